"""An LLM row never hides its fallbacks (issue 51): against a stand-in server whose every
reply breaks the schema, the ``llm_policy`` row is marked as not the model's score in the
task's ``summary.md``, in ``suite.md`` and in the merged report, with notes worded for the
role, and the merged rows name the model."""

from __future__ import annotations

import csv
import math
import re

import pytest
from experiment_fixtures import run_cli
from fake_ollama import FakeOllama

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.llm_rows import (
    fallback_mark,
    fallback_notes,
    model_label,
    role_fallbacks,
    share_text,
)


def _suite(tmp_path, name: str, agents: list[dict]):
    from langadapt.experiments.suite import run_suite

    data = {"name": name, "environment": {"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                                          "params": {"num_dists": 0}},
            "tasks": {"goto": {"goal": "goto"}}, "adapters": [{"type": "raw"}],
            "agents": agents, "training": {"episodes": 1}, "seeds": [0],
            "evaluation": {"heldout_seeds": {"first": 1_000_000, "count": 2}},
            "output": str(tmp_path / name), "cache_dir": str(tmp_path / "cache")}
    return run_suite(experiment_from_dict(data), progress=False, log=lambda _: None)


def _row(table: str, start: str) -> str:
    (row,) = [line for line in table.splitlines() if line.startswith(start)]
    return row


def test_an_all_fallback_llm_policy_row_is_flagged_in_suite_md_and_the_merged_report(
        tmp_path, capsys):
    pytest.importorskip("minigrid")
    pytest.importorskip("rliable")
    with FakeOllama(models=("tiny",), reply=lambda body: '{"action": 99}') as server:
        backend = {"backend": "ollama", "model": "tiny", "host": server.host, "retries": 0}
        llm = _suite(tmp_path, "llm", [{"type": "llm_policy", "params": {"backend": backend}},
                                       {"type": "random"}])
    floor = _suite(tmp_path, "floor", [{"type": "random"}])

    suite = (llm / "suite.md").read_text()
    row = _row(suite, "| raw | llm_policy")
    assert row.startswith("| raw | llm_policy † (100% fallbacks) | ollama tiny |"), row
    assert _row(suite, "| raw | random |").startswith("| raw | random | — |")
    assert "† **Not the model's score**" in suite
    assert "- **raw / llm_policy: " in suite and " decisions of its agent (100%) were random " \
           "legal moves" in suite
    summary = (llm / "goto" / "summary.md").read_text()
    marked = [line for line in summary.splitlines()
              if line.startswith("| raw | llm_policy † (100% fallbacks) |")]
    assert len(marked) == 2  # the summary table and rliable's
    assert "random legal moves" in summary and "rule describer" not in summary
    with open(llm / "goto" / "summary.csv", newline="") as handle:
        shares = {r["agent"]: r["llm_fallback_share"] for r in csv.DictReader(handle)}
    assert float(shares["llm_policy"]) == 1.0 and shares["random"] == ""

    out = tmp_path / "merged"
    code, _, err = run_cli(capsys, "report", str(llm), str(floor), "--out", str(out))
    assert (code, err) == (0, "")
    merged = (out / "suite.md").read_text()
    assert _row(merged, "| llm/raw | llm_policy † (100% fallbacks) | ollama tiny |")
    assert _row(merged, "| floor/raw | random | — |")
    assert "- **llm/raw / llm_policy: " in merged and "† its score is not the model's" in merged


def test_compared_folders_mark_the_llm_row_and_a_language_row_keeps_its_wording(
        tmp_path, capsys):
    from experiment_fixtures import QUIET, raw_config

    from langadapt.experiments.runner import run_experiment

    small = {"seeds": 1, "training": {"episodes": 1}, "evaluation": {"final_episodes": 2}}
    with FakeOllama(models=("tiny",), reply=lambda body: '{"action": 99}') as server:
        backend = {"backend": "ollama", "model": "tiny", "host": server.host, "retries": 0}
        llm = run_experiment(experiment_from_dict(raw_config(
            tmp_path, output=str(tmp_path / "llm"), **small,
            agents=[{"type": "llm_policy", "params": {"backend": backend}}])), **QUIET)
    floor = run_experiment(experiment_from_dict(raw_config(
        tmp_path, output=str(tmp_path / "floor"), **small, agents=[{"type": "random"}])),
        **QUIET)
    code, _, err = run_cli(capsys, "report", str(llm), str(floor), "--out",
                           str(tmp_path / "compared"))
    assert (code, err) == (0, "")
    table = (tmp_path / "compared" / "summary.md").read_text()
    # the umaze's corridors force some moves (one legal move: no LLM asked, no fallback)
    assert re.match(r"\| llm/raw \| llm_policy † \(\d\d% fallbacks\) \| 1 \|",
                    _row(table, "| llm/raw | llm_policy"))
    assert _row(table, "| floor/raw | random | 1 |")
    assert re.search(r"decisions of its agent \(\d\d%\) were random legal moves", table)


def test_fallback_shares_and_notes_are_worded_for_each_role():
    record = {"adapter_stats": {"llm_calls": 10, "llm_failures": 2, "llm_cache_hits": 2,
                                "llm_fallbacks": 2},
              "llm_roles": {"agent": {"decisions": 40, "llm_fallbacks": 1},
                            "advisor": {"decisions": 5, "llm_fallbacks": 5}}}
    found = role_fallbacks(record)
    assert found == {"adapter": (2.0, 12.0), "agent": (1.0, 40.0), "advisor": (5.0, 5.0)}
    notes = "\n".join(fallback_notes({("llm", "dqn"): found}))
    assert "2 of 12 descriptions of its adapter (17%) came from the rule describer" in notes
    assert "1 of 40 decisions of its agent (2.5%) were random legal moves" in notes
    assert "; the rest are the model's." in notes
    assert "5 of 5 advice requests of its advisor (100%) gave no advice" in notes
    assert fallback_mark(0.025) == " (2.5% fallbacks)" and fallback_mark(0.5).startswith(" †")
    assert fallback_mark(math.nan) == fallback_mark(0.0) == ""
    assert share_text(0.999) == "99%" and share_text(0.0004) == "<0.1%"
    assert role_fallbacks({"adapter_stats": {"llm_calls": 0}, "llm_roles": {"agent": {}}}) == {}


def test_model_labels_name_the_backend_and_its_default_model():
    assert model_label("llamacpp") == "llamacpp SmolLM2-135M-Instruct.Q4_1"
    assert model_label({"backend": "openai", "model": "gpt-x"}) == "openai gpt-x"
    assert model_label({"backend": "llamacpp", "model": "/m/Qwen2.5-0.5B.gguf"}) == \
        "llamacpp Qwen2.5-0.5B"
    assert model_label("auto") == "auto"
