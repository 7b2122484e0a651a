"""gymnasium's FrozenLake-v1 (held inside) with this project's conventions, and
`FrozenLakeMapsEnv` (a random lake each episode). See docs/environments.md.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv as GymFrozenLakeEnv
from gymnasium.envs.toy_text.frozen_lake import is_valid
from gymnasium.utils import seeding
from pydantic import Field

from ._checks import (
    NUMBER,
    RENDER_MODES,
    Flag,
    RenderMode,
    StepLimit,
    check_action,
    check_reset_options,
    checked,
    episode_over_error,
)
from .language import (
    Describer,
    LanguageSpec,
    join_words,
    offset_short,
    offset_words,
    register_language,
)
from .rendering import canvas, fill_disk, fill_rect

#: Moves of FrozenLake-v1, by action index.
FROZENLAKE_ACTIONS: tuple[str, ...] = ("left", "down", "right", "up")


class FrozenLakeEnv(gym.Env[np.ndarray, int]):
    """Cross a frozen lake from S to G without falling into a hole (docs/environments.md)."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    @checked
    def __init__(
        self,
        map_name: Literal["4x4", "8x8"] = "4x4",
        desc: list[str] | None = None,
        is_slippery: Flag = True,
        max_steps: StepLimit | None = None,
        render_mode: RenderMode = None,
    ) -> None:
        try:
            self.lake = GymFrozenLakeEnv(render_mode="ansi" if render_mode else None, desc=desc,
                                         map_name=map_name,
                                         is_slippery=is_slippery)
        except (ValueError, TypeError, AttributeError, IndexError) as error:
            raise ValueError(f"desc={desc!r} is not a lake (rows of S, F, H, G): {error}") from None
        self.nrow, self.ncol = int(self.lake.nrow), int(self.lake.ncol)
        default = 100 if (self.nrow, self.ncol) == (4, 4) else 200
        self.max_steps = default if max_steps is None else max_steps
        self.render_mode = render_mode
        self.action_space = spaces.Discrete(4)
        self.observation_space = spaces.Box(
            low=np.zeros(2, dtype=np.float32),
            high=np.array([self.nrow - 1, self.ncol - 1], dtype=np.float32),
            dtype=np.float32,
        )
        self._steps = 0
        self._active = False

    def _obs(self, state: int) -> np.ndarray:
        return np.array(divmod(int(state), self.ncol), dtype=np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Back to S (FrozenLake takes no reset options)."""
        super().reset(seed=seed)
        check_reset_options(options, ())
        self.lake.np_random = self.np_random  # one RNG: seeding this env seeds the slipping
        state, _ = self.lake.reset()
        self._steps = 0
        self._active = True
        return self._obs(state), {"legal_moves": [0, 1, 2, 3], "is_success": False}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move (0 left, 1 down, 2 right, 3 up) and return the gymnasium 5-tuple."""
        action = check_action(action, 4)
        if not self._active:
            raise episode_over_error(type(self).__name__)
        state, reward, terminated, _, _ = self.lake.step(action)
        self._steps += 1
        truncated = not terminated and self._steps >= self.max_steps
        self._active = not (terminated or truncated)
        success = bool(terminated and reward > 0)
        return self._obs(state), float(reward), bool(terminated), truncated, {
            "legal_moves": [0, 1, 2, 3], "is_success": success,
        }

    def render(self) -> np.ndarray | str | None:
        """``ansi``: gymnasium's text picture of the lake; ``rgb_array``: ice pale blue,
        holes dark blue, start light grey, goal green, the agent red (no pygame needed)."""
        if self.render_mode == "ansi":
            return self.lake.render()
        return self.rgb_array() if self.render_mode == "rgb_array" else None

    def rgb_array(self, size: int = 32) -> np.ndarray:
        """A picture of the lake, ``size`` pixels a cell."""
        image = canvas(self.nrow * size, self.ncol * size, (60, 60, 70))
        colors = {b"S": (215, 225, 235), b"F": (200, 230, 250), b"H": (30, 60, 120),
                  b"G": (70, 180, 80)}
        for r in range(self.nrow):
            for c in range(self.ncol):
                fill_rect(image, r * size + 1, c * size + 1, (r + 1) * size - 1,
                          (c + 1) * size - 1, colors[bytes(self.lake.desc[r][c])])
        r, c = divmod(int(self.lake.s), self.ncol)
        fill_disk(image, (r + 0.5) * size - 0.5, (c + 0.5) * size - 0.5, size * 0.32,
                  (210, 40, 40))
        return image

    def close(self) -> None:
        self.lake.close()


#: Tile codes of the lake in `FrozenLakeMapsEnv`'s observation.
TILE_CODES: dict[str, int] = {"S": 0, "F": 0, "H": 1, "G": 2}


#: Boards drawn for one lake before giving up (gymnasium's generator may draw for ever).
MAX_MAP_DRAWS = 10_000


def random_lake(size: int, frozen_probability: float, seed: int) -> list[str]:
    """gymnasium's ``generate_random_map(size, frozen_probability, seed=seed)`` (the same
    draws), but ValueError after `MAX_MAP_DRAWS` boards without a path."""
    rng, _ = seeding.np_random(seed)
    p = min(1.0, frozen_probability)
    for _ in range(MAX_MAP_DRAWS):
        board = rng.choice(["F", "H"], (size, size), p=[p, 1 - p])
        board[0][0], board[-1][-1] = "S", "G"
        if is_valid(board, size):
            return ["".join(row) for row in board]
    raise ValueError(f"size={size}, frozen_probability={frozen_probability}: no lake with a "
                     f"path from S to G in {MAX_MAP_DRAWS:,} draws (map seed {seed}); expected "
                     "a larger frozen_probability for this size (0.8 finds one at once)")


def _seed_range(name: str, value: Any) -> range:
    """``[first, stop]`` (a half-open range of map seeds) as a ``range``, else ValueError."""
    if (not isinstance(value, (list, tuple)) or len(value) != 2
            or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
            or not 0 <= value[0] < value[1]):
        raise ValueError(f"{name}={value!r}: expected [first, stop], the map seeds "
                         "first..stop-1 (0 <= first < stop)")
    return range(value[0], value[1])


class FrozenLakeMapsEnv(gym.Env[np.ndarray, int]):
    """FrozenLake on a new random lake each episode (docs/environments.md, "FrozenLake on
    random lakes"): the moves, slipping, reward and step limit are `FrozenLakeEnv`'s."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    @checked
    def __init__(
        self,
        size: Annotated[int, NUMBER, Field(ge=2, le=16)] = 4,
        frozen_probability: Annotated[float, NUMBER, Field(gt=0, le=1)] = 0.8,
        is_slippery: Flag = False,
        train_maps: Any = (0, 500),  # [first, stop] (_seed_range checks)
        held_out_maps: Any = (100_000, 100_100),
        split: Literal["train", "held_out"] = "train",
        max_steps: StepLimit | None = None,
        render_mode: RenderMode = None,
    ) -> None:
        train = _seed_range("train_maps", list(train_maps))
        held_out = _seed_range("held_out_maps", list(held_out_maps))
        overlap = range(max(train.start, held_out.start), min(train.stop, held_out.stop))
        if overlap:
            raise ValueError(f"train_maps {list(train_maps)} and held_out_maps "
                             f"{list(held_out_maps)} share the map seeds {overlap.start}.."
                             f"{overlap.stop - 1}; expected disjoint sets")
        self.size, self.frozen_probability = size, float(frozen_probability)
        self.is_slippery, self.split = is_slippery, split
        self.map_seeds = train if split == "train" else held_out
        self.max_steps, self.render_mode = max_steps, render_mode
        self.action_space = spaces.Discrete(4)
        high = np.array([size - 1, size - 1] + [2] * size * size, dtype=np.float32)
        self.observation_space = spaces.Box(low=np.zeros_like(high), high=high,
                                            dtype=np.float32)
        self._lakes: dict[int, FrozenLakeEnv] = {}
        self._next = 0
        self.map_seed: int | None = None
        self.current: FrozenLakeEnv | None = None
        self.lake_of(self.map_seeds[0])  # a size and probability with no lake fail here

    def lake_of(self, map_seed: int) -> FrozenLakeEnv:
        """The `FrozenLakeEnv` of lake ``map_seed`` (built once)."""
        if map_seed not in self._lakes:
            desc = random_lake(self.size, self.frozen_probability, map_seed)
            self._lakes[map_seed] = FrozenLakeEnv(desc=desc, is_slippery=self.is_slippery,
                                                  max_steps=self.max_steps,
                                                  render_mode=self.render_mode)
        return self._lakes[map_seed]

    def _obs(self, cell: np.ndarray) -> np.ndarray:
        return np.concatenate([cell, self._tiles]).astype(np.float32)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """A lake of this split, then back to its S."""
        super().reset(seed=seed)
        check_reset_options(options, ())
        if self.split == "train":
            index = int(self.np_random.integers(len(self.map_seeds)))
        else:
            self._next = 0 if seed is not None else self._next
            index, self._next = self._next, (self._next + 1) % len(self.map_seeds)
        self.map_seed = self.map_seeds[index]
        self.current = self.lake_of(self.map_seed)
        self.current.np_random = self.np_random  # one RNG: seeding this env seeds the slipping
        self._tiles = np.array([TILE_CODES[t] for row in self.current.lake.desc
                                for t in row.tobytes().decode()], dtype=np.float32)
        cell, info = self.current.reset()
        return self._obs(cell), {**info, "map_seed": self.map_seed}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move (0 left, 1 down, 2 right, 3 up) on the current lake."""
        if self.current is None:
            raise episode_over_error(type(self).__name__)
        cell, reward, terminated, truncated, info = self.current.step(action)
        return self._obs(cell), reward, terminated, truncated, {**info,
                                                                "map_seed": self.map_seed}

    def render(self) -> np.ndarray | str | None:
        """The current lake as `FrozenLakeEnv` renders it (nothing before the first reset)."""
        return None if self.current is None else self.current.render()


# --------------------------------------------------------------------------- language
FROZENLAKE_TASK = (
    "You cross a frozen lake on a grid from the start to the goal without falling into a "
    "hole. Each action moves you one cell: 0 left, 1 down, 2 right, 3 up. The ice may be "
    "slippery: a move can carry you sideways instead. Falling into a hole ends the episode."
)
FROZENLAKE_COMPACT_TASK = "Frozen lake grid. Reach the goal; never step into a hole."

#: (row, col) step of each FrozenLake action: 0 left, 1 down, 2 right, 3 up.
_LAKE_DELTAS = ((0, -1), (1, 0), (0, 1), (-1, 0))
_TILES = {"S": "the start", "F": "frozen ice", "H": "a hole", "G": "the goal"}


class FrozenLakeDescriber(Describer):
    """FrozenLake: state ``[row, col]`` on a lake ``desc`` (rows of S, F, H, G): the goal, the
    holes and edges around, the moves (docs/adapters.md)."""

    env_name = "FrozenLake"
    state_shape = (2,)
    n_actions = 4

    def __init__(self, desc: Sequence[str]) -> None:
        rows = [str(row.decode() if isinstance(row, bytes) else row) for row in desc]
        if not rows or len({len(r) for r in rows}) != 1 or not all(
                set(r) <= set(_TILES) for r in rows):
            raise ValueError(f"desc={desc!r}: expected equal-length rows of S, F, H and G")
        goals = [(r, c) for r, row in enumerate(rows) for c, tile in enumerate(row) if tile == "G"]
        if len(goals) != 1:
            raise ValueError(f"desc={desc!r}: expected exactly one goal G, found {len(goals)}")
        self.desc = tuple(rows)
        self.height, self.width = len(rows), len(rows[0])
        self.goal = goals[0]

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        if not all(float(v).is_integer() for v in state):
            raise ValueError(f"FrozenLake state {state.tolist()!r}: expected integer [row, col]")
        row, col = int(state[0]), int(state[1])
        if not (0 <= row < self.height and 0 <= col < self.width):
            raise ValueError(f"FrozenLake state {[row, col]!r} is outside the "
                             f"{self.height}x{self.width} lake")
        tile = self.desc[row][col]
        if tile in "HG":
            sentences = [f"You are in {_TILES[tile]}."]
        else:
            sentences = [f"The goal is {offset_words(self.goal[0] - row, self.goal[1] - col)}."]
        around = []
        for name, (dr, dc) in zip(FROZENLAKE_ACTIONS, _LAKE_DELTAS, strict=True):
            r, c = row + dr, col + dc
            where = "to the " + name if name in ("left", "right") else name
            if not (0 <= r < self.height and 0 <= c < self.width):
                around.append(f"the edge of the lake {where}")
            elif self.desc[r][c] == "H":
                around.append(f"a hole {where}")
        if around:
            verb = "is" if len(around) == 1 else "are"
            sentences.append(f"There {verb} {join_words(around, 'and')}.")
        else:
            sentences.append("There is frozen ice all around you.")
        if legal_moves:
            names = [FROZENLAKE_ACTIONS[a] for a in legal_moves]
            sentences.append(f"You can move {join_words(names, 'or')}.")
        return " ".join(sentences)


class FrozenLakeMapsDescriber(Describer):
    """FrozenLake on random lakes: state ``[row, col, tile codes]``; `FrozenLakeDescriber`'s
    sentences on the lake the state carries."""

    env_name = "FrozenLake"
    n_actions = 4

    def __init__(self, size: int) -> None:
        self.size = size
        self.state_shape = (2 + size * size,)
        self._describers: dict[bytes, FrozenLakeDescriber] = {}

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        tiles = state[2:].astype(np.int64)
        key = tiles.tobytes()
        if key not in self._describers:
            letters = {code: letter for letter, code in TILE_CODES.items() if letter != "S"}
            if not set(tiles.tolist()) <= set(letters):
                raise ValueError(f"FrozenLake lake codes {sorted(set(tiles.tolist()))}: "
                                 f"expected {sorted(letters)}")
            rows = ["".join(letters[int(c)] for c in tiles[r * self.size:(r + 1) * self.size])
                    for r in range(self.size)]
            self._describers[key] = FrozenLakeDescriber(rows)
        return self._describers[key].describe(state[:2], legal_moves, last_action)


def _frozenlake(env: FrozenLakeEnv, **options: Any) -> LanguageSpec:
    rows = ["".join(tile.decode() for tile in row) for row in env.lake.desc]
    describer = FrozenLakeDescriber(rows, **options)

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        row, col = int(state[0]), int(state[1])
        holes = [name for name, (dr, dc) in zip(FROZENLAKE_ACTIONS, _LAKE_DELTAS, strict=True)
                 if 0 <= row + dr < len(rows) and 0 <= col + dc < len(rows[0])
                 and rows[row + dr][col + dc] == "H"]
        goal = f"goal: {offset_short(describer.goal[0] - row, describer.goal[1] - col)}"
        return goal + (f"; holes: {', '.join(holes)}" if holes else "")

    # whitened: DQN on slippery 4x4, 3 seeds - 78% as raw's 78%, paragraph 40% (performance.md)
    return LanguageSpec(describer, FROZENLAKE_ACTIONS, FROZENLAKE_TASK,
                        lambda e: np.array(divmod(int(e.lake.s), e.ncol), dtype=np.float32),
                        compact_state=compact, compact_task=FROZENLAKE_COMPACT_TASK,
                        representation={"normalise": "whiten"})


def _frozenlake_maps(env: FrozenLakeMapsEnv) -> LanguageSpec:
    def state_of(e: FrozenLakeMapsEnv) -> np.ndarray:
        if e.current is None:
            raise ValueError("FrozenLakeMapsEnv has no lake before reset()")
        return e._obs(np.array(divmod(int(e.current.lake.s), e.size), dtype=np.float32))

    # whitened: DQN on 100 held-out lakes, 3 seeds - 51% vs paragraph 3%, raw 1% (performance.md)
    return LanguageSpec(FrozenLakeMapsDescriber(env.size), FROZENLAKE_ACTIONS, FROZENLAKE_TASK,
                        state_of, compact_task=FROZENLAKE_COMPACT_TASK,
                        representation={"normalise": "whiten"})


register_language(FrozenLakeEnv, _frozenlake)
register_language(FrozenLakeMapsEnv, _frozenlake_maps)
