"""A researcher's first hour (issue 43): progress inside runs, what runs cost, overrides of
any experiment file, merged suite reports, plots."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from langadapt.experiments import progress as progress_module
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment

from experiment_fixtures import raw_config


def test_runs_report_progress_lines_with_episodes_success_and_eta(tmp_path, monkeypatch):
    monkeypatch.setattr(progress_module, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(progress_module, "LINE_SECONDS", 0.0)
    lines: list[str] = []
    config = experiment_from_dict(raw_config(tmp_path, training={"episodes": 60}, seeds=1,
                                             agents=[{"type": "qlearning"}]))
    run_experiment(config, progress=True, log=lines.append)
    status = [line for line in lines if "train " in line]
    assert status, lines
    assert "runs 0/1 done; raw__qlearning__seed0: train " in status[0]
    assert "/60 episodes (ETA " in status[0] and "success " in status[0]


def test_a_run_watch_reads_whole_rows_only_and_shows_llm_calls(tmp_path):
    from langadapt.experiments.results import EPISODE_COLUMNS, runs_of

    config = experiment_from_dict(raw_config(tmp_path, seeds=1, agents=[{"type": "random"}]))
    (run,) = runs_of(config)
    watch = progress_module.watch_for(config, run, tmp_path)
    row = {"adapter": "raw", "agent": "random", "seed": 0, "phase": "final", "episode": 0,
           "return": 1.0, "length": 5, "success": 1, "wall_time": 3.0, "llm_calls": 2,
           "cache_hits": 0, "llm_fallbacks": 0}
    watch.path.parent.mkdir(parents=True)
    with open(watch.path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, EPISODE_COLUMNS)
        writer.writeheader()
        writer.writerow(row)
        handle.write("raw,random,0,fin")  # a row being written: not read yet
    watch.read()
    assert watch.status() == ("raw__random__seed0: final 1/2 episodes (ETA 3 s), success "
                              "100%, 2 LLM calls, ~1.50 s/call")


def test_summary_gives_llm_and_cpu_seconds_per_adapter_and_agent(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path))
    out = run_experiment(config, progress=False, log=lambda _: None)
    with open(out / "summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["llm_seconds"] for row in rows} == {"0.0000"}
    assert all(float(row["cpu_seconds"]) > 0 for row in rows)
    assert "| LLM calls | LLM s | CPU s | cache hits |" in (out / "summary.md").read_text()
