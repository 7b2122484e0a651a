"""Progress inside a zero-shot ``llm_policy`` run (issue 51): its rows are written as its
episodes end, each with its own LLM calls, and the progress lines show the episodes done,
the LLM calls, seconds per call and an ETA while the run goes on."""

from __future__ import annotations

import csv

from experiment_fixtures import raw_config
from fake_ollama import FakeOllama

from langadapt.experiments import runner
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment


def test_a_zero_shot_llm_policy_writes_each_episode_as_it_ends_and_shows_progress(
        tmp_path, monkeypatch):
    monkeypatch.setattr(runner, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(runner, "LINE_SECONDS", 0.0)
    lines: list[str] = []
    with FakeOllama(models=("tiny",), latency=0.05) as server:  # replies within the schema
        backend = {"backend": "ollama", "model": "tiny", "host": server.host}
        config = experiment_from_dict(raw_config(
            tmp_path, seeds=1, training={"episodes": 1}, evaluation={"final_episodes": 3},
            agents=[{"type": "llm_policy", "params": {"backend": backend}}]))
        out = run_experiment(config, progress=True, log=lines.append)
    with open(out / "episodes.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["phase"] for r in rows] == ["final"] * 3
    # each episode's own answers (calls, or cache hits of states seen in an earlier episode),
    # not every answer of the run on the first row
    assert all(int(r["llm_calls"]) + int(r["cache_hits"]) > 0 for r in rows), rows
    # a status while the run goes on (the poll may see 1/3 or 2/3 first, as episodes end)
    status = [line for line in lines if "raw__llm_policy__seed0: final " in line
              and "/3 episodes (ETA " in line]
    assert status, lines
    assert " LLM calls, ~" in status[0] and " s/call" in status[0]
