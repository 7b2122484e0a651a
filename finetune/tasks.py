"""The environments GRPO trains on (:class:`MazeTask`, :class:`SnapshotTask`): ``starts``,
``observe``, ``key``, ``step``, ``remember`` and ``evaluate`` are all the trainer calls.
See docs/finetune.md."""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import gymnasium
import numpy as np

from ..environments.maze import MazeEnv, bfs_distances

__all__ = ["Greedy", "MazeTask", "SnapshotTask", "draw_from", "episode_identity"]

Cell = tuple[int, int]
Observed = tuple[Any, tuple[int, ...]]
#: The greedy policy as the trainer hands it to `evaluate`: observed states -> actions.
Greedy = Callable[[Sequence[Observed]], list[int]]


class MazeTask:
    """A `MazeEnv` as a GRPO task: states are cells; ``states: all`` starts a step in every
    reachable non-goal cell, ``states: N`` in N of the cells rollouts have reached.

    ``potential``: phi(cell) for the oracle-shaped variant (``shaping: oracle``); default
    -BFS distance to the goal (0 at the goal)."""

    has_oracle = True

    def __init__(self, env: MazeEnv, potential: Callable[[Cell], float] | None = None) -> None:
        if not isinstance(env, MazeEnv):
            raise ValueError(f"env is {env!r}, expected a langadapt MazeEnv")
        self.env = env
        self.max_steps = env.max_steps
        self.to_goal = bfs_distances(env.grid, env.goal)
        reachable = bfs_distances(env.grid, env.start)
        if env.goal not in reachable:
            raise ValueError(f"maze {env.maze_name!r}: the goal is not reachable from the start")
        self.cells: list[Cell] = [c for c in env.free_cells() if c in reachable and c != env.goal]
        self.potential = potential or (lambda cell: -float(self.to_goal[cell]))
        self.met: set[Cell] = {env.start}

    @property
    def n_actions(self) -> int:
        return int(self.env.action_space.n)

    # ------------------------------------------------------------ the trainer's calls
    def starts(self, count: int | None, rng: np.random.Generator) -> list[Cell]:
        if count is None:
            return list(self.cells)
        met = sorted(self.met)
        if len(met) <= count:
            return met
        return [met[i] for i in sorted(rng.choice(len(met), size=count, replace=False))]

    def observe(self, cell: Cell) -> Observed:
        return self.env.observation_of(cell), self.legal(cell)

    def key(self, cell: Cell) -> Hashable:
        return cell

    def legal(self, cell: Cell) -> tuple[int, ...]:
        return tuple(self.env.legal_moves_at(cell))

    def step(self, cell: Cell, action: int, shaping: float | None = None
             ) -> tuple[float, Cell, bool, bool]:
        """``(reward, next_cell, terminated, truncated)`` of ``action`` taken in ``cell`` of
        the real environment; ``shaping`` = gamma adds ``gamma * phi(next) - phi(cell)``."""
        self.env.reset(options={"start": cell})
        obs, reward, terminated, _, _ = self.env.step(int(action))
        nxt = (int(obs[0]), int(obs[1]))
        if shaping is not None:
            phi_next = 0.0 if terminated else float(self.potential(nxt))
            phi = float(self.potential(cell))
            if not (math.isfinite(phi) and math.isfinite(phi_next)):
                raise ValueError(f"potential of {cell} / {nxt} is {phi!r} / {phi_next!r}; "
                                 "expected finite numbers")
            reward = reward + shaping * phi_next - phi
        return float(reward), nxt, bool(terminated), False

    def remember(self, path: Sequence[Cell], success: bool) -> None:
        self.met.update(path)

    def state_dict(self) -> dict[str, Any]:
        return {"met": [[int(r), int(c)] for r, c in sorted(self.met)]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.met = {(int(r), int(c)) for r, c in state["met"]}

    # ------------------------------------------------------------ judging
    def optimal_actions(self, cell: Cell) -> set[int]:
        """The legal actions that bring ``cell`` one move closer to the goal."""
        d = self.to_goal[cell]
        targets = self.env._targets[cell]  # noqa: SLF001 - the env's own transition table
        return {a for a in self.legal(cell) if self.to_goal.get(targets[a], d) == d - 1}

    def evaluate(self, greedy: Greedy) -> dict[str, float]:
        """Greedy rollout from the start (success, shortest path, length) and the fraction of
        cells whose greedy action is optimal (greedy is asked once, for every cell)."""
        actions = dict(zip(self.cells, greedy([self.observe(c) for c in self.cells]),
                           strict=True))
        accuracy = float(np.mean([actions[c] in self.optimal_actions(c) for c in self.cells]))
        cell, length, success = self.env.start, 0, False
        while length < self.env.max_steps:
            _, cell, success, _ = self.step(cell, actions[cell])
            length += 1
            if success:
                break
        shortest = success and length == self.to_goal[self.env.start]
        return {"greedy_success": float(success), "greedy_shortest": float(shortest),
                "greedy_length": float(length), "state_accuracy": accuracy}


def episode_identity(env: Any, seed: int) -> Hashable:
    """What tells a freshly reset episode from another: on a MiniGrid or BabyAI level its
    mission and initial grid (objects, agent position and direction; two seeds can draw the
    same layout); elsewhere (FrozenLake: every episode starts at S on the same lake) the
    reset seed itself, which sets the episode's slips."""
    level = getattr(env, "minigrid", None)
    if level is None:
        return int(seed)
    return (level.mission.encode() + level.grid.encode().tobytes()
            + bytes([*level.agent_pos, level.agent_dir]))


def draw_from(env: Any, rng: np.random.Generator) -> Any:
    """``env`` with its random draws (and those of every gymnasium environment it holds:
    FrozenLake's gymnasium lake, a MiniGrid level) taken from ``rng``; returns ``env``."""
    for part in (env, *(v for v in vars(env).values() if isinstance(v, gymnasium.Env))):
        part.np_random = rng
    return env


class SnapshotTask:
    """A MiniGrid/BabyAI level or FrozenLake as a GRPO task: states are deep-copied snapshots;
    training episodes use reset seeds from ``train_seed``, held-out ones from ``eval_seed``
    (refused if one was a training start); half of a step's starts are fresh, half from
    successful rollouts' paths (the last ``memory``); each rollout draws its own slips from the
    task's ``slips`` generator. ``eval_max_steps``: a greedy episode not done by then fails.
    See docs/finetune.md."""

    has_oracle = False

    def __init__(self, make_env: Callable[[], Any], *, train_seed: int = 1_000_000,
                 eval_seed: int = 0, eval_episodes: int = 100,
                 eval_max_steps: int | None = 64, memory: int = 512, seed: int = 0) -> None:
        self.make_env = make_env
        self.template = make_env()
        self.train_seed = int(train_seed)
        self.eval_seed = int(eval_seed)
        self.eval_episodes = int(eval_episodes)
        if not (self.eval_seed + self.eval_episodes <= self.train_seed):
            raise ValueError(
                f"evaluation seeds {self.eval_seed}..{self.eval_seed + self.eval_episodes - 1} "
                f"reach the training seeds (from {self.train_seed}); expected them below")
        self.max_steps = int(getattr(self.template, "minigrid", self.template).max_steps)
        self.eval_max_steps = eval_max_steps
        self.memory = int(memory)
        self.slips = np.random.default_rng([int(seed), 1])  # apart from the trainer's rng
        self.next_seed = self.train_seed
        self.reached: list[Any] = []
        self.trained: set[Hashable] = set()

    @property
    def n_actions(self) -> int:
        return int(self.template.action_space.n)

    def _fresh(self) -> tuple[Any, Observed]:
        env = copy.deepcopy(self.template)
        obs, info = env.reset(seed=self.next_seed)
        self.trained.add(episode_identity(env, self.next_seed))
        self.next_seed += 1
        return (env, (obs, tuple(info["legal_moves"])))

    # ------------------------------------------------------------ the trainer's calls
    def starts(self, count: int, rng: np.random.Generator) -> list[Any]:
        reached = min(count // 2, len(self.reached))
        picks = rng.choice(len(self.reached), size=reached, replace=False) if reached else []
        return [self._fresh() for _ in range(count - reached)] + [
            self.reached[int(i)] for i in picks]

    def observe(self, state: Any) -> Observed:
        return state[1]

    def key(self, state: Any) -> Hashable:
        obs, legal = state[1]
        return np.asarray(obs).tobytes(), legal

    def step(self, state: Any, action: int, shaping: float | None = None
             ) -> tuple[float, Any, bool, bool]:
        if shaping is not None:
            raise ValueError(f"shaping: oracle needs an oracle potential; "
                             f"{type(self.template).__name__} has none (use shaping: none)")
        env = draw_from(copy.deepcopy(state[0]), self.slips)
        obs, reward, terminated, truncated, info = env.step(int(action))
        return float(reward), (env, (obs, tuple(info["legal_moves"]))), terminated, truncated

    def remember(self, path: Sequence[Any], success: bool) -> None:
        if not success:
            return
        self.reached.extend(path)
        if len(self.reached) > self.memory:
            del self.reached[: len(self.reached) - self.memory]

    def state_dict(self) -> dict[str, Any]:
        return {"next_seed": self.next_seed, "slips": self.slips.bit_generator.state}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.next_seed = int(state["next_seed"])
        if "slips" in state:  # checkpoints before slippery tasks have none
            self.slips.bit_generator.state = state["slips"]
        # the training episodes started before the checkpoint, for the held-out check
        for seed in range(self.train_seed, self.next_seed):
            env = copy.deepcopy(self.template)
            env.reset(seed=seed)
            self.trained.add(episode_identity(env, seed))

    # ------------------------------------------------------------ judging
    def evaluate(self, policy: Greedy, fixed: bool = True) -> dict[str, float]:
        """The policy's episodes on the held-out seeds, played in lockstep (one batch of
        decisions per time step): success rate, mean reward and length (``greedy_*``: the
        trainer hands its greedy policy). ``fixed``: ``policy`` takes one action per
        observation, so each distinct observation is asked once; False for a sampling
        policy, asked at every visit."""
        envs, states = [], []
        for k in range(self.eval_episodes):
            seed = self.eval_seed + k
            env = copy.deepcopy(self.template)
            obs, info = env.reset(seed=seed)
            identity = episode_identity(env, seed)
            if identity in self.trained:
                same = ("reset seed: the same slips" if isinstance(identity, int)
                        else "mission and layout")
                raise ValueError(f"evaluation episode of seed {seed} was a training start "
                                 f"(the same {same}); expected held-out episodes")
            envs.append(env)
            states.append((obs, tuple(info["legal_moves"])))
        limit = self.eval_max_steps or self.max_steps
        success = np.zeros(len(envs))
        returns = np.zeros(len(envs))
        lengths = np.zeros(len(envs))
        alive = list(range(len(envs)))
        chosen: dict[Hashable, int] = {}
        for _ in range(limit):
            if not alive:
                break
            if fixed:
                keys = [self.key((None, states[k])) for k in alive]
                todo = {key: states[k] for key, k in zip(keys, alive, strict=True)
                        if key not in chosen}
                if todo:
                    chosen.update(zip(todo, policy(list(todo.values())), strict=True))
                actions = [chosen[key] for key in keys]
            else:
                actions = policy([states[k] for k in alive])
            still = []
            for k, action in zip(alive, actions, strict=True):
                obs, reward, terminated, truncated, info = envs[k].step(int(action))
                states[k] = (obs, tuple(info["legal_moves"]))
                lengths[k] += 1
                returns[k] += reward
                if terminated or truncated:
                    success[k] = float(info["is_success"])
                else:
                    still.append(k)
            alive = still
        return {"greedy_success": float(success.mean()), "greedy_return": float(returns.mean()),
                "greedy_length": float(lengths.mean()), "episodes": float(len(envs))}
