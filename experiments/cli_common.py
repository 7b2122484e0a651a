"""What the ``langadapt`` command's modules share: the usage error, ``--import``, quiet
model loading and the one-line error of an exception raised in the user's own code."""

from __future__ import annotations

import argparse
import os
import re
import sysconfig
import traceback
from pathlib import Path


class UsageError(ValueError):
    """A command-line value that cannot be used."""


def add_import_option(command: argparse.ArgumentParser) -> None:
    command.add_argument("--import", dest="imports", action="append", default=[],
                         metavar="MODULE", help="import this module first (it registers your "
                         "environment and its language spec); repeatable. An id written "
                         "as MODULE:EnvId imports MODULE by itself")


def import_modules(names: list[str]) -> None:
    from .env_ids import import_user_modules  # lazy: a fast start for every command

    try:
        import_user_modules(names, where="--import")
    except ValueError as error:
        raise UsageError(str(error)) from None


def quiet_model_loading() -> None:
    """No Hugging Face download or weight-loading bars in this process (before any model
    loads): transformers' switch, which turns huggingface_hub's bars off too."""
    try:
        from transformers.utils import logging as transformers_logging
    except ImportError:  # no transformers: only huggingface_hub could show a bar
        os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
        return
    transformers_logging.disable_progress_bar()


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
