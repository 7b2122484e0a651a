"""GRPO (Shao et al. 2024) of a :class:`LoRAPolicy` on the environment's own reward: groups of
rollouts from each start state, group-relative advantages, one AdamW step on the LoRA weights
with an exact KL to the frozen model. The step, ``cover``, ``min_prob`` and measured figures:
docs/finetune.md."""

from __future__ import annotations

import csv
import pickle
import random
import resource
import time
import warnings
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy.special import softmax

from ..agents.base import parse_config
from ..errors import one_line
from .grpo_settings import LOG_COLUMNS, GRPOSettings
from .tasks import MazeTask, SnapshotTask

__all__ = [
    "GRPOSettings",
    "GRPOTrainer",
    "LOG_COLUMNS",
    "MazeTask",
    "SnapshotTask",
    "floored_advantages",
    "group_advantages",
    "read_checkpoint",
    "tempered",
]


def floored_advantages(advantages: Any, probs: Any, min_prob: float) -> Any:
    """The advantages with the terms that would push an action's probability below
    ``min_prob`` (negative advantage, probability already below it) or above
    ``1 - min_prob`` (positive advantage, probability already above) set to 0."""
    if min_prob <= 0:
        return advantages
    done = ((advantages < 0) & (probs < min_prob)) | ((advantages > 0) & (probs > 1 - min_prob))
    return advantages * ~done


def tempered(probs: np.ndarray, power: float) -> np.ndarray:
    """``probs ** power``, normalised, computed on the logs (no underflow for a large
    power): the distribution at temperature ``T / power`` of one at temperature ``T``."""
    return softmax(power * np.log(np.maximum(probs, 1e-300)))


def group_advantages(rewards: Any, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, active)`` for a ``[groups, G]`` reward array: ``(r - mean) / std``
    within each group, and which groups have any spread (the others get 0 and are skipped).

    ValueError naming the group and value for a NaN or infinite reward."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 2 or r.shape[1] < 2:
        raise ValueError(f"rewards of shape {r.shape}: expected [groups, G] with G >= 2")
    bad = np.argwhere(~np.isfinite(r))
    if bad.size:
        g, i = (int(v) for v in bad[0])
        raise ValueError(
            f"reward {float(r[g, i])!r} in group {g} (sample {i}): expected finite rewards; a NaN "
            "reward would silently zero the group's advantages")
    mean = r.mean(axis=1, keepdims=True)
    std = r.std(axis=1, keepdims=True)
    active = (r.max(axis=1) - r.min(axis=1)) > 1e-9
    adv = np.zeros_like(r)
    adv[active] = (r[active] - mean[active]) / (std[active] + eps)
    return adv, active


def append_row(path: Path, row: dict[str, Any], columns: Sequence[str]) -> None:
    """Append ``row`` to the CSV file ``path``, writing the header first if it is new."""
    new = not path.is_file()
    with path.open("a", newline="", encoding="utf-8") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(columns))
        if new:
            writer.writeheader()
        writer.writerow(row)


def _run_length(rows: Sequence[dict[str, float]], holds: Any) -> int:
    """How many of the last ``rows`` in a row satisfy ``holds``."""
    count = 0
    for row in reversed(rows):
        if not holds(row):
            break
        count += 1
    return count


def _rss_mb() -> tuple[float, float]:
    """(current, peak) resident memory of this process in MB."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    try:
        with open("/proc/self/statm") as fh:
            pages = int(fh.read().split()[1])
        current = pages * resource.getpagesize() / 2**20
    except (OSError, ValueError, IndexError):
        current = peak
    return current, peak


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class GRPOTrainer:
    """Runs GRPO steps of ``policy`` on ``task`` (docs/finetune.md), logging one CSV
    row per step to ``out/log.csv`` and checkpointing to ``out/checkpoint/``; a trainer made
    on a folder with a checkpoint resumes from it."""

    def __init__(self, policy: Any, task: MazeTask | SnapshotTask,
                 settings: GRPOSettings | dict[str, Any] | None = None,
                 out: str | Path | None = None, seed: int = 0) -> None:
        import torch

        self.policy = policy
        self.task = task
        self.settings = parse_config(settings, GRPOSettings)
        if policy.spec.n_actions != task.n_actions:
            raise ValueError(f"the policy has {policy.spec.n_actions} actions, the "
                             f"environment {task.n_actions}")
        style = getattr(policy, "prompt_style", "verbose")
        if style != self.settings.prompt_style:
            raise ValueError(f"the policy prompts in the {style!r} style, settings.prompt_style "
                             f"is {self.settings.prompt_style!r}; expected the same")
        if self.settings.shaping == "oracle" and not task.has_oracle:
            raise ValueError(f"shaping: oracle needs an oracle potential; "
                             f"{type(task).__name__} has none (use shaping: none)")
        if self.settings.states == "all" and not isinstance(task, MazeTask):
            raise ValueError("states: all is only for mazes; give a number of start states "
                             "per step")
        self.out = None if out is None else Path(out)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.optimizer = torch.optim.AdamW(policy.trainable_parameters(),
                                           lr=self.settings.learning_rate,
                                           weight_decay=self.settings.weight_decay)
        self.step_index = 0
        self.train_seconds = 0.0
        self.train_cpu_seconds = 0.0
        self.wall_seconds = 0.0
        self.history: list[dict[str, float]] = []
        self._reference: dict[Hashable, Any] = {}
        if self.out is not None and (self.out / "checkpoint" / "trainer.pt").is_file():
            self.resume()

    @property
    def horizon(self) -> int:
        s = self.settings
        return 1 if s.reward == "step" else (s.horizon or self.task.max_steps)

    # ---------------------------------------------------------------- sampling
    def distributions(self, states: Sequence[Any], cache: dict[Hashable, np.ndarray]
                      ) -> list[np.ndarray]:
        """The policy's action probabilities in each state; the ones not in ``cache`` are
        scored in one batch (shared prompt prefix) and added to it."""
        keys = [self.task.key(x) for x in states]
        todo: dict[Hashable, Any] = {}
        for k, x in zip(keys, states, strict=True):
            if k not in cache and k not in todo:
                todo[k] = self.task.observe(x)
        if todo:
            probs = self.policy.distributions(list(todo.values()), self.settings.batch_size,
                                              shared_prefix=True)
            cache.update(zip(todo, probs, strict=True))
        return [cache[k] for k in keys]

    def _draw(self, legal: tuple[int, ...], probs: np.ndarray) -> int:
        return int(legal[self.rng.choice(len(legal), p=probs / probs.sum())])

    def first_actions(self, legal: tuple[int, ...], probs: np.ndarray) -> list[int]:
        """The first actions of one group (``group_actions``)."""
        g = self.settings.group_size
        if self.settings.group_actions == "sampled":
            return [self._draw(legal, probs) for _ in range(g)]
        order = [int(a) for a in self.rng.permutation(legal)]
        return order[:g] + [self._draw(legal, probs) for _ in range(g - len(order))]

    def returns(self, starts: Sequence[Any], actions: Sequence[int],
                cache: dict[Hashable, np.ndarray] | None = None) -> tuple[np.ndarray, dict]:
        """``(rewards, counts)`` of rollouts taking ``actions[i]`` in ``starts[i]`` then following
        the policy, advanced in lockstep (each time step scored in one batch); counts are
        ``decisions``, ``env_steps`` and ``success``."""
        s = self.settings
        cache = {} if cache is None else cache
        shaping = s.gamma if s.shaping == "oracle" else None
        totals = np.zeros(len(starts))
        discount = np.ones(len(starts))
        success = np.zeros(len(starts), dtype=bool)
        states = list(starts)
        paths: list[list[Any]] = [[x] for x in starts]
        chosen = [int(a) for a in actions]
        alive = list(range(len(starts)))
        decisions = env_steps = 0
        for t in range(self.horizon):
            if t > 0:
                probs = self.distributions([states[i] for i in alive], cache)
                decisions += len(alive)
                for i, p in zip(alive, probs, strict=True):
                    chosen[i] = self._draw(self.task.observe(states[i])[1], p)
            still = []
            env_steps += len(alive)
            for i in alive:
                r, states[i], terminated, truncated = self.task.step(states[i], chosen[i],
                                                                      shaping)
                totals[i] += discount[i] * r
                discount[i] *= s.gamma
                if terminated and r > 0:
                    success[i] = True
                if not (terminated or truncated):
                    paths[i].append(states[i])
                    still.append(i)
            alive = still
            if not alive:
                break
        for path, won in zip(paths, success, strict=True):
            self.task.remember(path, bool(won))
        return totals, {"decisions": decisions, "env_steps": env_steps,
                        "success": int(success.sum())}

    # ---------------------------------------------------------------- one step
    def step(self) -> dict[str, float] | None:
        """One GRPO step; returns (and logs) its row. None, with no update, when the greedy
        policy has taken the shortest path ``stop_after_solved`` times in a row, this one
        included: training stops with that policy."""
        import torch

        s = self.settings
        started, cpu0 = time.perf_counter(), _cpu_seconds()
        starts = self.task.starts(None if s.states == "all" else s.states, self.rng)
        cache: dict[Hashable, np.ndarray] = {}
        probs = self.distributions(starts, cache)
        evaluation = None
        if s.states == "all":  # every maze cell was scored: the greedy policy, for free
            evaluation = self.task.evaluate(lambda observed: [
                legal[int(np.argmax(cache[self.task.key(c)]))] for c, (_, legal)
                in zip(self.task.cells, observed, strict=True)])
            if (s.stop_after_solved is not None and evaluation["greedy_shortest"] == 1.0
                    and 1 + _run_length(self.history, lambda r: r["greedy_shortest"] == 1.0)
                    >= s.stop_after_solved):
                self.train_seconds += time.perf_counter() - started
                self.wall_seconds += time.perf_counter() - started
                self.train_cpu_seconds += _cpu_seconds() - cpu0
                return None
        actions = np.array([self.first_actions(self.task.observe(x)[1], p)
                            for x, p in zip(starts, probs, strict=True)], dtype=int)
        flat, counts = self.returns([x for x in starts for _ in range(s.group_size)],
                                    actions.ravel().tolist(), cache)
        rewards = flat.reshape(len(starts), s.group_size)
        advantages, active = group_advantages(rewards)
        active &= np.array([len(self.task.observe(x)[1]) > 1 for x in starts])  # no choice
        loss_value, kl_value = float("nan"), float("nan")
        if active.any():
            self.optimizer.zero_grad()
            chosen = [i for i, on in enumerate(active) if on]
            loss_sum, kl_sum = 0.0, 0.0
            for first in range(0, len(chosen), s.batch_size):
                part = chosen[first:first + s.batch_size]
                observed = [self.task.observe(starts[i]) for i in part]
                log_probs = self.policy.log_probs(observed, shared_prefix=True)
                terms = []
                for i, lp, state in zip(part, log_probs, observed, strict=True):
                    legal = state[1]
                    index = torch.tensor([legal.index(int(a)) for a in actions[i]])
                    adv = torch.tensor(advantages[i], dtype=lp.dtype)
                    chosen_lp = lp[index]
                    adv = floored_advantages(adv, chosen_lp.detach().exp(), s.min_prob)
                    term = -(adv * chosen_lp).mean()
                    if s.kl_coef > 0:
                        ref = self._reference_log_probs(self.task.key(starts[i]), state)
                        kl = (lp.exp() * (lp - ref)).sum()
                        kl_sum += float(kl)
                        term = term + s.kl_coef * kl
                    terms.append(term)
                loss = torch.stack(terms).sum() / len(chosen)
                loss.backward()
                loss_sum += float(loss.detach())
            if s.max_grad_norm is not None:
                torch.nn.utils.clip_grad_norm_(self.policy.trainable_parameters(),
                                               s.max_grad_norm)
            self.optimizer.step()
            loss_value = loss_sum
            kl_value = kl_sum / len(chosen) if s.kl_coef > 0 else float("nan")
        elapsed = time.perf_counter() - started
        self.train_seconds += elapsed
        self.wall_seconds += elapsed
        self.train_cpu_seconds += _cpu_seconds() - cpu0
        rss, peak = _rss_mb()
        row = {
            "step": self.step_index, "states": len(starts), "samples": int(rewards.size),
            "decisions": len(starts) + counts["decisions"], "env_steps": counts["env_steps"],
            "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
            "rollout_success": counts["success"] / rewards.size,
            "groups_skipped": int((~active).sum()),
            "zero_spread_fraction": float((~active).mean()),
            "loss": loss_value, "kl": kl_value,
            "greedy_success": float("nan"), "greedy_shortest": float("nan"),
            "greedy_length": float("nan"), "state_accuracy": float("nan"),
            **{k: v for k, v in (evaluation or {}).items() if k in LOG_COLUMNS},
            "step_seconds": elapsed, "train_seconds": self.train_seconds,
            "train_cpu_seconds": self.train_cpu_seconds, "wall_seconds": self.wall_seconds,
            "cpu_seconds": _cpu_seconds() - cpu0,
            "rss_mb": rss, "peak_rss_mb": peak,
        }
        self.step_index += 1
        self._log(row)
        return row

    def _reference_log_probs(self, key: Hashable, state: Any) -> Any:
        import torch

        if key not in self._reference:
            with torch.no_grad():
                self._reference[key] = self.policy.log_probs([state], reference=True)[0]
        return self._reference[key]

    def greedy_actions(self, observed: Sequence[tuple[Any, tuple[int, ...]]],
                       margin: float = 1e-3) -> list[int]:
        """The policy's most probable legal action in each observed state: exactly the action
        ``llm_policy`` with the adapter takes at temperature 0. Scored with the shared prompt
        prefix, and every state whose best two log-probabilities lie within ``margin`` (far
        above the prefix's rounding, about 1e-5) scored again with its prompt encoded whole,
        as ``llm_policy`` encodes it."""
        observed = list(observed)
        probs = self.policy.distributions(observed, self.settings.batch_size,
                                          shared_prefix=True)
        close = [k for k, p in enumerate(probs) if len(p) > 1 and np.diff(
            np.sort(np.log(np.maximum(p, 1e-300)))[-2:])[0] < margin]
        if close:
            exact = self.policy.distributions([observed[k] for k in close],
                                              self.settings.batch_size)
            for k, p in zip(close, exact, strict=True):
                probs[k] = p
        return [legal[int(np.argmax(p))] for (_, legal), p in zip(observed, probs, strict=True)]

    def sampled_actions(self, temperature: float) -> Any:
        """The current policy sampled at ``temperature`` (RAGEN reports T = 0.5 beside
        greedy): a function from observed states to actions, each action drawn with the
        trainer's rng from `tempered` ``p ** (settings.temperature / temperature)``; each
        distinct observation is scored once (the weights do not change while it is used)."""
        power = self.settings.temperature / temperature
        scored: dict[Hashable, np.ndarray] = {}

        def act(observed: Sequence[tuple[Any, tuple[int, ...]]]) -> list[int]:
            keys = [(np.asarray(obs).tobytes(), tuple(legal)) for obs, legal in observed]
            todo = {k: x for k, x in zip(keys, observed, strict=True) if k not in scored}
            if todo:
                scored.update(zip(todo, self.policy.distributions(
                    list(todo.values()), self.settings.batch_size, shared_prefix=True),
                    strict=True))
            return [self._draw(legal, tempered(scored[k], power))
                    for k, (_, legal) in zip(keys, observed, strict=True)]

        return act

    def evaluate(self) -> dict[str, float]:
        """The task's evaluation of the current greedy policy (`greedy_actions`)."""
        return self.task.evaluate(self.greedy_actions)

    # ---------------------------------------------------------------- the loop
    def train(self, progress: bool = True) -> list[dict[str, float]]:
        """Run the remaining steps (stopping early at ``max_minutes``, after
        ``stop_after_tied`` steps without any signal or ``stop_after_solved`` solved steps),
        checkpointing; the
        final policy's evaluation is kept in ``self.final`` with ``step = steps done``."""
        from tqdm.auto import tqdm

        s = self.settings
        bar = tqdm(total=s.steps, initial=self.step_index, disable=not progress,
                   desc=f"GRPO seed {self.seed}", unit="step")
        tied = _run_length(self.history, lambda r: r["zero_spread_fraction"] == 1.0)
        while self.step_index < s.steps:
            if s.max_minutes is not None and self.train_seconds >= 60 * s.max_minutes:
                break
            if (s.max_cpu_minutes is not None
                    and self.train_cpu_seconds >= 60 * s.max_cpu_minutes):
                break
            if s.stop_after_tied is not None and tied >= s.stop_after_tied:
                break
            row = self.step()
            if row is None:  # solved: stop with the policy just judged, before an update
                break
            tied = tied + 1 if row["zero_spread_fraction"] == 1.0 else 0
            bar.update(1)
            bar.set_postfix(reward=f"{row['reward_mean']:.3f}",
                            skipped=f"{row['zero_spread_fraction']:.2f}",
                            success=row["greedy_success"], s_per_step=f"{row['step_seconds']:.1f}")
            if self.out is not None and self.step_index % s.checkpoint_every == 0:
                self.checkpoint()
        bar.close()
        if self.out is not None:
            self.checkpoint()
        started, cpu0 = time.perf_counter(), _cpu_seconds()
        final = self.evaluate()
        self.wall_seconds += time.perf_counter() - started
        rss, peak = _rss_mb()
        row = {k: float("nan") for k in LOG_COLUMNS}
        row.update(final, step=self.step_index, train_seconds=self.train_seconds,
                   train_cpu_seconds=self.train_cpu_seconds,
                   wall_seconds=self.wall_seconds, rss_mb=rss, peak_rss_mb=peak,
                   eval_cpu_seconds=_cpu_seconds() - cpu0,
                   eval_wall_seconds=time.perf_counter() - started)
        self.final = row
        return self.history

    # ---------------------------------------------------------------- files
    def _log(self, row: dict[str, float]) -> None:
        self.history.append(row)
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        append_row(self.out / "log.csv", row, LOG_COLUMNS)

    def checkpoint(self) -> Path:
        """Save the adapter, optimiser, RNGs and counters to ``out/checkpoint`` (tensors
        and plain data only, so :func:`read_checkpoint` loads it with ``weights_only=True``)."""
        import torch

        if self.out is None:
            raise ValueError("this trainer has no out folder to checkpoint to")
        folder = self.out / "checkpoint"
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "step": self.step_index, "train_seconds": self.train_seconds,
            "train_cpu_seconds": self.train_cpu_seconds, "wall_seconds": self.wall_seconds,
            "task": self.task.state_dict(),
            "adapter": self.policy.adapter_state(), "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(), "settings": self.settings.model_dump(),
        }
        partial = folder / "trainer.pt.partial"
        torch.save(state, partial)
        partial.replace(folder / "trainer.pt")
        return folder

    def resume(self) -> None:
        """Continue from ``out/checkpoint`` (log rows after the checkpoint are dropped);
        ValueError naming the file for a checkpoint that is refused, damaged, or made with
        other settings, another model or other LoRA settings."""
        import torch

        path = self.out / "checkpoint" / "trainer.pt"
        state = read_checkpoint(path)
        mine = self.settings.model_dump()
        fields = type(self.settings).model_fields  # one newer than the checkpoint: its default
        changed = sorted(k for k in mine if k not in ("steps", "max_minutes", "max_cpu_minutes",
                                                      "stop_after_tied", "stop_after_solved")
                         and state["settings"].get(k, fields[k].default) != mine[k])
        if changed:
            raise ValueError(
                f"the checkpoint in {self.out} was made with other settings ({changed}); "
                "start in a new folder or remove it")
        try:
            self.policy.load_adapter_state(state["adapter"])
            self.optimizer.load_state_dict(state["optimizer"])
            self.rng.bit_generator.state = state["rng"]
            torch.set_rng_state(state["torch_rng"])
            random.setstate(state["python_rng"])
        except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as error:
            reason = one_line(str(error), 200)
            raise ValueError(
                f"finetune checkpoint {path} does not fit this policy ({type(error).__name__}: "
                f"{reason}; made with another model or LoRA settings?); delete it or the "
                "folder to start afresh") from None
        self.step_index = state["step"]
        self.train_seconds = state["train_seconds"]
        self.train_cpu_seconds = float(state.get("train_cpu_seconds", 0.0))
        self.wall_seconds = state["wall_seconds"]
        self.task.load_state_dict(state["task"])
        log = self.out / "log.csv"
        if log.is_file():
            with log.open(newline="", encoding="utf-8") as fh:
                rows = [r for r in csv.DictReader(fh) if int(r["step"]) < self.step_index]
            with log.open("w", newline="", encoding="utf-8") as fh:
                writer = csv.DictWriter(fh, fieldnames=LOG_COLUMNS)
                writer.writeheader()
                writer.writerows(rows)
            self.history = [{k: float(v) for k, v in r.items()} for r in rows]


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
