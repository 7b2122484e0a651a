"""The Natural Language RL / elsciRL mazes (as published) and seeded random mazes, as a
gymnasium environment. See docs/environments.md.
"""

from __future__ import annotations

import numbers
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import AfterValidator, Field

from ..errors import shown
from ._checks import (
    NUMBER,
    RENDER_MODES,
    Finite,
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
    bin_index,
    check_edges,
    join_words,
    offset_short,
    offset_words,
    register_language,
)
from .rendering import canvas, fill_disk, fill_rect

Cell = tuple[int, int]

#: (drow, dcol) of each action: 0 left, 1 right, 2 up, 3 down, 4 up-left, 5 down-left,
#: 6 up-right, 7 down-right.
ACTION_DELTAS: tuple[Cell, ...] = (
    (0, -1), (0, 1), (-1, 0), (1, 0), (-1, -1), (1, -1), (-1, 1), (1, 1),
)
ACTION_NAMES: tuple[str, ...] = (
    "left", "right", "up", "down", "up-left", "down-left", "up-right", "down-right",
)

#: Smallest width and height of a random maze.
MIN_RANDOM_SIZE = 5
MAX_RANDOM_SIZE = 201  # made in about a second; 401 takes four
#: Width and height of a random maze when none is given.
DEFAULT_RANDOM_SIZE = 9


@dataclass(frozen=True)
class MazeLayout:
    """A fixed maze: rows of '0'/'1' characters (1 = wall), a start cell and a goal cell."""

    name: str
    rows: tuple[str, ...]
    start: Cell
    goal: Cell

    @property
    def shape(self) -> tuple[int, int]:
        """(height, width) of the grid."""
        return len(self.rows), len(self.rows[0])

    def grid(self) -> np.ndarray:
        """The layout as a new int8 array of shape (height, width), 1 = wall."""
        return np.array([[int(ch) for ch in row] for row in self.rows], dtype=np.int8)


def _layout(name: str, rows: str, start: Cell, goal: Cell) -> MazeLayout:
    return MazeLayout(name, tuple(rows.split(" / ")), start, goal)


#: The published layouts, by name.
MAZE_LAYOUTS: dict[str, MazeLayout] = {
    layout.name: layout
    for layout in (
        _layout("umaze", "11111 / 10001 / 10101 / 10101 / 11111", (3, 1), (3, 3)),
        _layout(
            "double_t_maze",
            "1111111111111 / 1000001000001 / 1110111110111 / 1110111110111 / 1110111110111 / "
            "1110000000111 / 1111110111111 / 1111110111111 / 1111110111111 / 1111111111111",
            (1, 1), (8, 6),
        ),
        _layout(
            "medium",
            "11111111 / 10010001 / 10010101 / 11000011 / 11101001 / 10000101 / 10010001 / "
            "11111111",
            (1, 1), (6, 6),
        ),
        _layout(
            "large",
            "111111111 / 100000101 / 101010101 / 100010001 / 101110111 / 100000001 / "
            "111011101 / 100010001 / 101011111 / 101010001 / 100000101 / 111111111",
            (1, 1), (10, 7),
        ),
    )
}

#: The values the ``maze`` argument accepts as shipped (a layout added to `MAZE_LAYOUTS`
#: is accepted too).
MAZE_NAMES: tuple[str, ...] = (*MAZE_LAYOUTS, "random")


def _known_maze(name: str) -> str:
    if name != "random" and name not in MAZE_LAYOUTS:
        known = ", ".join(repr(n) for n in (*MAZE_LAYOUTS, "random"))
        raise ValueError(f"maze={shown(name)}: expected one of {known}")
    return name


#: A layout of `MAZE_LAYOUTS` (read when the maze is made) or ``"random"``.
MazeName = Annotated[str, AfterValidator(_known_maze)]
RandomSize = Annotated[int, NUMBER, Field(ge=MIN_RANDOM_SIZE, le=MAX_RANDOM_SIZE)]


def _neighbours(grid: np.ndarray, cell: Cell) -> Iterable[tuple[int, Cell]]:
    """(action, target) for every action from `cell` whose target is a free cell."""
    height, width = grid.shape
    row, col = cell
    for action, (drow, dcol) in enumerate(ACTION_DELTAS):
        r, c = row + drow, col + dcol
        if 0 <= r < height and 0 <= c < width and grid[r, c] == 0:
            yield action, (r, c)


def bfs_distances(grid: np.ndarray, start: Cell) -> dict[Cell, int]:
    """Fewest moves (8-neighbourhood, a move needs only its target free) from `start`."""
    distances = {start: 0}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        for _, target in _neighbours(grid, cell):
            if target not in distances:
                distances[target] = distances[cell] + 1
                queue.append(target)
    return distances


def shortest_path_actions(grid: np.ndarray, start: Cell, goal: Cell) -> list[int] | None:
    """The actions of one shortest path from `start` to `goal`, or None if unreachable."""
    previous: dict[Cell, tuple[Cell, int] | None] = {start: None}
    queue = deque([start])
    while queue:
        cell = queue.popleft()
        if cell == goal:
            actions: list[int] = []
            step = previous[cell]
            while step is not None:
                cell, action = step
                actions.append(action)
                step = previous[cell]
            return actions[::-1]
        for action, target in _neighbours(grid, cell):
            if target not in previous:
                previous[target] = (cell, action)
                queue.append(target)
    return None


def generate_random_maze(width: int, height: int, seed: int) -> tuple[np.ndarray, Cell, Cell]:
    """A solvable maze (grid, start, goal) from `seed`: a depth-first backtracker on the odd
    lattice; an even dimension's extra row/column is opened at random beside free cells.
    The goal is the free cell farthest from (1, 1) (ties: the last in row-major order)."""
    rng = np.random.default_rng(seed)
    grid = np.ones((height, width), dtype=np.int8)
    lattice_rows = range(1, height - 1, 2)
    lattice_cols = range(1, width - 1, 2)
    start: Cell = (1, 1)
    grid[start] = 0
    visited = {start}
    stack = [start]
    while stack:
        row, col = stack[-1]
        options = [
            (row + dr, col + dc)
            for dr, dc in ((0, -2), (0, 2), (-2, 0), (2, 0))
            if row + dr in lattice_rows and col + dc in lattice_cols
            and (row + dr, col + dc) not in visited
        ]
        if not options:
            stack.pop()
            continue
        nxt = options[int(rng.integers(len(options)))]
        grid[(row + nxt[0]) // 2, (col + nxt[1]) // 2] = 0
        grid[nxt] = 0
        visited.add(nxt)
        stack.append(nxt)
    if height % 2 == 0:
        row = height - 2
        for col in range(1, width - 1):
            if grid[row - 1, col] == 0 and rng.random() < 0.5:
                grid[row, col] = 0
    if width % 2 == 0:
        col = width - 2
        for row in range(1, height - 1):
            if (grid[row, col - 1] == 0 or grid[row - 1, col] == 0) and rng.random() < 0.5:
                grid[row, col] = 0
    distances = bfs_distances(grid, start)
    goal = max(distances, key=lambda cell: (distances[cell], cell))
    return grid, start, goal


class MazeEnv(gym.Env[np.ndarray, int]):
    """A grid maze with eight moves; reach the goal cell (docs/environments.md, "Maze")."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 4}

    #: Pixels per cell in ``rgb_array`` pictures.
    cell_pixels = 24

    @checked
    def __init__(
        self,
        maze: MazeName = "umaze",
        width: RandomSize | None = None,
        height: RandomSize | None = None,
        goal_reward: Finite = 1.0,
        step_reward: Finite = -0.001,
        max_steps: StepLimit = 100,
        render_mode: RenderMode = None,
        seed: Annotated[int, NUMBER, Field(ge=0)] = 0,
    ) -> None:
        if maze == "random":
            grid, start, goal = generate_random_maze(
                width or DEFAULT_RANDOM_SIZE, height or DEFAULT_RANDOM_SIZE, seed)
            self.maze_seed: int | None = seed
        else:
            if width is not None or height is not None:
                raise ValueError(
                    f"width={width!r}, height={height!r} given for maze {maze!r}; width and "
                    "height apply only to maze='random' (named layouts have a fixed size)"
                )
            layout = MAZE_LAYOUTS[maze]
            grid, start, goal = layout.grid(), layout.start, layout.goal
            self.maze_seed = None

        self.maze_name: str = maze
        self.goal_reward, self.step_reward = goal_reward, step_reward
        self.max_steps, self.render_mode = max_steps, render_mode

        grid.flags.writeable = False
        self.grid: np.ndarray = grid
        self.start: Cell = (int(start[0]), int(start[1]))
        self.goal: Cell = (int(goal[0]), int(goal[1]))
        self.height, self.width = (int(n) for n in grid.shape)
        self.cell: Cell = self.start

        self.action_space = spaces.Discrete(len(ACTION_DELTAS))
        self.observation_space = spaces.Box(
            low=0.0, high=float(max(self.height, self.width) - 1), shape=(2,), dtype=np.float32
        )

        # Transition tables, built once so that step() is a few dict/tuple look-ups.
        self._free: list[Cell] = [
            (r, c) for r in range(self.height) for c in range(self.width) if grid[r, c] == 0
        ]
        self._targets: dict[Cell, tuple[Cell, ...]] = {}
        self._legal: dict[Cell, list[int]] = {}
        self._obs: dict[Cell, np.ndarray] = {}
        for cell in self._free:
            moves = dict(_neighbours(grid, cell))
            self._targets[cell] = tuple(moves.get(a, cell) for a in range(len(ACTION_DELTAS)))
            self._legal[cell] = sorted(moves)
            self._obs[cell] = np.array(cell, dtype=np.float32)
        self._n_actions = len(ACTION_DELTAS)
        self._steps = 0
        self._active = False

    # ------------------------------------------------------------------ queries
    def legal_moves_at(self, cell: Cell) -> list[int]:
        """Actions whose target cell is free, from the free cell `cell` (ascending)."""
        return list(self._legal[self._check_cell(cell)])

    def free_cells(self) -> list[Cell]:
        """Every free (non-wall) cell, in row-major order."""
        return list(self._free)

    def observation_of(self, cell: Cell) -> np.ndarray:
        """The observation the agent receives in the free cell `cell` (a new array)."""
        return self._obs[self._check_cell(cell)].copy()

    def _check_cell(self, cell: Any) -> Cell:
        """`cell` (integral floats too: an observation) as a free (row, col), else ValueError."""
        try:
            values = [float(v) for v in cell]
        except (TypeError, ValueError):
            values = []
        if len(values) != 2 or not all(v.is_integer() for v in values):
            raise ValueError(f"cell {cell!r} is not a (row, col) pair of integers")
        key = (int(values[0]), int(values[1]))
        if key not in self._targets:
            raise ValueError(
                f"cell {cell!r} is not a free cell of maze {self.maze_name!r} "
                f"({self.height}x{self.width}); expected one of free_cells()"
            )
        return key

    # ------------------------------------------------------------------ gymnasium API
    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Start an episode in `start` (or ``options["start"]``); the maze itself is fixed."""
        super().reset(seed=seed)
        cell = self.start
        options = check_reset_options(options, ("start",))
        if options.get("start") is not None:
            cell = self._check_cell(options["start"])
            if cell == self.goal:
                raise ValueError(f"start {options['start']!r} is the goal cell, which is "
                                 "terminal; expected another free cell")
        self.cell = cell
        self._steps = 0
        self._active = True
        return self._obs[cell].copy(), {"legal_moves": self._legal[cell][:], "is_success": False}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Move (or stay, if the target is a wall) and return the gymnasium 5-tuple."""
        if type(action) is not int or not 0 <= action < 8:
            action = check_action(action, self._n_actions)
        if not self._active:
            raise episode_over_error(type(self).__name__)
        cell = self._targets[self.cell][action]
        self.cell = cell
        self._steps += 1
        if cell == self.goal:
            reward, terminated, truncated = self.goal_reward, True, False
        else:
            reward, terminated = self.step_reward, False
            truncated = self._steps >= self.max_steps
        self._active = not (terminated or truncated)
        info = {"legal_moves": self._legal[cell][:], "is_success": terminated}
        return self._obs[cell].copy(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | str | None:
        """``rgb_array``: walls dark, goal green, agent red; ``ansi``: '#', '.', 'G', 'A'."""
        if self.render_mode == "ansi":
            return self.ansi()
        if self.render_mode == "rgb_array":
            return self.rgb_array()
        return None

    def ansi(self) -> str:
        """A text picture: '#' wall, '.' free, 'S' start, 'G' goal, 'A' the agent."""
        marks = {self.start: "S", self.goal: "G", self.cell: "A"}  # later keys win
        return "\n".join("".join(marks.get((r, c), "#" if self.grid[r, c] else ".")
                                 for c in range(self.width)) for r in range(self.height))

    def rgb_array(self) -> np.ndarray:
        """A picture of the maze: walls dark grey, start light blue, goal green, agent red."""
        size = self.cell_pixels
        image = canvas(self.height * size, self.width * size, (250, 250, 250))
        for r in range(self.height):
            for c in range(self.width):
                if self.grid[r, c]:
                    fill_rect(image, r * size, c * size, (r + 1) * size, (c + 1) * size,
                              (60, 60, 70))
                else:
                    fill_rect(image, r * size + 1, c * size + 1, (r + 1) * size - 1,
                              (c + 1) * size - 1, (235, 235, 235))
        for (r, c), color in ((self.start, (170, 200, 240)), (self.goal, (70, 180, 80))):
            fill_rect(image, r * size + 2, c * size + 2, (r + 1) * size - 2, (c + 1) * size - 2,
                      color)
        r, c = self.cell
        fill_disk(image, (r + 0.5) * size - 0.5, (c + 0.5) * size - 0.5, size * 0.32,
                  (210, 40, 40))
        return image


# --------------------------------------------------------------------------- language
MAZE_TASK = (
    "You are an agent in a grid maze. Reach the goal cell in as few moves as possible. "
    "Each action moves you one cell: 0 left, 1 right, 2 up, 3 down, 4 up-left, "
    "5 down-left, 6 up-right, 7 down-right. You cannot move into a wall; only the legal "
    "actions listed are possible."
)
MAZE_COMPACT_TASK = "Grid maze. Reach the goal in few moves; pick one of the legal moves."


class MazeDescriber(Describer):
    """Maze: state ``[row, col]`` on ``grid`` (1 = wall): the goal, the walls around, the legal
    moves (docs/adapters.md, "The describers")."""

    env_name = "Maze"
    state_shape = (2,)
    n_actions = 8

    def __init__(
        self,
        grid: Any,
        goal: Sequence[int],
        include_last_move: bool = False,
        distance_edges: Sequence[int] = (2, 4, 7),
    ) -> None:
        array = np.asarray(grid)
        if array.ndim != 2 or array.size == 0 or not np.isin(array, (0, 1)).all():
            raise ValueError(
                f"grid of shape {array.shape}: expected a 2-D array of 0 (free) / 1 (wall)"
            )
        self.grid = array.astype(np.int8)
        self.height, self.width = self.grid.shape
        if (
            isinstance(goal, (str, bytes))
            or not isinstance(goal, Sequence | np.ndarray)
            or len(goal) != 2
            or not all(isinstance(v, numbers.Integral) for v in goal)
        ):
            raise ValueError(f"goal={goal!r}: expected a (row, col) pair of ints")
        self.goal = (int(goal[0]), int(goal[1]))
        if not self._is_free(*self.goal):
            raise ValueError(
                f"goal={goal!r} is not a free cell of the {self.height}x{self.width} grid"
            )
        self.include_last_move = bool(include_last_move)
        self.uses_last_action = self.include_last_move
        self.distance_edges = tuple(
            int(e) for e in check_edges("distance_edges", distance_edges, 3)
        )

    def _is_free(self, row: int, col: int) -> bool:
        return 0 <= row < self.height and 0 <= col < self.width and self.grid[row, col] == 0

    def goal_sentence(self, row: int, col: int) -> str:
        """Where the goal lies from ``(row, col)``."""
        drow, dcol = self.goal[0] - row, self.goal[1] - col
        if drow == 0 and dcol == 0:
            return "You are at the goal."
        how_far = ("right next to you", "near", "a fair way off", "far away")[
            bin_index(max(abs(drow), abs(dcol)), self.distance_edges)]
        return f"The goal is {how_far}, {offset_words(drow, dcol)}."

    def wall_sentence(self, row: int, col: int) -> str:
        """Which neighbouring cells are walls."""
        walls = [
            name
            for name, (dr, dc) in zip(ACTION_NAMES, ACTION_DELTAS, strict=True)
            if not self._is_free(row + dr, col + dc)
        ]
        if not walls:
            return "There are no walls around you."
        if len(walls) == 1:
            return f"There is a wall {walls[0]}."
        return f"There are walls {join_words(walls, 'and')}."

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        if not all(float(v).is_integer() for v in state):
            raise ValueError(f"Maze state {state.tolist()!r}: expected integer [row, col]")
        row, col = int(state[0]), int(state[1])
        if not self._is_free(row, col):
            raise ValueError(
                f"Maze state {[row, col]!r} is not a free cell of the {self.height}x{self.width} "
                "maze; expected the [row, col] of a free cell"
            )
        sentences = [self.goal_sentence(row, col), self.wall_sentence(row, col)]
        if legal_moves:
            names = [ACTION_NAMES[a] for a in legal_moves]
            sentences.append(f"You can move {join_words(names, 'or')}.")
        else:
            sentences.append("You cannot move.")
        if self.include_last_move:
            if last_action is None:
                sentences.append("You have not moved yet.")
            else:
                sentences.append(f"Your last move was {ACTION_NAMES[last_action]}.")
        return " ".join(sentences)


def _language(env: MazeEnv, **options: Any) -> LanguageSpec:
    goal = env.goal

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        # the legal moves are the neighbours that are not walls: no wall list needed
        return f"goal: {offset_short(goal[0] - int(state[0]), goal[1] - int(state[1]))}"

    return LanguageSpec(MazeDescriber(env.grid, env.goal, **options), tuple(ACTION_NAMES),
                        MAZE_TASK, lambda e: np.array(e.cell, dtype=np.float32),
                        compact_state=compact, compact_task=MAZE_COMPACT_TASK)


register_language(MazeEnv, _language)
