"""Kept policies (experiments.kept): every run folder keeps its final and kept-best
policy as safetensors; `langadapt evaluate` plays them again — the recorded held-out rows
exactly (greedy), other environment parameters in one command — and refuses what cannot
be rebuilt in one line."""

from __future__ import annotations

import csv
from importlib.util import find_spec
from pathlib import Path

import numpy as np
import pytest
import torch
from experiment_fixtures import run_cli

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.play import caption
from langadapt.experiments.runner import run_experiment

needs_sb3_minigrid = pytest.mark.skipif(
    find_spec("sb3_contrib") is None or find_spec("minigrid") is None,
    reason="needs the sb3 and minigrid extras")

#: babyai_mixed shrunk: its language row (sentence slots), greedy MaskablePPO.
MIXED_SHRUNK = {
    "name": "mixed_shrunk",
    "environment": {"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                    "params": {"num_dists": 0, "goal": "mixed"}},
    "adapters": [{"type": "language", "label": "sentences",
                  "settings": {"embedding": "sentences"}}],
    "agents": [{"type": "sb3", "label": "maskable_ppo", "params": {
        "algorithm": "MaskablePPO", "n_steps": 64, "batch_size": 64, "n_epochs": 1}}],
    "training": {"steps": 512, "n_envs": 2},
    "seeds": [0],
    "evaluation": {"every_steps": 256, "episodes": 2, "keep_best": True,
                   "heldout_seeds": {"first": 1000000, "count": 6}},
}

MAZE = {
    "name": "maze_kept",
    "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
    "adapters": [{"type": "raw"}, {"type": "language"}],
    "agents": [{"type": "qlearning"}, {"type": "dqn", "params": {"learning_starts": 10}}],
    "training": {"episodes": 6},
    "seeds": 1,
    "evaluation": {"every": 3, "episodes": 1, "final_episodes": 3},
}


def _rows(folder: Path, phase: str) -> list[tuple[str, ...]]:
    with open(folder / "episodes.csv", newline="") as handle:
        return [(r["adapter"], r["agent"], r["seed"], r["return"], r["length"], r["success"])
                for r in csv.DictReader(handle) if r["phase"] == phase]


def _trained(tmp_path: Path, data: dict) -> Path:
    config = experiment_from_dict({**data, "cache_dir": str(tmp_path / "cache")})
    return run_experiment(config, tmp_path / "trained", progress=False, log=lambda _: None)


def test_every_run_keeps_its_final_policy_and_evaluate_replays_its_rows(tmp_path, capsys):
    folder = _trained(tmp_path, MAZE)
    for run in (folder / "runs").iterdir():
        assert (run / "policy_final.safetensors").is_file()
        assert not (run / "policy_best.safetensors").exists()  # no keep_best
    code, _, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "again"))
    assert code == 0, err
    assert _rows(tmp_path / "again", "final") == _rows(folder, "final")
    assert (tmp_path / "again" / "summary.md").is_file()


@needs_sb3_minigrid
def test_a_babyai_policy_replays_exactly_and_transfers_in_one_command(tmp_path, capsys):
    folder = _trained(tmp_path, MIXED_SHRUNK)
    run = folder / "runs" / "sentences__maskable_ppo__seed0"
    assert {p.name for p in run.glob("policy_*")} == {"policy_final.safetensors",
                                                       "policy_best.safetensors"}
    code, _, err = run_cli(capsys, "evaluate", str(run), "--out", str(tmp_path / "again"))
    assert code == 0, err
    for phase in ("best", "final"):  # same seeds, greedy: the recorded rows exactly
        assert _rows(tmp_path / "again", phase) == _rows(folder, phase)
    code, _, err = run_cli(capsys, "evaluate", str(folder), "--out", str(tmp_path / "two"),
                           "--set", "environment.params.num_dists=2", "--episodes", "4")
    assert code == 0, err
    assert len(_rows(tmp_path / "two", "final")) == 4
    assert "num_dists=2" in (tmp_path / "two" / "summary.md").read_text()
    import langadapt

    loaded = langadapt.load_run(run)  # from Python: the policy and its environment
    env = loaded.make_env(num_dists=2)
    obs, info = env.reset(seed=5)
    assert 0 <= loaded.agent.act(obs, info["legal_moves"], explore=False) < 7


def test_what_cannot_be_rebuilt_or_loaded_is_one_line(tmp_path, capsys):
    folder = _trained(tmp_path, {**MAZE, "adapters": [{"type": "language"}],
                                 "agents": [{"type": "dqn", "params": {"learning_starts": 10}}]})
    run = folder / "runs" / "language__dqn__seed0"
    code, _, err = run_cli(capsys, "evaluate", str(run), "--out", str(tmp_path / "e1"),
                           "--set", "adapters.language.settings.with_raw=true")
    assert code == 2
    assert err.strip().endswith("policy_final.safetensors was saved for observations of "
                                "shape (384,); adapter language as set now gives shape (386,)")
    assert len(err.strip().splitlines()) == 1
    policy = run / "policy_final.safetensors"
    policy.write_bytes(policy.read_bytes()[:200])  # damaged
    code, _, err = run_cli(capsys, "evaluate", str(run), "--out", str(tmp_path / "e2"))
    assert code == 2 and "is not a saved agent (damaged, truncated or another format" in err
    assert len(err.strip().splitlines()) == 1

    class Payload:
        def __reduce__(self):
            return (open, (str(tmp_path / "ran"), "w"))

    torch.save({"payload": Payload()}, policy)  # a pickle crafted to run code
    code, _, err = run_cli(capsys, "evaluate", str(run), "--out", str(tmp_path / "e3"))
    assert code == 2 and "is not a saved agent" in err
    assert not (tmp_path / "ran").exists()
    code, _, err = run_cli(capsys, "evaluate", str(tmp_path), "--out", str(tmp_path / "e4"))
    assert code == 2 and "keeps no policy" in err


def test_logging_policies_false_keeps_none(tmp_path):
    folder = _trained(tmp_path, {**MAZE, "logging": {"policies": False}})
    assert not list(folder.glob("runs/*/policy_*"))


def test_play_writes_a_gif_of_frames_with_their_descriptions_and_actions(tmp_path, capsys):
    from PIL import Image

    folder = _trained(tmp_path, {**MAZE, "adapters": [{"type": "language"}],
                                 "agents": [{"type": "qlearning"}]})
    run = folder / "runs" / "language__qlearning__seed0"
    code, out, err = run_cli(capsys, "play", str(run), "--out", str(tmp_path / "maze.gif"),
                             "--episodes", "2")
    assert code == 0, err
    with Image.open(tmp_path / "maze.gif") as gif:
        assert gif.n_frames >= 4 and gif.width == 480  # two episodes, a frame a step and an end
        gif.seek(0)
        first = gif.convert("RGB")
    band = np.asarray(first)[-40:]  # the caption: dark text on white
    assert (band < 100).any() and (band > 200).any()
    assert "maze.gif" in out and "2 episodes" in out
    code, _, err = run_cli(capsys, "play", str(run), "--out", str(tmp_path / "maze.png"))
    assert code == 2 and "expected a .gif or .mp4 file" in err
    assert caption("A wall. " * 100, "0 (up)", 3).splitlines()[-1] == "step 3: 0 (up)"
