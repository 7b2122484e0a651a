"""Describers: rules that turn an environment's raw state into an English sentence.

A :class:`Describer` is called as ``describer(state, legal_moves=(), last_action=None)``
and returns one deterministic sentence (or a few). One describer per environment:

- :class:`SailingDescriber` - position across the river and heading relative to the wind.
- :class:`MazeDescriber` - where the goal is, the walls around, the legal moves.
- :class:`CartPoleDescriber` - qualitative bins for the four CartPole quantities, or the
  numbers rounded to what balancing needs (``style="numbers"``).
- :class:`FrozenLakeDescriber` - where the goal is, the holes and the lake's edges around.
- :class:`FrozenLakeMapsDescriber` - the same sentences on random lakes (the lake is part of
  the state).

Each is part of its environment's language spec (:mod:`environments.language`), where
:func:`~environments.language.language_for` finds it for an environment.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ._checks import check_legal_moves
from .frozenlake import FROZENLAKE_ACTIONS, TILE_CODES
from .maze import ACTION_DELTAS, ACTION_NAMES

__all__ = [
    "Describer",
    "SailingDescriber",
    "SailingBins",
    "MazeDescriber",
    "CartPoleDescriber",
    "CartPoleBins",
    "CartPoleSteps",
    "FrozenLakeDescriber",
    "FrozenLakeMapsDescriber",
    "number_words",
    "check_state",
    "check_legal_moves",
]


# --------------------------------------------------------------------------- checks
def check_state(state: Any, shape: tuple[int, ...], what: str = "state") -> np.ndarray:
    """``state`` as a finite float64 array of ``shape``, or a ValueError naming the problem."""
    if isinstance(state, (str, bytes)):
        raise ValueError(
            f"{what} {state!r} is a {type(state).__name__}; expected numbers of shape {shape}"
        )
    try:
        array = np.asarray(state, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(
            f"{what} {state!r} (type {type(state).__name__}) is not numeric; expected a float "
            f"array of shape {shape}"
        ) from None
    if array.shape != shape:
        raise ValueError(f"{what} {state!r} has shape {array.shape}; expected shape {shape}")
    if not np.isfinite(array).all():
        raise ValueError(f"{what} {state!r} contains NaN or inf; expected finite values")
    return array


def _check_action(action: Any, n_actions: int) -> int | None:
    if action is None:
        return None
    if isinstance(action, np.ndarray) and action.shape == ():
        action = action.item()
    if isinstance(action, bool) or not isinstance(action, numbers.Integral):
        raise ValueError(
            f"last_action {action!r} is not an int; expected an int in [0, {n_actions - 1}]"
        )
    if not 0 <= int(action) < n_actions:
        raise ValueError(f"last_action {action!r} is outside [0, {n_actions - 1}]")
    return int(action)


def _check_edges(name: str, edges: Sequence[float], count: int) -> tuple[float, ...]:
    values = tuple(float(e) for e in edges)
    if len(values) != count:
        raise ValueError(f"{name}={list(edges)!r} has {len(values)} edges; expected {count}")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}={list(edges)!r}: expected finite positive edges")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{name}={list(edges)!r}: expected strictly increasing edges")
    return values


def _bin(value: float, edges: Sequence[float]) -> int:
    """Index of the bin of ``value`` (>= 0): 0 below edges[0], ..., len(edges) at/above the last."""
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)


_ONES = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen "
    "fourteen fifteen sixteen seventeen eighteen nineteen"
).split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_words(n: int) -> str:
    """``n`` (0..999) in English words, e.g. 42 -> 'forty-two'; larger numbers as digits."""
    if n < 0:
        raise ValueError(f"n={n!r}: expected a non-negative int")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + ("" if ones == 0 else "-" + _ONES[ones])
    if n < 1000:
        hundreds, rest = divmod(n, 100)
        head = _ONES[hundreds] + " hundred"
        return head if rest == 0 else f"{head} and {number_words(rest)}"
    return str(n)


def _join(words: Sequence[str], conjunction: str) -> str:
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + f" {conjunction} " + words[-1]


# --------------------------------------------------------------------------- base
class Describer:
    """Turns a raw state (plus legal moves and the last action) into a sentence.

    Subclasses set ``state_shape`` and ``n_actions`` and implement :meth:`describe`,
    which receives an already checked float64 state, a tuple of legal moves and the last
    action (``int`` or ``None``). ``uses_last_action`` says whether the sentence depends
    on the last action (adapters use it to key their memo).
    """

    env_name: str = "environment"
    state_shape: tuple[int, ...] = ()
    n_actions: int | None = None
    uses_last_action: bool = False
    #: Per state value: (name, low, high) of the environment's observation space; states
    #: outside (beyond a float32 rounding tolerance) are rejected. None: unchecked.
    bounds: tuple[tuple[str, float, float], ...] | None = None

    def __call__(
        self, state: Any, legal_moves: Iterable[int] = (), last_action: int | None = None
    ) -> str:
        checked = check_state(state, self.state_shape, f"{self.env_name} state")
        if self.bounds is not None:
            for value, (name, low, high) in zip(checked.tolist(), self.bounds, strict=True):
                tolerance = 1e-5 * max(1.0, abs(low), abs(high))
                if not low - tolerance <= value <= high + tolerance:
                    raise ValueError(
                        f"{self.env_name} state {checked.tolist()!r}: {name} {value!r} is outside "
                        f"the observation space [{low}, {high}]"
                    )
        moves = check_legal_moves(legal_moves, self.n_actions)
        action = _check_action(last_action, self.n_actions) if self.n_actions else last_action
        return self.describe(checked, moves, action)

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        """The sentence for a checked state; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement describe()")


# --------------------------------------------------------------------------- sailing
class SailingBins(BaseModel):
    """Bin edges of :class:`SailingDescriber`.

    ``position``: edges on ``|x| / half_width`` between in the middle | near the center |
    between the center and the edge | near the edge | very close to the edge.
    ``heading``: edges on ``|theta|`` (radians, 0 = bow straight into the wind) between
    directly into the wind | into the wind | close hauled | cutting the wind | across the wind.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    position: tuple[float, float, float, float] = (0.1, 0.3, 0.6, 0.85)
    heading: tuple[float, float, float, float] = (0.05, 0.45, 0.95, 1.35)

    @field_validator("position", "heading")
    @classmethod
    def _increasing(cls, edges: tuple[float, ...], info: Any) -> tuple[float, ...]:
        return _check_edges(info.field_name, edges, 4)


_POSITIONS = (
    "in the middle of the river",
    "near the center of the river",
    "between the center and the edge of the river",
    "near the edge of the river",
    "very close to the edge of the river",
)
_HEADINGS = (
    "heading directly into the wind",
    "heading into the wind",
    "sailing close hauled",
    "cutting the wind",
    "sailing across the wind",
)


def _make_bins(kind: type[BaseModel], bins: Any) -> Any:
    """``bins`` as a ``kind`` instance (from an instance, a dict of its fields, or None)."""
    if isinstance(bins, kind):
        return bins
    if bins is None:
        return kind()
    if not isinstance(bins, dict):
        raise ValueError(
            f"bins={bins!r}: expected a {kind.__name__} or a dict of its fields "
            f"{sorted(kind.model_fields)}"
        )
    return kind(**bins)


class SailingDescriber(Describer):
    """Sailing: state ``[x, theta]``.

    ``x`` is the position across the river (negative = harbor side, positive = beach
    side, ``half_width`` = distance from the center to the edge); ``theta`` is the
    heading in radians relative to the wind, which blows from straight ahead (the
    direction of travel, +y): 0 points into the wind, positive theta turns the bow toward
    the beach (+x), negative toward the harbor. With the bow turned toward the beach the
    wind comes over the left (port) side, toward the harbor over the starboard side.

    Actions: 0 lowers theta (turns toward the harbor), 1 raises it (toward the beach).
    The last action is "toward the center" when it turns the bow toward the middle of
    the river from either side.

    Example: ``"The boat is near the edge of the river on the beach side, sailing close
    hauled with the wind on the port side. It last turned toward the center."``
    """

    env_name = "Sailing"
    state_shape = (2,)
    n_actions = 2
    uses_last_action = True

    def __init__(self, half_width: float = 10.0, bins: SailingBins | dict | None = None) -> None:
        if (
            isinstance(half_width, bool)
            or not isinstance(half_width, numbers.Real)
            or not (math.isfinite(half_width) and half_width > 0)
        ):
            raise ValueError(f"half_width={half_width!r}: expected a finite positive number")
        self.half_width = float(half_width)
        self.bins = _make_bins(SailingBins, bins)
        # The env's observation space: one step (speed <= 1) past a bank, |theta| <= 1.6.
        reach = self.half_width + 1.0
        self.bounds = (("x", -reach, reach), ("theta", -1.6, 1.6))

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        x, theta = float(state[0]), float(state[1])
        where = _bin(abs(x) / self.half_width, self.bins.position)
        side = "harbor" if x < 0 else "beach"
        position = _POSITIONS[where] + ("" if where == 0 else f" on the {side} side")
        how = _bin(abs(theta), self.bins.heading)
        heading = _HEADINGS[how]
        if how > 0:
            heading += " with the wind on the " + ("port" if theta > 0 else "starboard") + " side"
        text = f"The boat is {position}, {heading}."
        if last_action is not None:
            toward = "beach" if last_action == 1 else "harbor"
            if where > 0 and toward != side:
                toward = "center"
            text += f" It last turned toward the {toward}."
        return text


# --------------------------------------------------------------------------- maze
def _cells(n: int) -> str:
    return f"{number_words(n)} cell" + ("" if n == 1 else "s")


class MazeDescriber(Describer):
    """Maze: state ``[row, col]`` (row 0 at the top) on ``grid`` (1 = wall).

    Three sentences (four with ``include_last_move``):

    1. the goal: how far (right next to you: 1 move; near: 2-3; a fair way off: 4-6; far
       away: 7 or more, counted in king moves ignoring walls, ``distance_edges``) and the
       exact offset in words ("two cells up and one cell to the right") - the offset
       makes every free cell's description distinct;
    2. which of the eight neighbouring cells are walls (cells outside the grid count as
       walls);
    3. the legal moves in words;
    4. optionally the last move ("Your last move was up." / "You have not moved yet.").

    Example: ``"The goal is near, two cells down and one cell to the right. There are
    walls to the left, up and up-left. You can move right, down or down-right."``
    """

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
            int(e) for e in _check_edges("distance_edges", distance_edges, 3)
        )

    def _is_free(self, row: int, col: int) -> bool:
        return 0 <= row < self.height and 0 <= col < self.width and self.grid[row, col] == 0

    def goal_sentence(self, row: int, col: int) -> str:
        """Where the goal lies from ``(row, col)``."""
        drow, dcol = self.goal[0] - row, self.goal[1] - col
        if drow == 0 and dcol == 0:
            return "You are at the goal."
        parts = []
        if drow:
            parts.append(_cells(abs(drow)) + (" up" if drow < 0 else " down"))
        if dcol:
            parts.append(_cells(abs(dcol)) + (" to the left" if dcol < 0 else " to the right"))
        moves = max(abs(drow), abs(dcol))
        how_far = ("right next to you", "near", "a fair way off", "far away")[
            _bin(moves, self.distance_edges)
        ]
        return f"The goal is {how_far}, {' and '.join(parts)}."

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
        return f"There are walls {_join(walls, 'and')}."

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
            sentences.append(f"You can move {_join([ACTION_NAMES[a] for a in legal_moves], 'or')}.")
        else:
            sentences.append("You cannot move.")
        if self.include_last_move:
            if last_action is None:
                sentences.append("You have not moved yet.")
            else:
                sentences.append(f"Your last move was {ACTION_NAMES[last_action]}.")
        return " ".join(sentences)


# --------------------------------------------------------------------------- cartpole
class CartPoleBins(BaseModel):
    """Bin edges of :class:`CartPoleDescriber` (on absolute values; SI units).

    - ``angle`` (rad): upright | leans slightly | leans | leans far. Defaults 0.02, 0.07,
      0.14 (the episode ends beyond 0.2095 rad = 12 degrees).
    - ``angular_velocity`` (rad/s): nearly still | slowly | (no adverb) | quickly.
      Defaults 0.05, 0.5, 1.5.
    - ``position`` (m): near the center | left/right of the center | near the left/right
      edge. Defaults 0.5, 1.6 (the episode ends beyond 2.4 m).
    - ``velocity`` (m/s): standing still | slowly | (no adverb) | quickly. Defaults 0.05,
      0.5, 1.5.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    angle: tuple[float, float, float] = (0.02, 0.07, 0.14)
    angular_velocity: tuple[float, float, float] = (0.05, 0.5, 1.5)
    position: tuple[float, float] = (0.5, 1.6)
    velocity: tuple[float, float, float] = (0.05, 0.5, 1.5)

    @model_validator(mode="after")
    def _increasing(self) -> CartPoleBins:
        for name in ("angle", "angular_velocity", "position", "velocity"):
            edges = getattr(self, name)
            _check_edges(name, edges, len(edges))
        return self


_SPEED = ("", " slowly", "", " quickly")


class CartPoleSteps(BaseModel):
    """Rounding steps of :class:`CartPoleDescriber` with ``style="numbers"`` (SI units)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    angle: float = Field(0.01, gt=0, description="pole angle, rad")
    angular_velocity: float = Field(0.1, gt=0, description="pole angular velocity, rad/s")
    position: float = Field(0.1, gt=0, description="cart position, m")
    velocity: float = Field(0.1, gt=0, description="cart velocity, m/s")


def _rounded(value: float, step: float) -> tuple[float, str]:
    """``value`` rounded to a multiple of ``step``, and its magnitude as text."""
    rounded = round(value / step) * step
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return rounded, f"{abs(rounded):.{decimals}f}"


class CartPoleDescriber(Describer):
    """CartPole: state ``[cart position, cart velocity, pole angle, pole angular velocity]``.

    Positive values are to the right (a positive angle means the pole leans right).

    ``style="bins"`` (default): ``"The pole <angle> and <rotation>; the cart is <position>,
    <motion>."`` with the qualitative bins of :class:`CartPoleBins`. The pole is "falling"
    in the direction it rotates when that is the way it leans (or when it is upright), else
    "swinging back". ``include_numbers`` appends the four values rounded to ``decimals``.
    Example: ``"The pole leans slightly right and is falling right quickly; the cart is
    near the center, moving left slowly."``

    ``style="numbers"``: the four quantities in words and numbers, each rounded to its step
    of :class:`CartPoleSteps` (what balancing needs: the angle to 0.01 rad, the rest to
    0.1). Example: ``"The pole leans right by 0.03 rad and turns left at 0.4 rad/s; the
    cart is 0.1 m left of the center, moving right at 0.2 m/s."``

    States outside CartPole-v1's observation space (|position| > 4.8 m, |angle| > 24
    degrees) raise ValueError.
    """

    env_name = "CartPole"
    state_shape = (4,)
    n_actions = 2
    bounds = (
        ("cart position", -4.8, 4.8),
        ("cart velocity", -math.inf, math.inf),
        ("pole angle", -0.41887903, 0.41887903),
        ("pole angular velocity", -math.inf, math.inf),
    )

    def __init__(
        self,
        bins: CartPoleBins | dict | None = None,
        include_numbers: bool = False,
        decimals: int = 2,
        style: str = "bins",
        steps: CartPoleSteps | dict | None = None,
    ) -> None:
        self.bins = _make_bins(CartPoleBins, bins)
        self.steps = _make_bins(CartPoleSteps, steps)
        if isinstance(decimals, bool) or not isinstance(decimals, int) or not 0 <= decimals <= 6:
            raise ValueError(f"decimals={decimals!r}: expected an int in [0, 6]")
        if style not in ("bins", "numbers"):
            raise ValueError(f"style={style!r}: expected 'bins' or 'numbers'")
        self.include_numbers = bool(include_numbers)
        self.decimals = decimals
        self.style = style

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        if self.style == "numbers":
            return self._numbers(*(float(v) for v in state))
        x, x_dot, angle, omega = (float(v) for v in state)
        bins = self.bins
        lean = "right" if angle > 0 else "left"
        tilt = _bin(abs(angle), bins.angle)
        pole = ("is upright", f"leans slightly {lean}", f"leans {lean}", f"leans far {lean}")[tilt]
        spin = _bin(abs(omega), bins.angular_velocity)
        if spin == 0:
            rotation = "is nearly still"
        else:
            turn = "right" if omega > 0 else "left"
            verb = "is falling" if tilt == 0 or turn == lean else "is swinging back"
            rotation = f"{verb} {turn}{_SPEED[spin]}"
        side = "right" if x > 0 else "left"
        place = _bin(abs(x), bins.position)
        cart = ("near the center", f"{side} of the center", f"near the {side} edge")[place]
        pace = _bin(abs(x_dot), bins.velocity)
        if pace == 0:
            motion = "standing still"
        else:
            motion = f"moving {'right' if x_dot > 0 else 'left'}{_SPEED[pace]}"
        text = f"The pole {pole} and {rotation}; the cart is {cart}, {motion}."
        if self.include_numbers:
            d = self.decimals
            text += (
                f" (cart position {x:.{d}f} m, cart velocity {x_dot:.{d}f} m/s, pole angle "
                f"{angle:.{d}f} rad, pole angular velocity {omega:.{d}f} rad/s)"
            )
        return text

    def _numbers(self, x: float, x_dot: float, angle: float, omega: float) -> str:
        steps = self.steps
        a, a_text = _rounded(angle, steps.angle)
        pole = "is upright" if a == 0 else f"leans {_side(a)} by {a_text} rad"
        w, w_text = _rounded(omega, steps.angular_velocity)
        turn = "is not turning" if w == 0 else f"turns {_side(w)} at {w_text} rad/s"
        p, p_text = _rounded(x, steps.position)
        cart = "at the center" if p == 0 else f"{p_text} m {_side(p)} of the center"
        v, v_text = _rounded(x_dot, steps.velocity)
        motion = "standing still" if v == 0 else f"moving {_side(v)} at {v_text} m/s"
        return f"The pole {pole} and {turn}; the cart is {cart}, {motion}."


def _side(value: float) -> str:
    return "right" if value > 0 else "left"


# --------------------------------------------------------------------------- frozen lake
#: (row, col) step of each FrozenLake action: 0 left, 1 down, 2 right, 3 up.
_LAKE_DELTAS = ((0, -1), (1, 0), (0, 1), (-1, 0))
_TILES = {"S": "the start", "F": "frozen ice", "H": "a hole", "G": "the goal"}


class FrozenLakeDescriber(Describer):
    """FrozenLake: state ``[row, col]`` (row 0 at the top) on a lake ``desc`` (rows of
    S start, F frozen, H hole, G goal).

    Three sentences: where the goal is (the offset in words, like the maze's), what lies
    in each of the four directions (a hole, the lake's edge; frozen ice is not mentioned),
    and the moves. Slipping is the environment's business, not the description's.

    Example: ``"The goal is two cells down and one cell to the right. There is a hole to
    the left and the edge of the lake up. You can move left, down, right or up."``
    """

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
            drow, dcol = self.goal[0] - row, self.goal[1] - col
            parts = []
            if drow:
                parts.append(_cells(abs(drow)) + (" up" if drow < 0 else " down"))
            if dcol:
                parts.append(_cells(abs(dcol)) + (" to the left" if dcol < 0 else " to the right"))
            sentences = [f"The goal is {' and '.join(parts)}."]
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
            sentences.append(f"There {verb} {_join(around, 'and')}.")
        else:
            sentences.append("There is frozen ice all around you.")
        if legal_moves:
            names = [FROZENLAKE_ACTIONS[a] for a in legal_moves]
            sentences.append(f"You can move {_join(names, 'or')}.")
        return " ".join(sentences)


class FrozenLakeMapsDescriber(Describer):
    """FrozenLake on random lakes: state ``[row, col, tile codes]`` (`FrozenLakeMapsEnv`'s
    observation, the lake row by row: 0 frozen or start, 1 hole, 2 goal); the sentences of
    `FrozenLakeDescriber` on the lake the state carries."""

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
