"""What GRPO needs from ``transformers`` beyond the transformers backend: :func:`check_causal_lm`,
:func:`shared_prefix_log_probs` (a batch of prompts, their shared prefix encoded once) and
:func:`no_loading_bars`."""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import one_line
from ..llm.transformers_backend import (
    continuation_log_probs,
    require_finetune,
    resolve_model_source,
)

__all__ = ["check_causal_lm", "no_loading_bars", "shared_prefix_log_probs"]


def check_causal_lm(model: str | os.PathLike[str]) -> Path:
    """The model's source (`resolve_model_source`), and for a model directory a check,
    from its ``config.json`` alone, that transformers knows it as a causal language model;
    ValueError naming the model and its configuration class otherwise."""
    source = resolve_model_source(model)
    if source.is_dir():
        require_finetune("transformers")
        from transformers import MODEL_FOR_CAUSAL_LM_MAPPING, AutoConfig

        try:
            config = AutoConfig.from_pretrained(source)
        except (ValueError, OSError) as error:
            raise ValueError(f"model {str(source)!r}: config.json is not readable "
                             f"({one_line(error, 160)})") from None
        if type(config) not in MODEL_FOR_CAUSAL_LM_MAPPING:
            raise ValueError(f"model {str(source)!r} ({type(config).__name__}) is not a causal "
                             "language model; expected one transformers loads with "
                             "AutoModelForCausalLM")
    return source


def shared_prefix_log_probs(lm: Any, prompts: Sequence[Sequence[int]],
                            continuations: Sequence[Sequence[Sequence[int]]]) -> list[Any]:
    """`continuation_log_probs` for each of one or more prompts (one continuation list each),
    the token prefix all ``prompts`` share encoded once (equal up to float rounding, ~1e-6);
    gradients flow through the prefix."""
    import torch

    shared = min(len(p) for p in prompts) - 1
    first = prompts[0]
    for p in prompts[1:]:
        shared = next((i for i in range(shared) if p[i] != first[i]), shared)
    if len(prompts) == 1 or shared < 1:
        return [continuation_log_probs(lm, p, c) for p, c in zip(prompts, continuations,
                                                                  strict=True)]
    device = next(lm.parameters()).device
    cache = lm(torch.tensor([list(first[:shared])], device=device), use_cache=True,
               logits_to_keep=1).past_key_values
    prefix = [(layer.keys, layer.values) for layer in cache.layers]
    return [continuation_log_probs(lm, p[shared:], c, prefix=prefix)
            for p, c in zip(prompts, continuations, strict=True)]


@contextlib.contextmanager
def no_loading_bars() -> Iterator[None]:
    """No progress bar while a model loads: transformers' (``Loading weights``, checkpoint
    shards), huggingface_hub's and the plain tqdm bar of transformers' GGUF conversion; each
    is put back as it was on exit."""
    import huggingface_hub.utils as hub_utils
    from transformers.utils import logging as transformers_logging

    bars_on = transformers_logging.is_progress_bar_enabled()
    hub_off = hub_utils.are_progress_bars_disabled()
    try:
        from transformers import modeling_gguf_pytorch_utils as gguf_utils
    except ImportError:  # pragma: no cover - transformers without GGUF support
        gguf_utils = None
    gguf_tqdm = getattr(gguf_utils, "tqdm", None)
    transformers_logging.disable_progress_bar()  # also huggingface_hub's bars
    if gguf_tqdm is not None:
        gguf_utils.tqdm = functools.partial(gguf_tqdm, disable=True)
    try:
        yield
    finally:
        if gguf_tqdm is not None:
            gguf_utils.tqdm = gguf_tqdm
        with warnings.catch_warnings():  # hub: "cannot enable, HF_HUB_DISABLE_... is set"
            warnings.simplefilter("ignore")
            if bars_on:
                transformers_logging.enable_progress_bar()
            if hub_off:
                hub_utils.disable_progress_bars()
            else:
                hub_utils.enable_progress_bars()
