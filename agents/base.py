"""The agent protocol shared by every agent, and the checks they all need.

An agent is built from gymnasium spaces only (it knows nothing about adapters or our
environments)::

    agent = SomeAgent(observation_space, action_space, config=None, seed=0)
    action = agent.act(obs, legal_moves=None, explore=True)
    agent.learn(obs, action, reward, next_obs, terminated, truncated, next_legal_moves=None)
    agent.save(path); agent.load(path)

``legal_moves`` is a sequence of action indices (``None`` means every action is legal).
``terminated`` means the episode ended in a terminal state (no bootstrapping);
``truncated`` means it was cut off by a time limit (the value of ``next_obs`` still counts).
"""

from __future__ import annotations

import json
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict

ConfigT = TypeVar("ConfigT", bound=BaseModel)


def parse_config(config: BaseModel | dict[str, Any] | None, model: type[ConfigT]) -> ConfigT:
    """Return ``config`` as an instance of the pydantic ``model`` (defaults when ``None``)."""
    if config is None:
        return model()
    if isinstance(config, model):
        return config
    if isinstance(config, dict):
        return model(**config)
    if isinstance(config, BaseModel):
        raise ValueError(
            f"config is a {type(config).__name__}, expected a {model.__name__} or a dict"
        )
    raise ValueError(
        f"config is {config!r} ({type(config).__name__}), expected a {model.__name__}, "
        "a dict of hyperparameters or None"
    )


def discrete_action_count(action_space: spaces.Space) -> int:
    """Number of actions of a ``Discrete`` action space starting at 0; ValueError otherwise."""
    if not isinstance(action_space, spaces.Discrete):
        raise ValueError(f"action_space is {action_space!r}, expected gymnasium.spaces.Discrete")
    if int(action_space.start) != 0:
        raise ValueError(
            f"action_space {action_space!r} starts at {int(action_space.start)}, expected a "
            "Discrete space starting at 0"
        )
    return int(action_space.n)


def check_count(name: str, value: Any, minimum: int = 1, optional: bool = True) -> None:
    """ValueError unless ``value`` is an int >= ``minimum`` (or None when ``optional``).

    The one check behind every step / episode budget and seed argument of the agents and of
    :func:`agents.train` / :func:`agents.evaluate`.
    """
    if value is None and optional:
        return
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < minimum:
        what = "a positive int" if minimum == 1 else f"an int >= {minimum}"
        raise ValueError(f"{name} is {value!r}, expected {what}" + (" or None" if optional else ""))


class NoConfig(BaseModel):
    """Hyperparameters of an agent that has none: rejects any name given."""

    model_config = ConfigDict(extra="forbid")


class Agent:
    """Base class of all agents: space bookkeeping, legal-move masks and input checks.

    Subclasses set ``kind`` (the name stored in saved files) and ``config_model`` (their
    pydantic hyperparameters), add their own checks after ``super().__init__`` and implement
    ``act``, ``learn``, ``save`` and ``load``; ``_header`` / ``read_checked`` give the part of
    the saved-file header every agent shares.
    """

    kind: ClassVar[str] = "agent"
    #: The pydantic model of the agent's hyperparameters; ``__init__`` parses ``config``
    #: with it into ``self.config``.
    config_model: ClassVar[type[BaseModel]] = NoConfig

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: BaseModel | dict[str, Any] | None = None,
        seed: int = 0,
    ):
        if not isinstance(observation_space, spaces.Space):
            raise ValueError(
                f"observation_space is {observation_space!r}, expected a gymnasium space"
            )
        check_count("seed", seed, minimum=0, optional=False)
        self.observation_space = observation_space
        self.action_space = action_space
        self.n_actions = discrete_action_count(action_space)
        self.obs_shape: tuple[int, ...] = tuple(observation_space.shape or ())
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self._all_legal = np.ones(self.n_actions, dtype=bool)
        self.config = parse_config(config, self.config_model)

    # ----------------------------------------------------------------- protocol
    def act(self, obs: Any, legal_moves: Sequence[int] | None = None, explore: bool = True) -> int:
        raise NotImplementedError

    def learn(
        self,
        obs: Any,
        action: int,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        next_legal_moves: Sequence[int] | None = None,
    ) -> None:
        raise NotImplementedError

    def save(self, path: str | Path) -> None:
        raise NotImplementedError

    def load(self, path: str | Path) -> None:
        raise NotImplementedError

    def set_training_horizon(self, steps: int | None = None, episodes: int | None = None) -> None:
        """Tell the agent how long training will run (``train()`` calls this first).

        Agents whose schedules do not depend on the horizon ignore it (after checking it).
        """
        check_count("steps", steps)
        check_count("episodes", episodes)

    # ------------------------------------------------------------------ helpers
    def check_obs(self, obs: Any) -> np.ndarray:
        """``obs`` as a float32 array of the agent's observation shape; ValueError otherwise."""
        arr = np.asarray(obs, dtype=np.float32)
        if arr.shape != self.obs_shape:
            raise ValueError(
                f"observation has shape {arr.shape}, but this {self.kind} agent was built for "
                f"observation shape {self.obs_shape}"
            )
        return arr

    def legal_mask(self, legal_moves: Sequence[int] | np.ndarray | None, what: str) -> np.ndarray:
        """Boolean mask over actions from a list of legal moves (``None`` = all legal).

        Raises ValueError for an empty list or an action outside ``[0, n_actions)``.
        """
        if legal_moves is None:
            return self._all_legal
        moves = np.asarray(legal_moves)
        if moves.size == 0:
            raise ValueError(
                f"{what} is empty: the agent needs at least one legal action out of "
                f"{self.n_actions} (pass None when every action is legal)"
            )
        if moves.ndim != 1 or not np.issubdtype(moves.dtype, np.integer):
            raise ValueError(f"{what} is {legal_moves!r}, expected a sequence of action indices")
        if moves.min() < 0 or moves.max() >= self.n_actions:
            raise ValueError(
                f"{what} is {list(moves)!r}, expected action indices in [0, {self.n_actions})"
            )
        mask = np.zeros(self.n_actions, dtype=bool)
        mask[moves] = True
        return mask

    def check_action(self, action: Any) -> int:
        """``action`` as an int in ``[0, n_actions)``; ValueError otherwise."""
        value = action.item() if isinstance(action, np.ndarray) and action.ndim == 0 else action
        if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, np.integer, float, np.floating)
        ):
            a = None
        else:
            a = int(value) if np.isfinite(value) and value == int(value) else None
        if a is None or not 0 <= a < self.n_actions:
            raise ValueError(f"action is {action!r}, expected an int in [0, {self.n_actions})")
        return a

    def check_transition(
        self, reward: Any, terminated: Any, truncated: Any
    ) -> tuple[float, bool, bool]:
        """``(reward, terminated, truncated)`` as ``(float, bool, bool)``; ValueError unless
        the reward is a finite real number and both flags are bool-like (bool, numpy bool,
        or the ints 0 / 1)."""
        r = reward.item() if isinstance(reward, np.ndarray) and reward.ndim == 0 else reward
        if (
            isinstance(r, (bool, np.bool_))
            or not isinstance(r, (int, float, np.integer, np.floating))
            or not np.isfinite(r)
        ):
            raise ValueError(f"reward is {reward!r}, expected a finite real number")
        return float(r), _flag("terminated", terminated), _flag("truncated", truncated)

    def _header(self) -> dict[str, Any]:
        """What a saved file must match to be loaded (subclasses add their own keys)."""
        return {"kind": self.kind, "obs_shape": list(self.obs_shape), "n_actions": self.n_actions}

    def read_checked(self, path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """:func:`read_agent_file` plus :meth:`check_header` against :meth:`_header`."""
        header, payload = read_agent_file(path)
        expected = self._header()
        del expected["kind"]
        self.check_header(header, path, expected)
        return header, payload

    def check_header(
        self, header: dict[str, Any], path: str | Path, expected: dict[str, Any]
    ) -> None:
        """Compare what a saved file says about itself with this agent; ValueError on mismatch."""
        kind = header.get("kind")
        if kind != self.kind:
            raise ValueError(f"{path} holds a {kind!r} agent, but this is a {self.kind!r} agent")
        for key, want in expected.items():
            got = header.get(key)
            if _normalise(got) != _normalise(want):
                raise ValueError(
                    f"{path} was saved with {key}={got!r}, but this agent has {key}={want!r}"
                )


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    if isinstance(value, (int, np.integer)) and value in (0, 1):
        return bool(value)
    raise ValueError(f"{name} is {value!r}, expected a bool")


def read_agent_file(path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Read any file written by an agent's ``save``: returns ``(header, payload)``.

    Three formats exist: ``.npz`` (tables; header stored as JSON in the ``header`` entry),
    a torch zip archive (networks; loaded with ``weights_only=True``) and JSON (agents with
    no parameters). ValueError when ``path`` is none of these.
    """
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist or is not a file")
    with path.open("rb") as f:
        head = f.read(4)
    if head.startswith(b"{"):
        try:
            data = json.loads(path.read_text())
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise ValueError(f"{path} is not a saved agent: invalid JSON ({err})") from None
        return _header_of(data, path), data
    if head == b"PK\x03\x04":
        with zipfile.ZipFile(path) as zf:
            names = zf.namelist()
        if "header.npy" in names:
            with np.load(path, allow_pickle=False) as npz:
                payload = {k: npz[k] for k in npz.files}
            header = json.loads(str(payload.pop("header")))
            return _header_of(header, path), payload
        import torch

        data = torch.load(path, map_location="cpu", weights_only=True)
        if not isinstance(data, dict):
            raise ValueError(f"{path} is not a saved agent: a torch file without a header")
        return _header_of(data, path), data
    raise ValueError(f"{path} is not a saved agent (expected .npz, torch or JSON content)")


def _header_of(data: Any, path: Path) -> dict[str, Any]:
    header = data.get("header", data) if isinstance(data, dict) else None
    if isinstance(header, str):
        header = json.loads(header)
    if not isinstance(header, dict) or "kind" not in header:
        raise ValueError(f"{path} is not a saved agent: no header naming the agent kind")
    return header


def _normalise(value: Any) -> Any:
    """Lists and tuples compare equal after a JSON round trip."""
    if isinstance(value, (list, tuple)):
        return [_normalise(v) for v in value]
    return value


def rng_state(rng: np.random.Generator) -> dict[str, Any]:
    """The JSON-serialisable state of a numpy Generator."""
    return rng.bit_generator.state


def set_rng_state(rng: np.random.Generator, state: dict[str, Any]) -> None:
    """Restore a state returned by :func:`rng_state`."""
    rng.bit_generator.state = state
