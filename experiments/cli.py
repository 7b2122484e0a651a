"""The ``langadapt`` command: run experiments, show descriptions and prompts, prerender,
report, fine-tune, bench, doctor.

A bad command-line value is one line naming the option (exit code 2); an unexpected
exception (a bug) keeps its traceback.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import math
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import gymnasium

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ENV_ALIASES = {
    "sailing": "langadapt/Sailing-v0",
    "maze": "langadapt/Maze-v0",
    "cartpole": "langadapt/CartPole-v0",
}
BENCHMARKS = ("adapters", "encoder", "llm", "agents", "executors", "llm_roles", "minigrid")
# Run only when named (`langadapt bench finetune-trl`), never by a plain `langadapt bench`:
# name -> module experiments/benchmarks/<module>_bench.py.
OPT_IN_BENCHMARKS = {"finetune-trl": "finetune_trl"}


class UsageError(ValueError):
    """A command-line value that cannot be used."""


class _Parser(argparse.ArgumentParser):
    """argparse with its errors on one line (no usage block), exit code 2 as usual."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _version() -> str:
    from .. import __version__

    return __version__


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="langadapt",
        description="Language state adapters for RL: compare raw, rule-language and "
        "LLM-language states with the same agents.",
    )
    parser.add_argument("--version", action="version", version=f"langadapt {_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        aliases=["finetune"],  # the GRPO files are experiments too; `finetune --list` names them
        help="train and evaluate every adapter x agent x seed of an experiment file "
        "(alias: finetune)",
        description="Train and evaluate every (adapter x agent x seed) combination of an "
        "experiment file, then write episodes.csv, summary.csv, summary.md and plots.",
    )
    run.add_argument("file", nargs="?", metavar="FILE",
                     help="experiment YAML file, or the name of a packaged experiment "
                     "(e.g. quickstart; see --list)")
    run.add_argument("--list", action="store_true",
                     help="list the packaged experiments with their descriptions and exit")
    run.add_argument("--check", action="store_true",
                     help="validate the file and the options, print what would run, run nothing")
    run.add_argument("--out", type=Path, help="results folder (default: the file's output, "
                     "else results/<name>)")
    run.add_argument("--seeds", type=int, help="use seeds 0..N-1 instead of the file's seeds")
    run.add_argument("--jobs", type=int, help="runs at a time (default: the file's executor.jobs; "
                     "process pool: 1, ray: as many as the cluster fits)")
    run.add_argument("--executor", choices=("process", "ray"),
                     help="where runs execute: this machine's process pool (default) or a Ray "
                     "cluster (needs langadapt[ray])")
    run.add_argument("--address", help="ray: 'auto' (the cluster on this machine), HOST:PORT "
                     "of a head node or ray://HOST:PORT; default: start a local cluster")
    run.add_argument("--resume", action="store_true",
                     help="keep finished runs of the same experiment in --out, do the rest")
    run.add_argument("--force", action="store_true",
                     help="replace the earlier results in --out: only in a folder langadapt "
                     "wrote, only the files it wrote (docs/configuration.md)")
    run.add_argument("--no-progress", action="store_true", help="no progress bars")

    describe = commands.add_parser(
        "describe",
        help="print what an adapter says about sample or given states",
        description="Print the descriptions an adapter gives: of the states along a short "
        "random rollout, or of the states given with --state.",
    )
    describe.add_argument("env", help="sailing, maze, cartpole or a gymnasium id")
    describe.add_argument("--adapter", choices=("language", "llm"), default="language")
    describe.add_argument("--maze", default=None,
                          help="maze layout (umaze, double_t_maze, medium, large, random)")
    describe.add_argument("--state", action="append", default=[], metavar="VALUES",
                          help="a raw observation, numbers separated by commas or spaces "
                          "(maze: 'row,col'; sailing: 'x,theta'); repeatable")
    describe.add_argument("--steps", type=int, default=5,
                          help="rollout length when no --state is given (default 5)")
    describe.add_argument("--seed", type=int, default=0)
    describe.add_argument("--backend", default="auto",
                          choices=("auto", "llamacpp", "ollama", "openai"),
                          help="LLM backend for --adapter llm (default auto)")
    describe.add_argument("--model", default=None,
                          help="LLM model: an Ollama name, a GGUF file for llama.cpp (with "
                          "--backend auto a GGUF file goes to llama.cpp), or the name an "
                          "OpenAI-compatible server knows")
    describe.add_argument("--host", default=None, help="Ollama host (default $OLLAMA_HOST)")
    describe.add_argument("--base-url", default=None, help="--backend openai: the server's "
                          "API root, e.g. http://127.0.0.1:8000/v1")
    _add_import_option(describe)

    prompt = commands.add_parser(
        "prompt", help="show the LLM policy / advisor / shaper prompt and reply for one state",
        description="Print the prompt an LLM role sends for one state and the reply it gets.")
    prompt.add_argument("env", help="sailing, maze, cartpole or a gymnasium id")
    prompt.add_argument("--role", choices=("policy", "advisor", "shaper"), default="policy")
    prompt.add_argument("--maze", default=None, help="maze layout (maze only)")
    prompt.add_argument("--state", default=None, help="raw observation (default: the reset)")
    prompt.add_argument("--decoding", choices=("structured", "text"), default="structured")
    prompt.add_argument("--backend", default="llamacpp", choices=("llamacpp", "ollama", "openai"))
    prompt.add_argument("--model", default=None, help="Ollama model name, GGUF path, or the "
                        "model name of an OpenAI-compatible server")
    prompt.add_argument("--host", default=None, help="Ollama host")
    prompt.add_argument("--base-url", default=None, help="--backend openai: the server's API "
                        "root, e.g. http://127.0.0.1:8000/v1")
    _add_import_option(prompt)

    prerender = commands.add_parser(
        "prerender",
        help="describe and encode every reachable state of an experiment into the caches",
        description="Describe and encode every reachable state (discrete environments) for "
        "each language and llm adapter of an experiment file, filling the persistent caches.",
    )
    prerender.add_argument("file", metavar="FILE",
                           help="experiment YAML file or the name of a packaged experiment")
    prerender.add_argument("--no-progress", action="store_true", help="no progress bars")

    report = commands.add_parser(
        "report",
        help="rebuild summary and plots from a results folder, or compare several",
        description="Rebuild summary.csv, summary.md and the plots from a results folder's "
        "episodes.csv and config.yaml. With several folders: one summary and one set of "
        "curves of them all (adapters named FOLDER/ADAPTER) in --out, the folders only read.",
    )
    report.add_argument("folder", type=Path, nargs="+")
    report.add_argument("--out", type=Path, help="with several folders: where the comparison "
                        "goes (default: comparison)")

    _add_finetune_export(commands)

    commands.add_parser(
        "doctor",
        help="check that the embedded LLM (llama.cpp) runs on this CPU",
        description="Print the embedded model's file and the llama.cpp build's CPU features, "
        "then evaluate a short prompt in a child process. A build that crashes on this CPU "
        "(e.g. tuned for AVX-512/AMX the processor does not run) is one line naming the "
        "pip command that rebuilds it portably, exit code 2.",
    )

    bench = commands.add_parser(
        "bench",
        help="run the benchmarks and print the ratios they measure",
        description="Run the benchmarks (adapter speed, the encoder backends, LLM caching "
        "and prerender, agent speed and success against Stable-Baselines3). Every figure is "
        "a ratio measured side by side in this one run. Opt-in, only when named: "
        "finetune-trl (langadapt's GRPO loop vs TRL's GRPOTrainer on a maze; needs "
        "pip install 'langadapt[trl]').",
    )
    bench.add_argument("name", nargs="?", choices=tuple(OPT_IN_BENCHMARKS),
                       help="run this opt-in benchmark instead of the default ones")
    bench.add_argument("--only", choices=BENCHMARKS, action="append",
                       help="run only this benchmark (repeatable)")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, a rough check")
    trl = bench.add_argument_group("finetune-trl options")
    trl.add_argument("--steps", type=int, help="GRPO steps per side (default 5; 1 with --quick)")
    trl.add_argument("--maze", help="named maze (default umaze)")
    trl.add_argument("--model", help="Hugging Face model directory or .gguf file (default: "
                     "the embedded SmolLM2)")
    trl.add_argument("--cpu-seconds", type=float, help="train each side for this many CPU "
                     "seconds instead of a number of steps")
    trl.add_argument("--out", type=Path, help="also write the rows to this .csv or .json file")
    return parser


def _add_import_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--import", dest="imports", action="append", default=[],
                         metavar="MODULE", help="import this module first (it registers your "
                         "environment and its language spec); repeatable. An id written "
                         "as MODULE:EnvId imports MODULE by itself")


# ----------------------------------------------------------------- packaged experiment files


def _packaged_configs() -> dict[str, dict[str, Any]]:
    """``{name: {"grpo", "description", "resource"}}`` of the experiment files shipped in
    ``langadapt/configs`` (``grpo``: it has an agent of type grpo)."""
    from importlib.resources import files

    import yaml

    folder = files("langadapt") / "configs"
    if not folder.is_dir():
        return {}
    found = {}
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not (entry.name.endswith(".yaml") and entry.is_file()):
            continue
        try:
            data = yaml.safe_load(entry.read_text(encoding="utf-8"))
        except (yaml.YAMLError, UnicodeDecodeError):
            data = None
        data = data if isinstance(data, dict) else {}
        agents = data.get("agents") if isinstance(data.get("agents"), list) else []
        grpo = any(isinstance(a, dict) and a.get("type") == "grpo" for a in agents)
        description = " ".join(str(data.get("description") or "").split())
        found[entry.name[: -len(".yaml")]] = {
            "grpo": grpo, "description": description, "resource": entry}
    return found


_RESOURCES = contextlib.ExitStack()  # packaged files extracted to disk (only from a zip)
atexit.register(_RESOURCES.close)


def _config_file(text: str | None) -> Path:
    """The file ``langadapt run TEXT`` means: an existing path as it is, else the packaged
    file of a bare name (``quickstart`` or ``quickstart.yaml``); a UsageError naming the
    packaged ones otherwise."""
    from importlib.resources import as_file

    packaged = _packaged_configs()
    names = ", ".join(packaged) or "none"
    if text is None:
        raise UsageError(f"FILE is required: an experiment file or one of the packaged "
                         f"experiments {names} (see --list)")
    path = Path(text).expanduser()
    if path.exists():
        return path
    bare = "/" not in text and os.sep not in text
    name = text[: -len(".yaml")] if text.endswith(".yaml") else text
    entry = packaged.get(name) if bare else None
    if entry is not None:
        return _RESOURCES.enter_context(as_file(entry["resource"]))
    if bare:
        raise UsageError(f"{text!r}: no such file and no packaged experiment of that name; "
                         f"packaged experiments: {names}")
    stem = Path(text).stem
    hint = f" (the packaged one is `langadapt run {stem}`)" if stem in packaged else ""
    raise UsageError(f"{text}: no such experiment file{hint}")


def _print_packaged(grpo_only: bool) -> int:
    packaged = {n: e for n, e in _packaged_configs().items() if e["grpo"] or not grpo_only}
    kind = "GRPO fine-tuning experiments" if grpo_only else "experiments"
    if not packaged:
        print(f"no packaged {kind} in this installation")
        return 0
    print(f"packaged {kind} (langadapt run NAME):")
    width = max(len(n) for n in packaged)
    for name, entry in packaged.items():
        print(f"  {name:<{width}}  {entry['description']}".rstrip())
    return 0


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
        return observation, list(range(env.action_space.n))
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
    base = env.unwrapped
    if hasattr(base, "legal_moves_at"):
        try:
            legal = base.legal_moves_at(tuple(float(v) for v in state))
        except ValueError as error:
            raise UsageError(f"--state {text!r}: {error}") from None
    else:
        legal = list(range(env.action_space.n))
    return state, legal


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


def _llm_spec(backend: str, model: str | None, host: str | None,
              base_url: str | None = None) -> dict[str, Any]:
    """The backend spec of ``--backend/--model/--host/--base-url``, checked without
    contacting any server or loading any model; a UsageError naming the option otherwise."""
    from pydantic import ValidationError

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
        item = error.errors()[0]
        field = str(item["loc"][0]) if item["loc"] else "backend"
        option = field if field in ("model", "host", "base_url") else "backend"
        message = item["msg"].removeprefix("Value error, ")
        shown = spec.get(option)
        raise UsageError(f"--{option.replace('_', '-')} {shown!r}: {message}") from None
    return spec


def _quiet_model_loading() -> None:
    """No Hugging Face download or weight-loading bars in this process (before any model
    loads): transformers' switch, which turns huggingface_hub's bars off too."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # no transformers: only huggingface_hub could show a bar
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        return
    transformers_logging.disable_progress_bar()


# ----------------------------------------------------------------- commands


def command_run(args: argparse.Namespace) -> int:
    if args.list:
        return _print_packaged(grpo_only=args.command == "finetune")
    from .config import experiment_from_dict, load_config
    from .runner import run_experiment

    path = _config_file(args.file)
    config = load_config(path)
    data = config.model_dump(mode="json")
    if args.seeds is not None:
        data["seeds"] = args.seeds
    executor = data["executor"]
    if args.executor is not None:
        executor["type"] = args.executor
    if args.address is not None:
        executor["address"] = args.address
    if args.jobs is not None:
        executor["jobs"] = args.jobs
    config = experiment_from_dict(data, f"{args.file} with the command-line options")
    if args.check:
        _build_environments(config)
        tasks = len(config.tasks or [None])
        runs = len(config.adapters) * len(config.agents) * len(config.seed_list) * tasks
        print(f"{path}: experiment {config.name!r}, {runs} runs ({len(config.adapters)} "
              f"adapters x {len(config.agents)} agents x {len(config.seed_list)} seeds"
              f"{f' x {tasks} tasks' if config.tasks else ''}), "
              f"executor {config.executor.type}, results in {args.out or config.output_dir}")
        return 0
    if args.no_progress:
        _quiet_model_loading()
    started = time.perf_counter()
    from .suite import run_suite  # a suite: one experiment per task, then its report

    out = (run_suite if config.tasks else run_experiment)(
        config,
        out_dir=args.out,
        resume=args.resume,
        force=args.force,
        progress=not args.no_progress,
    )
    print(f"done in {time.perf_counter() - started:.0f} s: {out}")
    return 0


def _import_modules(names: list[str]) -> None:
    from .env_ids import import_user_modules

    try:
        import_user_modules(names, where="--import")
    except ValueError as error:
        raise UsageError(str(error)) from None


def _build_environments(config: Any) -> None:
    """Build the environment of the experiment (of every task of a suite) once, so that
    ``--check`` fails on bad environment params as ``run`` would."""
    from .config import ConfigError
    from .one_run import make_env
    from .suite import task_configs

    experiments = task_configs(config) if config.tasks else {None: config}
    for task, experiment in experiments.items():
        try:
            make_env(experiment).close()
        except ConfigError as error:
            raise ConfigError(f"{config.name}, task {task}: {error}" if task else error) \
                from None


def _make_env(name: str, maze: str | None) -> gymnasium.Env:
    """The environment a command names (an alias such as ``maze`` or a gymnasium id), with
    ``--maze`` for the maze only; a UsageError naming the value otherwise."""
    import gymnasium

    from .env_ids import resolve_env_id

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
    _import_modules(args.imports)
    env = _make_env(args.env, args.maze)
    states = [_state_of(env, text) for text in args.state]
    settings = {}
    if args.adapter == "llm":
        settings = _llm_spec(args.backend, args.model, args.host, args.base_url)
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
            shown = state.tolist() if hasattr(state, "tolist") else state
            print(f"state {shown}: {adapter(state, legal, (), encode=False)}")
        return 0
    observation, info = env.reset(seed=args.seed)
    rng = np.random.default_rng(args.seed)
    history: list[tuple[np.ndarray, int]] = []
    for step in range(args.steps + 1):
        legal = info.get("legal_moves", list(range(env.action_space.n)))
        text = adapter(observation, legal, tuple(history), encode=False)
        shown = [round(float(value), 3) for value in np.ravel(observation)]
        print(f"step {step} state {shown}: {text}")
        if step == args.steps:
            break
        action = int(rng.choice(legal))
        history.append((observation, action))
        observation, _, terminated, truncated, info = env.step(action)
        if terminated or truncated:
            break
    return 0


def command_prompt(args: argparse.Namespace) -> int:
    from ..roles.llm_policy import show_prompt

    _import_modules(args.imports)
    env = _make_env(args.env, args.maze)
    state = _state_of(env, args.state)[0] if args.state is not None else None
    spec = _llm_spec(args.backend, args.model, args.host, args.base_url)
    print(show_prompt(env, args.role, spec, state=state, decoding=args.decoding))
    return 0


def command_prerender(args: argparse.Namespace) -> int:
    from .config import load_config
    from .runner import prerender

    config = load_config(_config_file(args.file))
    if args.no_progress:
        _quiet_model_loading()
    counters = prerender(config, progress=not args.no_progress)
    if not counters:
        print(f"{config.environment.id}: no enumerable state set; nothing to prerender")
    for name, stats in counters.items():
        shown = ", ".join(f"{k}={v:g}" for k, v in stats.items() if v)
        print(f"{name}: {shown}")
    return 0


def command_report(args: argparse.Namespace) -> int:
    from .report import write_report
    from .suite import SUITE_FILE, write_suite_report

    if len(args.folder) > 1:
        from .compare import compare_folders

        out = args.out or Path("comparison")
        print(compare_folders(args.folder, out))
        print(f"written: {out}/summary.csv, summary.md, learning_curves.png, final_returns.png")
        return 0
    if args.out is not None:
        raise UsageError(f"--out {args.out} is for comparing several folders; one folder's "
                         "report is rebuilt in the folder")
    folder = args.folder[0]
    if (folder / SUITE_FILE).is_file():
        write_suite_report(folder)
    else:
        write_report(folder)
    return 0


# ----------------------------------------------------------------- finetune-export
def _add_finetune_export(commands: Any) -> None:
    export = commands.add_parser(
        "finetune-export",
        help="merge a trained LoRA adapter into its GGUF base: one .gguf llama.cpp runs",
        description="Merge a LoRA adapter trained by a grpo agent into its base model "
        "and write the result as one GGUF file (metadata, tokenizer and chat template of the "
        "base), for backend: llamacpp (see docs/finetune.md).",
    )
    export.add_argument("adapter", metavar="ADAPTER",
                        help="adapter folder (e.g. results/grpo_umaze/runs/raw__grpo__seed0/"
                        "grpo/adapter)")
    export.add_argument("--out", type=Path, required=True, metavar="FILE.gguf",
                        help="the .gguf file to write")
    export.add_argument("--model", default=None, help="the GGUF base the adapter was trained "
                        "on (default: the embedded SmolLM2)")
    export.add_argument("--dtype", choices=("f16", "f32"), default="f16",
                        help="type of the weight matrices (default f16; f32: exact weights, "
                        "twice the size)")
    export.add_argument("--force", action="store_true",
                        help="replace FILE.gguf if it exists (default: refuse)")


def command_finetune_export(args: argparse.Namespace) -> int:
    # imported here: the optional finetune extra, and a fast start for other commands
    from ..finetune.export import export_gguf

    started = time.perf_counter()
    try:  # a bad adapter, output path or base model is the user's to fix, not a traceback
        out = export_gguf(args.adapter, args.out, model=args.model, dtype=args.dtype,
                          force=args.force)
    except ValueError as error:
        raise UsageError(str(error)) from error
    size = out.stat().st_size / 1e6
    print(f"wrote {out} ({size:.0f} MB, {args.dtype}) in {time.perf_counter() - started:.0f} s")
    return 0


def _opt_in_bench(args: argparse.Namespace) -> int:
    if args.only:
        raise UsageError(f"--only names default benchmarks; {args.name} runs on its own")
    if args.steps is not None and args.steps < 1:
        raise UsageError(f"--steps {args.steps}: expected an int >= 1")
    if args.cpu_seconds is not None and not (math.isfinite(args.cpu_seconds)
                                             and args.cpu_seconds > 0):
        raise UsageError(f"--cpu-seconds {args.cpu_seconds}: expected a number of seconds > 0")
    print(f"\n=== benchmark: {args.name} ===", flush=True)
    try:
        module = importlib.import_module(
            f"langadapt.experiments.benchmarks.{OPT_IN_BENCHMARKS[args.name]}_bench")
    except ImportError as error:  # the optional extra it needs is not installed
        if "langadapt[" in str(error):
            raise UsageError(str(error)) from None
        raise
    try:
        module.run(quick=args.quick, steps=args.steps, maze=args.maze or "umaze",
                   model=args.model, cpu_budget=args.cpu_seconds, out=args.out)
    except ValueError as error:  # a bad maze name or model path
        raise UsageError(str(error)) from error
    except ImportError as error:  # the optional extra it needs is not installed
        if "langadapt[" in str(error):
            raise UsageError(str(error)) from None
        raise
    return 0


def command_bench(args: argparse.Namespace) -> int:
    if args.name is not None:
        return _opt_in_bench(args)
    given = [f"--{k.replace('_', '-')}" for k in ("steps", "maze", "model", "cpu_seconds", "out")
             if getattr(args, k) is not None]
    if given:
        raise UsageError(f"{', '.join(given)} apply only to an opt-in benchmark "
                         f"({', '.join(OPT_IN_BENCHMARKS)})")
    chosen = args.only or list(BENCHMARKS)
    figures: dict[str, dict] = {}
    for name in chosen:
        print(f"\n=== benchmark: {name} ===", flush=True)
        module = importlib.import_module(f"langadapt.experiments.benchmarks.{name}_bench")
        figures[name] = module.run(quick=args.quick)
    print("\n=== all figures ===")
    for name, values in figures.items():
        for key, value in values.items():
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            print(f"{name}.{key}: {shown}")
    return 0


def command_doctor(args: argparse.Namespace) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from ..llm import native_check
    from ..llm.gguf_check import default_gguf_path

    try:
        print(f"llama-cpp-python {version('llama-cpp-python')}")
    except PackageNotFoundError:
        raise UsageError("llama-cpp-python is not installed (pip install llama-cpp-python); "
                         "the embedded LLM needs it") from None
    model = default_gguf_path()
    print(f"embedded model: {model}")
    print(f"llama.cpp build: {native_check.system_info()}")
    started = time.perf_counter()
    native_check.check_llama_cpp_runs(model, native_check.probe_command(model))
    print(f"ok: llama.cpp evaluated a prompt in a child process "
          f"({time.perf_counter() - started:.1f} s)")
    return 0


COMMANDS = {
    "run": command_run,
    "doctor": command_doctor,
    "describe": command_describe,
    "prompt": command_prompt,
    "prerender": command_prerender,
    "report": command_report,
    "bench": command_bench,
    "finetune": command_run,
    "finetune-export": command_finetune_export,
}


def expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix, shown as one message without a traceback: bad
    configuration or options, results folders, missing or unreadable files, an LLM that
    cannot be reached, runs that failed on a cluster. Anything else is a bug: traceback."""
    from ..finetune.agent import FinetuneError
    from ..llm import LLMError
    from .config import ConfigError
    from .results import ResultsFolderError
    from .runner import RunsFailedError

    return (
        UsageError,
        ConfigError,
        FinetuneError,
        ResultsFolderError,
        RunsFailedError,
        LLMError,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return COMMANDS[args.command](args)
    except expected_errors() as error:
        print(f"langadapt {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished work is kept (use --resume to continue)", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
