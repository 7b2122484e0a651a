"""An LLM adapter that merges states is flagged (issue 59): ``done.json`` records how many
states the LLM described and how many distinct descriptions it gave them, and the summary
notes it for every LLM adapter row — in bold when states were merged."""

from __future__ import annotations

import json
import re

from experiment_fixtures import QUIET
from standin_server import StandInServer

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.llm_rows import description_notes
from langadapt.experiments.runner import run_experiment


def test_a_server_answering_one_sentence_for_every_state_is_flagged(tmp_path):
    with StandInServer(latency=0.0, model="m", reply="You are on the lake.") as server:
        llm = {"backend": "openai", "base_url": server.base_url, "model": "m",
               "api_key_env": None}
        data = {"name": "merged", "environment": {"id": "langadapt/FrozenLake-v0",
                                                  "params": {"is_slippery": False}},
                "adapters": [{"type": "llm", "settings": llm}], "agents": [{"type": "qlearning"}],
                "training": {"episodes": 20}, "seeds": [0],
                "evaluation": {"every": 10, "episodes": 1, "final_episodes": 1},
                "output": str(tmp_path / "out"), "cache_dir": str(tmp_path / "cache")}
        out = run_experiment(experiment_from_dict(data), **QUIET)
    done = json.loads((out / "runs" / "llm__qlearning__seed0" / "done.json").read_text())
    states = done["adapter_descriptions"]["states"]
    assert states > 1 and done["adapter_descriptions"]["descriptions"] == 1
    summary = (out / "summary.md").read_text()
    assert (f"- **llm / qlearning: its LLM adapter merges states** ({states} states got 1 "
            "distinct description, over 1 run)") in summary


def test_description_notes_flag_merges_only():
    notes = description_notes({("llm", "dqn"): [(16, 16), (16, 16)],
                               ("llm2", "dqn"): [(16, 16), (14, 3)],
                               ("raw", "dqn"): []})
    assert notes == [
        "- llm / dqn: its LLM adapter gave every state a description of its own (16 states got "
        "16 distinct descriptions).",
        "- **llm2 / dqn: its LLM adapter merges states** (16 states got 16 distinct "
        "descriptions; 14 states got 3 distinct descriptions, over 2 runs): states it merged "
        "look the same to the agent."]
    assert not re.search("raw", " ".join(notes))
