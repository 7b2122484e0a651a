"""The command line's start: ``langadapt --version`` and ``langadapt --help`` against a bare
``python -c pass``, run in turn in fresh processes, CPU seconds (user + system, the child's
own accounting) as the median of the runs, and whether torch was imported.

``python -m langadapt.benchmarks.cli_bench [--quick]``, or
``langadapt bench --only cli``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["run"]

_TORCH_LOADED = ("import sys; from langadapt.experiments.cli import main\n"
                 "try:\n    main(sys.argv[1:])\nexcept SystemExit:\n    pass\n"
                 "print('torch' in sys.modules, file=sys.stderr)")


def _cpu_seconds(argv: list[str]) -> float:
    """The CPU seconds of one child process running ``argv``."""
    before = os.times()
    subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (
        after.children_system - before.children_system)


def run(quick: bool = False) -> dict[str, Any]:
    """Median CPU seconds of each command (A B C in turn, ``runs`` times) and their ratios
    to the bare interpreter; ``torch_imported`` for each langadapt command."""
    runs = 3 if quick else 9
    command = str(Path(sys.executable).with_name("langadapt"))  # the installed entry point
    commands = {"python": [sys.executable, "-c", "pass"], "version": [command, "--version"],
                "help": [command, "--help"]}
    for argv in commands.values():  # warm the file cache and the byte-compiled modules
        _cpu_seconds(argv)
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(runs):
        for name, argv in commands.items():
            seconds[name].append(_cpu_seconds(argv))
    figures: dict[str, Any] = {f"{n}_cpu_s": statistics.median(s) for n, s in seconds.items()}
    for name in ("version", "help"):
        figures[f"{name}_over_python"] = figures[f"{name}_cpu_s"] / figures["python_cpu_s"]
        checked = subprocess.run([sys.executable, "-c", _TORCH_LOADED, f"--{name}"],
                                 capture_output=True, text=True, check=True)
        figures[f"{name}_torch_imported"] = checked.stderr.strip().splitlines()[-1] == "True"
    for key, value in figures.items():
        print(f"{key}: {value:.3f}" if isinstance(value, float) else f"{key}: {value}")
    return figures


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    run(parser.parse_args().quick)
