"""One language spec per environment (`LanguageSpec`): describer, action names, task text,
what prompts show. `register_language(EnvClass, factory)` brings an environment;
`language_for(env, **options)` finds its spec. See docs/environments.md."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium
import numpy as np

from ._checks import checked_arguments
from .cartpole import CartPoleEnv
from .describers import CartPoleDescriber, Decimals, Describer, SailingDescriber
from .frozenlake import FROZENLAKE_ACTIONS, FrozenLakeEnv, FrozenLakeMapsEnv
from .grid_describers import FrozenLakeDescriber, FrozenLakeMapsDescriber, MazeDescriber
from .maze import ACTION_NAMES, MazeEnv
from .sailing import X_LIMIT, SailingEnv

__all__ = ["PROMPT_STYLES", "LanguageSpec", "LanguageSpecError", "bridged_minigrid_hint",
           "language_for", "register_language", "unwrap_env"]

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


# --------------------------------------------------------------------------- built-in specs
MAZE_TASK = (
    "You are an agent in a grid maze. Reach the goal cell in as few moves as possible. "
    "Each action moves you one cell: 0 left, 1 right, 2 up, 3 down, 4 up-left, "
    "5 down-left, 6 up-right, 7 down-right. You cannot move into a wall; only the legal "
    "actions listed are possible."
)
CARTPOLE_TASK = (
    "You balance a pole on a cart that moves along a track. Keep the pole upright and the "
    "cart within 2.4 m of the center for as long as possible; the episode ends when the "
    "pole leans more than 0.21 rad (12 degrees) or the cart leaves the track. Action 0 "
    "pushes the cart to the left, action 1 pushes it to the right. Positive numbers mean "
    "right: a positive pole angle leans right. Pushing the cart toward the side the pole "
    "is falling to brings it back upright."
)
SAILING_TASK = (
    "You steer a sailing boat up a river against the wind, which blows from straight "
    "ahead. Make progress upstream to the finish line without touching either bank. "
    "Heading straight into the wind makes no progress; sailing across it is fast. "
    "Action 0 turns the bow toward the harbor bank (left), action 1 toward the beach "
    "bank (right)."
)
MAZE_COMPACT_TASK = "Grid maze. Reach the goal in few moves; pick one of the legal moves."
CARTPOLE_COMPACT_TASK = ("CartPole: keep the pole upright. Positive is right; push toward the "
                         "side the pole falls to.")
SAILING_COMPACT_TASK = ("Sail upstream against the wind without touching a bank; sailing "
                        "across the wind is fast.")
FROZENLAKE_COMPACT_TASK = "Frozen lake grid. Reach the goal; never step into a hole."
FROZENLAKE_TASK = (
    "You cross a frozen lake on a grid from the start to the goal without falling into a "
    "hole. Each action moves you one cell: 0 left, 1 down, 2 right, 3 up. The ice may be "
    "slippery: a move can carry you sideways instead. Falling into a hole ends the episode."
)


def _offset(drow: int, dcol: int) -> str:
    """``"2 down, 1 right"``: an offset in rows and columns, for compact prompts."""
    parts = ([f"{abs(drow)} {'up' if drow < 0 else 'down'}"] if drow else []) + (
        [f"{abs(dcol)} {'left' if dcol < 0 else 'right'}"] if dcol else [])
    return ", ".join(parts) or "here"


def _maze(env: MazeEnv, **options: Any) -> LanguageSpec:
    goal = env.goal

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        # the legal moves are the neighbours that are not walls: no wall list needed
        return f"goal: {_offset(goal[0] - int(state[0]), goal[1] - int(state[1]))}"

    return LanguageSpec(MazeDescriber(env.grid, env.goal, **options), tuple(ACTION_NAMES),
                        MAZE_TASK, lambda e: np.array(e.cell, dtype=np.float32),
                        compact_state=compact, compact_task=MAZE_COMPACT_TASK)


@checked_arguments
def _cartpole(env: CartPoleEnv, decimals: Decimals = 2, **options: Any) -> LanguageSpec:
    describer = CartPoleDescriber(**options)

    def numbers(state: np.ndarray) -> tuple[str, str, str, str]:
        return tuple(f"{float(v) + 0.0:.{decimals}f}" for v in np.round(state, decimals))

    def numbers_then_sentence(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        x, x_dot, angle, omega = numbers(state)
        return (f"Cart position: {x} m\nCart velocity: {x_dot} m/s\n"
                f"Pole angle: {angle} rad\nPole angular velocity: {omega} rad/s\n"
                + describer.describe(state, legal_moves, None))  # show() checked them

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        x, x_dot, angle, omega = numbers(state)
        return f"x {x}, v {x_dot}, angle {angle}, angular v {omega}"

    return LanguageSpec(describer, ("push left", "push right"), CARTPOLE_TASK,
                        lambda e: np.array(e.state, dtype=np.float32), numbers_then_sentence,
                        compact, CARTPOLE_COMPACT_TASK)


def _sailing(env: SailingEnv, **options: Any) -> LanguageSpec:
    options.setdefault("half_width", float(X_LIMIT))

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        return f"x {float(state[0]):.1f} of ±{X_LIMIT:g}, heading {float(state[1]):.1f} rad"

    return LanguageSpec(SailingDescriber(**options),
                        ("turn toward the harbor", "turn toward the beach"), SAILING_TASK,
                        lambda e: np.array([e.x, e.theta], dtype=np.float32),
                        compact_state=compact, compact_task=SAILING_COMPACT_TASK)


def _frozenlake(env: FrozenLakeEnv, **options: Any) -> LanguageSpec:
    rows = ["".join(tile.decode() for tile in row) for row in env.lake.desc]
    describer = FrozenLakeDescriber(rows, **options)

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        row, col = int(state[0]), int(state[1])
        holes = [name for name, (dr, dc) in zip(FROZENLAKE_ACTIONS, ((0, -1), (1, 0), (0, 1),
                                                                      (-1, 0)), strict=True)
                 if 0 <= row + dr < len(rows) and 0 <= col + dc < len(rows[0])
                 and rows[row + dr][col + dc] == "H"]
        goal = f"goal: {_offset(describer.goal[0] - row, describer.goal[1] - col)}"
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


for _type, _factory in ((SailingEnv, _sailing), (MazeEnv, _maze), (CartPoleEnv, _cartpole),
                        (FrozenLakeEnv, _frozenlake), (FrozenLakeMapsEnv, _frozenlake_maps)):
    register_language(_type, _factory)
