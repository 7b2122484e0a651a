"""``langadapt bench``, ``doctor`` and ``finetune-export``."""

from __future__ import annotations

import argparse
import importlib
import math
import time
from pathlib import Path
from typing import Any

from .cli_common import UsageError

BENCHMARKS = ("adapters", "encoder", "llm", "agents", "executors", "llm_roles", "minigrid",
              "vector", "llm_concurrency", "language_cost")
# Run only when named (`langadapt bench finetune-trl`), never by a plain `langadapt bench`:
# name -> module experiments/benchmarks/<module>_bench.py.
OPT_IN_BENCHMARKS = {"finetune-trl": "finetune_trl"}


def add_parsers(commands: Any) -> None:
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
    trl.add_argument("--out", type=Path, help="also write the rows to this .csv or .json file")

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
    chosen = args.only or list(BENCHMARKS)
    vector_steps = chosen == ["vector"] and args.steps is not None
    given = [f"--{k.replace('_', '-')}" for k in ("steps", "maze", "model", "cpu_seconds", "out")
             if getattr(args, k) is not None and not (k == "steps" and vector_steps)]
    if given:
        raise UsageError(f"{', '.join(given)} apply only to an opt-in benchmark "
                         f"({', '.join(OPT_IN_BENCHMARKS)})" + (
                             " (--steps also to --only vector)" if "--steps" in given else ""))
    if vector_steps and args.steps < 1:
        raise UsageError(f"--steps {args.steps}: expected an int >= 1")
    figures: dict[str, dict] = {}
    for name in chosen:
        print(f"\n=== benchmark: {name} ===", flush=True)
        module = importlib.import_module(f"langadapt.experiments.benchmarks.{name}_bench")
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


COMMANDS = {
    "bench": command_bench,
    "doctor": command_doctor,
    "finetune-export": command_finetune_export,
}
