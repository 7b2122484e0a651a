"""`langadapt schema`: the experiment file's JSON Schema types each agent's params and each
adapter's settings by its type, accepts every shipped file, and names a registered user agent,
which a file can then name and run (issue 58)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml
from experiment_fixtures import run_cli
from test_experiments import tiny_config

from langadapt.agents.random_agent import RandomAgent
from langadapt.agents.registry import AGENTS
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.json_schema import experiment_schema
from langadapt.experiments.runner import run_experiment
from langadapt.experiments.schema import ConfigError

CONFIGS = sorted((Path(__file__).resolve().parents[1] / "configs").glob("*.yaml"))
QUICKSTART = CONFIGS[0].with_name("quickstart.yaml")


class PlainAgent(RandomAgent):
    """A user's agent: random actions under another name."""


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = experiment_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def messages(validator, data) -> list[str]:
    return [error.message for error in validator.iter_errors(data)]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_every_shipped_file_is_valid_under_the_schema(validator, path):
    assert messages(validator, yaml.safe_load(path.read_text())) == []


@pytest.mark.parametrize("where, key", [
    (("agents", 0, "params"), "learning_rat"),            # dqn's hyperparameters
    (("agents", 0, "per_adapter", "language"), "gama"),  # the same, for one adapter
    (("adapters", 1, "settings"), "embeding"),           # the language adapter's settings
])
def test_a_misspelt_key_under_a_type_is_refused_by_name(validator, where, key):
    data = yaml.safe_load(QUICKSTART.read_text())
    data["adapters"][1] = {"type": "language", "settings": {}}
    data["agents"][0].setdefault("per_adapter", {})["language"] = {}
    block = data
    for part in where:
        block = block[part]
    block[key] = 1
    found = messages(validator, data)
    assert len(found) == 1 and repr(key) in found[0], found


def test_types_are_the_registered_ones_and_an_llm_adapter_takes_its_backend_flat(validator):
    agents = validator.schema["$defs"]["AgentSpec"]["properties"]["type"]["enum"]
    assert set(agents) == set(AGENTS) and {"dqn", "sb3", "llm_policy", "oracle"} <= set(agents)
    llm = {"type": "llm", "settings": {"backend": "openai", "base_url": "http://127.0.0.1:1/v1",
                                       "model": "m", "embedding": "sentences"}}
    data = yaml.safe_load(QUICKSTART.read_text())
    data["adapters"] = [llm]
    assert messages(validator, data) == []
    llm["settings"]["backend"] = "telepathy"
    assert any("telepathy" in message for message in messages(validator, data))


def test_a_registered_agent_is_in_the_schema_and_a_file_names_and_runs_it(
        tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(AGENTS, "plain_agent", PlainAgent)  # as register_agent does
    code, out, _ = run_cli(capsys, "schema")
    assert code == 0
    assert "plain_agent" in json.loads(out)["$defs"]["AgentSpec"]["properties"]["type"]["enum"]
    config = experiment_from_dict(tiny_config(tmp_path, agents=[{"type": "plain_agent"}],
                                              seeds=1, executor={"type": "process", "jobs": 1}))
    result = run_experiment(config, jobs=1, progress=False, log=lambda _: None)
    assert (result / "runs" / "raw__plain_agent__seed0" / "episodes.csv").is_file()
    monkeypatch.delitem(AGENTS, "plain_agent")  # another process: the module not imported
    code, out, _ = run_cli(capsys, "report", str(result))  # its folder is read as data
    assert code == 0 and "plain_agent" in out


def test_an_unknown_agent_is_one_line_naming_the_key_the_value_and_the_nearest(tmp_path):
    with pytest.raises(ConfigError) as error:
        experiment_from_dict(tiny_config(tmp_path, agents=[{"type": "qlearnig"}]))
    line = str(error.value).splitlines()[1]
    assert "agents.0.type" in line and "'qlearnig'" in line and "'qlearning'" in line


def test_schema_writes_a_file(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "schema", "--out", str(tmp_path / "s.json"))
    assert code == 0 and "s.json" in out
    assert json.loads((tmp_path / "s.json").read_text())["$schema"].endswith("2020-12/schema")
    for bad in (tmp_path / "no" / "s.json", tmp_path):  # a missing folder, a folder
        code, _, err = run_cli(capsys, "schema", "--out", str(bad))
        assert code == 2 and f"--out {str(bad)!r}" in err and len(err.strip().splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.json"]  # no temporary left
