"""The ``langadapt`` command: run experiments, show descriptions and prompts, prerender,
report, fine-tune, bench, doctor. Each group of commands is one module with its
``add_parsers(commands)`` and its ``COMMANDS``: :mod:`.cli_experiments` (run, finetune,
prerender, report), :mod:`.cli_inspect` (describe, prompt), :mod:`.cli_tools` (bench,
doctor, finetune-export).

A bad command-line value is one line naming the option (exit code 2; an unknown option
with the nearest known one: "did you mean --out?"); an exception raised in the user's own
code (their environment, describer) is one line naming their file:line and the run (exit
code 1; ``--traceback`` shows the whole); any other exception (a bug) keeps its traceback.
"""

from __future__ import annotations

import argparse
import difflib
import os
import sys
from collections.abc import Sequence

from . import cli_experiments, cli_inspect, cli_tools
from .cli_common import UsageError, user_code_error

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
    for module in (cli_experiments, cli_inspect, cli_tools):
        module.add_parsers(commands)
    for command in {id(c): c for c in commands.choices.values()}.values():  # aliases: once
        command.add_argument("--traceback", action="store_true",
                             help="show the whole traceback of an error raised in your own "
                             "code (default: one line naming your file and line)")
    parser.set_defaults(commands=commands.choices)
    return parser


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


COMMANDS = {**cli_experiments.COMMANDS, **cli_inspect.COMMANDS, **cli_tools.COMMANDS}


def expected_errors() -> tuple[type[BaseException], ...]:
    """Errors that are the user's to fix, shown as one message without a traceback: bad
    configuration or options, results folders, missing or unreadable files, an LLM that
    cannot be reached, runs that failed on a cluster. Anything else is a bug: traceback."""
    from ..finetune.agent import FinetuneError
    from ..llm import CacheError, LLMError
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
        CacheError,
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
    except KeyboardInterrupt:
        print("interrupted; finished work is kept (use --resume to continue)", file=sys.stderr)
        return 130
    except Exception as error:
        line = None if args.traceback else user_code_error(error)
        if line is None:
            raise
        print(f"langadapt {args.command}: error: {line}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
