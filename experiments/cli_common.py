"""What the ``langadapt`` command's modules share: the usage error, ``--import`` and quiet
model loading."""

from __future__ import annotations

import argparse
import os


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
