"""Kept policies played again: :func:`load_run` rebuilds a run's policy
(``runs/<run>/policy_final.safetensors``, ``policy_best.safetensors``: the agent's weights or
table and the adapter's fitted normaliser, safetensors, loading runs no code) and its
observations from the folder's ``config.yaml`` read as data; :func:`evaluate_folder` plays
them on held-out episodes into a results folder ``report`` reads. See docs/configuration.md
("Kept policies").
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import agents
from ..adapters.representation import Standardiser
from ..agents.base import read_agent_file
from .config import ExperimentConfig
from .one_run import (
    OBSERVATION_TENSORS,
    agent_params,
    make_adapter,
    make_env,
    with_set_layout,
    wrap,
)
from .results import POLICY_FILES, Run, find_run, folder_config


@dataclass
class LoadedRun:
    """A kept policy with what rebuilds its observations: ``agent`` acts on the
    observations of ``make_env()``."""

    config: ExperimentConfig
    run: Run
    agent: Any
    adapter: Any
    path: Path

    def make_env(self, **params: Any) -> Any:
        """A new environment of the run (``params`` over the file's environment parameters),
        observed through the run's adapter."""
        return wrap(make_env(self.config, over=params), self.adapter)


def load_run(path: str | Path, which: str = "final") -> LoadedRun:
    """The kept ``which`` policy (final or best) of a run folder ``results/<name>/runs/<run>``,
    rebuilt from the folder's ``config.yaml`` and the policy file; one ValueError naming
    what is missing or does not fit."""
    run_dir = Path(path)
    if which not in POLICY_FILES:
        raise ValueError(f"which={which!r}: expected one of {', '.join(POLICY_FILES)}")
    file = run_dir / POLICY_FILES[which]
    if not file.is_file():
        kept = [w for w, name in POLICY_FILES.items() if (run_dir / name).is_file()]
        raise ValueError(f"{run_dir} keeps no {which} policy ({POLICY_FILES[which]}); "
                         + (f"it keeps {', '.join(kept)}" if kept else
                            "expected a run folder results/<name>/runs/<run> of a run "
                            "trained with logging.policies on"))
    out_dir = run_dir.parent.parent
    config = folder_config(out_dir)
    run = find_run(config, run_dir.name)
    header, tensors = read_agent_file(file)
    adapter = make_adapter(run.adapter, make_env(config), config.cache_dir)
    mean = tensors.pop(f"{OBSERVATION_TENSORS}mean", None)
    matrix = tensors.pop(f"{OBSERVATION_TENSORS}matrix", None)
    if mean is not None:
        adapter._standardiser = Standardiser(mean.numpy(),  # noqa: SLF001  (the fitted one)
                                             None if matrix is None else matrix.numpy())
    space = adapter.observation_space
    params = with_set_layout(agent_params(run.agent, run.adapter.name, config.cache_dir),
                             adapter)
    agent = agents.make_agent(run.agent.type, space, make_env(config).action_space,
                              seed=run.seed, **params)
    saved = tuple(header.get("obs_shape", ()))
    if saved != tuple(space.shape):
        raise ValueError(f"{file} was saved for observations of shape {saved}; the run's "
                         f"adapter {run.adapter.name} now gives {tuple(space.shape)}")
    agent.load_saved(header, tensors, file)
    return LoadedRun(config, run, agent, adapter, file)

