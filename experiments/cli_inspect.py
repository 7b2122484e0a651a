"""``langadapt describe`` and ``prompt``: what an adapter says about a state, and what an LLM
role asks and answers."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from ..environments.user_code import resolve_env_id
from .cli_run import add_import_option, import_modules
from .schema import UsageError

if TYPE_CHECKING:
    import argparse

    import gymnasium

ENV_ALIASES = {
    "sailing": "langadapt/Sailing-v0",
    "maze": "langadapt/Maze-v0",
    "cartpole": "langadapt/CartPole-v0",
}


def add_parsers(commands: Any) -> None:
    describe = commands.add_parser(
        "describe",
        help="print what an adapter says about sample or given states",
        description="Print the descriptions an adapter gives: of the states along a short "
        "random rollout, or of the states given with --state.",
    )
    _env_options(describe, "a raw observation, numbers separated by commas or spaces (maze: "
                 "'row,col'; sailing: 'x,theta'; a Dict or Tuple observation in JSON: "
                 "'{\"cell\": 1}'); repeatable", many=True)
    describe.add_argument("--adapter", choices=("language", "llm"), default="language")
    describe.add_argument("--steps", type=int, default=5,
                          help="rollout length when no --state is given (default 5)")
    describe.add_argument("--seed", type=int, default=0)
    _llm_options(describe, "auto", "LLM backend for --adapter llm (default auto)")

    prompt = commands.add_parser(
        "prompt", help="show the LLM policy / advisor / shaper prompt and reply for one state",
        description="Print the prompt an LLM role sends for one state and the reply it gets.")
    _env_options(prompt, "raw observation (default: the reset; a Dict or Tuple one in JSON)")
    prompt.add_argument("--role", choices=("policy", "advisor", "shaper"), default="policy")
    prompt.add_argument("--decoding", choices=("structured", "text"), default="structured")
    _llm_options(prompt, "llamacpp", "LLM backend (default llamacpp)")


def _env_options(command: Any, state_help: str, many: bool = False) -> None:
    """The environment, ``--maze``, ``--state`` and ``--import`` of describe and prompt."""
    command.add_argument("env", help="sailing, maze, cartpole or a gymnasium id")
    command.add_argument("--maze", default=None,
                         help="maze layout (umaze, double_t_maze, medium, large, random)")
    command.add_argument("--state", action="append" if many else "store",
                         default=[] if many else None, metavar="VALUES", help=state_help)
    add_import_option(command)


def _llm_options(command: Any, default: str, backend_help: str) -> None:
    """``--backend``, ``--model``, ``--host`` and ``--base-url`` (checked by :func:`llm_spec`)."""
    choices = ("llamacpp", "ollama", "openai")
    command.add_argument("--backend", default=default, help=backend_help,
                         choices=("auto", *choices) if default == "auto" else choices)
    command.add_argument("--model", default=None,
                         help="LLM model: an Ollama name, a GGUF file for llama.cpp, or the "
                         "name an OpenAI-compatible server knows")
    command.add_argument("--host", default=None, help="Ollama host (default $OLLAMA_HOST)")
    command.add_argument("--base-url", default=None, help="--backend openai: the server's "
                         "API root, e.g. http://127.0.0.1:8000/v1")


# ----------------------------------------------------------------- option checks


def _parse_state(text: str) -> list[float]:
    parts = text.replace(",", " ").split()
    try:
        values = [float(p) for p in parts]
    except ValueError:
        raise UsageError(f"--state {text!r}: expected numbers separated by commas") from None
    if not values:
        raise UsageError(f"--state {text!r}: expected numbers separated by commas")
    if not all(math.isfinite(v) for v in values):
        raise UsageError(f"--state {text!r}: expected finite numbers")
    return values


def _state_of(env: gymnasium.Env, text: str) -> tuple[Any, list[int]]:
    """``--state TEXT`` as an observation of ``env`` and its legal moves; a UsageError
    naming the value if it is not a state of ``env``."""
    import numpy as np
    from gymnasium import spaces

    space = env.observation_space
    if isinstance(space, (spaces.Discrete, spaces.MultiDiscrete, spaces.MultiBinary)):
        values = _parse_state(text)
        whole = len(values) == int(np.prod(space.shape)) and all(v == int(v) for v in values)
        state = np.asarray(values, dtype=space.dtype).reshape(space.shape) if whole else None
        observation = None if state is None else (state if space.shape else state.item())
        if observation is None or not space.contains(observation):
            raise UsageError(f"--state {text!r} is not an observation of {env.spec.id}'s "
                             f"observation space {space}")
        return observation, _legal_at(env, observation, text)
    if isinstance(space, (spaces.Dict, spaces.Tuple)):
        observation = _structured_state(env, text)
        return observation, _legal_at(env, observation, text)
    if not isinstance(space, spaces.Box):
        raise UsageError(f"--state gives numbers; {env.spec.id}'s observation space is "
                         f"{space} (describe a rollout instead: leave out --state)")
    state = np.asarray(_parse_state(text), dtype=space.dtype)
    if state.shape != space.shape:
        raise UsageError(
            f"--state {text!r} has {state.size} values; {env.spec.id} observations have "
            f"shape {space.shape}"
        )
    if not space.contains(state):
        low, high = np.ravel(space.low).tolist(), np.ravel(space.high).tolist()
        raise UsageError(f"--state {text!r} is outside {env.spec.id}'s observation space "
                         f"(low {low}, high {high})")
    return state, _legal_at(env, tuple(float(v) for v in state), text)


def _legal_at(env: gymnasium.Env, state: Any, text: str) -> list[int]:
    """The legal moves of ``state``: the environment's ``legal_moves_at(state)`` when it has
    one (the maze's takes the cell), else every action; a UsageError if it refuses it."""
    base = env.unwrapped
    if not hasattr(base, "legal_moves_at"):
        return list(range(env.action_space.n))
    try:
        return [int(move) for move in base.legal_moves_at(state)]
    except ValueError as error:
        raise UsageError(f"--state {text!r}: {error}") from None


def _structured_state(env: gymnasium.Env, text: str) -> Any:
    """``--state`` in JSON (``{"cell": 1, "goal": 0}``, ``[3, 1]``) as an observation of a
    Dict or Tuple space, in the space's own types (gymnasium's flatten, then unflatten)."""
    import json

    from gymnasium import spaces

    space = env.observation_space
    kind = "an object of its keys" if isinstance(space, spaces.Dict) else "a list of its parts"
    try:
        value = json.loads(text)
        if isinstance(space, spaces.Tuple) and isinstance(value, list):
            value = tuple(value)
        state = spaces.unflatten(space, spaces.flatten(space, value))
    except (ValueError, TypeError, KeyError, IndexError, AssertionError, RecursionError):
        state = None  # (RecursionError: JSON nested past Python's depth)
    if state is None or not space.contains(state) or (
            isinstance(space, spaces.Dict) and set(value) != set(space.spaces)):
        shown = text if len(text) <= 80 else f"{text[:77]}..."
        raise UsageError(f"--state {shown!r} is not an observation of {env.spec.id}'s "
                         f"observation space {space}; expected JSON, {kind}")
    return state


def _check_host(host: str) -> str:
    from urllib.parse import urlsplit

    text = host.strip()
    url = text if "://" in text else f"http://{text}"
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a port out of range)
    except ValueError as error:
        raise UsageError(f"--host {host!r}: {error}") from None
    if not text or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--host {host!r}: expected a server URL such as "
                         "http://127.0.0.1:11434")
    return host


def llm_spec(backend: str, model: str | None, host: str | None,
              base_url: str | None = None) -> dict[str, Any]:
    """The backend spec of ``--backend/--model/--host/--base-url``, checked without
    contacting any server or loading any model; a UsageError naming the option otherwise."""
    from pydantic import ValidationError

    from ..errors import one_line
    from ..llm import backend_fields

    spec: dict[str, Any] = {"backend": backend}
    if (base_url is not None) != (backend == "openai"):
        raise UsageError("--backend openai needs --base-url (the server's API root, e.g. "
                         "http://127.0.0.1:8000/v1) and --model" if base_url is None else
                         f"--base-url {base_url!r} is for --backend openai")
    if base_url is not None:
        if model is None:
            raise UsageError("--backend openai needs --model: the model name the server knows")
        spec["base_url"] = base_url
    if model is not None:
        if not model.strip():
            raise UsageError(f"--model {model!r}: expected an Ollama model name or the path "
                             "of a .gguf file")
        spec["model"] = model
    if host is not None:
        if backend == "llamacpp":
            raise UsageError(f"--host {host!r} is for an Ollama server; --backend llamacpp "
                             "runs the model in this process")
        spec["host"] = _check_host(host)
    try:
        for cls, fields in backend_fields(spec):
            cls(**fields)
    except ValidationError as error:
        raise UsageError(f"--backend {backend!r}: {one_line(error)}") from None
    return spec


def _make_env(name: str, maze: str | None) -> gymnasium.Env:
    """The environment a command names (an alias such as ``maze`` or a gymnasium id), with
    ``--maze`` for the maze only; a UsageError naming the value otherwise."""
    import gymnasium

    try:
        env_id = resolve_env_id(ENV_ALIASES.get(name.lower(), name))
    except ValueError as error:
        aliases = f" (or an alias: {', '.join(ENV_ALIASES)})" \
            if str(error).startswith("unknown environment") else ""
        raise UsageError(f"{error}{aliases}") from None
    if maze is None:
        return gymnasium.make(env_id)
    if env_id != ENV_ALIASES["maze"]:
        raise UsageError(f"--maze {maze!r} is for the maze; {env_id} has no layouts")
    from ..environments.maze import MAZE_NAMES

    if maze not in MAZE_NAMES:
        raise UsageError(f"--maze {maze!r}: unknown layout; expected one of "
                         f"{', '.join(MAZE_NAMES)}")
    return gymnasium.make(env_id, maze=maze)


# ----------------------------------------------------------------- commands


def command_describe(args: argparse.Namespace) -> int:
    import numpy as np

    from .. import adapters

    if args.steps < 0:
        raise UsageError(f"--steps {args.steps}: expected a number of steps >= 0")
    if args.seed < 0:
        raise UsageError(f"--seed {args.seed}: expected a seed >= 0")
    given_llm_options = [f"--{k.replace('_', '-')}" for k in ("model", "host", "base_url")
                         if getattr(args, k) is not None]
    if args.adapter != "llm" and given_llm_options:
        raise UsageError(f"{', '.join(given_llm_options)} only apply with --adapter llm")
    import_modules(args.imports)
    env = _make_env(args.env, args.maze)
    states = [_state_of(env, text) for text in args.state]
    settings = {}
    if args.adapter == "llm":
        settings = llm_spec(args.backend, args.model, args.host, args.base_url)
    try:
        adapter = adapters.make(args.adapter, env, **settings)
    except ValueError as error:  # no language spec, an observation space no adapter takes
        raise UsageError(str(error)) from None
    if args.adapter == "llm":
        backend = adapter.backend
        reason = f" ({backend.choice_reason})" if backend.choice_reason else ""
        print(f"# LLM backend: {backend.name}, model {backend.model_label()}{reason}")
    if states:
        for state, legal in states:
            shown = _shown(state) if isinstance(state, (dict, tuple)) else (
                state.tolist() if hasattr(state, "tolist") else state)
            print(f"state {shown}: {adapter(state, legal, (), encode=False)}")
        return 0
    observation, info = env.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    history: list[tuple[np.ndarray, int]] = []
    for step in range(args.steps + 1):
        legal = info.get("legal_moves", list(range(env.action_space.n)))
        text = adapter(observation, legal, tuple(history), encode=False)
        print(f"step {step} state {_shown(observation)}: {text}")
        if step == args.steps:
            break
        action = int(rng.choice(legal))
        history.append((observation, action))
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return 0


def _shown(observation: Any, part: bool = False) -> Any:
    """An observation as printed: a list of numbers rounded to 3 places; a Dict or Tuple
    observation's parts each so (a single number as itself)."""
    import numpy as np

    if isinstance(observation, dict):
        return {key: _shown(value, True) for key, value in observation.items()}
    if isinstance(observation, tuple):
        return tuple(_shown(value, True) for value in observation)
    if part and np.ndim(observation) == 0:
        value = np.asarray(observation).item()
        return round(value, 3) if isinstance(value, float) else value
    return [round(float(value), 3) for value in np.ravel(observation)]


def command_prompt(args: argparse.Namespace) -> int:
    from ..roles.llm_policy import show_prompt

    import_modules(args.imports)
    env = _make_env(args.env, args.maze)
    state, legal = _state_of(env, args.state) if args.state is not None else (None, None)
    spec = llm_spec(args.backend, args.model, args.host, args.base_url)
    if state is not None and not hasattr(env.unwrapped, "legal_moves_at"):
        print(f"# legal moves of the given state: every action ({env.spec.id} has no "
              "legal_moves_at(state) to say which are legal there)")
    print(show_prompt(env, args.role, spec, state=state, decoding=args.decoding,
                      legal_moves=legal))
    return 0


COMMANDS = {"describe": command_describe, "prompt": command_prompt}
