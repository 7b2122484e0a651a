"""`TransformersBackend`: a local causal LM through ``transformers`` (+ optional LoRA
adapter; the ``finetune`` extra). Its scoring functions are the ones GRPO trains. See
docs/finetune.md and docs/llm.md."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar

from pydantic import Field, field_validator

from ..errors import one_line
from .backend import LLMBackend
from .cache import cache_root, file_sha256
from .errors import LLMReplyError, LLMUnavailableError, StructuredOutputError
from .gguf_check import check_gguf, default_gguf_path
from .replies import MAX_CANDIDATES, finite_values, reply_text

__all__ = ["FINETUNE_PACKAGES", "TransformersBackend", "chat_prompt_ids", "continuation_log_probs",
           "load_causal_lm", "model_identity", "reply_token_ids", "require_finetune",
           "resolve_model_source", "text_log_probs"]

#: The import names the ``finetune`` extra provides.
FINETUNE_PACKAGES: tuple[str, ...] = ("transformers", "peft", "gguf")


def require_finetune(*packages: str) -> None:
    """`LLMUnavailableError` naming the ``finetune`` extra when any of ``packages`` (default:
    `FINETUNE_PACKAGES`) is missing."""
    missing = [p for p in packages or FINETUNE_PACKAGES if importlib.util.find_spec(p) is None]
    if missing:
        raise LLMUnavailableError(
            f"{', '.join(missing)} not installed: transformers models, LoRA and GRPO "
            "fine-tuning need the optional dependencies of langadapt[finetune] "
            "(pip install 'langadapt[finetune]')"
        )


def model_cache_root() -> Path:
    return cache_root() / "transformers"


def resolve_model_source(model: str | os.PathLike[str] | None) -> Path:
    """The model directory or GGUF file ``model`` names (None: SmolLM2), else ValueError."""
    if model is None:
        return check_gguf(default_gguf_path())
    if not isinstance(model, (str, os.PathLike)):
        raise ValueError(f"model={model!r}: expected a model directory or a .gguf file path")
    if not os.fspath(model).strip():
        raise ValueError(f"model={os.fspath(model)!r} is blank; expected a model directory or a "
                         ".gguf file, or no model (None) for the embedded SmolLM2")
    path = Path(model).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ValueError(
                f"model directory {str(path)!r} has no config.json; expected a Hugging Face "
                "model directory (save_pretrained) or a .gguf file"
            )
        return path.resolve()
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise ValueError(
                f"model file {str(path)!r} is not a .gguf file; expected a .gguf file or a "
                "Hugging Face model directory"
            )
        return check_gguf(path)
    raise ValueError(
        f"model {str(path)!r} does not exist; expected a Hugging Face model directory or a "
        ".gguf file"
    )


def _directory_identity(path: Path) -> str:
    digest = hashlib.sha256()
    for item in sorted(path.iterdir()):
        if item.is_file() and item.suffix in (".json", ".safetensors", ".bin", ".model"):
            digest.update(item.name.encode())
            digest.update(file_sha256(item).encode())
    return "sha256:" + digest.hexdigest()


def model_identity(source: Path) -> str:
    """Content hash of a GGUF file or of a model directory's weights and configs."""
    if source.is_dir():
        return _directory_identity(source)
    memo = model_cache_root() / "gguf_sha256.json"
    memo.parent.mkdir(parents=True, exist_ok=True)
    return "sha256:" + file_sha256(source, memo)


def _float32_copy(source: Path, identity: str) -> Path:
    """A float32 copy of the GGUF file ``source`` in the model cache (made once)."""
    # the optional finetune extra: imported when used
    from transformers import AutoModelForCausalLM, AutoTokenizer

    target = model_cache_root() / f"{source.stem}-{identity.split(':')[-1][:16]}"
    if (target / "config.json").is_file():
        return target
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype="float32")
    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    # The weights are plain float32 now, but the model still carries the GGUF quantizer,
    # with which save_pretrained refuses to write it.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    partial = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    model.save_pretrained(partial)
    tokenizer.save_pretrained(partial)
    try:
        partial.rename(target)
    except OSError:  # another process made it first
        shutil.rmtree(partial, ignore_errors=True)
    return target


_LOADED: dict[str, tuple[Any, Any]] = {}
_LOAD_LOCK = threading.Lock()


def load_causal_lm(model: str | os.PathLike[str] | None = None, *, fresh: bool = False
                   ) -> tuple[Any, Any, str]:
    """``(model, tokenizer, identity)`` of a local causal LM in float32, eval mode; shared per
    process unless ``fresh``."""
    require_finetune("transformers", "gguf")
    source = resolve_model_source(model)
    identity = model_identity(source)
    with _LOAD_LOCK:
        if not fresh and identity in _LOADED:
            return (*_LOADED[identity], identity)
        directory = _float32_copy(source, identity) if source.is_file() else source
        # the optional finetune extra: imported when used
        from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

        config = AutoConfig.from_pretrained(directory)
        try:
            lm = AutoModelForCausalLM.from_pretrained(directory, dtype="float32")
        except ValueError as error:
            raise ValueError(
                f"model {str(source)!r} ({type(config).__name__}) is not a causal language "
                f"model: {one_line(error)}"
            ) from None
        tokenizer = AutoTokenizer.from_pretrained(directory)
        lm.eval()
        if not fresh:
            _LOADED[identity] = (lm, tokenizer)
    return lm, tokenizer, identity


def continuation_log_probs(lm: Any, prompt_ids: Sequence[int], continuations: Sequence[
        Sequence[int]], prefix: Any | None = None) -> Any:
    """Log-probability (torch, with grad when on) of each non-empty continuation after
    ``prompt_ids``, encoded once (after ``prefix``: key/value tensors of earlier tokens)."""
    import torch  # the optional finetune extra: imported when used
    from transformers import DynamicCache

    device = next(lm.parameters()).device
    longest = max(len(c) for c in continuations)
    cache = None if prefix is None else DynamicCache(ddp_cache_data=prefix)
    out = lm(torch.tensor([list(prompt_ids)], device=device), past_key_values=cache,
             use_cache=longest > 1 or prefix is not None, logits_to_keep=1)
    first = out.logits[0, -1].float().log_softmax(-1)
    scores = first[torch.tensor([c[0] for c in continuations], device=device)]
    if longest == 1:
        return scores
    cache = out.past_key_values
    cache.batch_repeat_interleave(len(continuations))
    inputs = torch.tensor([list(c[:-1]) + [c[0]] * (longest - len(c)) for c in continuations],
                          device=device)
    rest = lm(inputs, past_key_values=cache, use_cache=False).logits.float().log_softmax(-1)
    extra = []
    for k, tokens in enumerate(continuations):
        steps = torch.arange(len(tokens) - 1, device=device)
        targets = torch.tensor(list(tokens[1:]), device=device, dtype=torch.long)
        extra.append(rest[k, steps, targets].sum())
    return scores + torch.stack(extra)


def reply_token_ids(tokenizer: Any, replies: Sequence[str]) -> list[list[int]]:
    """Token ids of each reply followed by end of turn (the tokenizer's ``eos_token``)."""
    end = tokenizer.eos_token_id
    return [list(tokenizer(r, add_special_tokens=False).input_ids) + [end] for r in replies]


def chat_prompt_ids(tokenizer: Any, messages: list[dict[str, str]]) -> list[int]:
    """Token ids of ``messages`` in the chat template, the assistant's turn opened."""
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    return list(tokenizer(text, add_special_tokens=False).input_ids)


def text_log_probs(lm: Any, tokenizer: Any, messages: list[dict[str, str]],
                   replies: Sequence[str]) -> Any:
    """Log-probability of each whole reply (then end of turn) to ``messages``: what `score`
    returns and GRPO trains."""
    return continuation_log_probs(lm, chat_prompt_ids(tokenizer, messages),
                                  reply_token_ids(tokenizer, replies))


class TransformersBackend(LLMBackend):
    """A causal LM through ``transformers`` (+ optional LoRA adapter)."""

    name: ClassVar[str] = "transformers"
    supports_concurrency: ClassVar[bool] = False
    supports_scoring: ClassVar[bool] = True

    model: Path | None = Field(
        None, description="model directory or .gguf file; None = the embedded SmolLM2")
    adapter: Path | None = Field(
        None, description="LoRA adapter directory written by langadapt finetune")

    @field_validator("model", mode="before")
    @classmethod
    def _model_source(cls, value: Any) -> Path | None:
        if value is None:
            return None
        return resolve_model_source(value)

    @field_validator("adapter", mode="before")
    @classmethod
    def _adapter_dir(cls, value: Any) -> Path | None:
        if value is None or value == "":
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"adapter={value!r}: expected a LoRA adapter directory")
        path = Path(value).expanduser()
        if not (path / "adapter_config.json").is_file():
            raise ValueError(
                f"adapter {str(path)!r} has no adapter_config.json; expected a LoRA adapter "
                "directory written by langadapt finetune (its adapter/ folder)"
            )
        return path.resolve()

    def model_post_init(self, context: Any) -> None:
        require_finetune()

    def where(self) -> str:
        label = self.model.name if self.model is not None else "SmolLM2 (embedded)"
        extra = f", adapter {self.adapter.name!r}" if self.adapter is not None else ""
        return f"transformers (model {label!r}{extra})"

    def model_label(self) -> str:
        return self.model.name if self.model is not None else default_gguf_path().stem

    def structured_output_hint(self) -> str:
        return ("the transformers backend answers schemas with a finite set of values (enum, "
                "const, boolean fields) by scoring each; use text mode or the llamacpp backend "
                "for other schemas")

    def resolve_identity(self) -> str:
        base = model_identity(resolve_model_source(self.model))
        if self.adapter is None:
            return base
        return f"{base}+lora:{_directory_identity(self.adapter)}"

    def language_model(self) -> tuple[Any, Any]:
        """``(model, tokenizer)``, loaded on first use (adapter merged in)."""
        return self.runtime.once("language_model", self._load)

    def _load(self) -> tuple[Any, Any]:
        lm, tokenizer, _ = load_causal_lm(self.model, fresh=self.adapter is not None)
        if self.adapter is not None:
            from peft import PeftModel  # the optional finetune extra: imported when used

            lm = PeftModel.from_pretrained(lm, self.adapter).merge_and_unload()
            lm.eval()
        return lm, tokenizer

    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int,
                 *, seed: int | None = None) -> str:
        import torch  # the optional finetune extra: imported when used

        seed = self.seed if seed is None else seed
        lm, tokenizer = self.language_model()
        generator = torch.Generator().manual_seed(seed)
        lock = self.runtime.once("generate_lock", threading.Lock)
        with lock, torch.no_grad():
            if schema is not None:
                return self._structured(messages, schema, generator)
            ids = chat_prompt_ids(tokenizer, messages)
            if len(ids) + max_tokens > self.context_length:
                raise LLMReplyError(
                    f"the prompt has {len(ids)} tokens; with max_tokens={max_tokens} it does "
                    f"not fit context_length={self.context_length}")
            torch.manual_seed(seed)
            out = lm.generate(
                torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                max_new_tokens=max_tokens, do_sample=self.temperature > 0,
                temperature=self.temperature if self.temperature > 0 else None,
                top_p=None, top_k=None, pad_token_id=tokenizer.eos_token_id)
            text = tokenizer.decode(out[0, len(ids):], skip_special_tokens=True)
        return text

    def _structured(self, messages: list[dict[str, str]], schema: dict, generator: Any) -> str:
        import torch  # the optional finetune extra: imported when used

        values = finite_values(schema)
        if not values:
            raise StructuredOutputError(
                f"{self.where()} cannot honour this schema: its valid values are not a finite "
                f"set of at most {MAX_CANDIDATES}; {self.structured_output_hint()}")
        lm, tokenizer = self.language_model()
        scores = text_log_probs(lm, tokenizer, messages, [reply_text(v) for v in values])
        if self.temperature > 0:
            probs = (scores / self.temperature).softmax(-1)
            best = int(torch.multinomial(probs, 1, generator=generator))
        else:
            best = int(scores.argmax())
        return json.dumps(values[best])

    def compute_scores(self, messages: list[dict[str, str]], replies: list[str], *,
                       seed: int = 0, deadline: float | None = None) -> list[float]:
        """The log-probability of each whole reply (then ``eos_token``) after the prompt."""
        import torch  # the optional finetune extra: imported when used

        lm, tokenizer = self.language_model()
        lock = self.runtime.once("generate_lock", threading.Lock)
        with lock, torch.no_grad():
            ids = chat_prompt_ids(tokenizer, messages)
            longest = max(len(tokenizer(r, add_special_tokens=False).input_ids) + 1
                          for r in replies)
            if len(ids) + longest > self.context_length:
                raise LLMReplyError(
                    f"{self.where()}: the prompt ({len(ids)} tokens) and the longest reply "
                    f"({longest}) do not fit context_length={self.context_length}")
            scores = text_log_probs(lm, tokenizer, messages, replies)
        self.runtime.count("llm_prompt_tokens", len(ids))
        return [float(v) for v in scores.double()]
