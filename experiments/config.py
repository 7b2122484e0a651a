"""The experiment file: loading one YAML file into an :class:`ExperimentConfig` with clear
errors, and the keys in which two experiments differ.

The schema is in :mod:`.schema`, the error messages in :mod:`.config_errors`, the checks
of agent and adapter settings in :mod:`.config_checks`; every public name is importable
from here. Every error names the file, the key path and what was expected.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from .config_checks import check_component_settings
from .config_errors import ConfigError, format_validation_error, shown
from .safe_yaml import MAX_YAML_VALUES, load_yaml
from .schema import (
    MAX_SEED,
    MAX_SEED_COUNT,
    AdapterSpec,
    AgentSpec,
    EnvironmentSpec,
    EvaluationSpec,
    ExecutorSpec,
    ExperimentConfig,
    HeldOutSeeds,
    TrainingSpec,
)

__all__ = [  # the public names, wherever they are defined
    "MAX_SEED", "MAX_SEED_COUNT", "MAX_YAML_VALUES", "AdapterSpec", "AgentSpec", "ConfigError",
    "EnvironmentSpec", "EvaluationSpec", "ExecutorSpec", "ExperimentConfig", "HeldOutSeeds",
    "TrainingSpec", "changed_keys", "experiment_from_dict", "load_config", "load_yaml",
]

MAX_FILE_BYTES = 4_000_000
"""Largest experiment file read (the shipped ones are below 5 kB)."""


def experiment_from_dict(data: Any, source: Path | str = "<config>",
                         data_only: bool = False) -> ExperimentConfig:
    """Validate an already-loaded mapping; errors name ``source`` and the key path.

    ``data_only``: the file is a results folder's, read as data — no module it names is
    imported (``imports:``, a ``module:EnvId``) and the agents' and adapters' settings are
    not checked against their classes (the run that wrote it did)."""
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: expected a mapping of keys (name, environment, adapters, ...), "
            f"got {type(data).__name__}"
        )
    try:
        config = ExperimentConfig.model_validate(data, context={"data_only": data_only})
    except ValidationError as error:
        raise ConfigError(format_validation_error(source, error, ExperimentConfig)) from None
    if not data_only:
        check_component_settings(config, source)
    return config


def load_config(path: str | Path, data_only: bool = False) -> ExperimentConfig:
    """Read and validate an experiment YAML file (``data_only``: see
    :func:`experiment_from_dict`)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such experiment file")
    size = path.stat().st_size
    if size > MAX_FILE_BYTES:
        raise ConfigError(f"{path}: {size:,} bytes; expected an experiment file of at most "
                          f"{MAX_FILE_BYTES:,} bytes")
    try:
        data = load_yaml(path.read_bytes().decode("utf-8"), path)
    except UnicodeDecodeError as error:
        raise ConfigError(
            f"{path}: not a UTF-8 text file (byte {error.start}: {error.reason}); save it as UTF-8"
        ) from None
    except yaml.YAMLError as error:
        raise ConfigError(f"{path}: not valid YAML: {' '.join(str(error).split())}") from None
    return experiment_from_dict(data, path, data_only)


def changed_keys(old: ExperimentConfig, new: ExperimentConfig, most: int = 5) -> list[str]:
    """The key paths (``training.episodes: 30 -> 40``) in which two experiments' results
    differ: what :meth:`ExperimentConfig.fingerprint` compares, at most ``most`` of them."""
    changes: list[str] = []
    _diff(old.fingerprint_data(), new.fingerprint_data(), "", changes)
    if len(changes) > most:
        changes = [*changes[:most], f"and {len(changes) - most} more"]
    return changes


def _diff(old: Any, new: Any, where: str, changes: list[str]) -> None:
    if isinstance(old, dict) and isinstance(new, dict):
        for key in [*old, *(k for k in new if k not in old)]:
            path = f"{where}.{key}" if where else str(key)
            if key not in new:
                changes.append(f"{path} removed (was {_brief(old[key])})")
            elif key not in old:
                changes.append(f"{path} added ({_brief(new[key])})")
            else:
                _diff(old[key], new[key], path, changes)
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for index, (a, b) in enumerate(zip(old, new, strict=True)):
            _diff(a, b, f"{where}.{index}", changes)
    elif old != new:
        changes.append(f"{where or '(top level)'}: {_brief(old)} -> {_brief(new)}")


def _brief(value: Any, width: int = 40) -> str:
    text = shown(value)
    return text if len(text) <= width else text[: width - 3] + "..."
