"""The ``langadapt`` command: run experiments, show descriptions, prerender, report, bench."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

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
BENCHMARKS = ("adapters", "llm", "agents", "executors", "llm_roles")


class UsageError(ValueError):
    """A command-line value that cannot be used."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="langadapt",
        description="Language state adapters for RL: compare raw, rule-language and "
        "LLM-language states with the same agents.",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    run = commands.add_parser(
        "run",
        help="train and evaluate every adapter x agent x seed of an experiment file",
        description="Train and evaluate every (adapter x agent x seed) combination of an "
        "experiment file, then write episodes.csv, summary.csv, summary.md and plots.",
    )
    run.add_argument("file", type=Path, help="experiment YAML file, e.g. configs/quickstart.yaml")
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
                     help="replace whatever the results folder holds")
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
    describe.add_argument("--backend", default="auto", choices=("auto", "llamacpp", "ollama"),
                          help="LLM backend for --adapter llm (default auto)")
    describe.add_argument("--model", default=None,
                          help="LLM model: an Ollama name, or a GGUF file for llama.cpp (with "
                          "--backend auto a GGUF file goes to llama.cpp)")
    describe.add_argument("--host", default=None, help="Ollama host (default $OLLAMA_HOST)")

    prompt = commands.add_parser(
        "prompt", help="show the LLM policy / advisor / shaper prompt and reply for one state",
        description="Print the prompt an LLM role sends for one state and the reply it gets.")
    prompt.add_argument("env", help="sailing, maze, cartpole or a gymnasium id")
    prompt.add_argument("--role", choices=("policy", "advisor", "shaper"), default="policy")
    prompt.add_argument("--maze", default=None, help="maze layout (maze only)")
    prompt.add_argument("--state", default=None, help="raw observation (default: the reset)")
    prompt.add_argument("--decoding", choices=("structured", "text"), default="structured")
    prompt.add_argument("--backend", default="llamacpp", choices=("llamacpp", "ollama"))
    prompt.add_argument("--model", default=None, help="Ollama model name or GGUF path")
    prompt.add_argument("--host", default=None, help="Ollama host")

    prerender = commands.add_parser(
        "prerender",
        help="describe and encode every reachable state of an experiment into the caches",
        description="Describe and encode every reachable state (discrete environments) for "
        "each language and llm adapter of an experiment file, filling the persistent caches.",
    )
    prerender.add_argument("file", type=Path)

    report = commands.add_parser(
        "report",
        help="rebuild summary and plots from a results folder",
        description="Rebuild summary.csv, summary.md and the plots from a results folder's "
        "episodes.csv and config.yaml.",
    )
    report.add_argument("folder", type=Path)

    finetune = commands.add_parser(
        "finetune",
        help="GRPO-train the LLM policy (LoRA) on a maze; needs langadapt[finetune]",
        description="GRPO fine-tuning of the LLM policy on environment reward, per seed, "
        "with a learning curve beside DQN (see docs/finetune.md).",
    )
    finetune.add_argument("file", type=Path, help="finetune YAML file, e.g. "
                          "configs/grpo_umaze.yaml")
    finetune.add_argument("--out", type=Path, help="results folder (default: the file's "
                          "output, else results/<name>)")
    finetune.add_argument("--seeds", type=int, nargs="+", help="train only these seeds")
    finetune.add_argument("--force", action="store_true", help="start the folder afresh")
    finetune.add_argument("--no-progress", action="store_true", help="no progress bars")

    bench = commands.add_parser(
        "bench",
        help="run the benchmarks and print the ratios they measure",
        description="Run the benchmarks (adapter speed, LLM caching and prerender, agent "
        "speed and success against Stable-Baselines3). Every figure is a ratio measured "
        "side by side in this one run.",
    )
    bench.add_argument("--only", choices=BENCHMARKS, action="append",
                       help="run only this benchmark (repeatable)")
    bench.add_argument("--quick", action="store_true", help="smaller sizes, a rough check")
    return parser


def _parse_state(text: str) -> list[float]:
    parts = text.replace(",", " ").split()
    try:
        return [float(p) for p in parts]
    except ValueError:
        raise UsageError(f"--state {text!r}: expected numbers separated by commas") from None


def command_run(args: argparse.Namespace) -> int:
    from langadapt.experiments.config import experiment_from_dict, load_config
    from langadapt.experiments.runner import run_experiment

    config = load_config(args.file)
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
    started = time.perf_counter()
    out = run_experiment(
        config,
        out_dir=args.out,
        resume=args.resume,
        force=args.force,
        progress=not args.no_progress,
    )
    print(f"done in {time.perf_counter() - started:.0f} s: {out}")
    return 0


def _make_env(name: str, maze: str | None) -> gymnasium.Env:
    """The environment a command names (an alias such as ``maze`` or a gymnasium id), with
    ``--maze`` for the maze only; a UsageError naming the value otherwise."""
    import gymnasium

    import langadapt.environments  # noqa: F401  (registers the langadapt ids)

    env_id = ENV_ALIASES.get(name.lower(), name)
    if env_id not in gymnasium.registry:
        ours = sorted(k for k in gymnasium.registry if k.startswith("langadapt/"))
        known = ", ".join([*ENV_ALIASES, *ours])
        raise UsageError(f"unknown environment {name!r}; expected one of {known}")
    if maze and env_id != ENV_ALIASES["maze"]:
        raise UsageError(f"--maze {maze!r} is for the maze; {env_id} has no layouts")
    return gymnasium.make(env_id, **({"maze": maze} if maze else {}))


def command_describe(args: argparse.Namespace) -> int:
    import numpy as np

    from langadapt import adapters

    if args.steps < 0:
        raise UsageError(f"--steps {args.steps}: expected a number of steps >= 0")
    given_llm_options = [f"--{k}" for k in ("model", "host") if getattr(args, k)]
    if args.adapter != "llm" and given_llm_options:
        raise UsageError(f"{', '.join(given_llm_options)} only apply with --adapter llm")
    env = _make_env(args.env, args.maze)
    settings = {}
    if args.adapter == "llm":
        settings = {"backend": args.backend}
        if args.model:
            settings["model"] = args.model
        if args.host:
            settings["host"] = args.host
    adapter = adapters.make(args.adapter, env, **settings)
    if args.adapter == "llm":
        backend = adapter.backend
        reason = f" ({backend.choice_reason})" if backend.choice_reason else ""
        print(f"# LLM backend: {backend.name}, model {backend.model_label()}{reason}")
    if args.state:
        space = env.observation_space
        for text in args.state:
            state = np.asarray(_parse_state(text), dtype=space.dtype)
            if state.shape != space.shape:
                raise UsageError(
                    f"--state {text!r} has {state.size} values; {env.spec.id} observations have "
                    f"shape {space.shape}"
                )
            legal = _legal_moves_of(env, state)
            print(f"state {state.tolist()}: {adapter(state, legal, (), encode=False)}")
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


def _legal_moves_of(env, state) -> list[int]:
    base = env.unwrapped
    if hasattr(base, "legal_moves_at"):
        return base.legal_moves_at((int(state[0]), int(state[1])))
    return list(range(env.action_space.n))


def command_prompt(args: argparse.Namespace) -> int:
    from langadapt.agents.llm_policy import show_prompt

    env = _make_env(args.env, args.maze)
    spec = {"backend": args.backend, **{k: getattr(args, k) for k in ("model", "host")
                                        if getattr(args, k)}}
    state = _parse_state(args.state) if args.state else None
    print(show_prompt(env, args.role, spec, state=state, decoding=args.decoding))
    return 0


def command_prerender(args: argparse.Namespace) -> int:
    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import prerender

    config = load_config(args.file)
    counters = prerender(config)
    if not counters:
        print(f"{config.environment.id}: no enumerable state set; nothing to prerender")
    for name, stats in counters.items():
        shown = ", ".join(f"{k}={v:g}" for k, v in stats.items() if v)
        print(f"{name}: {shown}")
    return 0


def command_report(args: argparse.Namespace) -> int:
    from langadapt.experiments.report import write_report

    write_report(args.folder)
    return 0


def command_finetune(args: argparse.Namespace) -> int:
    from langadapt.finetune.run import load_finetune_config, run_finetune

    started = time.perf_counter()
    try:  # a bad file, model path or LoRA module is the user's to fix, not a traceback
        out = run_finetune(load_finetune_config(args.file), out=args.out, force=args.force,
                           progress=not args.no_progress, seeds=args.seeds)
    except ValueError as error:
        raise UsageError(str(error)) from error
    print(f"done in {time.perf_counter() - started:.0f} s: {out}")
    return 0


def command_bench(args: argparse.Namespace) -> int:
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


COMMANDS = {
    "run": command_run,
    "describe": command_describe,
    "prompt": command_prompt,
    "prerender": command_prerender,
    "report": command_report,
    "bench": command_bench,
    "finetune": command_finetune,
}


def expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix, shown as one message without a traceback: bad
    configuration or options, results folders, missing or unreadable files, an LLM that
    cannot be reached, runs that failed on a cluster. Anything else is a bug: traceback."""
    from langadapt.experiments.config import ConfigError
    from langadapt.experiments.runner import ResultsFolderError, RunsFailedError
    from langadapt.llm import LLMError

    return (
        UsageError,
        ConfigError,
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
