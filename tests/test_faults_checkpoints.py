"""Fault tests of ``--resume`` from a checkpoint (agents.checkpoints, experiments.results):
a checkpoint that reads back but does not fit the run — wrong types or shapes, another agent,
counters that are not its records', another run's — is set aside with the run's rows (named
in one warning) and that run starts afresh; nothing of ``episodes.csv`` is lost and no
traceback is shown. Stale temporary files of a killed write are removed."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from experiment_fixtures import run_cli
from safetensors import safe_open
from safetensors.torch import save

from langadapt.agents.checkpoints import read_checkpoint
from langadapt.experiments import one_run

RUN = "raw__qlearning__seed0"
FILE = """\
name: checkpointed
environment: {id: langadapt/Maze-v0, params: {maze: umaze}}
adapters: [{type: raw}]
agents: [{type: qlearning}]
training: {episodes: 12}
seeds: [0]
evaluation: {every: 4, episodes: 1, final_episodes: 2}
logging: {checkpoint_every_steps: 20}
"""


@pytest.fixture()
def interrupted(tmp_path: Path, capsys, monkeypatch) -> tuple[Path, Path]:
    """(experiment file, results folder) of a run killed after its last checkpoint, before
    it wrote done.json."""
    experiment = tmp_path / "exp.yaml"
    experiment.write_text(FILE + f"cache_dir: {tmp_path / 'cache'}\n")
    out = tmp_path / "out"

    def killed(*args: Any) -> None:
        raise KeyboardInterrupt("killed")

    with monkeypatch.context() as patch:
        patch.setattr(one_run, "write_policies", killed)
        run_cli(capsys, "run", str(experiment), "--out", str(out), "--no-progress")
    assert (out / "runs" / RUN / "checkpoint.safetensors").is_file()
    assert not (out / "runs" / RUN / "done.json").exists()
    return experiment, out


def _edit(path: Path, change: Callable[[dict[str, Any], dict[str, torch.Tensor]], Any]) -> None:
    """Rewrite the checkpoint ``path`` after ``change(header, tensors)`` (in place; a str
    it returns is written as the raw header)."""
    with safe_open(str(path), framework="pt") as handle:
        header = json.loads(handle.metadata()["langadapt-agent"])
        tensors = {name: handle.get_tensor(name) for name in handle.keys()}  # noqa: SIM118
    raw = change(header, tensors)
    path.write_bytes(save(tensors, metadata={
        "langadapt-agent": raw if isinstance(raw, str) else json.dumps(header)}))


def _records(change):
    return lambda header, _: change(header["checkpoint"])


CASES = {
    "record arity": _records(lambda run: run.update(records=[r[:6] for r in run["records"]])),
    "string steps": _records(lambda run: run.update(steps=str(run["steps"]))),
    "bad last": _records(lambda run: run.update(last=["x", 1])),
    "steps 1e9": _records(lambda run: run.update(steps=10**9)),
    "records cut": _records(lambda run: run.update(records=run["records"][:3])),
    "nested": lambda header, _: "[" * 50_000 + "]" * 50_000,
    "another run": _records(lambda run: run.update(identity={**run["identity"], "seed": 1})),
    "another agent kind": lambda header, _: header.update(kind="dqn"),
    "wrong-shaped tensor": lambda header, tensors: tensors.update(
        values=torch.zeros(tensors["values"].shape[0], 9, dtype=tensors["values"].dtype)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_checkpoint_that_does_not_fit_is_set_aside_and_the_run_starts_afresh(
        interrupted, case, capsys, caplog):
    experiment, out = interrupted
    run_dir = out / "runs" / RUN
    checkpoint = run_dir / "checkpoint.safetensors"
    _edit(checkpoint, CASES[case])
    rows = (run_dir / "episodes.csv").read_bytes()
    crafted = checkpoint.read_bytes()
    with caplog.at_level(logging.WARNING, logger="langadapt.experiments"):
        code, _, err = run_cli(capsys, "run", str(experiment), "--out", str(out), "--resume",
                               "--no-progress")
    assert code == 0 and "Traceback" not in err, err
    assert (run_dir / "done.json").is_file()  # the run, started afresh, finished
    warning = [r.getMessage() for r in caplog.records if "starts afresh" in r.getMessage()]
    assert len(warning) == 1 and str(checkpoint) in warning[0], warning
    aside = {p.name.partition(".set-aside-")[0]: p for p in run_dir.glob("*.set-aside-*")}
    assert aside["checkpoint.safetensors"].read_bytes() == crafted
    assert aside["episodes.csv"].read_bytes() == rows  # every row it had, kept
    assert len((run_dir / "episodes.csv").read_text().splitlines()) > 1
    code, _, err = run_cli(capsys, "report", str(out))  # the folder is whole again
    assert code == 0, err


def test_counters_that_are_not_the_records_are_named(interrupted):
    _, out = interrupted
    checkpoint = out / "runs" / RUN / "checkpoint.safetensors"
    _edit(checkpoint, CASES["steps 1e9"])
    with pytest.raises(ValueError, match=r"checkpoint.safetensors: checkpoint counters .*"
                                         r"steps 1000000000\)"):
        read_checkpoint(checkpoint)


def test_a_checkpoint_records_the_run_it_belongs_to(interrupted):
    _, out = interrupted
    identity = read_checkpoint(out / "runs" / RUN / "checkpoint.safetensors").identity
    assert identity is not None
    assert (identity["run"], identity["seed"]) == (RUN, 0)
    assert len(identity["experiment"]) == 16


def test_resume_removes_the_temporary_file_a_killed_checkpoint_write_left(
        interrupted, capsys):
    experiment, out = interrupted
    run_dir = out / "runs" / RUN
    stale = run_dir / ".checkpoint.safetensors.0123abcd.tmp.safetensors"
    stale.write_bytes(b"\x00" * 1000)
    code, _, err = run_cli(capsys, "run", str(experiment), "--out", str(out), "--resume",
                           "--no-progress")
    assert code == 0, err
    assert not stale.exists()
    assert not list(run_dir.glob("*.set-aside-*"))  # the checkpoint fitted: resumed from it
