"""`Checkpoints`: a callback that saves a learner's state on a schedule (steps or seconds)
and, given a checkpoint read back, resumes a run from it: the policy (weights, optimiser
moments, counters), the run's counters and records, the evaluation schedule and the
kept-best policy. Files are safetensors (reading one runs no code). What is and is not
identical after a resume: docs/agents.md ("Checkpoints and resume")."""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from .base import (
    FILE_FORMAT,
    FILE_VERSION,
    MAX_AGENT_FILE_BYTES,
    Agent,
    agent_file_bytes,
    read_agent_file,
)
from .loop import Callback, EpisodeRecord, Evaluation, TrainingRun
from .training import Evaluations

__all__ = ["Checkpoint", "CheckpointUnfit", "Checkpoints", "check_run_state", "read_checkpoint"]

#: The kind a checkpoint's header names (beside the agent's own kind).
CHECKPOINT = "checkpoint"
_BEST = "best_policy."


class CheckpointUnfit(ValueError):
    """A checkpoint that reads back but does not fit the run resumed from it (the message
    names the file): the run starts afresh."""


class Checkpoint:
    """A checkpoint read back from ``path``: the agent's header and tensors, the run's state
    (checked: :func:`check_run_state`) and the run identity it was saved for (None: an older
    file without one)."""

    def __init__(self, header: dict[str, Any], tensors: dict[str, torch.Tensor],
                 path: str | Path = "checkpoint") -> None:
        self.path = path
        self.run = check_run_state(path, header.pop(CHECKPOINT))
        self.identity: dict[str, Any] | None = self.run.get("identity")
        self.agent_header = header
        self.tensors = {k: v for k, v in tensors.items() if not k.startswith(_BEST)}
        self.best_tensors = {k.removeprefix(_BEST): v for k, v in tensors.items()
                             if k.startswith(_BEST)}

    @property
    def rows(self) -> int:
        """How many records (rows) the run had written when it was saved."""
        return len(self.run["records"])

    @property
    def steps(self) -> int:
        """The environment steps the run had trained when it was saved."""
        return int(self.run["steps"])

    @property
    def spent(self) -> tuple[float, float]:
        """(CPU seconds, wall seconds) the run's processes had spent training when it was
        saved, all earlier resumes included (0 for a checkpoint that does not say)."""
        return (float(self.run.get("cpu_seconds", 0.0)),
                float(self.run.get("wall_seconds", 0.0)))


def read_checkpoint(path: str | Path, most: int | None = MAX_AGENT_FILE_BYTES) -> Checkpoint:
    """The checkpoint in ``path`` (at most ``most`` bytes); ValueError naming the file (and
    the field) when it is not one."""
    header, tensors = read_agent_file(path, most)
    if not isinstance(header.get(CHECKPOINT), dict):
        raise ValueError(f"{path} is a saved agent, not a checkpoint")
    return Checkpoint(header, tensors, path)


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


_RECORD = (_count, _number, _count, lambda v: type(v) in (bool, int), _number,
           lambda v: isinstance(v, str) and len(v) <= 32, _count)
"""A record's fields: episode, return, length, success, wall time, phase, total steps."""


def _evaluation_fits(value: Any) -> bool:
    return value is None or (isinstance(value, list) and len(value) == 3
                             and _count(value[0]) and _count(value[1]) and _number(value[2]))


def check_run_state(path: Any, state: dict[str, Any]) -> dict[str, Any]:
    """``state`` (a checkpoint's run state) when its fields have the types and counts a
    run writes — the counters those of its last training record (a checkpoint is saved
    right after one); ValueError naming ``path`` and the field otherwise."""
    records = state.get("records")
    checks: list[tuple[str, bool]] = [
        ("steps", _count(state.get("steps"))), ("episodes", _count(state.get("episodes"))),
        ("records", isinstance(records, list) and all(
            isinstance(r, list) and len(r) == len(_RECORD)
            and all(fits(v) for fits, v in zip(_RECORD, r, strict=True)) for r in records)),
        ("best", _evaluation_fits(state.get("best"))),
        ("last", _evaluation_fits(state.get("last"))),
        ("next_step", state.get("next_step") is None or _count(state.get("next_step"))),
        ("identity", state.get("identity") is None or isinstance(state.get("identity"), dict))]
    for field, fits in checks:
        if not fits:
            raise ValueError(f"{path}: checkpoint field {field!r} is not what a run writes "
                             "(wrong type, sign or record shape)")
    trained = [r for r in records if r[5] == "train"]
    if trained and (trained[-1][0], trained[-1][6]) != (state["episodes"], state["steps"]):
        raise ValueError(
            f"{path}: checkpoint counters (episodes {state['episodes']}, steps "
            f"{state['steps']}) are not those of its last training record (episode "
            f"{trained[-1][0]}, steps {trained[-1][6]})")
    return state


def _evaluation(values: list[Any] | None) -> Evaluation | None:
    return None if values is None else Evaluation(int(values[0]), int(values[1]),
                                                  float(values[2]))


class Checkpoints(Callback):
    """Calls ``save(data)`` with a checkpoint's bytes after a training record once
    ``every_steps`` steps or ``every_seconds`` seconds have passed since the last (either
    may be None); with ``resume``, the run starts where that checkpoint was saved
    (`CheckpointUnfit` naming its file when it does not fit the run). ``identity``: what
    names the run (experiment, run, seed), saved in each checkpoint."""

    def __init__(self, save: Callable[[bytes], None], every_steps: int | None = None,
                 every_seconds: float | None = None, resume: Checkpoint | None = None,
                 identity: dict[str, Any] | None = None) -> None:
        self.save, self.every_steps, self.every_seconds = save, every_steps, every_seconds
        self.resume, self.identity = resume, identity
        self._last_steps, self._last_time = 0, time.monotonic()
        self._started = (time.process_time(), time.perf_counter())

    def on_start(self, run: TrainingRun) -> None:
        self._started = (time.process_time(), time.perf_counter())
        evaluations = self._evaluations(run)
        if self.resume is None:
            return
        try:
            self._resume(run, evaluations)
        except (ValueError, TypeError, KeyError, IndexError, OverflowError,
                RuntimeError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise CheckpointUnfit(f"{self.resume.path} does not fit this run: {reason}"
                                  ) from None

    def _resume(self, run: TrainingRun, evaluations: Evaluations | None) -> None:
        assert self.resume is not None
        state, source = self.resume.run, self.resume.path
        agent: Agent = run.policy  # type: ignore[assignment]
        if self.resume.best_tensors and evaluations is not None:
            agent.load_saved(self.resume.agent_header, self.resume.best_tensors, source)
            evaluations.best_policy = agent.snapshot()
        agent.load_saved(self.resume.agent_header, self.resume.tensors, source)
        run.steps, run.episodes = int(state["steps"]), int(state["episodes"])
        run.result.records[:] = [EpisodeRecord(*record) for record in state["records"]]
        run.result.best, run.result.last = _evaluation(state["best"]), _evaluation(state["last"])
        if evaluations is not None:
            evaluations.next_step = state["next_step"]
        self._last_steps = run.steps

    def on_record(self, run: TrainingRun, record: EpisodeRecord) -> None:
        if record.phase != "train":
            return
        due = (self.every_steps is not None and run.steps - self._last_steps >= self.every_steps
               or self.every_seconds is not None
               and time.monotonic() - self._last_time >= self.every_seconds)
        if due:
            self.save(self.checkpoint(run))
            self._last_steps, self._last_time = run.steps, time.monotonic()

    def checkpoint(self, run: TrainingRun) -> bytes:
        """The checkpoint of ``run`` now, as bytes."""
        agent: Agent = run.policy  # type: ignore[assignment]
        evaluations = self._evaluations(run)
        result = run.result
        state, tensors = agent.get_state()
        if evaluations is not None and evaluations.best_policy is not None:
            current = agent.snapshot()
            agent.restore(evaluations.best_policy)
            tensors = {**tensors, **{_BEST + k: v for k, v in agent.get_state()[1].items()}}
            agent.restore(current)
        record = [[r.episode, r.return_, r.length, r.success, r.wall_time, r.phase,
                   r.total_steps] for r in result.records]
        header = {
            "format": FILE_FORMAT, "version": FILE_VERSION, **agent.header(), "state": state,
            CHECKPOINT: {
                "steps": run.steps, "episodes": run.episodes, "records": record,
                "best": None if result.best is None else list(vars(result.best).values()),
                "last": None if result.last is None else list(vars(result.last).values()),
                "next_step": None if evaluations is None else evaluations.next_step,
                **self._spent(),
                **({} if self.identity is None else {"identity": self.identity})}}
        json.dumps(header)  # a value JSON cannot hold fails here, not in the writer
        return agent_file_bytes(header, tensors)

    def _spent(self) -> dict[str, float]:
        """The CPU and wall seconds of this process's training so far, plus what the
        checkpoint it resumed from had spent."""
        before = (0.0, 0.0) if self.resume is None else self.resume.spent
        return {"cpu_seconds": before[0] + time.process_time() - self._started[0],
                "wall_seconds": before[1] + time.perf_counter() - self._started[1]}

    @staticmethod
    def _evaluations(run: TrainingRun) -> Evaluations | None:
        """The run's evaluation and keep-best callback, if any."""
        return next((c for c in run.callbacks if isinstance(c, Evaluations)), None)
