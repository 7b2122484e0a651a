"""The ``langadapt`` command: :mod:`.cli_run` (run, finetune, init, prerender, report),
:mod:`.cli_inspect` (describe, prompt), and here bench, doctor and finetune-export, each group
with its ``add_parsers(commands)`` and ``COMMANDS``. A bad value or an error in the user's
own code is one line (exit 2 or 1); a bug keeps its traceback. See docs/configuration.md.
"""

from __future__ import annotations

import argparse
import difflib
import importlib
import importlib.util
import math
import os
import re
import sys
import sysconfig
import time
import traceback
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import cli_inspect, cli_policies, cli_run
from .cli_run import path_argument
from .schema import MAX_TRAINING_STEPS, ConfigError, UsageError

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


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
    cli_run.add_parsers(commands)
    cli_inspect.add_parsers(commands)
    cli_policies.add_parsers(commands)
    _add_tool_parsers(commands)
    for command in {id(c): c for c in commands.choices.values()}.values():  # aliases: once
        command.add_argument("--traceback", action="store_true",
                             help="show the whole traceback of an error raised in your own "
                             "code (default: one line naming your file and line)")
    parser.set_defaults(commands=commands.choices)
    return parser


def _resume_command(argv: Sequence[str], out: Path) -> str:
    """``argv`` as a ``langadapt`` command that resumes into ``out``: ``--out`` named,
    ``--resume`` added, ``--force`` dropped (it would start again)."""
    import shlex

    words = [word for word in argv if word != "--force"]
    if not any(word == "--out" or word.startswith("--out=") for word in words):
        words += ["--out", str(out)]
    if "--resume" not in words:
        words.append("--resume")
    return shlex.join(["langadapt", *words])


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    """The arguments; an unknown option is one line naming it and the nearest known ones."""
    args, unknown = _parser().parse_known_args(argv)
    if unknown:
        command = args.commands[args.command]
        known = [o for o in command._option_string_actions if o.startswith("--")]
        near = list(dict.fromkeys(  # best first
            m for word in unknown if word.startswith("--")
            for m in difflib.get_close_matches(word.split("=")[0], known, 3, 0.6)))
        hint = f"; did you mean {' or '.join(near)}?" if near else ""
        command.error(f"unrecognized arguments: {' '.join(unknown)}{hint}")
    return args


def expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix, shown as one message without a traceback: bad
    configuration or options, results folders, missing or unreadable files, an LLM that
    cannot be reached, runs that failed on a cluster. Anything else is a bug: traceback."""
    from ..adapters.representation import SentenceSetOverflow
    from ..environments import LanguageSpecError
    from ..finetune.agent import FinetuneError
    from ..llm import CacheError, LLMError
    from .folders import ResultsFolderError
    from .runner import RunsFailedError

    return (
        UsageError,
        ConfigError,
        FinetuneError,
        ResultsFolderError,
        RunsFailedError,
        LLMError,
        CacheError,
        LanguageSpecError,
        SentenceSetOverflow,
        FileNotFoundError,
        IsADirectoryError,
        NotADirectoryError,
        PermissionError,
    )


def _check_encoder_backend() -> None:
    """A bad ``LANGADAPT_ENCODER_BACKEND`` as one line before any work, not mid-run."""
    from ..adapters.encoder import chosen_backend

    try:
        chosen_backend(None)
    except (ValueError, ImportError) as error:
        raise UsageError(str(error)) from None


def main(argv: Sequence[str] | None = None) -> int:
    args = _parse(argv)
    try:
        _check_encoder_backend()
        return COMMANDS[args.command](args)
    except expected_errors() as error:
        print(f"langadapt {args.command}: error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as stop:
        out = getattr(stop, "langadapt_out", None)
        how = ("use --resume to continue" if out is None else
               f"continue with: {_resume_command(sys.argv[1:] if argv is None else argv, out)}")
        print(f"interrupted{f' ({stop})' if str(stop) else ''}; finished work is kept ({how})",
              file=sys.stderr)
        return 128 + getattr(stop, "signal", 2)  # 130 (SIGINT), 143 (SIGTERM), 129 (SIGHUP)
    except Exception as error:
        line = None if args.traceback else user_code_error(error)
        if line is None:
            raise
        print(f"langadapt {args.command}: error: {line}", file=sys.stderr)
        return 1


# ----------------------------------------------------------------- errors in the user's code


_REMOTE_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _frames(error: BaseException) -> list[tuple[str, int, str]]:
    """(file, line, function) of the frames ``error`` passed, innermost last; a worker
    process's error gives them as its remote traceback's text."""
    remote = getattr(error.__cause__, "tb", None)  # concurrent.futures' _RemoteTraceback
    if isinstance(remote, str):
        return [(f, int(n), name) for f, n, name in _REMOTE_FRAME.findall(remote)]
    return [(f.filename, f.lineno or 0, f.name) for f in traceback.extract_tb(error.__traceback__)]


def _library_file(filename: str) -> bool:
    """Whether a file is langadapt's own (its packages: a checkout's other files, such as
    a user's module beside them, are not), an installed package's, Python's or a script."""
    top = Path(__file__).resolve().parents[1]  # the langadapt package: a checkout's root
    path = Path(filename).resolve()
    if path.is_relative_to(top) and (path == top / "__init__.py" or (
            top / path.relative_to(top).parts[0] / "__init__.py").is_file()):
        return True
    roots = {Path(sysconfig.get_paths()[k]).resolve()
             for k in ("stdlib", "platstdlib", "purelib", "platlib", "scripts")}
    return filename.startswith("<") or any(path.is_relative_to(root) for root in roots)


def user_code_error(error: BaseException) -> str | None:
    """One line for an exception raised in the user's own code (their environment,
    describer, callback): the error, the innermost frame of theirs (file:line) and the run
    it happened in; None when no frame of the traceback is the user's (a langadapt bug)."""
    frames = [frame for frame in _frames(error) if not _library_file(frame[0])]
    if not frames:
        return None
    filename, line, function = frames[-1]
    run = getattr(error, "langadapt_run_key", None)
    where = f" in run {run}" if run else ""
    return (f"{type(error).__name__}: {error} at {filename}:{line} (in {function}){where}; "
            "--traceback shows the whole traceback")


# ----------------------------------------------------------------- bench, doctor, finetune-export


BENCHMARKS = ("cli", "adapters", "encoder", "llm", "agents", "executors", "llm_roles", "minigrid",
              "vector", "llm_concurrency", "language_cost")
# Run only when named (`langadapt bench finetune-trl`), never by a plain `langadapt bench`:
# name -> module benchmarks/<module>_bench.py (in a checkout, not in the wheel).
OPT_IN_BENCHMARKS = {"finetune-trl": "finetune_trl"}


def _add_tool_parsers(commands: Any) -> None:
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
    trl.add_argument("--steps", type=int, help="GRPO steps per side (default 5; 1 with --quick); "
                     "with --only vector: environment steps per arm (default 10000)")
    trl.add_argument("--maze", help="named maze (default umaze)")
    trl.add_argument("--model", help="Hugging Face model directory or .gguf file (default: "
                     "the embedded SmolLM2)")
    trl.add_argument("--cpu-seconds", type=float, help="train each side for this many CPU "
                     "seconds instead of a number of steps")
    trl.add_argument("--out", type=path_argument,
                     help="also write the rows to this .csv or .json file")

    schema = commands.add_parser(
        "schema",
        help="print the experiment file's JSON Schema (for an editor's completion and checks)",
        description="The JSON Schema (draft 2020-12) of an experiment file: every key, and each "
        "agent's params and adapter's settings by their type, agents added with register_agent "
        "by --import modules included. Point an editor at it with a first line "
        "'# yaml-language-server: $schema=langadapt.schema.json' (docs/configuration.md).",
    )
    cli_run.add_import_option(schema)
    schema.add_argument("--out", type=path_argument, metavar="FILE.json",
                        help="write it to this file, replacing it (default: print it)")

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
    export.add_argument("--out", type=path_argument, required=True, metavar="FILE.gguf",
                        help="the .gguf file to write")
    export.add_argument("--model", default=None, help="the GGUF base the adapter was trained "
                        "on (default: the embedded SmolLM2)")
    export.add_argument("--dtype", choices=("f16", "f32"), default="f16",
                        help="type of the weight matrices (default f16; f32: exact weights, "
                        "twice the size)")
    export.add_argument("--force", action="store_true",
                        help="replace FILE.gguf if it exists (default: refuse)")


def command_schema(args: argparse.Namespace) -> int:
    import json

    from .folders import replacing
    from .json_schema import experiment_schema

    cli_run.import_modules(args.imports)
    text = json.dumps(experiment_schema(), indent=1) + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    try:
        with replacing(args.out.parent, args.out.name) as temporary:  # the old one kept on failure
            temporary.write_text(text, encoding="utf-8")
    except OSError as error:
        raise UsageError(f"--out {str(args.out)!r}: {error.strerror}; expected a file in an "
                         "existing folder") from None
    print(f"wrote {args.out}")
    return 0


def command_finetune_export(args: argparse.Namespace) -> int:
    # imported here: the optional finetune extra, and a fast start for other commands
    from ..finetune.export import export_gguf
    from ..roles.llm_policy import trained_prompt_style

    started = time.perf_counter()
    try:  # a bad adapter, output path or base model is the user's to fix, not a traceback
        out = export_gguf(args.adapter, args.out, model=args.model, dtype=args.dtype,
                          force=args.force)
    except ValueError as error:
        raise UsageError(str(error)) from error
    size = out.stat().st_size / 1e6
    print(f"wrote {out} ({size:.0f} MB, {args.dtype}) in {time.perf_counter() - started:.0f} s")
    style = trained_prompt_style(args.adapter)
    if style is not None:  # the merged file cannot say how the policy was prompted
        print(f"trained on {style} prompts: act with llm_policy prompt_style: {style}")
    return 0


def _opt_in_bench(args: argparse.Namespace) -> int:
    if args.only:
        raise UsageError(f"--only names default benchmarks; {args.name} runs on its own")
    if args.steps is not None:
        _check_steps(args.steps)
    if args.cpu_seconds is not None and not (math.isfinite(args.cpu_seconds)
                                             and args.cpu_seconds > 0):
        raise UsageError(f"--cpu-seconds {args.cpu_seconds}: expected a number of seconds > 0")
    print(f"\n=== benchmark: {args.name} ===", flush=True)
    try:
        module = _bench_module(OPT_IN_BENCHMARKS[args.name])
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


def _bench_module(name: str) -> Any:
    """``benchmarks/<name>_bench.py``, which runs from a checkout (the wheel has none)."""
    if importlib.util.find_spec("langadapt.benchmarks") is None:
        raise UsageError("the benchmarks run from a checkout of the repository (git clone it, "
                         "then make bench); this installation has none")
    return importlib.import_module(f"langadapt.benchmarks.{name}_bench")


def _check_steps(steps: int) -> None:
    if not 1 <= steps <= MAX_TRAINING_STEPS:
        raise UsageError(f"--steps {steps}: expected an int from 1 to {MAX_TRAINING_STEPS:,}")


def command_bench(args: argparse.Namespace) -> int:
    if args.name is not None:
        return _opt_in_bench(args)
    chosen = args.only or list(BENCHMARKS)
    vector_steps = chosen == ["vector"] and args.steps is not None
    given = [f"--{k.replace('_', '-')}" for k in ("steps", "maze", "model", "cpu_seconds", "out")
             if getattr(args, k) is not None and not (k == "steps" and vector_steps)]
    if given:
        raise UsageError(f"{', '.join(given)} apply only to an opt-in benchmark "
                         f"({', '.join(OPT_IN_BENCHMARKS)})" + (
                             " (--steps also to --only vector)" if "--steps" in given else ""))
    if vector_steps:
        _check_steps(args.steps)
    figures: dict[str, dict] = {}
    for name in chosen:
        print(f"\n=== benchmark: {name} ===", flush=True)
        module = _bench_module(name)
        figures[name] = module.run(quick=args.quick, **(
            {"steps": args.steps} if name == "vector" and vector_steps else {}))
    print("\n=== all figures ===")
    for name, values in figures.items():
        for key, value in values.items():
            shown = f"{value:.4g}" if isinstance(value, float) else str(value)
            print(f"{name}.{key}: {shown}")
    return 0


def command_doctor(args: argparse.Namespace) -> int:
    from importlib.metadata import PackageNotFoundError, version

    from ..llm import native_check
    from ..llm.gguf_check import default_gguf_path, embedded_missing

    try:
        print(f"llama-cpp-python {version('llama-cpp-python')}")
    except PackageNotFoundError:
        raise UsageError(embedded_missing(True) or "llama-cpp-python is not installed") from None
    model = default_gguf_path()
    print(f"embedded model: {model}")
    print(f"llama.cpp build: {native_check.system_info()}")
    started = time.perf_counter()
    native_check.check_llama_cpp_runs(model, native_check.probe_command(model))
    print(f"ok: llama.cpp evaluated a prompt in a child process "
          f"({time.perf_counter() - started:.1f} s)")
    return 0


_TOOLS = {
    "bench": command_bench,
    "doctor": command_doctor,
    "finetune-export": command_finetune_export,
    "schema": command_schema,
}


COMMANDS = {**cli_run.COMMANDS, **cli_inspect.COMMANDS, **cli_policies.COMMANDS, **_TOOLS}


if __name__ == "__main__":
    sys.exit(main())
