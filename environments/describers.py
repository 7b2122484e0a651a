"""Rule describers: ``describer(state, legal_moves=(), last_action=None)`` -> one
deterministic text. The `Describer` base, its checks, Sailing's and CartPole's (the grid
worlds' are in `.grid_describers`). See docs/environments.md."""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, Strict, field_validator, model_validator

from ._checks import check_action, checked_arguments

__all__ = ["CartPoleBins", "CartPoleDescriber", "CartPoleSteps", "Describer", "SailingBins",
           "SailingDescriber", "check_legal_moves", "check_state", "join_words", "number_words"]


# --------------------------------------------------------------------------- checks
def check_legal_moves(legal_moves: Any, n_actions: int | None) -> tuple[int, ...]:
    """``legal_moves`` as a tuple of ints in ``[0, n_actions)`` (any range if None)."""
    if legal_moves is None:
        return ()
    if isinstance(legal_moves, (str, bytes)) or not isinstance(legal_moves, Iterable):
        raise ValueError(
            f"legal_moves {legal_moves!r} is not a sequence of actions; expected e.g. [0, 2, 3]"
        )
    moves: list[int] = []
    for move in legal_moves:
        if isinstance(move, np.ndarray) and move.shape == ():
            move = move.item()
        if isinstance(move, bool) or not isinstance(move, numbers.Integral):
            raise ValueError(f"legal move {move!r} in {legal_moves!r} is not an int action")
        if n_actions is not None and not 0 <= int(move) < n_actions:
            raise ValueError(
                f"legal move {move!r} in {legal_moves!r} is outside [0, {n_actions - 1}]"
            )
        moves.append(int(move))
    if len(set(moves)) != len(moves):
        raise ValueError(f"legal_moves {legal_moves!r} repeat an action; expected distinct actions")
    return tuple(moves)


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


def check_edges(name: str, edges: Sequence[float], count: int) -> tuple[float, ...]:
    values = tuple(float(e) for e in edges)
    if len(values) != count:
        raise ValueError(f"{name}={list(edges)!r} has {len(values)} edges; expected {count}")
    if not all(math.isfinite(v) and v > 0 for v in values):
        raise ValueError(f"{name}={list(edges)!r}: expected finite positive edges")
    if any(b <= a for a, b in zip(values, values[1:], strict=False)):
        raise ValueError(f"{name}={list(edges)!r}: expected strictly increasing edges")
    return values


def bin_index(value: float, edges: Sequence[float]) -> int:
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


def join_words(words: Sequence[str], conjunction: str) -> str:
    if len(words) == 1:
        return words[0]
    return ", ".join(words[:-1]) + f" {conjunction} " + words[-1]


# --------------------------------------------------------------------------- base
def _numeric(state: Mapping | tuple) -> bool:
    """Whether a tuple is a plain sequence of numbers (a dict never is)."""
    return not isinstance(state, Mapping) and all(
        isinstance(v, numbers.Real) or (isinstance(v, np.ndarray) and v.shape == ())
        for v in state)


class Describer:
    """A raw state (plus legal moves and the last action) -> a sentence. Subclasses set
    ``state_shape`` (None: the observation unchecked), ``n_actions``, ``bounds``,
    ``uses_last_action`` and implement `describe`, which gets checked arguments."""

    env_name: str = "environment"
    state_shape: tuple[int, ...] | None = ()
    n_actions: int | None = None
    uses_last_action: bool = False
    #: Per state value: (name, low, high) of the observation space (None: unchecked).
    bounds: tuple[tuple[str, float, float], ...] | None = None

    def __call__(
        self, state: Any, legal_moves: Iterable[int] = (), last_action: int | None = None
    ) -> str:
        """The sentence of ``state``; every argument checked here, the public boundary."""
        return self.describe(*self.check(state, legal_moves, last_action))

    def check(self, state: Any, legal_moves: Iterable[int] = (), last_action: Any = None
              ) -> tuple[Any, tuple[int, ...], int | None]:
        """The arguments as `describe` takes them, else ValueError naming the bad value."""
        if self.state_shape is None:  # the observation as the environment gives it
            return (state, check_legal_moves(legal_moves, self.n_actions),
                    self.check_last_action(last_action))
        if isinstance(state, (Mapping, tuple)) and not _numeric(state):
            raise ValueError(
                f"{self.env_name} state {state!r} is a {type(state).__name__}; "
                f"{type(self).__name__} takes numbers of shape {self.state_shape} (a describer "
                "of Dict or Tuple observations sets state_shape = None and receives them as "
                "the environment gives them)")
        checked = check_state(state, self.state_shape, f"{self.env_name} state")
        self.check_bounds(checked)
        moves = check_legal_moves(legal_moves, self.n_actions)
        return checked, moves, self.check_last_action(last_action)

    def check_bounds(self, state: np.ndarray) -> None:
        """ValueError for a value outside ``bounds`` (beyond float32 rounding)."""
        if self.bounds is None:
            return
        values = np.asarray(state, dtype=np.float64).tolist()
        for value, (name, low, high) in zip(values, self.bounds, strict=True):
            tolerance = 1e-5 * max(1.0, abs(low), abs(high))
            if not low - tolerance <= value <= high + tolerance:
                raise ValueError(
                    f"{self.env_name} state {values!r}: {name} {value!r} is outside "
                    f"the observation space [{low}, {high}]"
                )

    def check_last_action(self, last_action: Any) -> int | None:
        """``last_action`` as an action of this describer (or None), else ValueError."""
        if not self.n_actions or last_action is None:
            return last_action
        try:
            return check_action(last_action, self.n_actions)
        except ValueError as error:
            raise ValueError(f"last_action: {error}") from None

    def describe(
        self, state: Any, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        """The sentence for a checked state; subclasses implement it."""
        raise NotImplementedError(f"{type(self).__name__} does not implement describe()")


# --------------------------------------------------------------------------- sailing
class SailingBins(BaseModel):
    """Bin edges of `SailingDescriber`: ``position`` on ``|x| / half_width``, ``heading`` on
    ``|theta|`` (docs/adapters.md, "The describers")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    position: tuple[float, float, float, float] = (0.1, 0.3, 0.6, 0.85)
    heading: tuple[float, float, float, float] = (0.05, 0.45, 0.95, 1.35)

    @field_validator("position", "heading")
    @classmethod
    def _increasing(cls, edges: tuple[float, ...], info: Any) -> tuple[float, ...]:
        return check_edges(info.field_name, edges, 4)


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
    """Sailing: state ``[x, theta]``: the position across the river, the heading relative to
    the wind and the last turn (docs/adapters.md, "The describers")."""

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
        where = bin_index(abs(x) / self.half_width, self.bins.position)
        side = "harbor" if x < 0 else "beach"
        position = _POSITIONS[where] + ("" if where == 0 else f" on the {side} side")
        how = bin_index(abs(theta), self.bins.heading)
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


# --------------------------------------------------------------------------- cartpole
class CartPoleBins(BaseModel):
    """Bin edges of `CartPoleDescriber`, on absolute values in SI units (docs/adapters.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    angle: tuple[float, float, float] = (0.02, 0.07, 0.14)
    angular_velocity: tuple[float, float, float] = (0.05, 0.5, 1.5)
    position: tuple[float, float] = (0.5, 1.6)
    velocity: tuple[float, float, float] = (0.05, 0.5, 1.5)

    @model_validator(mode="after")
    def _increasing(self) -> CartPoleBins:
        for name in ("angle", "angular_velocity", "position", "velocity"):
            edges = getattr(self, name)
            check_edges(name, edges, len(edges))
        return self


Decimals = Annotated[int, Strict(), Field(ge=0, le=6)]  # decimal places shown

_SPEED = ("", " slowly", "", " quickly")


class CartPoleSteps(BaseModel):
    """Rounding steps of `CartPoleDescriber` with ``style="numbers"`` (SI units)."""

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
    """CartPole: state ``[x, x_dot, angle, angle_dot]`` (positive = right), in bins
    (`CartPoleBins`) or, with ``style="numbers"``, rounded to `CartPoleSteps` (docs/adapters.md)."""

    env_name = "CartPole"
    state_shape = (4,)
    n_actions = 2
    bounds = (
        ("cart position", -4.8, 4.8),
        ("cart velocity", -math.inf, math.inf),
        ("pole angle", -0.41887903, 0.41887903),
        ("pole angular velocity", -math.inf, math.inf),
    )

    @checked_arguments
    def __init__(
        self,
        bins: Any = None,  # a CartPoleBins, a dict of its fields or None (_make_bins checks)
        include_numbers: bool = False,
        decimals: Decimals = 2,
        style: Literal["bins", "numbers"] = "bins",
        steps: Any = None,  # a CartPoleSteps, a dict of its fields or None
    ) -> None:
        self.bins = _make_bins(CartPoleBins, bins)
        self.steps = _make_bins(CartPoleSteps, steps)
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
        tilt = bin_index(abs(angle), bins.angle)
        pole = ("is upright", f"leans slightly {lean}", f"leans {lean}", f"leans far {lean}")[tilt]
        spin = bin_index(abs(omega), bins.angular_velocity)
        if spin == 0:
            rotation = "is nearly still"
        else:
            turn = "right" if omega > 0 else "left"
            verb = "is falling" if tilt == 0 or turn == lean else "is swinging back"
            rotation = f"{verb} {turn}{_SPEED[spin]}"
        side = "right" if x > 0 else "left"
        place = bin_index(abs(x), bins.position)
        cart = ("near the center", f"{side} of the center", f"near the {side} edge")[place]
        pace = bin_index(abs(x_dot), bins.velocity)
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
