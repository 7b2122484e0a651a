"""The describer machinery shared by every environment: the `Describer` base (state, legal
moves, last action -> one deterministic text), its checks and word helpers, and the
`LanguageSpec` registry (`register_language(EnvClass, factory)` brings an environment,
`language_for(env, **options)` finds its spec). Each environment's describer and spec live
in its own module. See docs/environments.md."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np
from pydantic import BaseModel

from ._checks import check_action

__all__ = ["PROMPT_STYLES", "Describer", "LanguageSpec", "LanguageSpecError",
           "bridged_minigrid_hint", "check_legal_moves", "check_state", "join_words",
           "language_for", "number_words", "register_language", "unwrap_env"]


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


def _cells(n: int) -> str:
    return f"{number_words(n)} cell" + ("" if n == 1 else "s")


def offset_words(drow: int, dcol: int) -> str:
    """``"two cells up and one cell to the right"``."""
    parts = []
    if drow:
        parts.append(_cells(abs(drow)) + (" up" if drow < 0 else " down"))
    if dcol:
        parts.append(_cells(abs(dcol)) + (" to the left" if dcol < 0 else " to the right"))
    return " and ".join(parts)


def offset_short(drow: int, dcol: int) -> str:
    """``"2 down, 1 right"``: an offset in rows and columns, for compact prompts."""
    parts = ([f"{abs(drow)} {'up' if drow < 0 else 'down'}"] if drow else []) + (
        [f"{abs(dcol)} {'left' if dcol < 0 else 'right'}"] if dcol else [])
    return ", ".join(parts) or "here"


def make_bins(kind: type[BaseModel], bins: Any) -> Any:
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


# --------------------------------------------------------------------------- specs
#: The prompt styles: ``verbose`` (the describer's sentences) and ``compact`` (few tokens).
PROMPT_STYLES = ("verbose", "compact")


@dataclass(frozen=True)
class LanguageSpec:
    """What the library says about one environment (docs/environments.md, "Language specs");
    ``prompt_state`` / ``compact_state``: what a ``verbose`` / ``compact`` prompt shows of a
    state (default: the sentence); ``representation``: the language adapter's defaults."""

    describer: Describer
    action_names: tuple[str, ...]
    task: str
    state_of: Callable[[Any], Any]
    prompt_state: Callable[[Any, tuple[int, ...]], str] | None = None
    compact_state: Callable[[Any, tuple[int, ...]], str] | None = None
    compact_task: str | None = None
    representation: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.describer, Describer):
            raise ValueError(f"describer={self.describer!r}: expected a Describer")
        names = tuple(self.action_names)
        if not names or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"action_names={self.action_names!r}: expected non-empty strings")
        if self.describer.n_actions is not None and len(names) != self.describer.n_actions:
            raise ValueError(f"action_names names {len(names)} actions, but the describer has "
                             f"{self.describer.n_actions}")
        if not isinstance(self.task, str) or not self.task.strip():
            raise ValueError(f"task={self.task!r}: expected a non-empty text")
        object.__setattr__(self, "action_names", names)

    @property
    def n_actions(self) -> int:
        return len(self.action_names)

    @property
    def state_shape(self) -> tuple[int, ...] | None:
        """The describer's state shape; None: states as the environment gives them."""
        shape = self.describer.state_shape
        return None if shape is None else tuple(shape)

    def describe(self, state: Any, legal_moves: Sequence[int] = (),
                 last_action: int | None = None) -> str:
        """The describer's sentence for ``state``."""
        return self.describer(state, legal_moves, last_action)

    def show(self, state: Any, legal_moves: Sequence[int] = (), style: str = "verbose") -> str:
        """What a decision prompt of ``style`` (``verbose`` or ``compact``) shows of ``state``."""
        if style not in PROMPT_STYLES:
            raise ValueError(f"prompt style {style!r}: expected one of {PROMPT_STYLES}")
        render = (self.compact_state if style == "compact" else None) or self.prompt_state
        checked, moves, _ = self.describer.check(state, legal_moves)  # the one check
        if render is None:
            return self.describer.describe(checked, moves, None)
        return render(checked, tuple(legal_moves))

    def task_for(self, style: str = "verbose") -> str:
        """The system prompt of ``style``."""
        return self.compact_task if style == "compact" and self.compact_task else self.task

    def action_label(self, action: int) -> str:
        """``"2 (up)"``: the action's number and name."""
        return f"{action} ({self.action_names[action]})"


SpecFactory = Callable[..., LanguageSpec]
_FACTORIES: list[tuple[type, SpecFactory]] = []


def register_language(env_type: type, factory: SpecFactory) -> None:
    """Use ``factory(unwrapped_env, **options) -> LanguageSpec`` for ``env_type`` and its
    subclasses (a later registration for the same class replaces the earlier one)."""
    if not isinstance(env_type, type):
        raise ValueError(f"env_type={env_type!r}: expected an environment class")
    if not callable(factory):
        raise ValueError(f"factory={factory!r}: expected a callable (env, **options) -> "
                         "LanguageSpec")
    _FACTORIES[:] = [(t, f) for t, f in _FACTORIES if t is not env_type]
    _FACTORIES.append((env_type, factory))


def unwrap_env(env: Any) -> Any:
    """The unwrapped environment of ``env`` (an instance or a gymnasium id)."""
    if isinstance(env, str):
        try:
            env = gymnasium.make(env)
        except gymnasium.error.Error as error:
            raise ValueError(f"environment id {env!r} is unknown to gymnasium: {error}") from None
    return getattr(env, "unwrapped", env)


def bridged_minigrid_hint(env: Any) -> str:
    """``"; ... use langadapt/<id> ..."`` for a plain MiniGrid/BabyAI environment, else ``""``."""
    base = getattr(env, "unwrapped", env)
    spec_id = getattr(getattr(base, "spec", None), "id", None)
    if type(base).__module__.split(".")[0] != "minigrid" or not spec_id:
        return ""
    return (f"; {spec_id} is a plain MiniGrid level: use langadapt/{spec_id} (the bridged "
            "level, with its language spec)")


class LanguageSpecError(ValueError):
    """A registered language spec that cannot describe its environment's observations: one
    line naming the fix (the user's to make, never a traceback)."""


def language_for(env: Any, **options: Any) -> LanguageSpec:
    """The language spec of ``env`` (possibly wrapped, or a gymnasium id), else ValueError
    (:class:`LanguageSpecError` for a spec that cannot take the environment's observations)."""
    base = unwrap_env(env)
    for env_type, factory in reversed(_FACTORIES):
        if isinstance(base, env_type):
            try:
                spec = factory(base, **options)
            except TypeError as error:
                raise ValueError(f"language options {sorted(options)} for "
                                 f"{type(base).__name__}: {error}") from None
            return _takes_observations(spec, base)
    known = ", ".join(t.__name__ for t, _ in _FACTORIES)
    bridged = bridged_minigrid_hint(base)
    if bridged:
        raise ValueError(f"no language spec for {type(base).__name__}{bridged}")
    raise ValueError(
        f"no language spec for environment {type(base).__name__!r}; expected one of: {known} "
        "(register your own with langadapt.environments.register_language)"
    )


def _takes_observations(spec: LanguageSpec, base: Any) -> LanguageSpec:
    """``spec``, unless its describer takes numbers (``state_shape`` set) while ``base``'s
    observations are dicts or tuples of more than numbers: then one line with the fix."""
    space = getattr(base, "observation_space", None)
    parts = (space.spaces.values() if isinstance(space, gymnasium.spaces.Dict) else
             space.spaces if isinstance(space, gymnasium.spaces.Tuple) else None)
    numbers = isinstance(space, gymnasium.spaces.Tuple) and all(
        isinstance(part, gymnasium.spaces.Discrete) for part in parts)
    if parts is None or numbers or spec.state_shape is None:
        return spec
    name = type(spec.describer).__name__
    raise LanguageSpecError(
        f"{name} has state_shape = {spec.state_shape}, so it takes numbers, but "
        f"{type(base).__name__}'s observations are a {type(space).__name__}: set "
        f"state_shape = None in {name}, and its describe receives each observation as the "
        "environment gives it")
