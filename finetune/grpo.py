"""GRPO (group-relative policy optimisation, Shao et al. 2024) of a `LoRAPolicy` on a maze,
with rewards from the environment.

One step:

1. pick the step's states: every reachable non-goal cell (``states: all``), or ``N`` of
   the cells the policy has met so far (the start, and every cell its sampled actions and
   rollouts reached);
2. score them all without grad (each prompt encoded once, its candidate replies run on its
   KV cache) and draw a group of ``G`` actions per state from the policy — always legal;
3. reward each action by stepping a real `MazeEnv` from that cell: ``reward: step`` is the
   one-step reward plus the potential-based shaping ``gamma * phi(s') - phi(s)`` (``phi``
   = -BFS distance to the goal, 0 at the goal; Ng et al. 1999, so the optimal policy is
   unchanged); ``reward: episode`` credits each decision with the discounted return of
   the rest of an episode that follows the current policy (``horizon`` steps at most);
4. advantages ``(r - mean) / std`` within each group; a group whose rewards are all equal
   carries no signal and is skipped (counted per step);
5. one gradient step (AdamW on the LoRA weights) on
   ``-mean(A * log pi(a|s)) + kl_coef * KL(pi(.|s) || pi_ref(.|s))`` over the other
   groups. The KL to the frozen model (adapter off) is exact: the policy is a categorical
   over the legal actions. Sampling and update use the same weights, so PPO's ratio is 1
   and its clipping never acts; the objective is GRPO's.

The pass of step 2 also gives the greedy action in every cell, so the policy's greedy
rollout and per-state accuracy are measured at every step for free (on ``states: all``).

The checkpoint (``out/checkpoint/trainer.pt``) holds tensors and plain data only (ints,
floats, strings, lists, tuples, dicts: the LoRA weights, AdamW's state, numpy's and
Python's RNG states, torch's RNG state tensor, the settings), and `read_checkpoint` loads
it with ``torch.load(weights_only=True)``: a results folder is data, never code, so a
crafted file whose pickle would call a function is refused (one ValueError naming the
file; nothing in it runs), as is a damaged or truncated one or one that does not fit the
policy. Delete the file or the folder to start afresh.
"""

from __future__ import annotations

import csv
import math
import pickle
import random
import resource
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..environments.maze import MazeEnv, bfs_distances

__all__ = [
    "GRPOSettings",
    "GRPOTrainer",
    "LOG_COLUMNS",
    "MazeTask",
    "group_advantages",
    "read_checkpoint",
]

Cell = tuple[int, int]

LOG_COLUMNS = (
    "step", "states", "samples", "legal_fraction", "reward_mean", "reward_std",
    "groups_skipped", "zero_spread_fraction", "loss", "kl", "greedy_success",
    "greedy_shortest", "greedy_length", "state_accuracy", "step_seconds", "train_seconds",
    "wall_seconds", "cpu_seconds", "rss_mb", "peak_rss_mb",
)


class GRPOSettings(BaseModel):
    """Hyperparameters of GRPO (defaults: the CPU settings that solve umaze in minutes)."""

    model_config = ConfigDict(extra="forbid")

    steps: int = Field(30, ge=1, description="GRPO steps (one gradient step each)")
    group_size: int = Field(4, description="actions sampled per state (G, at least 2)")
    states: Literal["all"] | int = Field(
        "all", description="states per step: 'all' reachable non-goal cells, or N cells met")
    learning_rate: float = Field(3e-4, gt=0, le=1.0)
    weight_decay: float = Field(0.0, ge=0)
    max_grad_norm: float | None = Field(1.0, gt=0, description="gradient clipping; None = off")
    temperature: float = Field(1.0, gt=0, description="policy temperature (sampling and loss)")
    kl_coef: float = Field(0.0, ge=0, description="weight of KL to the frozen model; 0 = off")
    reward: Literal["step", "episode"] = Field(
        "step", description="step: one-step reward + shaping; episode: discounted return")
    shaping: Literal["oracle", "none"] = Field(
        "oracle", description="potential-based shaping with phi = -BFS distance to the goal")
    gamma: float = Field(0.99, gt=0, le=1.0, description="discount of shaping and returns")
    horizon: int = Field(20, ge=1, description="longest rollout of reward: episode")
    batch_size: int = Field(16, ge=1, description="states per backward pass (bounds memory)")
    max_minutes: float | None = Field(
        None, gt=0, description="stop after this much training time (minutes); None = off")
    checkpoint_every: int = Field(5, ge=1, description="steps between checkpoints")
    stop_after_tied: int | None = Field(
        3, ge=1, description="stop after this many steps in a row in which every group was "
        "tied (no gradient: the policy has stopped changing); None = run every step")

    @field_validator("group_size")
    @classmethod
    def _group(cls, value: int) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < 2:
            raise ValueError(
                f"group_size is {value!r}, expected an int >= 2 (GRPO compares the rewards "
                "within a group; a group of 1 has no spread)")
        return value

    @field_validator("states")
    @classmethod
    def _states(cls, value: Any) -> Any:
        if value != "all" and (isinstance(value, bool) or not isinstance(value, int)
                               or value < 1):
            raise ValueError(f"states is {value!r}, expected 'all' or a positive int")
        return value


def group_advantages(rewards: Any, eps: float = 1e-6) -> tuple[np.ndarray, np.ndarray]:
    """``(advantages, active)`` for a ``[groups, G]`` reward array: ``(r - mean) / std``
    within each group, and which groups have any spread (the others get 0 and are skipped).

    ValueError naming the group and value for a NaN or infinite reward.
    """
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


class MazeTask:
    """The maze side of GRPO: states, one-step rewards from a real `MazeEnv`, the oracle
    potential, and the greedy evaluation (success, shortest path, per-state accuracy).

    ``potential``: phi(cell) for shaping; default -BFS distance to the goal (0 at the goal).
    """

    def __init__(self, env: MazeEnv, potential: Callable[[Cell], float] | None = None) -> None:
        if not isinstance(env, MazeEnv):
            raise ValueError(f"env is {env!r}, expected a langadapt MazeEnv")
        self.env = env
        self.to_goal = bfs_distances(env.grid, env.goal)
        reachable = bfs_distances(env.grid, env.start)
        if env.goal not in reachable:
            raise ValueError(f"maze {env.maze_name!r}: the goal is not reachable from the start")
        self.cells: list[Cell] = [c for c in env.free_cells() if c in reachable and c != env.goal]
        self.potential = potential or (lambda cell: -float(self.to_goal[cell]))

    def legal(self, cell: Cell) -> tuple[int, ...]:
        return tuple(self.env.legal_moves_at(cell))

    def state(self, cell: Cell) -> tuple[np.ndarray, tuple[int, ...]]:
        return self.env.observation_of(cell), self.legal(cell)

    def step(self, cell: Cell, action: int, gamma: float, shaping: bool
             ) -> tuple[float, Cell, bool]:
        """``(reward, next_cell, terminated)`` of ``action`` taken in ``cell`` of the real
        environment, plus ``gamma * phi(next) - phi(cell)`` when ``shaping``."""
        self.env.reset(options={"start": cell})
        obs, reward, terminated, _, _ = self.env.step(int(action))
        nxt = (int(obs[0]), int(obs[1]))
        if shaping:
            phi_next = 0.0 if terminated else float(self.potential(nxt))
            phi = float(self.potential(cell))
            if not (math.isfinite(phi) and math.isfinite(phi_next)):
                raise ValueError(f"potential of {cell} / {nxt} is {phi!r} / {phi_next!r}; "
                                 "expected finite numbers")
            reward = reward + gamma * phi_next - phi
        return float(reward), nxt, bool(terminated)

    def optimal_actions(self, cell: Cell) -> set[int]:
        """The legal actions that bring ``cell`` one move closer to the goal."""
        d = self.to_goal[cell]
        targets = self.env._targets[cell]  # noqa: SLF001 - the env's own transition table
        return {a for a in self.legal(cell) if self.to_goal.get(targets[a], d) == d - 1}

    def evaluate(self, greedy: Callable[[Cell], int]) -> dict[str, float]:
        """Greedy rollout from the start (success, shortest path, length) and the fraction of
        cells whose greedy action is optimal."""
        accuracy = float(np.mean([greedy(c) in self.optimal_actions(c) for c in self.cells]))
        cell, length, success = self.env.start, 0, False
        while length < self.env.max_steps:
            _, cell, success = self.step(cell, greedy(cell), 1.0, False)
            length += 1
            if success:
                break
        shortest = success and length == self.to_goal[self.env.start]
        return {"greedy_success": float(success), "greedy_shortest": float(shortest),
                "greedy_length": float(length), "state_accuracy": accuracy}


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
    """Runs GRPO steps of ``policy`` on ``task`` (see the module docstring), logging one CSV
    row per step to ``out/log.csv`` and checkpointing to ``out/checkpoint/``; a trainer made
    on a folder with a checkpoint resumes from it."""

    def __init__(self, policy: Any, task: MazeTask, settings: GRPOSettings | dict[str, Any]
                 | None = None, out: str | Path | None = None, seed: int = 0) -> None:
        import torch

        self.policy = policy
        self.task = task
        self.settings = (settings if isinstance(settings, GRPOSettings)
                         else GRPOSettings(**(settings or {})))
        if policy.spec.n_actions != task.env.action_space.n:
            raise ValueError(f"the policy has {policy.spec.n_actions} actions, the maze "
                             f"{task.env.action_space.n}")
        self.out = None if out is None else Path(out)
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.optimizer = torch.optim.AdamW(policy.trainable_parameters(),
                                           lr=self.settings.learning_rate,
                                           weight_decay=self.settings.weight_decay)
        self.step_index = 0
        self.train_seconds = 0.0
        self.wall_seconds = 0.0
        self.met: set[Cell] = {task.env.start}
        self.history: list[dict[str, float]] = []
        self._reference: dict[Cell, Any] = {}
        if self.out is not None and (self.out / "checkpoint" / "trainer.pt").is_file():
            self.resume()

    # ---------------------------------------------------------------- one step
    def pick_cells(self) -> list[Cell]:
        if self.settings.states == "all":
            return list(self.task.cells)
        met = sorted(self.met)
        if len(met) <= self.settings.states:
            return met
        picks = self.rng.choice(len(met), size=self.settings.states, replace=False)
        return [met[i] for i in sorted(picks)]

    def _distributions(self, cells: Sequence[Cell]) -> dict[Cell, np.ndarray]:
        states = [self.task.state(c) for c in cells]
        probs = self.policy.distributions(states, self.settings.batch_size)
        return dict(zip(cells, probs, strict=True))

    def _sample(self, cell: Cell, probs: dict[Cell, np.ndarray]) -> int:
        if cell not in probs:
            probs.update(self._distributions([cell]))
        legal = self.task.legal(cell)
        return int(legal[self.rng.choice(len(legal), p=probs[cell] / probs[cell].sum())])

    def reward(self, cell: Cell, action: int, probs: dict[Cell, np.ndarray]) -> float:
        """The reward of ``action`` in ``cell`` under the configured reward kind."""
        s = self.settings
        shaping = s.shaping == "oracle"
        total, discount = 0.0, 1.0
        for t in range(s.horizon if s.reward == "episode" else 1):
            if t > 0:
                action = self._sample(cell, probs)
            r, cell, terminated = self.task.step(cell, action, s.gamma, shaping)
            self.met.add(cell)
            total += discount * r
            discount *= s.gamma
            if terminated:
                break
        if not math.isfinite(total):
            raise ValueError(f"reward {total!r} for action {action} in {cell}: expected a "
                             "finite number")
        return total

    def step(self) -> dict[str, float]:
        """One GRPO step; returns (and logs) its row."""
        import torch

        s = self.settings
        started, cpu0 = time.perf_counter(), _cpu_seconds()
        cells = self.pick_cells()
        # (2) one no-grad pass: sampling distributions and, for free, the greedy policy
        probs = self._distributions(cells)
        if s.states == "all":
            greedy = {c: self.task.legal(c)[int(np.argmax(p))] for c, p in probs.items()}
            evaluation = self.task.evaluate(greedy.__getitem__)
        else:
            evaluation = None
        actions = np.zeros((len(cells), s.group_size), dtype=int)
        rewards = np.zeros((len(cells), s.group_size))
        legal_count = 0
        for g, cell in enumerate(cells):
            legal = self.task.legal(cell)
            for i in range(s.group_size):
                a = self._sample(cell, probs)
                legal_count += a in legal
                actions[g, i] = a
                rewards[g, i] = self.reward(cell, a, probs)
        advantages, active = group_advantages(rewards)
        loss_value, kl_value = float("nan"), float("nan")
        if active.any():
            self.optimizer.zero_grad()
            chosen = [i for i, on in enumerate(active) if on]
            loss_sum, kl_sum = 0.0, 0.0
            for start in range(0, len(chosen), s.batch_size):
                part = chosen[start:start + s.batch_size]
                states = [self.task.state(cells[i]) for i in part]
                log_probs = self.policy.log_probs(states)
                terms = []
                for i, lp, (_, legal) in zip(part, log_probs, states, strict=True):
                    index = torch.tensor([legal.index(int(a)) for a in actions[i]])
                    adv = torch.tensor(advantages[i], dtype=lp.dtype)
                    term = -(adv * lp[index]).mean()
                    if s.kl_coef > 0:
                        ref = self._reference_log_probs(cells[i], states[part.index(i)])
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
        rss, peak = _rss_mb()
        row = {
            "step": self.step_index, "states": len(cells), "samples": int(rewards.size),
            "legal_fraction": legal_count / rewards.size,
            "reward_mean": float(rewards.mean()), "reward_std": float(rewards.std()),
            "groups_skipped": int((~active).sum()),
            "zero_spread_fraction": float((~active).mean()),
            "loss": loss_value, "kl": kl_value,
            **(evaluation or dict.fromkeys(
                ("greedy_success", "greedy_shortest", "greedy_length", "state_accuracy"),
                float("nan"))),
            "step_seconds": elapsed, "train_seconds": self.train_seconds,
            "wall_seconds": self.wall_seconds, "cpu_seconds": _cpu_seconds() - cpu0,
            "rss_mb": rss, "peak_rss_mb": peak,
        }
        self.step_index += 1
        self._log(row)
        return row

    def _reference_log_probs(self, cell: Cell, state: Any) -> Any:
        import torch

        if cell not in self._reference:
            with torch.no_grad():
                self._reference[cell] = self.policy.log_probs([state], reference=True)[0]
        return self._reference[cell]

    def evaluate(self) -> dict[str, float]:
        """Greedy rollout and per-state accuracy of the current policy."""
        probs = self._distributions(self.task.cells)
        greedy = {c: self.task.legal(c)[int(np.argmax(p))] for c, p in probs.items()}
        return self.task.evaluate(greedy.__getitem__)

    # ---------------------------------------------------------------- the loop
    def train(self, progress: bool = True) -> list[dict[str, float]]:
        """Run the remaining steps (stopping early at ``max_minutes`` or after
        ``stop_after_tied`` steps without any signal), checkpointing; the
        final policy's evaluation is appended as a last row with ``step = steps done``."""
        from tqdm.auto import tqdm

        s = self.settings
        bar = tqdm(total=s.steps, initial=self.step_index, disable=not progress,
                   desc=f"GRPO seed {self.seed}", unit="step")
        tied = 0
        while self.step_index < s.steps:
            if s.max_minutes is not None and self.train_seconds >= 60 * s.max_minutes:
                break
            if s.stop_after_tied is not None and tied >= s.stop_after_tied:
                break
            row = self.step()
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
        started = time.perf_counter()
        final = self.evaluate()
        self.wall_seconds += time.perf_counter() - started
        rss, peak = _rss_mb()
        row = {k: float("nan") for k in LOG_COLUMNS}
        row.update(final, step=self.step_index, train_seconds=self.train_seconds,
                   wall_seconds=self.wall_seconds, rss_mb=rss, peak_rss_mb=peak)
        self.final = row
        return self.history

    # ---------------------------------------------------------------- files
    def _log(self, row: dict[str, float]) -> None:
        self.history.append(row)
        if self.out is None:
            return
        self.out.mkdir(parents=True, exist_ok=True)
        path = self.out / "log.csv"
        new = not path.is_file()
        with path.open("a", newline="", encoding="utf-8") as fh:
            writer = csv.DictWriter(fh, fieldnames=LOG_COLUMNS)
            if new:
                writer.writeheader()
            writer.writerow(row)

    def checkpoint(self) -> Path:
        """Save the adapter, optimiser, RNGs and counters to ``out/checkpoint`` (tensors and
        plain data only, so `read_checkpoint` loads it with ``weights_only=True``)."""
        import torch

        if self.out is None:
            raise ValueError("this trainer has no out folder to checkpoint to")
        folder = self.out / "checkpoint"
        folder.mkdir(parents=True, exist_ok=True)
        state = {
            "step": self.step_index, "train_seconds": self.train_seconds,
            "wall_seconds": self.wall_seconds, "met": [(int(r), int(c)) for r, c in
                                                       sorted(self.met)],
            "adapter": self.policy.adapter_state(), "optimizer": self.optimizer.state_dict(),
            "rng": self.rng.bit_generator.state, "torch_rng": torch.get_rng_state(),
            "python_rng": random.getstate(), "settings": self.settings.model_dump(),
        }
        partial = folder / "trainer.pt.partial"
        torch.save(state, partial)
        partial.replace(folder / "trainer.pt")
        return folder

    def resume(self) -> None:
        """Continue from ``out/checkpoint`` (log rows after the checkpoint are dropped).

        ValueError naming the file for a checkpoint that is refused, damaged, or made with
        other settings, another model or other LoRA settings."""
        import torch

        path = self.out / "checkpoint" / "trainer.pt"
        state = read_checkpoint(path)
        mine = self.settings.model_dump()
        changed = sorted(k for k in mine if k not in ("steps", "max_minutes", "stop_after_tied")
                         and state["settings"].get(k) != mine[k])
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
            reason = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
            raise ValueError(
                f"finetune checkpoint {path} does not fit this policy ({type(error).__name__}: "
                f"{reason}; made with another model or LoRA settings?); delete it or the "
                "folder to start afresh") from None
        self.step_index = state["step"]
        self.train_seconds = state["train_seconds"]
        self.wall_seconds = state["wall_seconds"]
        self.met = {tuple(c) for c in state["met"]}
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
    "step": int, "train_seconds": (int, float), "wall_seconds": (int, float), "met": list,
    "adapter": dict, "optimizer": dict, "rng": dict, "torch_rng": object,
    "python_rng": tuple, "settings": dict,
}


def read_checkpoint(path: str | Path) -> dict[str, Any]:
    """The state dict of a GRPO checkpoint file, read as data only.

    ``torch.load(weights_only=True)``: only tensors and plain Python data are rebuilt, never
    an arbitrary object, so a crafted file cannot run code. One ValueError naming the file
    (and saying to delete it or the folder) when the file is refused, damaged or truncated,
    or is not a GRPO checkpoint.
    """
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
