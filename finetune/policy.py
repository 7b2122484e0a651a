""":class:`LoRAPolicy`: ``llm_policy``'s structured prompt on the transformers backend, made
trainable: a softmax over the legal actions of exactly the backend's reply scores. See
docs/finetune.md."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from ..agents.base import parse_config
from ..environments import LanguageSpec
from ..environments.language import PROMPT_STYLES
from ..llm.replies import finite_values, reply_text
from ..llm.transformers_backend import (
    chat_prompt_ids,
    continuation_log_probs,
    load_causal_lm,
    reply_token_ids,
    require_finetune,
)
from ..roles import DiscreteActionParser, check_legal, decision_messages
from .hf_model import no_loading_bars, shared_prefix_log_probs

__all__ = ["LoRASettings", "LoRAPolicy"]

State = tuple[Any, tuple[int, ...]]


def lora_adapter_dir(adapter: Any) -> Path:
    """``adapter`` as a LoRA adapter directory's path; ValueError naming it otherwise."""
    if not isinstance(adapter, (str, os.PathLike)) or not os.fspath(adapter).strip():
        raise ValueError(f"adapter={adapter!r}: expected a LoRA adapter directory")
    path = Path(adapter).expanduser()
    if not (path / "adapter_config.json").is_file():
        raise ValueError(f"adapter {str(path)!r} has no adapter_config.json; expected a LoRA "
                         "adapter directory written by a grpo agent (runs/<run>/grpo/adapter)")
    return path


class LoRASettings(BaseModel):
    """The LoRA adapter (peft) put on the model's projections."""

    model_config = ConfigDict(extra="forbid")

    r: int = Field(16, ge=1, le=1024)
    alpha: float = Field(32.0, gt=0)
    dropout: float = Field(0.0, ge=0.0, lt=1.0)
    target_modules: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj",
                                 "up_proj", "down_proj"], min_length=1)


class LoRAPolicy:
    """A trainable LLM policy, ``softmax(score / temperature)`` over the legal actions.
    ``model``: HF directory, GGUF file, None (embedded SmolLM2) or a ``(model, tokenizer)``
    pair; ``adapter``: a saved LoRA adapter to continue from (``lora`` then ignored)."""

    def __init__(
        self,
        spec: LanguageSpec,
        model: str | Path | tuple[Any, Any] | None = None,
        lora: LoRASettings | dict[str, Any] | None = None,
        adapter: str | Path | None = None,
        temperature: float = 1.0,
        seed: int = 0,
        prompt_style: str = "verbose",
        progress: bool = True,
    ) -> None:
        require_finetune()
        if not isinstance(spec, LanguageSpec):
            raise ValueError(f"spec is {spec!r}, expected a LanguageSpec (language_for(env))")
        if not (isinstance(temperature, (int, float)) and np.isfinite(temperature)
                and temperature > 0):
            raise ValueError(f"temperature is {temperature!r}, expected a number > 0")
        if prompt_style not in PROMPT_STYLES:
            raise ValueError(f"prompt_style is {prompt_style!r}, expected one of "
                             f"{PROMPT_STYLES}")
        self.spec = spec
        self.prompt_style = prompt_style
        self.parser = DiscreteActionParser(n_actions=spec.n_actions)
        self.temperature = float(temperature)
        self.lora = parse_config(lora, LoRASettings)
        with contextlib.nullcontext() if progress else no_loading_bars():
            self._build(model, adapter, seed)

    def _build(self, model: Any, adapter: str | Path | None, seed: int) -> None:
        import torch
        from peft import LoraConfig, PeftModel, get_peft_model

        if isinstance(model, tuple):
            lm, self.tokenizer = model
            self.model_identity = "in-memory"
        else:
            lm, self.tokenizer, self.model_identity = load_causal_lm(model, fresh=True)
        self.model_source = None if isinstance(model, tuple) or model is None else str(model)
        if adapter is not None:
            self.lm = PeftModel.from_pretrained(lm, lora_adapter_dir(adapter), is_trainable=True)
        else:
            present = {name.rsplit(".", 1)[-1] for name, _ in lm.named_modules()}
            missing = [m for m in self.lora.target_modules if m not in present]
            if missing:
                linear = sorted({name.rsplit(".", 1)[-1] for name, mod in lm.named_modules()
                                 if isinstance(mod, torch.nn.Linear)})
                raise ValueError(
                    f"LoRA target_modules {missing} are not modules of the model; expected "
                    f"names among its linear layers: {linear}")
            torch.manual_seed(seed)
            self.lm = get_peft_model(lm, LoraConfig(
                r=self.lora.r, lora_alpha=self.lora.alpha, lora_dropout=self.lora.dropout,
                target_modules=list(self.lora.target_modules), bias="none"))
        self.lm.eval()  # no dropout in the base model; LoRA dropout follows lora.dropout

    # ---------------------------------------------------------------- scoring
    def messages(self, state: Any, legal_moves: Sequence[int] | None) -> list[dict[str, str]]:
        """The chat `LLMPolicy` sends in structured mode for ``state`` (no history, no
        examples) in this policy's prompt style."""
        return decision_messages(self.spec, state, check_legal(self.spec, legal_moves),
                                 style=self.prompt_style)

    def log_probs(self, states: Sequence[State], reference: bool = False,
                  shared_prefix: bool = False) -> list[Any]:
        """Log-probabilities of each state's legal actions (in ``legal_moves`` order, with grad
        when enabled), by the ``reference`` model if asked, the shared prefix encoded once if
        ``shared_prefix``."""
        prompts, replies = [], []
        for state, legal in states:
            moves = check_legal(self.spec, legal)
            # the values the backend scores for the action schema llm_policy sends
            values = finite_values(self.parser.schema(moves))
            messages = decision_messages(self.spec, state, moves, style=self.prompt_style)
            prompts.append(chat_prompt_ids(self.tokenizer, messages))
            replies.append(reply_token_ids(self.tokenizer, [reply_text(v) for v in values]))
        context = self.lm.disable_adapter() if reference else contextlib.nullcontext()
        with context:
            if shared_prefix:
                scores = shared_prefix_log_probs(self.lm, prompts, replies)
            else:
                scores = [continuation_log_probs(self.lm, p, r)
                          for p, r in zip(prompts, replies, strict=True)]
        return [(s / self.temperature).log_softmax(-1) for s in scores]

    def distributions(self, states: Sequence[State], batch_size: int = 16,
                      shared_prefix: bool = False) -> list[np.ndarray]:
        """Action probabilities over each state's legal moves (no grad), in batches."""
        import torch

        out: list[np.ndarray] = []
        with torch.no_grad():
            for start in range(0, len(states), batch_size):
                chunk = self.log_probs(states[start:start + batch_size],
                                       shared_prefix=shared_prefix)
                out.extend(lp.exp().double().numpy() for lp in chunk)
        return out

    def greedy(self, state: Any, legal_moves: Sequence[int] | None) -> int:
        """The most probable legal action."""
        moves = check_legal(self.spec, legal_moves)
        return int(moves[int(np.argmax(self.distributions([(state, moves)])[0]))])

    # ---------------------------------------------------------------- weights
    def trainable_parameters(self) -> list[Any]:
        return [p for p in self.lm.parameters() if p.requires_grad]

    def save_adapter(self, directory: str | Path, extra: dict[str, Any] | None = None) -> Path:
        """Write the LoRA adapter (peft format) and ``policy.json`` (how to prompt it)."""
        path = Path(directory)
        path.mkdir(parents=True, exist_ok=True)
        self.lm.save_pretrained(path)
        info = {"decoding": "structured", "prompt_style": self.prompt_style,
                "temperature": self.temperature,
                "model": self.model_source, "model_identity": self.model_identity,
                **(extra or {})}
        (path / "policy.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        return path

    def adapter_state(self) -> dict[str, Any]:
        """The LoRA weights (a state dict of tensors)."""
        from peft import get_peft_model_state_dict

        return {k: v.detach().clone() for k, v in get_peft_model_state_dict(self.lm).items()}

    def load_adapter_state(self, state: dict[str, Any]) -> None:
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(self.lm, state)
