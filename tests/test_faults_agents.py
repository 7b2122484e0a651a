"""Bad input and damaged files for agents and describers: every case a clear ValueError.

Non-finite or missing observations and rewards, legal moves that are not distinct ints
(the same verdict whether or not the agent has seen that list before), damaged or foreign
agent files, and states outside an environment's observation space.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from gymnasium import spaces
from safetensors import safe_open
from safetensors.torch import save

from langadapt.agents import DQNAgent, make_agent
from langadapt.environments import CartPoleDescriber, SailingDescriber

BOX4 = spaces.Box(-1.0, 1.0, (4,), np.float32)
OK = np.zeros(4, np.float32)
AGENTS = ["qlearning", "dqn", "random"]


def _agent(name: str):
    params = dict(total_steps=10, hidden_sizes=[8], learning_starts=0) if name == "dqn" else {}
    return make_agent(name, BOX4, spaces.Discrete(3), **params)


# ------------------------------------------------------------- non-finite input (case 2)
@pytest.mark.parametrize("name", AGENTS)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, None])
def test_non_finite_or_missing_observations_are_rejected(name, bad):
    agent = _agent(name)
    obs = [0.0, bad, 0.0, 0.0]
    with pytest.raises(ValueError, match="observation"):
        agent.act(obs)
    with pytest.raises(ValueError, match="observation"):
        agent.act(obs, [0, 1], explore=False)
    with pytest.raises(ValueError, match="observation"):
        agent.learn(obs, 0, 0.0, OK, False, False)
    with pytest.raises(ValueError, match="observation"):
        agent.learn(OK, 0, 0.0, obs, False, False)
    with pytest.raises(ValueError, match="observation"):
        agent.act(None)
    with pytest.raises(ValueError, match="reward"):
        agent.learn(OK, 0, bad, OK, False, False)


def test_dqn_greedy_policy_stays_finite_after_rejected_nan():
    agent = _agent("dqn")
    with pytest.raises(ValueError):
        agent.learn([np.nan] * 4, 0, 1.0, OK, False, False)
    assert agent.buffer.size == 0
    for _ in range(12):
        agent.learn(OK, 1, 1.0, OK, False, False)
    assert np.isfinite(agent.q_values(OK)).all()


# ------------------------------------------------------------- legal moves (case 3)
@pytest.mark.parametrize("name", AGENTS)
def test_legal_moves_must_be_distinct_ints_warm_or_cold(name):
    agent = _agent(name)
    for warm in (False, True):
        if warm:
            assert agent.act(OK, [0, 1]) in (0, 1)  # (0, 1) is now memorised
            assert agent.act(OK, (0, 1)) in (0, 1)
        with pytest.raises(ValueError, match="not an int action"):
            agent.act(OK, (False, 1))
        with pytest.raises(ValueError, match="not an int action"):
            agent.act(OK, [0.0, 1])
        with pytest.raises(ValueError, match="not an int action"):
            agent.act(OK, [True])
        with pytest.raises(ValueError, match="repeat an action"):
            agent.act(OK, [1, 1])
        with pytest.raises(ValueError, match="repeat an action"):
            agent.learn(OK, 0, 0.0, OK, False, False, next_legal_moves=[0, 0])
    with pytest.raises(ValueError, match="not an int action"):
        agent.act(OK, (False, 5))


# ------------------------------------------------------------- agent files (case 7)
def _saved(tmp_path, name="dqn"):
    agent = _agent(name)
    for _ in range(3):
        agent.learn(OK, 1, 1.0, OK, False, False)
    path = tmp_path / f"{name}.pt"
    agent.save(path)
    return agent, path


def _rewrite(path, change):
    """Change a saved agent as ``{"header": JSON text, "tensors": {...}}`` and save it back
    (a missing entry: no metadata, or no tensors)."""
    with safe_open(str(path), framework="pt") as handle:
        data = {"header": handle.metadata()["langadapt-agent"],
                "tensors": {name: handle.get_tensor(name) for name in handle.keys()}}
    change(data)
    metadata = {"langadapt-agent": data["header"]} if "header" in data else None
    path.write_bytes(save(data.get("tensors", {}), metadata=metadata))


def test_truncated_file_names_the_file(tmp_path):
    agent, path = _saved(tmp_path)
    data = path.read_bytes()
    for cut in (len(data) // 2, 100, 0):
        path.write_bytes(data[:cut])
        with pytest.raises(ValueError, match=rf"{path.name} is not a saved agent"):
            agent.load(path)


def test_foreign_zip_and_foreign_torch_file(tmp_path):
    agent, _ = _saved(tmp_path)
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("hello.txt", "not an agent")
    with pytest.raises(ValueError, match="other.zip is not a saved agent"):
        agent.load(other)
    plain = tmp_path / "weights.safetensors"
    plain.write_bytes(save({"weight": torch.zeros(2)}))
    with pytest.raises(ValueError, match="weights.safetensors is not a saved agent: its "
                                         "metadata has no 'langadapt-agent' JSON header"):
        agent.load(plain)
    not_ours = tmp_path / "not_ours.safetensors"
    not_ours.write_bytes(save({}, metadata={"langadapt-agent": json.dumps({"kind": "dqn"})}))
    with pytest.raises(ValueError, match="does not name 'langadapt-agent'"):
        agent.load(not_ours)


class _Payload:
    """Pickled, it runs ``open(marker, "w")`` when unpickled."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (open, (self.marker, "w"))


def test_a_policy_file_crafted_to_run_code_runs_nothing_and_is_one_line(tmp_path):
    agent, _ = _saved(tmp_path)
    marker = tmp_path / "ran"
    crafted = tmp_path / "policy_final.safetensors"
    torch.save({"header": "{}", "tensors": {}, "payload": _Payload(marker)}, crafted)
    with pytest.raises(ValueError, match=r"^\S*policy_final.safetensors is not a saved agent "
                                         r"\(damaged, truncated or another format; langadapt "
                                         r"saves safetensors files\): [^\n]*$"):
        agent.load(crafted)
    assert not marker.exists()


def test_header_that_is_not_json_and_missing_payload(tmp_path):
    agent, path = _saved(tmp_path)
    _rewrite(path, lambda d: d.__setitem__("header", "{not json"))
    with pytest.raises(ValueError, match="metadata has no 'langadapt-agent' JSON header"):
        agent.load(path)
    agent, path = _saved(tmp_path)
    _rewrite(path, lambda d: d["tensors"].pop("q_net.0.weight"))
    with pytest.raises(ValueError, match=r"dqn.pt: .*missing tensor 'q_net.0.weight'"):
        agent.load(path)
    _rewrite(path, lambda d: d.pop("header"))
    with pytest.raises(ValueError, match="metadata has no 'langadapt-agent' JSON header"):
        agent.load(path)


def test_wrong_shapes_and_nan_weights(tmp_path):
    agent, path = _saved(tmp_path)
    _rewrite(path, lambda d: d["tensors"].__setitem__("q_net.2.weight", torch.zeros(3, 5)))
    with pytest.raises(ValueError, match=r"'q_net.2.weight' has shape \(3, 5\), expected \(3, 8\)"):
        agent.load(path)
    agent, path = _saved(tmp_path)
    _rewrite(path, lambda d: d["tensors"]["q_net.0.bias"].__setitem__(0, float("nan")))
    before = agent.q_values(OK)
    with pytest.raises(ValueError, match="'q_net.0.bias' contains NaN or inf"):
        agent.load(path)
    np.testing.assert_array_equal(agent.q_values(OK), before)  # nothing was loaded
    q, qpath = _saved(tmp_path, "qlearning")
    _rewrite(qpath, lambda d: d["tensors"].__setitem__("values", torch.zeros(1, 7)))
    with pytest.raises(ValueError, match=r"'values' has shape \(1, 7\), expected"):
        q.load(qpath)


def test_newer_format_and_other_agent_or_shape(tmp_path):
    agent, path = _saved(tmp_path)

    def newer(d):
        header = json.loads(d["header"])
        header["version"] = 99
        d["header"] = json.dumps(header)

    _rewrite(path, newer)
    with pytest.raises(ValueError, match="format version 99; this langadapt reads versions up to"):
        agent.load(path)
    _, path = _saved(tmp_path)
    with pytest.raises(ValueError, match="holds a 'dqn' agent, but this is a 'qlearning' agent"):
        _agent("qlearning").load(path)
    wide = DQNAgent(spaces.Box(-1, 1, (5,), np.float32), spaces.Discrete(3), dict(hidden_sizes=[8]))
    with pytest.raises(ValueError, match=r"obs_shape=\[4\], but this agent has obs_shape=\[5\]"):
        wide.load(path)


def test_save_is_atomic(tmp_path, monkeypatch):
    agent, path = _saved(tmp_path)
    good = path.read_bytes()

    def crash(self, data):
        with open(self, "wb") as handle:
            handle.write(data[:10])
        raise OSError("disk full")

    monkeypatch.setattr(Path, "write_bytes", crash)
    with pytest.raises(OSError, match="disk full"):
        agent.save(path)
    assert path.read_bytes() == good  # the real name still holds the last good save
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left


# ------------------------------------------------------------- out-of-range states (case 10)
@pytest.mark.parametrize(
    ("describer", "state", "message"),
    [
        (
            SailingDescriber(),
            [5e16, 0.0],
            r"x 5e\+16 is outside the observation space \[-11.0, 11.0\]",
        ),
        (SailingDescriber(), [0.0, 3.0], r"theta 3.0 is outside .*\[-1.6, 1.6\]"),
        (CartPoleDescriber(), [5e16, 0.0, 0.0, 0.0], r"cart position 5e\+16 is outside .*4.8"),
        (CartPoleDescriber(style="numbers"), [0.0, 0.0, -1.0, 0.0], r"pole angle -1.0 is outside"),
    ],
)
def test_describers_reject_states_outside_the_observation_space(describer, state, message):
    with pytest.raises(ValueError, match=message):
        describer(state)


def test_describers_accept_the_edges_of_the_observation_space():
    assert "edge" in SailingDescriber()([np.float32(11.0), np.float32(-1.6)])
    assert CartPoleDescriber()([np.float32(4.8), 1e6, np.float32(0.41887903), -1e6])
