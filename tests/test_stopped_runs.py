"""A run whose LLM server is down stops the experiment: the finished runs are kept and
summarised (the stopped ones named in the notes), ``report`` works on the folder, and
``--resume`` goes on; ``run --check`` asks every LLM server the file names (one cheap
request, a short timeout) unless ``--offline``."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import QUIET, raw_config, run_cli
from standin_server import StandInServer

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.report import write_report
from langadapt.experiments.results import STOPPED_FILE, check_results, finished_runs
from langadapt.experiments.runner import run_experiment
from langadapt.llm import LLMError


def _dead_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


def _llm_data(tmp_path: Path, base_url: str) -> dict:
    backend = {"backend": "openai", "base_url": base_url, "model": "m", "api_key_env": None,
               "retries": 1, "backoff": 0.05, "timeout": 5}
    return raw_config(tmp_path, seeds=1, training={"episodes": 2},
                      evaluation={"final_episodes": 1},
                      agents=[{"type": "qlearning"},
                              {"type": "llm_policy", "params": {"backend": backend}}])


def test_a_down_server_keeps_and_summarises_the_finished_runs(tmp_path):
    data = _llm_data(tmp_path, _dead_url())
    lines: list[str] = []
    with pytest.raises(LLMError, match="no server is answering"):
        run_experiment(experiment_from_dict(data), progress=False, log=lines.append)
    out = Path(data["output"])
    assert list(finished_runs(out)) == ["raw__qlearning__seed0"]
    summary = (out / "summary.md").read_text()
    assert "| raw | qlearning |" in summary
    assert "**run raw__llm_policy__seed0 did not finish**" in summary
    assert "no server is answering" in summary
    assert lines[-1].startswith("stopped: run raw__llm_policy__seed0 failed; the 1 finished "
                                "run is kept and summarised in")
    assert f"--out {out} --resume" in lines[-1]
    write_report(out, log=None)  # `report` on the folder works
    assert list(check_results(out)) == ["raw__llm_policy__seed0"]
    with pytest.raises(LLMError):  # still down: the same stop, nothing lost
        run_experiment(experiment_from_dict(data), resume=True, **QUIET)
    assert (out / STOPPED_FILE).is_file() and "did not finish" in (out / "summary.md").read_text()
    assert list(finished_runs(out)) == ["raw__qlearning__seed0"]


def test_check_asks_the_llm_servers_the_file_names(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    url = _dead_url()
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(_llm_data(tmp_path, url)))
    code, _, err = run_cli(capsys, "run", str(path), "--check")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "agents.1.params.backend" in err and f"no server is answering at {url}" in err
    code, out, err = run_cli(capsys, "run", str(path), "--check", "--offline")
    assert code == 0, err
    with StandInServer(latency=0.0, model="m", reply='{"action": 0}') as server:
        path.write_text(yaml.safe_dump(_llm_data(tmp_path, server.base_url)))
        code, out, err = run_cli(capsys, "run", str(path), "--check")
        assert code == 0, err
        assert server.chat_requests == 0  # no prompt was sent
    assert not (tmp_path / "out").exists()
