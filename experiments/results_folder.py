"""Preparing a results folder (see :mod:`.results` for its layout): creating it, refusing
another experiment's folder, a folder that is not langadapt's, or one with a symbolic link
among its entries, and ``--force`` removing only what the runner writes."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from .config import ConfigError, ExperimentConfig, changed_keys, load_config, load_yaml
from .results import MARKER, MARKER_TEXT, RESULT_FILES, RUN_FILES, RUN_KEY
from .results_io import LOCK_FILE, inside, write_text


def refuse_links(out_dir: Path) -> None:
    """Refuse a results folder any of whose result entries is a symbolic link."""
    for name in (*RESULT_FILES, LOCK_FILE, MARKER, "runs"):
        inside(out_dir, name)
    runs = out_dir / "runs"
    if runs.is_dir():
        for run_dir in runs.iterdir():
            inside(out_dir, Path("runs") / run_dir.name)
            if run_dir.is_dir():
                for name in RUN_FILES:
                    inside(out_dir, Path("runs") / run_dir.name / name)


def results_folder_of(path: Path) -> Path | None:
    """The results folder ``path`` (an experiment file) lies in, if any: its folder holds
    the :data:`MARKER`, or ``path`` is a ``config.yaml`` beside ``episodes.csv`` or
    ``runs/`` (a folder written before the marker), or a suite's ``suite.yaml``."""
    folder = Path(path).parent
    if (folder / MARKER).exists():
        return folder
    if path.name == "config.yaml" and any((folder / n).exists() for n in ("episodes.csv", "runs")):
        return folder
    if path.name == "suite.yaml" and any((d / MARKER).exists() for d in folder.glob("*/")):
        return folder
    return None


def unnamed_modules(config: ExperimentConfig, named: list[str]) -> list[str]:
    """The modules ``config`` would import (``imports:``, a ``module:EnvId``) that are not
    in ``named`` (the command line's ``--import``)."""
    wanted = [*config.imports]
    if ":" in config.environment.id:
        wanted.append(config.environment.id.partition(":")[0])
    return [name for name in dict.fromkeys(wanted) if name not in named]


# ----------------------------------------------------------------------------- preparing


def prepare_output(config: ExperimentConfig, out_dir: Path, resume: bool, force: bool) -> None:
    """Create the results folder, refusing to mix two different experiments in one.

    ``force`` replaces an earlier experiment's results, in a folder recognised as
    langadapt's own (:func:`is_results_folder`), and only what the runner writes
    (:func:`_remove_results`); a folder holding anything else is never touched. Call it
    holding :func:`folder_lock`, or before any other writer can run.
    """
    config_file = out_dir / "config.yaml"
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"{out_dir} is a file; expected a results folder")
    refuse_foreign(out_dir)
    if force and is_results_folder(out_dir):
        _remove_results(out_dir)
    refuse_links(out_dir)
    if config_file.exists():
        try:
            existing = load_config(config_file, data_only=True)
        except ConfigError as error:
            _refuse_old_finetune(out_dir)
            reason = str(error).splitlines()[-1].strip()
            raise ConfigError(
                f"{config_file} cannot be read ({reason}); this folder's experiment is "
                "unknown: pass --force to replace its results, or choose another --out folder"
            ) from None
        if existing.fingerprint() != config.fingerprint() and not (
                resume and _adds_seeds(existing, config)):
            changes = "; ".join(changed_keys(existing, config))
            raise ConfigError(
                f"{out_dir} holds the results of a different experiment (changed: {changes}); "
                "choose another --out folder, or pass --force to replace them"
            )
        if not resume:
            raise ConfigError(
                f"{out_dir} already holds results of this experiment; pass --resume to "
                "continue it or --force to start again"
            )
    out_dir.mkdir(parents=True, exist_ok=True)
    if not (out_dir / MARKER).is_file():
        write_text(out_dir, MARKER, MARKER_TEXT)
    resolved = config.resolved()
    resolved["output"] = str(out_dir)
    write_text(out_dir, "config.yaml", yaml.safe_dump(resolved, sort_keys=False))


def _adds_seeds(existing: ExperimentConfig, config: ExperimentConfig) -> bool:
    """Whether ``config`` is ``existing`` with more seeds (every earlier seed kept): resuming
    then keeps the finished runs and trains the new seeds."""
    earlier = set(existing.seed_list)
    if not earlier < set(config.seed_list):
        return False
    return (existing.model_copy(update={"seeds": config.seeds}).fingerprint()
            == config.fingerprint())


def _old_finetune_config(out_dir: Path) -> bool:
    """Whether ``config.yaml`` is one the old ``langadapt finetune`` wrote (``grpo`` and
    ``lora`` at its top)."""
    config_file = out_dir / "config.yaml"
    if config_file.is_symlink() or not config_file.is_file():
        return False
    try:
        data = load_yaml(config_file.read_bytes().decode("utf-8"))
    except (OSError, yaml.YAMLError, UnicodeDecodeError, ConfigError):
        return False
    return isinstance(data, dict) and {"grpo", "lora"} <= set(data)


def _refuse_old_finetune(out_dir: Path) -> None:
    """One line for a folder the old ``langadapt finetune`` wrote (``grpo`` and ``lora`` at
    the top of its ``config.yaml``, ``seed_<k>/`` folders)."""
    if _old_finetune_config(out_dir):
        raise ConfigError(
            f"{out_dir} holds results of the old `langadapt finetune` (grpo and lora settings "
            "at the top of config.yaml, seed_<k>/ folders); GRPO is now an agent (type: grpo) "
            "of an experiment, its files in runs/<run>/grpo/, so this folder cannot be "
            "resumed: choose another --out folder, or pass --force to replace its results "
            "(seed_<k>/adapter stays usable with llm_policy and finetune-export)")


def is_results_folder(out_dir: Path) -> bool:
    """Whether langadapt wrote ``out_dir``: it holds the :data:`MARKER` file the runner
    writes, or a ``config.yaml`` that is an experiment (or of the old ``langadapt
    finetune``). Only such a folder is emptied by ``--force``."""
    marker = out_dir / MARKER
    if marker.is_file() and not marker.is_symlink():
        return True
    config_file = out_dir / "config.yaml"
    if config_file.is_symlink() or not config_file.is_file():
        return False
    try:
        load_config(config_file, data_only=True)
    except ConfigError:
        return _old_finetune_config(out_dir)
    return True


def refuse_foreign(out_dir: Path) -> None:
    """Refuse a folder that holds files but is not a langadapt results folder
    (:func:`is_results_folder`), without suggesting ``--force``: it is someone else's."""
    if not out_dir.is_dir() or is_results_folder(out_dir):
        return
    if any(entry.name != LOCK_FILE for entry in out_dir.iterdir()):
        raise ConfigError(
            f"{out_dir} exists and is not a langadapt results folder (no {MARKER} file, no "
            "experiment config.yaml); its files are not langadapt's, so they are never "
            "replaced: choose another --out folder"
        )


def _remove_results(out_dir: Path) -> None:
    """Remove what the runner writes: the :data:`RESULT_FILES` and the run folders
    (``runs/<adapter>__<agent>__seed<k>``); other entries of the folder and of ``runs/``
    stay. A symbolic link is removed itself, never followed."""
    for name in RESULT_FILES:
        path = out_dir / name
        if path.is_symlink() or path.is_file():
            path.unlink()
    runs = out_dir / "runs"
    if runs.is_symlink():
        runs.unlink()
    elif runs.is_dir():
        for entry in runs.iterdir():
            if not RUN_KEY.fullmatch(entry.name):
                continue
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)  # does not follow links inside the folder
            else:
                entry.unlink()
        if not any(runs.iterdir()):
            runs.rmdir()
