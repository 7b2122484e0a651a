"""What an adapter takes: the environment's spaces and the checks of one input."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
from gymnasium import spaces

from ..environments import bridged_minigrid_hint, check_legal_moves

__all__ = ["FLATTENED_SPACES", "AdapterInput", "InputChecks", "check_state", "env_observation",
           "env_spaces"]

#: One adapter input: (state, legal_moves, episode_action_history).
AdapterInput = tuple[Any, Sequence[int], Sequence[Any]]

#: What ``observation_space`` an adapter takes: a Box as it is, the others flattened.
FLATTENED_SPACES = ("Discrete", "MultiDiscrete", "MultiBinary", "Dict", "Tuple")


def env_spaces(env: Any) -> tuple[spaces.Space, spaces.Box, int | None]:
    """The environment's observation space (a wrapper's, when ``env`` is wrapped), the Box
    its observations flatten to (itself when it is one; gymnasium's ``flatten_space``
    otherwise) and the number of discrete actions (or None)."""
    space = getattr(env, "observation_space", None)
    flat = space if isinstance(space, spaces.Box) else None
    if isinstance(space, spaces.Space) and type(space).__name__ in FLATTENED_SPACES:
        try:
            flat = spaces.flatten_space(space)
        except NotImplementedError:  # a part (e.g. MiniGrid's mission text) does not flatten
            flat = None
    if not isinstance(flat, spaces.Box):
        name = type(getattr(env, "unwrapped", env)).__name__
        raise ValueError(
            f"environment {name} has observation_space {space!r}, which no adapter (raw, "
            f"language, llm) takes; expected a Box or one of {', '.join(FLATTENED_SPACES)} "
            "of them (wrap the environment in a gymnasium ObservationWrapper that gives one)"
            + bridged_minigrid_hint(env))
    action_space = getattr(env, "action_space", None)
    return space, flat, int(action_space.n) if isinstance(action_space, spaces.Discrete) \
        else None


def check_state(state: Any, space: spaces.Space, shape: tuple[int, ...],
                dtype: np.dtype) -> np.ndarray:
    """``state`` as a finite array of ``shape`` and ``dtype`` (flattened by gymnasium when
    ``space`` is not a Box), else ValueError."""
    if not isinstance(space, spaces.Box):
        try:
            contained = space.contains(state)
        except (TypeError, ValueError, AttributeError):
            contained = False
        if not contained:
            raise ValueError(f"state {state!r} is not an observation of {space}")
        state = spaces.flatten(space, state)
    if isinstance(state, (str, bytes)) or state is None:
        raise ValueError(f"state {state!r}: expected a numeric array of shape {shape}")
    array = np.asarray(state)
    if array.dtype.kind not in "biuf":
        raise ValueError(f"state {state!r} (type {type(state).__name__}) is not numeric; "
                         f"expected an array of shape {shape}")
    array = array.astype(dtype, copy=False)
    if array.shape != shape:
        raise ValueError(f"state {state!r} has shape {array.shape}; expected shape {shape}")
    if array.dtype.kind == "f" and not np.isfinite(array).all():
        raise ValueError(f"state {state!r} contains NaN or inf; expected finite values")
    return np.ascontiguousarray(array)


def env_observation(state: Any, space: spaces.Space, flat: spaces.Box) -> Any:
    """The environment's own observation of a checked state: the state itself for a Box
    space, else gymnasium's ``unflatten`` of it (an int for Discrete, a dict for Dict)."""
    if isinstance(space, spaces.Box) or not (
            isinstance(state, np.ndarray) and state.shape == flat.shape):
        return state
    return spaces.unflatten(space, state)


Checked = tuple[np.ndarray, tuple[int, ...], Any]


class InputChecks:
    """`BaseAdapter`'s environment and input checks (a mixin: ``_env``, ``_env_space``,
    ``_space``, ``_n_actions`` and ``memo`` are the adapter's)."""

    @property
    def env(self) -> Any:
        """The environment (unwrapped)."""
        return self._env

    @property
    def n_actions(self) -> int | None:
        return self._n_actions

    @property
    def state_shape(self) -> tuple[int, ...]:
        return self.memo.shape

    @property
    def state_dtype(self) -> np.dtype:
        return self.memo.dtype

    def env_observation(self, state: Any) -> Any:
        """The environment's own observation of a checked state (what describers receive)."""
        return env_observation(state, self._env_space, self._space)

    def check_state(self, state: Any) -> np.ndarray:
        """``state`` checked (see `adapters.inputs.check_state`), else ValueError."""
        return check_state(state, self._env_space, self.memo.shape, self.memo.dtype)

    def check_input(self, item: Any) -> Checked:
        """A ``(state, legal_moves, history)`` item, checked (ValueError when bad)."""
        if not isinstance(item, (tuple, list)) or not 1 <= len(item) <= 3:
            raise ValueError(
                f"input {item!r}: expected a (state, legal_moves, episode_action_history) tuple")
        state, legal, history = (*item, (), ())[:3]
        checked = (self.check_state(state), check_legal_moves(legal, self._n_actions), history)
        if self.uses_history:
            self.history_key(history)  # a bad history item is a ValueError here
        return checked

    def _checked(self, inputs: Any) -> list[Checked]:
        if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
            raise ValueError(f"inputs={inputs!r}: expected an iterable of (state, legal_moves, "
                             "episode_action_history) tuples, e.g. reachable_inputs(env)")
        return [self.check_input(item) for item in inputs]

