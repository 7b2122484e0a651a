"""Checkpoints (agents.checkpoints) and ``--resume`` from them: a run killed with SIGKILL
goes on from its last checkpoint, keeping its rows, redoing at most the steps since."""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
import time
from importlib.util import find_spec
from pathlib import Path

import pytest
from experiment_fixtures import run_cli

from langadapt.agents.checkpoints import read_checkpoint

pytestmark = pytest.mark.skipif(find_spec("stable_baselines3") is None,
                                reason="needs the sb3 extra")

STEPS = 12_000
FILE = f"""\
name: resumed
environment: {{id: langadapt/Maze-v0, params: {{maze: umaze}}}}
adapters: [{{type: raw}}]
agents:
  - type: sb3
    label: ppo
    params: {{algorithm: PPO, n_steps: 64, batch_size: 64, n_epochs: 1}}
training: {{steps: {STEPS}, n_envs: 2}}
seeds: [0]
evaluation: {{every_steps: 2000, episodes: 2, keep_best: true, final_episodes: 3}}
logging: {{checkpoint_every_steps: 600}}
"""


def _train_rows(folder: Path) -> list[dict[str, str]]:
    with open(folder / "runs" / "raw__ppo__seed0" / "episodes.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def test_a_run_killed_at_60_percent_resumes_from_its_checkpoint(tmp_path, capsys):
    experiment = tmp_path / "resumed.yaml"
    experiment.write_text(FILE + f"cache_dir: {tmp_path / 'cache'}\n")
    out = tmp_path / "out"
    checkpoint = out / "runs" / "raw__ppo__seed0" / "checkpoint.safetensors"
    command = [str(Path(sys.executable).with_name("langadapt")), "run", str(experiment),
               "--out", str(out), "--no-progress"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    saved_steps, deadline = 0, time.monotonic() + 240
    try:
        while saved_steps < 0.6 * STEPS:
            assert process.poll() is None, process.stderr.read().decode()
            assert time.monotonic() < deadline, "no checkpoint past 60% in 240 s"
            time.sleep(0.05)
            try:
                saved_steps = read_checkpoint(checkpoint).run["steps"]
            except ValueError:  # not there yet, or being replaced
                continue
    finally:
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    kept = read_checkpoint(checkpoint)
    assert not (out / "runs" / "raw__ppo__seed0" / "done.json").exists()
    before = _train_rows(out)[: kept.rows]

    code, _, err = run_cli(capsys, "run", str(experiment), "--out", str(out), "--resume",
                           "--no-progress")
    assert code == 0, err
    rows = _train_rows(out)
    assert rows[: kept.rows] == before  # the rows written up to the checkpoint are kept
    resumed_steps = sum(int(r["length"]) for r in rows[kept.rows:] if r["phase"] == "train")
    assert resumed_steps <= STEPS - kept.run["steps"]  # only the steps after the checkpoint
    assert kept.run["steps"] >= 0.6 * STEPS
    assert STEPS - kept.run["steps"] <= 0.4 * STEPS + 0.1 * STEPS
    assert {r["phase"] for r in rows} >= {"train", "eval", "best", "final"}
    assert not checkpoint.exists()  # the finished run's checkpoint is removed
    assert (out / "runs" / "raw__ppo__seed0" / "policy_final.safetensors").is_file()


def test_a_damaged_checkpoint_starts_the_run_afresh(tmp_path, capsys):
    experiment = tmp_path / "resumed.yaml"
    experiment.write_text(FILE.replace(f"steps: {STEPS}", "steps: 600")
                          + f"cache_dir: {tmp_path / 'cache'}\n")
    out = tmp_path / "out"
    code, _, err = run_cli(capsys, "run", str(experiment), "--out", str(out), "--no-progress")
    assert code == 0, err
    run_dir = out / "runs" / "raw__ppo__seed0"
    (run_dir / "done.json").unlink()  # as if it had been killed
    (run_dir / "checkpoint.safetensors").write_bytes(b"\x00" * 40)
    code, _, err = run_cli(capsys, "run", str(experiment), "--out", str(out), "--resume",
                           "--no-progress")
    assert code == 0, err
    assert (run_dir / "done.json").is_file() and not (run_dir / "checkpoint.safetensors").exists()


@pytest.mark.parametrize("name", ["dqn", "qlearning"])
def test_a_step_learner_resumes_its_counters_records_and_policy(name, tmp_path):
    from langadapt.agents import make_agent, train
    from langadapt.agents.checkpoints import Checkpoints
    from langadapt.environments import MazeEnv

    saved: list[bytes] = []
    env = MazeEnv(maze="umaze")
    agent = make_agent(name, env.observation_space, env.action_space, seed=1)
    full = train(agent, env, steps=1200, eval_every_steps=300, eval_episodes=1,
                 keep_best=True, seed=1, progress=False,
                 callbacks=[Checkpoints(saved.append, every_steps=400)])
    assert len(saved) >= 2
    (tmp_path / "c.safetensors").write_bytes(saved[1])
    kept = read_checkpoint(tmp_path / "c.safetensors")
    assert 800 <= kept.run["steps"] < 1200 and kept.rows == len(kept.run["records"])
    again = make_agent(name, env.observation_space, env.action_space, seed=99)
    resumed = train(again, MazeEnv(maze="umaze"), steps=1200, eval_every_steps=300,
                    eval_episodes=1, keep_best=True, seed=1, progress=False,
                    callbacks=[Checkpoints(saved.append, every_steps=400, resume=kept)])
    assert [r.as_dict() for r in resumed.records[: kept.rows]] == [
        r.as_dict() for r in full.records[: kept.rows]]
    assert sum(r.length for r in resumed.records if r.phase == "train") <= 1200
    assert resumed.best is not None and resumed.last is not None
