"""`LanguageObservation`: a gymnasium wrapper whose observations come from an adapter."""

from __future__ import annotations

import copy as _copy
from collections import deque
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from .history import check_history_length
from .memory import Frames

__all__ = ["LanguageObservation", "recorded_action"]


def recorded_action(action: Any, box: bool) -> int | tuple[float, ...]:
    """An action as a history records it: a Box action as a tuple of floats, else an int."""
    if box:
        return tuple(float(v) for v in np.ravel(action))
    return action if type(action) is int else int(action)


class LanguageObservation(gym.Wrapper, gym.utils.RecordConstructorArgs):
    """Each observation replaced by ``adapter.adapt(obs, legal_moves, history)``'s vector
    (a fresh copy; ``copy=False``: the shared read-only one), its text in
    ``info["description"]``; legal moves from ``info["legal_moves"]`` (else every action of
    a Discrete space); the episode's ``(previous_observation, action)`` pairs kept (the last
    ``history_length``), cleared on reset; with the adapter's ``memory``, its last
    observations and actions stacked (`adapters.memory`). ``copy.deepcopy`` copies all but
    the adapter, which the copy shares (it is a pure function of its input). See
    docs/adapters.md.
    """

    def __init__(
        self,
        env: gym.Env,
        adapter: Any,
        history_length: int | None = None,
        copy: bool = True,
    ) -> None:
        # Recorded (not deep-copied: adapters hold a model, locks and a database) so that
        # env.spec can recreate the wrapper around the same adapter.
        gym.utils.RecordConstructorArgs.__init__(
            self, adapter=adapter, history_length=history_length, copy=copy,
            _disable_deepcopy=True)
        gym.Wrapper.__init__(self, env)
        check_history_length(history_length)
        if not callable(getattr(adapter, "adapt", None)):
            raise ValueError(f"adapter {adapter!r} has no adapt() method; expected an adapter "
                             "from adapters.make(...)")
        self.adapter = adapter
        self.copy = bool(copy)
        self._adapt = adapter.adapt
        self.history_length = history_length
        self.observation_space = adapter.observation_space
        space = env.action_space
        self._all_moves = list(range(space.n)) if isinstance(space, spaces.Discrete) else []
        self._box = isinstance(space, spaces.Box)  # actions recorded as tuples of floats
        self._history: list[tuple[Any, int]] | deque[tuple[Any, int]] = (
            [] if history_length is None else deque(maxlen=history_length)
        )
        self._record = self._history.append  # the same object for the wrapper's life
        self._previous: Any = None
        memory = getattr(adapter, "memory", None)
        self._frames = None if memory is None else Frames(
            memory, int(adapter.frame_space.shape[0]), space)

    def __deepcopy__(self, memo: dict[int, Any]) -> LanguageObservation:
        """A copy that steps independently of this wrapper and shares its adapter."""
        memo[id(self.adapter)] = self.adapter  # shared wherever it is referenced
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for key, value in self.__dict__.items():
            new.__dict__[key] = _copy.deepcopy(value, memo)
        new._adapt = self.adapter.adapt
        new._record = new._history.append  # the copy's own history, not the original's
        return new

    @property
    def supplies_descriptions(self) -> bool:
        """Whether ``info["description"]`` says what the state means (not the raw numbers)."""
        return bool(getattr(self.adapter, "describes_states", True))

    @property
    def history(self) -> list[tuple[Any, int]] | deque[tuple[Any, int]]:
        """The episode's ``(previous_observation, action)`` pairs (cleared on ``reset``)."""
        return self._history

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Reset the env and the history; the first observation through the adapter."""
        obs, info = self.env.reset(seed=seed, options=options)
        self._history.clear()
        self._previous = obs
        vector, info["description"] = self._adapt(
            obs, info.get("legal_moves", self._all_moves), self._history
        )
        if self._frames is not None:
            return self._frames.start(vector), info
        return (vector.copy() if self.copy else vector), info

    def step(self, action: Any) -> tuple[np.ndarray, SupportsFloat, bool, bool, dict[str, Any]]:
        """Step the env, record ``(previous_observation, action)``, adapt the new obs."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        action = recorded_action(action, self._box)
        self._record((self._previous, action))  # a deque(maxlen=0) keeps nothing
        self._previous = obs
        legal = info.get("legal_moves")
        if legal is None:
            legal = self._all_moves
        vector, info["description"] = self._adapt(obs, legal, self._history)
        if self._frames is not None:
            vector = self._frames.push(vector, action)
        elif self.copy:
            vector = vector.copy()
        return vector, reward, terminated, truncated, info
