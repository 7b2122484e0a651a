"""Tabular Q-learning with epsilon-greedy exploration and legal-move masking; the table is
keyed by description, observation bytes or bins (``key``, ``bins``). See docs/agents.md
(QLearningAgent)."""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Sequence
from typing import Any, Literal

import numpy as np
import torch
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, PositiveInt

from .base import Agent, take
from .discretisation import Discretisation

#: Continuous observations of this many dimensions or more are an encoder's vectors.
VECTOR_DIMS = 64


class QLearningConfig(BaseModel):
    """Hyperparameters of :class:`QLearningAgent`; the update and the table key (``key``,
    ``bins``, ``bounds``) are explained in docs/agents.md (QLearningAgent)."""

    model_config = ConfigDict(extra="forbid")

    alpha: float = Field(0.1, gt=0.0, le=1.0)
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    epsilon_start: float = Field(1.0, ge=0.0, le=1.0)
    epsilon_min: float = Field(0.05, ge=0.0, le=1.0)
    epsilon_decay: float = Field(0.99, gt=0.0, le=1.0)  # multiplied in after each episode
    initial_q: float = 0.0
    key: Literal["auto", "observation", "description"] = "auto"
    bins: PositiveInt | list[PositiveInt] | None = None  # None: the observation's bytes
    bounds: list[tuple[float, float]] | None = None  # (low, high) per dimension, for bins


class QLearningAgent(Agent):
    """Tabular Q-learning over a dict keyed by description hashes, state bytes or bins."""

    kind = "qlearning"
    config_model = QLearningConfig
    config: QLearningConfig

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: QLearningConfig | dict[str, Any] | None = None,
        seed: int = 0,
    ):
        super().__init__(observation_space, action_space, config, seed)
        if not isinstance(observation_space, (spaces.Box, spaces.Discrete)):
            raise ValueError(
                f"observation_space is {observation_space!r}, expected a Box or Discrete space"
            )
        if self.config.key == "description" and self.config.bins is not None:
            raise ValueError(
                f"bins={self.config.bins!r} needs key='observation' (a description has no bins)"
            )
        self.table: dict[bytes, np.ndarray] = {}
        self.epsilon = self.config.epsilon_start
        self.episodes = 0
        self.updates = 0
        self.discretisation: Discretisation | None = None
        if self.config.bins is not None:
            if not isinstance(observation_space, spaces.Box):
                raise ValueError(f"bins={self.config.bins!r} needs a Box observation space, "
                                 f"got {observation_space!r}")
            self.discretisation = Discretisation(observation_space, self.config.bins,
                                                 self.config.bounds)
        elif self.config.bounds is not None:
            raise ValueError("bounds apply only with bins")
        self.table_key = self.config.key if self.config.key != "auto" else (
            "observation" if self.config.bins is not None else "auto")
        self._warned = False

    # ------------------------------------------------------------------- keys
    def observe(self, obs: Any, info: dict[str, Any]) -> Any:
        """The description (``info["description"]``) when the table is keyed by
        descriptions, else the observation: the learner and :func:`agents.evaluate` pass
        what this returns to :meth:`act` and :meth:`learn`."""
        if self.table_key != "description":
            return obs
        text = info.get("description")
        if not isinstance(text, str):
            raise ValueError(
                "the table is keyed by descriptions, but the environment gives no "
                'info["description"]: wrap it in LanguageObservation with a text adapter'
            )
        return text

    def bind(self, env: Any) -> None:
        """Resolve ``key="auto"`` on the first environment: by description when ``env``
        supplies descriptions, else by observation (warning once for encoder vectors)."""
        if self.table_key != "auto":
            return
        try:
            supplies = bool(env.get_wrapper_attr("supplies_descriptions"))
        except AttributeError:
            supplies = False
        self.table_key = "description" if supplies else "observation"
        self._warn_vector_keys()

    def _warn_vector_keys(self) -> None:
        space = self.observation_space
        if (self.table_key == "observation" and self.discretisation is None and not self._warned
                and isinstance(space, spaces.Box) and np.issubdtype(space.dtype, np.floating)
                and int(np.prod(self.obs_shape)) >= VECTOR_DIMS):
            self._warned = True
            warnings.warn(
                f"qlearning keys its table by the float bytes of {int(np.prod(self.obs_shape))}-"
                "dimensional observations: an encoder's vectors differ in their last bits "
                "between processes and batch sizes, so the table does not carry over to a new "
                "process; set key: description (with a LanguageObservation environment) or "
                "bins", stacklevel=3)

    def check_input(self, obs: Any) -> None:
        """ValueError unless ``obs`` is a description (a table keyed by descriptions) or an
        observation :meth:`check_obs` accepts."""
        if self.table_key != "description":
            self.check_obs(obs)
        elif type(obs) is not str:
            raise ValueError(
                f"observation is {type(obs).__name__}, but this table is keyed by "
                "descriptions: pass the description text (info['description'] of a "
                "LanguageObservation env; agents.train and agents.evaluate do)"
            )

    def key(self, obs: Any) -> bytes:
        """The table key (bytes) of an observation or description :meth:`check_input` accepts."""
        if self.table_key == "description":
            return hashlib.blake2b(obs.encode(), digest_size=16).digest()
        if self.table_key == "auto":  # used without bind(): the observation it is
            self.table_key = "observation"
            self._warn_vector_keys()
        arr = np.asarray(obs, dtype=np.float32)
        if self.discretisation is None:
            # + 0.0 maps -0.0 to 0.0 so that equal values give equal bytes.
            return (arr + np.float32(0.0)).tobytes()
        return self.discretisation.bins_of(arr.ravel().astype(np.float64)).tobytes()

    def _key_width(self, table_key: str) -> int | None:
        """How many bytes :meth:`key` gives when keyed by ``table_key`` (None: not yet
        known, an ``auto`` table never used)."""
        if table_key == "description":
            return 16
        if table_key == "auto" or not isinstance(self.observation_space, spaces.Box):
            return None
        flat = np.zeros(int(np.prod(self.obs_shape)), dtype=np.float64)
        if self.discretisation is None:
            return flat.astype(np.float32).nbytes
        return len(self.discretisation.bins_of(flat).tobytes())

    def q_values(self, obs: Any) -> np.ndarray:
        """A copy of the action values of ``obs`` (``initial_q`` where unseen)."""
        self.check_input(obs)
        row = self.table.get(self.key(obs))
        return np.full(self.n_actions, self.config.initial_q) if row is None else row.copy()

    def _row(self, key: bytes) -> np.ndarray:
        row = self.table.get(key)
        if row is None:
            row = np.full(self.n_actions, self.config.initial_q, dtype=np.float64)
            self.table[key] = row
        return row

    # ---------------------------------------------------------------- protocol
    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> int:
        """Epsilon-greedy action among the legal moves (greedy when ``explore`` is False).

        Greedy ties go to the lowest action index when not exploring (deterministic) and
        to a random one of the tied actions when exploring."""
        key = self.key(obs)
        legal = np.flatnonzero(self.mask(legal_moves))
        if explore and self.rng.random() < self.epsilon:
            return int(legal[self.rng.integers(legal.size)])
        row = self.table.get(key)
        if row is None:
            return int(legal[self.rng.integers(legal.size)]) if explore else int(legal[0])
        values = row[legal]
        best = legal[values == values.max()]
        if explore and best.size > 1:
            return int(best[self.rng.integers(best.size)])
        return int(best[0])

    def _learn(self, obs: Any, action: int, reward: float, next_obs: Any, terminated: bool,
               truncated: bool, next_legal_moves: Sequence[int] | None = None) -> None:
        """One Q-learning update; decays epsilon when the episode ends."""
        key = self.key(obs)
        next_key = self.key(next_obs)
        target = reward
        if not terminated:
            mask = self.mask(next_legal_moves)
            next_row = self.table.get(next_key)
            best_next = self.config.initial_q if next_row is None else float(next_row[mask].max())
            target += self.config.gamma * best_next
        row = self._row(key)
        row[action] += self.config.alpha * (target - row[action])
        self.updates += 1
        if terminated or truncated:
            self.episodes += 1
            self.epsilon = max(self.config.epsilon_min, self.epsilon * self.config.epsilon_decay)

    # ------------------------------------------------------------ snapshots / files
    def snapshot(self) -> dict[bytes, np.ndarray]:
        """A copy of the table."""
        return {k: row.copy() for k, row in self.table.items()}

    def restore(self, snapshot: dict[bytes, np.ndarray]) -> None:
        self.table = {k: row.copy() for k, row in snapshot.items()}

    def header(self) -> dict[str, Any]:
        return super().header() | {"bins": self.config.bins, "bounds": self.config.bounds}

    def get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """The table (keys as rows of bytes, values), epsilon, counters and RNG state."""
        state, _ = super().get_state()
        keys = list(self.table)
        key_len = len(keys[0]) if keys else 0
        key_arr = np.frombuffer(b"".join(keys), dtype=np.uint8).reshape(len(keys), key_len)
        values = np.stack(list(self.table.values())) if keys else np.zeros((0, self.n_actions))
        state |= {"epsilon": self.epsilon, "episodes": self.episodes, "updates": self.updates,
                  "key": self.table_key}
        return state, {"keys": torch.from_numpy(key_arr.copy()), "values": torch.from_numpy(values)}

    def set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        keys = take(tensors, "keys", (-1, -1)).numpy()
        values = take(tensors, "values", (keys.shape[0], self.n_actions)).numpy()
        if keys.dtype != np.uint8:
            raise ValueError(f"tensor 'keys' has dtype {keys.dtype}, expected uint8")
        super().set_state(state, tensors)
        self.table = {
            keys[i].tobytes(): values[i].astype(np.float64) for i in range(keys.shape[0])
        }
        saved = state.get("key", self.config.key)
        if self.config.key not in ("auto", saved) and saved != "auto":
            raise ValueError(f"the table is keyed by {saved!r}, but this agent has "
                             f"key={self.config.key!r}")
        width = self._key_width(saved)
        if keys.shape[0] and width is not None and keys.shape[1] != width:
            raise ValueError(f"tensor 'keys' has rows of {keys.shape[1]} bytes; a table keyed "
                             f"by {saved} here has keys of {width} bytes (none would match)")
        self.table_key = saved
        self.epsilon = float(state["epsilon"])
        self.episodes = int(state["episodes"])
        self.updates = int(state["updates"])
