"""A cold step — a state whose description MiniLM has not encoded yet — traced through the
real runner (issue 58): the project files and functions it crosses, and each input checked
once. Measured on this tree: a DQN step on the maze crosses 11 files mid-episode, an SB3
sentence-set step on BabyAI 11 (the issue's targets, 8 and 10, are not met:
docs/development.md, The cold step)."""

from __future__ import annotations

import os
import sys
from collections import Counter
from pathlib import Path

import pytest

import langadapt
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.one_run import execute_run

ROOT = str(Path(langadapt.__file__).resolve().parent)
ENCODES = {"encode_many", "encode_checked"}  # the encoder's entry: a step that calls it is cold


def traced_steps(config: dict, key: str, starts_step, tmp_path: Path) -> list[Counter]:
    """One Counter of (file, function) calls per step of the run ``key`` of ``config``;
    ``starts_step(file, function)`` says which call opens a step."""
    steps: list[Counter] = []

    def profile(frame, event, _arg):
        if event != "call":
            return
        path = frame.f_code.co_filename
        if not path.startswith(ROOT) or "/tests/" in path or "/.venv/" in path:
            return
        where = (os.path.relpath(path, ROOT), frame.f_code.co_name)
        if starts_step(*where):
            steps.append(Counter())
        if steps:
            steps[-1][where] += 1

    (tmp_path / "out").mkdir()
    validated = experiment_from_dict({**config, "output": str(tmp_path / "out"),
                                      "cache_dir": str(tmp_path / "cache")})
    sys.setprofile(profile)
    try:
        execute_run(validated, key, str(tmp_path / "out"))
    finally:
        sys.setprofile(None)
    return steps


def cold_mid_episode(steps: list[Counter]) -> list[Counter]:
    """The cold steps that end no episode (an episode's end adds the records and callbacks)."""
    return [s for s in steps if any(f in ENCODES for _, f in s)
            and not any(f == "record" for _, f in s)]


def files(step: Counter) -> set[str]:
    return {file for file, _ in step}


MAZE_DQN = {"name": "t", "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
            "adapters": [{"type": "language"}],
            "agents": [{"type": "dqn", "params": {"learning_starts": 5, "batch_size": 4}}],
            "training": {"steps": 60}, "seeds": 1, "evaluation": {"final_episodes": 1}}
BABYAI_SET = {"name": "t", "environment": {"id": "BabyAI-GoToLocal-v0"},
              "adapters": [{"type": "language", "settings": {"embedding": "sentence_set",
                                                             "max_sentences": 24}}],
              "agents": [{"type": "sb3", "params": {
                  "algorithm": "MaskablePPO", "n_steps": 16, "batch_size": 16, "n_epochs": 1,
                  "extractor": "sentence_grounded"}}],
              "training": {"steps": 32}, "seeds": 1, "evaluation": {"final_episodes": 1}}


@pytest.mark.parametrize("config, key, opens, needs, keys", [
    (MAZE_DQN, "language__dqn__seed0", ("agents/dqn.py", "_act"), None, 1),  # a paragraph
    (BABYAI_SET, "language__sb3__seed0", ("agents/sb3_vec.py", "step"), "sb3_contrib", None),
], ids=["maze-dqn", "babyai-sb3-sentence-set"])
def test_a_cold_step_crosses_11_files_and_checks_once(tmp_path, config, key, opens, needs,
                                                       keys):
    if needs:
        pytest.importorskip(needs)
    steps = traced_steps(config, key, lambda file, f: (file, f) == opens, tmp_path)
    cold = cold_mid_episode(steps)
    assert cold, "no cold step traced"
    for step in cold:
        assert len(files(step)) <= 11, sorted(files(step))
        assert step[("adapters/base.py", "check_input")] == step[("adapters/base.py", "adapt")]
        assert step[("adapters/embedding_cache.py", "check_texts")] == 1  # once per lookup
        if keys is not None:  # one hashed key per text looked up
            assert step[("adapters/embedding_cache.py", "text_key")] == keys
