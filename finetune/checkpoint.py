"""GRPO checkpoints (``out/checkpoint/trainer.pt``): tensors and plain data only, read with
``weights_only=True``; a crafted, damaged or unfitting file is one ValueError naming it."""

from __future__ import annotations

import csv
import pickle
import random
import warnings
from pathlib import Path
from typing import Any

from .grpo_settings import LOG_COLUMNS


def save_checkpoint(trainer: Any) -> Path:
    """Save ``trainer``'s adapter, optimiser, RNGs and counters to ``out/checkpoint``
    (tensors and plain data only, so `read_checkpoint` loads it with ``weights_only=True``)."""
    import torch

    if trainer.out is None:
        raise ValueError("this trainer has no out folder to checkpoint to")
    folder = trainer.out / "checkpoint"
    folder.mkdir(parents=True, exist_ok=True)
    state = {
        "step": trainer.step_index, "train_seconds": trainer.train_seconds,
        "train_cpu_seconds": trainer.train_cpu_seconds, "wall_seconds": trainer.wall_seconds,
        "task": trainer.task.state_dict(),
        "adapter": trainer.policy.adapter_state(), "optimizer": trainer.optimizer.state_dict(),
        "rng": trainer.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
        "python_rng": random.getstate(), "settings": trainer.settings.model_dump(),
    }
    partial = folder / "trainer.pt.partial"
    torch.save(state, partial)
    partial.replace(folder / "trainer.pt")
    return folder


def restore_checkpoint(trainer: Any) -> None:
    """Continue ``trainer`` from ``out/checkpoint`` (log rows after the checkpoint are dropped).

    ValueError naming the file for a checkpoint that is refused, damaged, or made with
    other settings, another model or other LoRA settings."""
    import torch

    path = trainer.out / "checkpoint" / "trainer.pt"
    state = read_checkpoint(path)
    mine = trainer.settings.model_dump()
    fields = type(trainer.settings).model_fields  # a setting newer than the checkpoint: its default
    changed = sorted(k for k in mine if k not in ("steps", "max_minutes", "max_cpu_minutes",
                                                  "stop_after_tied",
                                                  "stop_after_solved")
                     and state["settings"].get(k, fields[k].default) != mine[k])
    if changed:
        raise ValueError(
            f"the checkpoint in {trainer.out} was made with other settings ({changed}); "
            "start in a new folder or remove it")
    try:
        trainer.policy.load_adapter_state(state["adapter"])
        trainer.optimizer.load_state_dict(state["optimizer"])
        trainer.rng.bit_generator.state = state["rng"]
        torch.set_rng_state(state["torch_rng"])
        random.setstate(state["python_rng"])
    except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as error:
        reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise ValueError(
            f"finetune checkpoint {path} does not fit this policy ({type(error).__name__}: "
            f"{reason}; made with another model or LoRA settings?); delete it or the "
            "folder to start afresh") from None
    trainer.step_index = state["step"]
    trainer.train_seconds = state["train_seconds"]
    trainer.train_cpu_seconds = float(state.get("train_cpu_seconds", 0.0))
    trainer.wall_seconds = state["wall_seconds"]
    trainer.task.load_state_dict(state["task"])
    log = trainer.out / "log.csv"
    if log.is_file():
        with log.open(newline="", encoding="utf-8") as fh:
            rows = [r for r in csv.DictReader(fh) if int(r["step"]) < trainer.step_index]
        with log.open("w", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=LOG_COLUMNS)
            writer.writeheader()
            writer.writerows(rows)
        trainer.history = [{k: float(v) for k, v in r.items()} for r in rows]


_CHECKPOINT_KEYS = {
    "step": int, "train_seconds": (int, float), "wall_seconds": (int, float), "task": dict,
    "adapter": dict, "optimizer": dict, "rng": dict, "torch_rng": object,
    "python_rng": tuple, "settings": dict,
}


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state dict of a GRPO checkpoint, read with ``weights_only=True`` (no code runs); one
    ValueError naming the file for a refused, damaged or foreign one."""
    import torch

    path = Path(path)
    fresh = "delete it or the folder to start afresh"
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4"
            state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        if "weights only" in str(error).lower():
            raise ValueError(
                f"finetune checkpoint {path} holds objects other than tensors and plain data; "
                f"refused (a results folder is read as data, never run as code); {fresh}"
            ) from None
        raise ValueError(f"finetune checkpoint {path} is damaged or truncated "
                         f"(UnpicklingError); {fresh}") from None
    except (OSError, RuntimeError, EOFError, ValueError, KeyError, IndexError, TypeError,
            AttributeError, UnicodeDecodeError) as error:
        if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError)):
            raise
        raise ValueError(f"finetune checkpoint {path} is damaged or truncated "
                         f"({type(error).__name__}); {fresh}") from None
    if not isinstance(state, dict):
        raise ValueError(f"finetune checkpoint {path} holds a {type(state).__name__}, not a "
                         f"GRPO checkpoint; {fresh}")
    wrong = sorted(k for k, kind in _CHECKPOINT_KEYS.items()
                   if k not in state or not isinstance(state[k], kind)
                   or (kind is int and (isinstance(state[k], bool) or state[k] < 0))
                   or (k == "torch_rng" and not isinstance(state[k], torch.Tensor)))
    if wrong:
        raise ValueError(f"finetune checkpoint {path} is not a GRPO checkpoint (missing or "
                         f"wrong: {', '.join(wrong)}); {fresh}")
    if any(not isinstance(v, torch.Tensor) for v in state["adapter"].values()):
        raise ValueError(f"finetune checkpoint {path}: its adapter weights are not all "
                         f"tensors; {fresh}")
    return state
