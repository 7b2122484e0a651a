"""The agent protocol, its input checks (the agent's public boundary) and the one save format
(a safetensors file: the tensors, and the JSON header in its metadata; loading runs no code).
See docs/agents.md (The protocol, Save and load)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, TypeVar

import numpy as np
import torch
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict

from ..environments import check_action, check_legal_moves
from ..errors import one_line
from .loop import ActionOverride, StepLearner, check_count

ConfigT = TypeVar("ConfigT", bound=BaseModel)

#: Name and version written into every saved file's header (version 2: safetensors; the
#: torch files of version 1 are no longer read).
FILE_FORMAT = "langadapt-agent"
FILE_VERSION = 2


def parse_config(config: BaseModel | dict[str, Any] | None, model: type[ConfigT]) -> ConfigT:
    """Return ``config`` as an instance of the pydantic ``model`` (defaults when ``None``)."""
    if config is None:
        return model()
    if isinstance(config, model):
        return config
    if isinstance(config, dict):
        return model(**config)
    raise ValueError(
        f"config is {config!r} ({type(config).__name__}), expected a {model.__name__}, "
        "a dict of hyperparameters or None"
    )


class NoConfig(BaseModel):
    """Hyperparameters of an agent that has none: rejects any name given."""

    model_config = ConfigDict(extra="forbid")


class Agent:
    """Base class of all agents: spaces, input checks, legal-move masks, save / load.
    Subclasses set ``kind`` and ``config_model`` and implement ``act``, ``learn``,
    ``get_state`` / ``set_state`` and ``snapshot`` / ``restore``."""

    kind: ClassVar[str] = "agent"
    config_model: ClassVar[type[BaseModel]] = NoConfig
    #: False for a policy that has nothing to learn (a zero-shot LLM policy): the runner
    #: evaluates it without training.
    learns: bool = True
    #: True for an agent whose ``learn`` takes ``demonstration=True`` (advice learnt as
    #: demonstrations: DQN's large-margin term) and that has ``confident(obs, legal_moves)``.
    learns_from_demonstrations: ClassVar[bool] = False
    #: True for an agent that also acts on a one-dimensional Box action space (``act``
    #: returns an array; ``n_actions`` is 0, no legal moves).
    box_actions: ClassVar[bool] = False
    #: Patterns (``re.fullmatch``) of the tensors a saved file may hold beyond those a new
    #: agent's ``get_state`` gives (an optimiser's moments after its first step, a best
    #: policy once found); any other name is refused on load.
    optional_tensors: ClassVar[tuple[str, ...]] = ()

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
        box = self.box_actions and isinstance(action_space, spaces.Box)
        if box and len(action_space.shape) != 1:
            raise ValueError(f"action_space is {action_space!r}, expected a one-dimensional "
                             f"Box for a {self.kind} agent")
        if not box and (not isinstance(action_space, spaces.Discrete)
                        or int(action_space.start) != 0):
            raise ValueError(
                f"action_space is {action_space!r}, expected gymnasium.spaces.Discrete "
                "starting at 0" + (" or a one-dimensional Box" if self.box_actions else
                                   f" (a {self.kind} agent has discrete actions)")
            )
        check_count("seed", seed, minimum=0, optional=False)
        self.observation_space = observation_space
        self.action_space = action_space
        self.n_actions = 0 if box else int(action_space.n)  # Box: action_space.shape
        self.obs_shape: tuple[int, ...] = tuple(observation_space.shape or ())
        self.seed = int(seed)
        self.rng = np.random.default_rng(self.seed)
        self._all_legal = np.ones(self.n_actions, dtype=bool)
        self._all_legal.flags.writeable = False
        self._masks: dict[tuple[int, ...], np.ndarray] = {}
        self.config = parse_config(config, self.config_model)

    # ----------------------------------------------------------------- protocol
    # Check once, trust inside: ``act`` and ``learn`` (a caller's entry) check their inputs,
    # then run ``_act`` / ``_learn``; the learner's loop and :func:`evaluate` call those
    # directly (:meth:`trusted`), the environment having checked what it hands over.
    def act(self, obs: Any, legal_moves: Sequence[int] | None = None, explore: bool = True) -> Any:
        """The action for ``obs`` among ``legal_moves`` (None: all), exploring or greedy;
        one-line ValueError for an observation or legal moves the agent cannot take."""
        self.check_input(obs)
        if self.n_actions:
            self.legal_mask(legal_moves, "legal_moves")
        return self._act(obs, legal_moves, explore)

    def learn(self, obs: Any, action: int, reward: float, next_obs: Any, terminated: bool,
              truncated: bool, next_legal_moves: Sequence[int] | None = None,
              **options: Any) -> None:
        """Learn from one transition; one-line ValueError for an input that does not fit."""
        self.check_input(obs)
        self.check_input(next_obs)
        action = self.check_action(action)
        reward, terminated, truncated = self.check_transition(reward, terminated, truncated)
        if not terminated:
            self.legal_mask(next_legal_moves, "next_legal_moves")
        self._learn(obs, action, reward, next_obs, terminated, truncated, next_legal_moves,
                    **options)

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> Any:
        raise NotImplementedError  # act on checked inputs

    def _learn(self, *transition: Any, **options: Any) -> None:
        raise NotImplementedError  # learn on checked inputs: reward a float, the flags bools

    def trusted(self, name: str) -> Any:
        """The method a loop calls for ``name`` ("act" or "learn"): the unchecked ``_act`` /
        ``_learn``, or the ``act`` / ``learn`` a subclass or the instance puts in their place."""
        own = name in vars(self) or getattr(type(self), name) is not getattr(Agent, name)
        return getattr(self, name if own else "_" + name)

    def bind(self, env: Any) -> None:
        """The environment the agent acts in next (learners and :func:`evaluate` call it; must be
        cheap to repeat): agents that read more than the observation take it from ``env``."""

    def observe(self, obs: Any, info: dict[str, Any]) -> Any:
        """What the agent acts on and learns from after a reset or step: the observation
        (a table keyed by descriptions takes ``info["description"]`` instead)."""
        return obs

    def learner(self, override: ActionOverride | None = None) -> Any:
        """The learner that trains this agent (:func:`agents.train` calls its ``learn(env,
        budget, callbacks)``): the step learner, with ``override`` (an advisor) choosing
        some of the actions. Agents that learn otherwise (a policy search) return their own."""
        return StepLearner(self, override)

    def set_training_horizon(self, steps: int | None = None, episodes: int | None = None) -> None:
        """Tell the agent how long training will run (a learner calls this first)."""
        check_count("steps", steps)
        check_count("episodes", episodes)

    def snapshot(self) -> Any:
        """An in-memory copy of the policy (weights or table), for :meth:`restore`."""
        return None

    def restore(self, snapshot: Any) -> None:
        """Make the policy the one :meth:`snapshot` copied."""

    def get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """What a saved file holds: (JSON-serialisable state, named tensors)."""
        return {"rng": self.rng.bit_generator.state}, {}

    def set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        """Restore :meth:`get_state`'s output (already checked against the file's header);
        ValueError when a tensor has the wrong shape."""
        self.rng.bit_generator.state = state["rng"]

    # ------------------------------------------------------------------ checks
    def check_input(self, obs: Any) -> None:
        """ValueError unless ``obs`` is what :meth:`act` and :meth:`learn` take (by default an
        observation :meth:`check_obs` accepts)."""
        self.check_obs(obs)

    def check_obs(self, obs: Any) -> np.ndarray:
        """``obs`` as a finite float32 array of the agent's observation shape; else ValueError."""
        try:
            arr = np.asarray(obs, dtype=np.float32)
        except (TypeError, ValueError):
            raise ValueError(
                f"observation is {obs!r}, expected numbers of shape {self.obs_shape}"
            ) from None
        if arr.shape != self.obs_shape:
            raise ValueError(
                f"observation has shape {arr.shape}, but this {self.kind} agent was built for "
                f"observation shape {self.obs_shape}"
            )
        # One sum is cheaper than an elementwise isfinite; it is inf/nan only if some value
        # is (or the sum overflows, which the exact check below then clears).
        if not math.isfinite(arr.sum()) and not np.isfinite(arr).all():
            raise ValueError(f"observation {arr.tolist()!r} contains NaN or inf (or None)")
        return arr

    def legal_mask(self, legal_moves: Sequence[int] | None, what: str) -> np.ndarray:
        """:meth:`mask` of ``legal_moves`` checked: ValueError for an empty, repeated, non-int
        or out-of-range move (a memorised tuple of exact ints was checked before)."""
        key = tuple(legal_moves) if type(legal_moves) in (list, tuple) else None
        if legal_moves is not None and (not key or not all(type(m) is int for m in key)
                                        or key not in self._masks):
            if not check_legal_moves(legal_moves, self.n_actions):
                raise ValueError(
                    f"{what} is empty: the agent needs at least one legal action out of "
                    f"{self.n_actions} (pass None when every action is legal)"
                )
        return self.mask(legal_moves)

    def mask(self, legal_moves: Sequence[int] | None) -> np.ndarray:
        """Read-only boolean mask over actions of legal moves already checked (``None`` = all);
        masks are memorised by the moves' tuple."""
        if legal_moves is None:
            return self._all_legal
        key = tuple(legal_moves)
        mask = self._masks.get(key)
        if mask is None:
            mask = np.zeros(self.n_actions, dtype=bool)
            mask[list(key)] = True
            mask.flags.writeable = False
            if len(self._masks) < 4096:
                self._masks[key] = mask
        return mask

    def check_action(self, action: Any) -> int:
        """``action`` as an int in ``[0, n_actions)``; ValueError otherwise."""
        return check_action(action, self.n_actions)

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
            or not math.isfinite(r)
        ):
            raise ValueError(f"reward is {reward!r}, expected a finite real number")
        return float(r), _flag("terminated", terminated), _flag("truncated", truncated)

    # -------------------------------------------------------------- save / load
    def header(self) -> dict[str, Any]:
        """What a saved file must match to be loaded (subclasses add their settings)."""
        return {"kind": self.kind, "obs_shape": list(self.obs_shape), "n_actions": self.n_actions}

    def save(self, path: str | Path) -> None:
        """Write the agent to ``path`` atomically (a temporary file renamed into place)."""
        state, tensors = self.get_state()
        header = {"format": FILE_FORMAT, "version": FILE_VERSION, **self.header(), "state": state}
        write_agent_file(path, header, tensors)

    def load(self, path: str | Path) -> None:
        """Restore a file written by :meth:`save`: ValueError naming the file and what is
        wrong when it is damaged, not an agent file, or saved by another agent kind, for
        other shapes or settings, or by a newer format."""
        header, tensors = read_agent_file(path)
        self.load_saved(header, tensors, path)

    def load_saved(self, header: dict[str, Any], tensors: dict[str, torch.Tensor],
                   source: Any) -> None:
        """Restore what `read_agent_file` read from ``source`` (named in the errors)."""
        for key, want in self.header().items():
            got = header.get(key)
            if json.loads(json.dumps(got)) != json.loads(json.dumps(want)):
                if key == "kind":
                    raise ValueError(
                        f"{source} holds a {got!r} agent, but this is a {want!r} agent"
                    )
                raise ValueError(
                    f"{source} was saved with {key}={got!r}, but this agent has {key}={want!r}"
                )
        held = self.get_state()[1]
        unknown = [name for name in tensors if name not in held and not any(
            re.fullmatch(pattern, name) for pattern in self.optional_tensors)]
        if unknown:
            raise ValueError(f"{source}: tensor {', '.join(map(repr, unknown[:3]))}"
                             f"{' ...' if len(unknown) > 3 else ''} is not one a {self.kind} "
                             "agent holds")
        check_tensors(source, tensors, held)
        try:
            self.set_state(header["state"], tensors)
        except (KeyError, TypeError, RuntimeError, OverflowError, IndexError,
                AttributeError) as error:
            reason = str(error).splitlines()[0] if str(error) else type(error).__name__
            raise ValueError(f"{source}: saved state does not fit this agent: {reason}"
                             ) from None
        except ValueError as error:
            raise ValueError(f"{source}: {error}") from None


MAX_SAVED_VALUE = 1e15
"""The largest size of a saved float (weights, Q-values, normalisers): beyond it a network's
products overflow float32 (3e38 weights give NaN Q-values); trained ones stay far below.
Adam's second moments (``exp_avg_sq``, squared gradients) may reach its square."""


def check_tensors(source: Any, tensors: dict[str, torch.Tensor],
                  held: dict[str, torch.Tensor]) -> None:
    """ValueError naming ``source`` and the tensor when a saved tensor's values are not of
    the kind (float, integer, bool) of the agent's tensor of the same name (``held``: what
    the agent holds now: an integer or bool tensor is not loaded into a float network;
    another float width is converted) or a float's size is beyond
    :data:`MAX_SAVED_VALUE`."""
    for name, tensor in tensors.items():
        want = held.get(name)
        if want is not None and _kind(tensor) != _kind(want):
            raise ValueError(f"{source}: tensor {name!r} has dtype {tensor.dtype}; this agent "
                             f"holds {want.dtype} ({_kind(want)} values)")
        most = MAX_SAVED_VALUE ** 2 if name.endswith("exp_avg_sq") else MAX_SAVED_VALUE
        if tensor.is_floating_point() and tensor.numel() and float(tensor.abs().max()) > most:
            raise ValueError(f"{source}: tensor {name!r} holds values beyond {most:.0e} in "
                             "size; expected a trained agent's")


def _kind(tensor: torch.Tensor) -> str:
    """float, bool or integer: what a tensor's values are (their width aside)."""
    if tensor.is_floating_point():
        return "float"
    return "bool" if tensor.dtype == torch.bool else "integer"


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, (bool, np.bool_)) or (isinstance(value, (int, np.integer))
                                                and value in (0, 1)):
        return bool(value)
    raise ValueError(f"{name} is {value!r}, expected a bool")


def agent_file_bytes(header: dict[str, Any], tensors: dict[str, torch.Tensor]) -> bytes:
    """A saved agent as safetensors bytes: the tensors, the JSON header in the metadata."""
    from safetensors.torch import save  # noqa: PLC0415  (only when saving)

    own = {name: tensor.detach().cpu().contiguous().clone() for name, tensor in tensors.items()}
    return save(own, metadata={FILE_FORMAT: json.dumps(header)})


def write_agent_file(path: str | Path, header: dict[str, Any], tensors: dict[str, Any]) -> None:
    """Save ``header`` and ``tensors`` as a safetensors file, atomically."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        temporary.write_bytes(agent_file_bytes(header, tensors))
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


MAX_AGENT_FILE_BYTES = 512 * 1024 * 1024
"""The largest policy or checkpoint file read (a bigger one is refused before it is opened:
what a crafted file can make a reader hold in memory)."""

#: Tensor types a saved agent may hold (safetensors' names); others (F8 ...) are refused.
TENSOR_DTYPES = frozenset({"F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "BOOL"})
_HEADER_INT = 2**128  # header integers beyond this (in size): no counter, seed or rng state


def read_agent_file(path: str | Path, most: int | None = MAX_AGENT_FILE_BYTES
                    ) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """``(header, tensors)`` of a file an agent's ``save`` wrote (safetensors: loading runs
    no code); one ValueError naming the file (and the field or tensor) for anything else:
    missing, bigger than ``most`` bytes (None: no bound), damaged, foreign, newer, a header
    value of the wrong type (``kind``, ``obs_shape``, ``n_actions``, ``state``), NaN,
    Infinity or an integer beyond 2**128 in the header, a tensor type other than
    :data:`TENSOR_DTYPES`, non-finite values."""
    from safetensors import SafetensorError, safe_open  # noqa: PLC0415  (only when loading)

    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path} does not exist or is not a file")
    size = path.stat().st_size
    if most is not None and size > most:
        raise ValueError(f"{path}: {size:,} bytes; expected a saved agent of at most "
                         f"{most:,} bytes (a policy or checkpoint langadapt writes is smaller)")
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
            header = _header(path, metadata)
            dtypes = {name: handle.get_slice(name).get_dtype() for name in handle.keys()}  # noqa: SIM118
            odd = {name: dtype for name, dtype in dtypes.items() if dtype not in TENSOR_DTYPES}
            if odd:
                name, dtype = next(iter(odd.items()))
                raise _Refused(f"{path}: tensor {name!r} has type {dtype}; expected one of "
                               f"{', '.join(sorted(TENSOR_DTYPES))}")
            tensors = {name: handle.get_tensor(name) for name in dtypes}
    except _Refused as refused:
        raise ValueError(str(refused)) from None
    except (SafetensorError, OSError, ValueError, RuntimeError, TypeError) as error:
        reason = one_line(error)
        raise ValueError(f"{path} is not a saved agent (damaged, truncated or another "
                         f"format; langadapt saves safetensors files): {reason}") from None
    for name, tensor in tensors.items():
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise ValueError(f"{path}: tensor {name!r} contains NaN or inf values")
    return header, tensors


class _Refused(Exception):
    """A refusal inside the reader, already one line naming the file."""


def _reject_constant(name: str) -> Any:
    raise _Refused(f"holds {name}; expected finite numbers")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise _Refused(f"holds {text[:20]}, beyond a float; expected finite numbers")
    return value


def _bounded_int(text: str) -> int:
    if len(text.lstrip("-")) > 39 or abs(value := int(text)) >= _HEADER_INT:
        raise _Refused(f"holds the integer {text[:20]}{'...' if len(text) > 20 else ''}; "
                       "expected integers below 2**128")
    return value


def _header(path: Path, metadata: dict[str, str]) -> dict[str, Any]:
    """The JSON header of a saved agent's metadata, its fields checked; `_Refused` naming
    ``path`` otherwise."""
    if FILE_FORMAT not in metadata:
        raise _Refused(f"{path} is not a saved agent: its metadata has no {FILE_FORMAT!r} "
                       "JSON header")
    try:
        header = json.loads(metadata[FILE_FORMAT], parse_constant=_reject_constant,
                            parse_int=_bounded_int, parse_float=_finite_float)
    except _Refused as refused:
        raise _Refused(f"{path}: its {FILE_FORMAT!r} header {refused}") from None
    except RecursionError:
        raise _Refused(f"{path}: its {FILE_FORMAT!r} header is nested too deeply to be a "
                       "saved agent's") from None
    except (json.JSONDecodeError, TypeError, ValueError):
        raise _Refused(f"{path} is not a saved agent: its metadata has no {FILE_FORMAT!r} "
                       "JSON header") from None
    if not isinstance(header, dict) or header.get("format") != FILE_FORMAT:
        raise _Refused(f"{path} is not a saved agent: its header does not name {FILE_FORMAT!r}")
    version = header.get("version")
    if not isinstance(version, int) or version > FILE_VERSION:
        raise _Refused(
            f"{path} was saved in format version {version!r}; this langadapt reads versions "
            f"up to {FILE_VERSION} (upgrade langadapt to load it)"
        )
    if "state" not in header or "kind" not in header:
        raise _Refused(f"{path} is not a saved agent: the header has no 'kind' or 'state'")
    shape = header.get("obs_shape", [])
    checks = {"kind": isinstance(header["kind"], str),
              "state": isinstance(header["state"], dict),
              "obs_shape": isinstance(shape, list) and len(shape) <= 8 and all(
                  type(n) is int and n >= 0 for n in shape),
              "n_actions": type(header.get("n_actions", 0)) is int
              and header.get("n_actions", 0) >= 0}
    wrong = [key for key, fits in checks.items() if not fits]
    if wrong:
        key = wrong[0]
        raise _Refused(f"{path}: header field {key}={_short(header.get(key))}; expected "
                       + {"kind": "a name", "state": "a mapping",
                          "obs_shape": "a list of up to 8 whole numbers >= 0",
                          "n_actions": "a whole number >= 0"}[key])
    return header


def _short(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def take(tensors: dict[str, torch.Tensor], name: str, shape: Sequence[int]) -> torch.Tensor:
    """``tensors[name]`` checked against ``shape`` (-1 = any size); ValueError otherwise."""
    if name not in tensors:
        raise ValueError(f"missing tensor {name!r}")
    tensor = tensors[name]
    if tensor.dim() != len(shape) or any(
        want not in (-1, got) for want, got in zip(shape, tensor.shape, strict=True)
    ):
        raise ValueError(
            f"tensor {name!r} has shape {tuple(tensor.shape)}, expected {tuple(shape)}"
        )
    return tensor
