"""Tests of the agents package: updates by hand, masking, save/load, the loop, learning."""

from __future__ import annotations

import json
import warnings

import gymnasium as gym
import numpy as np
import pytest
import torch
from gymnasium import spaces
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError
from safetensors import safe_open

from langadapt.agents import (
    DQNAgent,
    DQNConfig,
    EpisodeRecord,
    QLearningAgent,
    QLearningConfig,
    RandomAgent,
    dqn_targets,
    evaluate,
    make_agent,
    train,
)
from langadapt.agents.base import NoConfig
from langadapt.agents.buffers import ReplayBuffer
from langadapt.environments import MazeEnv

BOX1 = spaces.Box(low=0.0, high=1.0, shape=(1,), dtype=np.float32)
BOX4 = spaces.Box(low=-1.0, high=1.0, shape=(4,), dtype=np.float32)
S0 = np.array([0.0], dtype=np.float32)
S1 = np.array([1.0], dtype=np.float32)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# ------------------------------------------------------------------ Q-learning by hand
def test_qlearning_update_on_two_state_mdp_matches_hand_computation():
    agent = QLearningAgent(
        BOX1,
        spaces.Discrete(2),
        dict(alpha=0.5, gamma=0.9, epsilon_start=1.0, epsilon_decay=0.5, epsilon_min=0.1),
    )
    # s1 --a1, r=10--> terminal: Q(s1,1) = 0 + 0.5 * (10 - 0) = 5 (no bootstrap).
    agent.learn(S1, 1, 10.0, S0, terminated=True, truncated=False)
    np.testing.assert_allclose(agent.q_values(S1), [0.0, 5.0])
    assert agent.epsilon == 0.5  # decayed once at the episode's end
    # s1 --a0, r=2--> terminal: Q(s1,0) = 1.
    agent.learn(S1, 0, 2.0, S0, terminated=True, truncated=False)
    np.testing.assert_allclose(agent.q_values(S1), [1.0, 5.0])
    # s0 --a1, r=1--> s1 where only action 0 is legal: target = 1 + 0.9 * Q(s1,0) = 1.9,
    # not 1 + 0.9 * 5: the illegal action is left out of the max.
    agent.learn(S0, 1, 1.0, S1, terminated=False, truncated=False, next_legal_moves=[0])
    np.testing.assert_allclose(agent.q_values(S0), [0.0, 0.95])
    # Same transition with every action legal: target = 1 + 0.9 * 5 = 5.5.
    agent.learn(S0, 1, 1.0, S1, terminated=False, truncated=False)
    np.testing.assert_allclose(agent.q_values(S0), [0.0, 0.95 + 0.5 * (5.5 - 0.95)])
    # A truncated transition bootstraps: target = 0 + 0.9 * 5 = 4.5 -> Q(s0,0) = 2.25.
    agent.learn(S0, 0, 0.0, S1, terminated=False, truncated=True)
    np.testing.assert_allclose(agent.q_values(S0)[0], 2.25)
    assert agent.epsilon == 0.125
    agent.learn(S0, 0, 0.0, S1, terminated=True, truncated=False)
    assert agent.epsilon == 0.1  # floored at epsilon_min
    assert agent.act(S0, explore=False) == 1 and agent.act(S1, explore=False) == 1
    assert agent.act(S1, legal_moves=[0], explore=False) == 0


def test_qlearning_discretisation_bins_and_bounds():
    space = spaces.Box(
        low=np.array([-1.0, -np.inf], np.float32), high=np.array([1.0, np.inf], np.float32)
    )
    with pytest.raises(ValueError, match="finite bounds"):
        QLearningAgent(space, spaces.Discrete(2), dict(bins=4))
    agent = QLearningAgent(
        space, spaces.Discrete(2), dict(bins=[4, 2], bounds=[(-1.0, 1.0), (-5.0, 5.0)])
    )
    assert agent.key([-0.9, -1.0]) == agent.key([-0.6, -4.0])  # same bins
    assert agent.key([-0.9, 1.0]) != agent.key([-0.9, -1.0])
    assert agent.key([5.0, 100.0]) == agent.key([0.99, 4.9])  # clipped into the last bin
    with pytest.raises(ValueError, match=r"bins is \[4, 2, 2\], expected 2 positive ints"):
        QLearningAgent(space, spaces.Discrete(2), dict(bins=[4, 2, 2], bounds=[(0, 1)] * 2))
    # Exact keys distinguish -0.0 from nothing: equal values give equal keys.
    exact = QLearningAgent(BOX1, spaces.Discrete(2))
    assert exact.key(np.array([-0.0], np.float32)) == exact.key(np.array([0.0], np.float32))


def test_qlearning_on_384_dim_encodings_uses_exact_bytes():
    space = spaces.Box(low=-1.0, high=1.0, shape=(384,), dtype=np.float32)
    agent = QLearningAgent(space, spaces.Discrete(3), dict(alpha=1.0))
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 384)).astype(np.float32)
    with pytest.warns(UserWarning, match="float bytes of 384-dimensional.*set key: description"):
        agent.learn(a, 2, 1.0, b, terminated=True, truncated=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once, not on every step
        assert agent.act(a.copy(), explore=False) == 2
    assert len(agent.table) == 1 and agent.table_key == "observation"


def test_qlearning_key_auto_follows_the_environment():
    from langadapt import adapters
    from langadapt.adapters import LanguageObservation

    raw = LanguageObservation(MazeEnv(maze="umaze"), adapters.make("raw", MazeEnv(maze="umaze")))
    on_raw = QLearningAgent(raw.observation_space, raw.action_space)
    on_raw.bind(raw)
    assert on_raw.table_key == "observation"  # the raw adapter's numbers are not descriptions
    plain = MazeEnv(maze="umaze")
    on_plain = QLearningAgent(plain.observation_space, plain.action_space)
    on_plain.bind(plain)
    assert on_plain.table_key == "observation"
    told = QLearningAgent(raw.observation_space, raw.action_space, dict(key="description"))
    told.bind(plain)  # told otherwise: kept
    assert told.table_key == "description"


# ------------------------------------------------------------------ DQN target by hand
def test_dqn_targets_hand_made_batch_terminal_against_truncated():
    rewards = torch.tensor([1.0, 1.0, 0.5])
    terminated = torch.tensor([0.0, 1.0, 0.0])  # row 0: truncated / ongoing; row 1: terminal
    next_q_target = torch.tensor([[1.0, 3.0], [2.0, 0.0], [4.0, -1.0]])
    next_q_online = torch.tensor([[5.0, 0.0], [0.0, 1.0], [0.0, 9.0]])
    gamma = 0.5
    double = dqn_targets(rewards, terminated, gamma, next_q_target, next_q_online)
    # Double DQN: a* from the online net (row 0: a*=0 -> 1.0; row 2: a*=1 -> -1.0).
    torch.testing.assert_close(double, torch.tensor([1.5, 1.0, 0.0]))
    vanilla = dqn_targets(rewards, terminated, gamma, next_q_target)
    torch.testing.assert_close(vanilla, torch.tensor([2.5, 1.0, 2.5]))
    masks = torch.tensor([[False, True], [True, True], [True, False]])
    masked_double = dqn_targets(rewards, terminated, gamma, next_q_target, next_q_online, masks)
    torch.testing.assert_close(masked_double, torch.tensor([2.5, 1.0, 2.5]))
    masked_vanilla = dqn_targets(rewards, terminated, gamma, next_q_target, None, masks)
    torch.testing.assert_close(masked_vanilla, torch.tensor([2.5, 1.0, 2.5]))


def _constant_q(agent: DQNAgent, values: list[float]) -> None:
    """Make both networks output ``values`` for every observation."""
    with torch.no_grad():
        for net in (agent.q_net, agent.target_net):
            net[-1].weight.zero_()
            net[-1].bias.copy_(torch.tensor(values))


def test_dqn_agent_stores_terminated_not_truncated_and_bootstraps_truncation():
    agent = DQNAgent(BOX4, spaces.Discrete(2), dict(gamma=0.9, total_steps=100, batch_size=2))
    _constant_q(agent, [1.0, 2.0])
    o = np.zeros(4, np.float32)
    final = np.full(4, 0.5, np.float32)
    agent.learn(o, 0, 1.0, final, terminated=False, truncated=True)
    agent.learn(o, 1, 3.0, final, terminated=True, truncated=False, next_legal_moves=[])
    agent.learn(o, 1, 0.0, final, terminated=False, truncated=False, next_legal_moves=[0])
    buf = agent.buffer
    assert buf.terminated[:3].tolist() == [0.0, 1.0, 0.0]
    np.testing.assert_array_equal(buf.next_obs[0], final)  # the final obs, not a reset obs
    assert buf.next_masks[2].tolist() == [True, False]
    next_obs = torch.from_numpy(buf.next_obs[:3])
    with torch.no_grad():
        targets = dqn_targets(
            torch.from_numpy(buf.rewards[:3]),
            torch.from_numpy(buf.terminated[:3]),
            0.9,
            agent.target_net(next_obs),
            agent.q_net(next_obs),
            torch.from_numpy(buf.next_masks[:3]),
        )
    # truncated: 1 + 0.9 * 2; terminal: 3; only action 0 legal next: 0 + 0.9 * 1.
    torch.testing.assert_close(targets, torch.tensor([2.8, 3.0, 0.9]))
    with pytest.raises(ValueError, match="next_legal_moves is empty"):
        agent.learn(o, 1, 0.0, final, terminated=False, truncated=False, next_legal_moves=[])


def test_dqn_epsilon_schedule_is_linear_over_exploration_fraction():
    cfg = dict(
        exploration_fraction=0.5,
        exploration_initial_eps=1.0,
        exploration_final_eps=0.2,
        learning_starts=10_000,
    )
    agent = DQNAgent(BOX4, spaces.Discrete(2), cfg)
    o = np.zeros(4, np.float32)
    with pytest.raises(ValueError, match="set_training_horizon"):
        agent.learn(o, 0, 0.0, o, False, False)
    agent = DQNAgent(BOX4, spaces.Discrete(2), cfg)
    agent.set_training_horizon(steps=100)
    seen = []
    for _ in range(60):
        agent.learn(o, 0, 0.0, o, False, False)
        seen.append(agent.epsilon)
    assert seen[24] == pytest.approx(1.0 - 0.8 * 25 / 50)
    assert seen[49] == pytest.approx(0.2) and seen[59] == pytest.approx(0.2)


def test_dqn_trains_on_schedule_and_hard_updates_target():
    cfg = dict(
        total_steps=100,
        learning_starts=8,
        train_freq=4,
        gradient_steps=3,
        target_update_interval=6,
        batch_size=4,
        hidden_sizes=[8],
    )
    agent = DQNAgent(BOX4, spaces.Discrete(2), cfg)
    rng = np.random.default_rng(0)
    for t in range(1, 13):
        agent.learn(rng.random(4), int(rng.integers(2)), 1.0, rng.random(4), False, False)
        # training rounds after steps 12 only (t % 4 == 0 and t > 8)
        assert agent.n_updates == (3 if t >= 12 else 0)
    # the target was synced at step 12 (12 % 6 == 0) before training: now they differ
    online, target = agent.q_net.state_dict(), agent.target_net.state_dict()
    assert not all(torch.equal(online[k], target[k]) for k in online)
    for _ in range(6):
        agent.learn(rng.random(4), 0, 1.0, rng.random(4), False, False)
    torch.testing.assert_close(agent.q_net.state_dict(), agent.target_net.state_dict())


def _huber_adam_step_by_hand(w1, b1, w2, b2, obs, actions, y, lr, max_norm):
    """One Huber-loss Adam step (first step: bias-corrected moments are g and g**2) on the MLP
    ``relu(obs @ w1.T + b1) @ w2.T + b2``, written out with numpy."""
    h_pre = obs @ w1.T + b1
    h = np.maximum(h_pre, 0.0)
    q = (h @ w2.T + b2)[np.arange(len(obs)), actions]
    delta = q - y
    dq = np.clip(delta, -1.0, 1.0) / len(obs)  # d mean(smooth_l1) / dq
    dout = np.zeros((len(obs), w2.shape[0]))
    dout[np.arange(len(obs)), actions] = dq
    grads = [None, None, dout.T @ h, dout.sum(0)]
    dh = (dout @ w2) * (h_pre > 0)
    grads[0], grads[1] = dh.T @ obs, dh.sum(0)
    norm = np.sqrt(sum((g**2).sum() for g in grads))
    scale = min(1.0, max_norm / (norm + 1e-6))
    grads = [g * scale for g in grads]
    return [p - lr * g / (np.abs(g) + 1e-8) for p, g in zip((w1, b1, w2, b2), grads, strict=True)]


def test_one_gradient_step_equals_a_hand_computed_huber_adam_step():
    box = spaces.Box(-5.0, 5.0, (2,), np.float32)
    cfg = dict(
        hidden_sizes=[3],
        batch_size=4,
        double_dqn=False,
        gamma=0.5,
        learning_rate=0.1,
        max_grad_norm=0.7,
        total_steps=100,
        learning_starts=10**6,
    )
    agent = DQNAgent(box, spaces.Discrete(2), cfg, seed=3)
    transitions = [
        ([1.0, -2.0], 0, 1.0, [0.5, 0.5], False),
        ([0.5, 1.5], 1, -1.0, [2.0, -1.0], True),
        ([-1.0, 0.3], 1, 0.5, [1.0, 1.0], False),
    ]
    for o, a, r, n, done in transitions:
        agent.learn(np.array(o), a, r, np.array(n), done, False)
    params = [p.detach().double().numpy().copy() for p in agent.q_net.parameters()]
    target = [p.detach().double().numpy().copy() for p in agent.target_net.parameters()]
    idx = np.random.Generator(np.random.PCG64())
    idx.bit_generator.state = agent.rng.bit_generator.state
    rows = idx.integers(0, 3, size=(1, 4))[0]
    buf = agent.buffer
    obs, nxt = buf.obs[rows].astype(float), buf.next_obs[rows].astype(float)
    actions = buf.actions[rows, 0]
    next_q = np.maximum(nxt @ target[0].T + target[1], 0) @ target[2].T + target[3]
    y = buf.rewards[rows] + 0.5 * (1 - buf.terminated[rows]) * next_q.max(1)
    want = _huber_adam_step_by_hand(*params, obs, actions, y, lr=0.1, max_norm=0.7)
    agent.train_steps(1)
    for got, expected in zip(agent.q_net.parameters(), want, strict=True):
        np.testing.assert_allclose(got.detach().numpy(), expected, rtol=1e-4, atol=1e-5)
    # acting reads the same (updated) weights through its numpy views
    x = np.array([0.3, -0.7], np.float32)
    with torch.no_grad():
        np.testing.assert_allclose(
            agent.q_values(x), agent.q_net(torch.from_numpy(x)).numpy(), rtol=1e-6
        )


def test_replay_buffer_wraps_around():
    buf = ReplayBuffer(3, 2, 2)
    for i in range(5):
        buf.add(np.full(2, i), i % 2, float(i), np.full(2, i + 1), i == 4, np.ones(2, bool))
    assert buf.size == 3 and buf.pos == 2
    assert sorted(buf.rewards.tolist()) == [2.0, 3.0, 4.0]
    batch = buf.sample(np.random.default_rng(0), 2, 5, torch.device("cpu"))
    assert batch.obs.shape == (2, 5, 2) and batch.actions.shape == (2, 5, 1)
    assert batch.next_masks is None  # every action was legal everywhere
    # every sampled transition is one of the three stored (obs i -> next i + 1)
    torch.testing.assert_close(batch.next_obs, batch.obs + 1)
    assert set(batch.rewards.flatten().tolist()) <= {2.0, 3.0, 4.0}


# ----------------------------------------------------------------------------- masking
_DQN_FOR_MASKING = {
    n: DQNAgent(
        spaces.Box(-1.0, 1.0, (3,), np.float32),
        spaces.Discrete(n),
        dict(hidden_sizes=[16], learning_starts=0, total_steps=10),
    )
    for n in (2, 5, 8)
}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_masking_never_picks_an_illegal_move(data):
    n = data.draw(st.sampled_from([2, 5, 8]))
    legal = sorted(data.draw(st.sets(st.integers(0, n - 1), min_size=1)))
    obs = np.array(data.draw(st.lists(st.floats(-1, 1, width=32), min_size=3, max_size=3)))
    explore = data.draw(st.booleans())
    seed = data.draw(st.integers(0, 1000))
    obs = obs.astype(np.float32)
    illegal_bonus = np.where(np.isin(np.arange(n), legal), 0.0, 1000.0)

    dqn = _DQN_FOR_MASKING[n]
    dqn.epsilon = data.draw(st.sampled_from([0.0, 1.0]))
    with torch.no_grad():
        dqn.q_net[-1].bias.copy_(torch.tensor(illegal_bonus))
    q = QLearningAgent(spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Discrete(n), seed=seed)
    q.epsilon = dqn.epsilon
    q.table[q.key(obs)] = illegal_bonus.copy()  # illegal actions look best
    rnd = RandomAgent(spaces.Box(-1.0, 1.0, (3,), np.float32), spaces.Discrete(n), seed=seed)
    for agent in (dqn, q, rnd):
        assert agent.act(obs, legal, explore=explore) in legal
    # the masked max in Q-learning's target ignores the illegal actions' high values
    q.learn(obs, legal[0], 0.0, obs, terminated=False, truncated=False, next_legal_moves=legal)
    assert q.table[q.key(obs)][legal[0]] == pytest.approx(0.0)


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("name", ["qlearning", "dqn", "random"])
def test_bad_input_errors(name):
    agent = (
        make_agent(name, BOX4, spaces.Discrete(3), total_steps=10)
        if name == "dqn"
        else (make_agent(name, BOX4, spaces.Discrete(3)))
    )
    with pytest.raises(ValueError, match=r"shape \(3,\).*shape \(4,\)"):
        agent.act(np.zeros(3, np.float32))
    with pytest.raises(ValueError, match="legal_moves is empty"):
        agent.act(np.zeros(4, np.float32), legal_moves=[])
    with pytest.raises(ValueError, match=r"legal move 3 in \[0, 3\] is outside \[0, 2\]"):
        agent.act(np.zeros(4, np.float32), legal_moves=[0, 3])
    with pytest.raises(ValueError, match=r"action 7 is outside the action space"):
        agent.learn(np.zeros(4), 7, 0.0, np.zeros(4), False, False)
    for bad in [None, np.array([1]), "x", 0.5, True, float("nan"), 2.0]:
        with pytest.raises(ValueError, match=r"action .*expected an integer in \[0, 2\]"):
            agent.check_action(bad)
    assert agent.check_action(np.int64(2)) == 2 and agent.check_action(np.array(1)) == 1
    for bad in [[0.5], [5], ["a"]]:
        with pytest.raises(ValueError, match="legal move"):
            agent.act(np.zeros(4, np.float32), legal_moves=bad)
    o = np.zeros(4, np.float32)
    for reward in [None, float("nan"), float("inf"), "1", True]:
        with pytest.raises(ValueError, match=r"reward is .*expected a finite real number"):
            agent.learn(o, 0, reward, o, False, False)
    for flag in [None, "yes", 2, 0.5]:
        with pytest.raises(ValueError, match=r"terminated is .*expected a bool"):
            agent.learn(o, 0, 0.0, o, flag, False)
        with pytest.raises(ValueError, match=r"truncated is .*expected a bool"):
            agent.learn(o, 0, 0.0, o, False, flag)
    agent.learn(o, 0, np.float32(1.0), o, np.bool_(False), np.bool_(True))
    if name == "dqn":
        assert agent.buffer.size == 1 and np.isfinite(agent.buffer.rewards[:1]).all()


def test_config_and_factory_errors():
    with pytest.raises(ValidationError, match="learning_rat"):
        make_agent("dqn", BOX4, spaces.Discrete(2), learning_rat=0.1)
    with pytest.raises(ValidationError, match="alpha"):
        QLearningAgent(BOX4, spaces.Discrete(2), dict(alpha=-1))
    with pytest.raises(ValueError, match=r"unknown agent 'ppo', expected one of"):
        make_agent("ppo", BOX4, spaces.Discrete(2))
    with pytest.raises(ValueError, match="expected gymnasium.spaces.Discrete"):
        DQNAgent(BOX4, spaces.Box(-1, 1, (2,)))
    with pytest.raises(ValueError, match="expected a Box space"):
        DQNAgent(spaces.Discrete(3), spaces.Discrete(2))
    assert isinstance(
        make_agent("qlearning", BOX4, spaces.Discrete(2), alpha=0.3).config.alpha, float
    )


def test_base_agent_parses_config_with_the_class_config_model():
    assert QLearningAgent.config_model is QLearningConfig and DQNAgent.config_model is DQNConfig
    assert RandomAgent.config_model is NoConfig
    q = QLearningAgent(BOX4, spaces.Discrete(2), config={"alpha": 0.3}, seed=1)
    assert isinstance(q.config, QLearningConfig) and q.config.alpha == 0.3 and q.seed == 1
    with pytest.raises(ValidationError, match="extra"):
        RandomAgent(BOX4, spaces.Discrete(2), config={"x": 1})
    with pytest.raises(ValueError, match="expected a QLearningConfig, a dict"):
        QLearningAgent(BOX4, spaces.Discrete(2), config=NoConfig())


# --------------------------------------------------------------------------- save/load
PARAMS = {"dqn": dict(hidden_sizes=[32], learning_starts=50, train_freq=4)}


def _trained(name: str, seed: int = 0):
    env = MazeEnv(maze="umaze")
    params = PARAMS.get(name, {})
    agent = make_agent(name, env.observation_space, env.action_space, seed=seed, **params)
    train(agent, env, episodes=6, seed=seed, progress=False)
    return agent, env


@pytest.mark.parametrize("name", ["qlearning", "dqn", "random"])
def test_save_load_gives_identical_actions(name, tmp_path):
    agent, env = _trained(name)
    path = tmp_path / f"{name}.bin"
    agent.save(path)
    fresh = make_agent(
        name, env.observation_space, env.action_space, seed=123, **PARAMS.get(name, {})
    )
    fresh.load(path)
    cells = [env.observation_of(c) for c in env.free_cells()]
    for explore in (False, True):  # the RNG state is saved too
        got = [fresh.act(o, env.legal_moves_at(tuple(map(int, o))), explore) for o in cells * 5]
        want = [agent.act(o, env.legal_moves_at(tuple(map(int, o))), explore) for o in cells * 5]
        assert got == want
    if name == "dqn":
        for o in cells:
            np.testing.assert_array_equal(fresh.q_values(o), agent.q_values(o))
    # one format for every agent: safetensors, a JSON header in its metadata
    with safe_open(str(path), framework="pt") as handle:
        header = json.loads(handle.metadata()["langadapt-agent"])
    assert header["kind"] == name and header["format"] == "langadapt-agent"
    assert not list(tmp_path.glob(".*.tmp"))  # the temporary file was renamed into place


def test_mismatched_load_names_the_mismatch(tmp_path):
    dqn, env = _trained("dqn")
    dqn.save(tmp_path / "dqn.pt")
    q, _ = _trained("qlearning")
    q.save(tmp_path / "q.pt")
    q_other = QLearningAgent(env.observation_space, env.action_space)
    with pytest.raises(ValueError, match="holds a 'dqn' agent, but this is a 'qlearning' agent"):
        q_other.load(tmp_path / "dqn.pt")
    with pytest.raises(ValueError, match="holds a 'qlearning' agent, but this is a 'dqn'"):
        DQNAgent(env.observation_space, env.action_space).load(tmp_path / "q.pt")
    wider = DQNAgent(spaces.Box(-1, 1, (3,), np.float32), env.action_space)
    with pytest.raises(ValueError, match=r"obs_shape=\[2\], but this agent has obs_shape=\[3\]"):
        wider.load(tmp_path / "dqn.pt")
    other_layers = DQNAgent(env.observation_space, env.action_space, dict(hidden_sizes=[16]))
    with pytest.raises(ValueError, match=r"hidden_sizes=\[32\].*hidden_sizes=\[16\]"):
        other_layers.load(tmp_path / "dqn.pt")
    fewer_actions = QLearningAgent(env.observation_space, spaces.Discrete(4))
    with pytest.raises(ValueError, match="n_actions=8, but this agent has n_actions=4"):
        fewer_actions.load(tmp_path / "q.pt")
    binned = QLearningAgent(env.observation_space, env.action_space, dict(bins=5))
    with pytest.raises(ValueError, match="bins=None, but this agent has bins=5"):
        binned.load(tmp_path / "q.pt")
    by_text = QLearningAgent(env.observation_space, env.action_space, dict(key="description"))
    with pytest.raises(ValueError, match="keyed by 'observation', but this agent has key='desc"):
        by_text.load(tmp_path / "q.pt")
    (tmp_path / "junk.txt").write_text("hello")
    with pytest.raises(ValueError, match="is not a saved agent"):
        q_other.load(tmp_path / "junk.txt")
    with pytest.raises(ValueError, match="does not exist"):
        q_other.load(tmp_path / "missing.npz")


# ------------------------------------------------------------------------ training loop
def test_train_records_evaluations_and_is_deterministic():
    env = MazeEnv(maze="umaze")
    seen: list[EpisodeRecord] = []

    def run() -> list[EpisodeRecord]:
        agent = QLearningAgent(env.observation_space, env.action_space, seed=3)
        return train(
            agent,
            env,
            episodes=6,
            eval_every=2,
            eval_episodes=3,
            seed=3,
            progress=False,
            on_episode=seen.append,
        )

    records = run()
    assert seen == records.records and list(records) == records.records
    assert [r.phase for r in records] == (["train"] + ["train", "eval", "eval", "eval"]) * 3
    assert [r.episode for r in records if r.phase == "train"] == [1, 2, 3, 4, 5, 6]
    assert {r.episode for r in records if r.phase == "eval"} == {2, 4, 6}
    steps = [r.total_steps for r in records if r.phase == "train"]
    assert steps == list(np.cumsum([r.length for r in records if r.phase == "train"]))
    assert all(r.success == (r.length < 100) for r in records)  # umaze: success = goal reached
    again = run()
    assert [(r.return_, r.length) for r in again] == [(r.return_, r.length) for r in records]


def test_train_step_budget_is_exact_and_partial_episode_dropped():
    env = gym.make("CartPole-v1")
    agent = RandomAgent(env.observation_space, env.action_space)
    calls = []
    learn = agent.learn
    agent.learn = lambda *args: (calls.append(args), learn(*args))
    recs = train(agent, env, steps=100, seed=0, progress=False)
    assert sum(r.length for r in recs) <= 100 and recs[-1].total_steps <= 100
    assert len(calls) == 100
    # the 100th transition ended no episode, so the partial episode left no record
    assert not (calls[-1][4] or calls[-1][5])
    assert recs[-1].total_steps == sum(r.length for r in recs) < 100
    del agent.learn
    with pytest.raises(ValueError, match="episodes=... or steps="):
        train(agent, env, progress=False)
    with pytest.raises(ValueError, match="eval_every is 0"):
        train(agent, env, episodes=1, eval_every=0, progress=False)
    for kwargs, message in [
        (dict(steps=1.5), "steps is 1.5, expected a positive int"),
        (dict(episodes="3"), "episodes is '3', expected a positive int"),
        (dict(episodes=1, seed=-1), r"seed is -1, expected an int >= 0"),
        (dict(episodes=1, seed=1.0), r"seed is 1.0, expected an int >= 0"),
    ]:
        with pytest.raises(ValueError, match=message):
            train(agent, env, progress=False, **kwargs)
    with pytest.raises(ValueError, match="episodes is None, expected a positive int"):
        evaluate(agent, env, None, seed=0)
    with pytest.raises(ValueError, match="seed is None, expected an int >= 0"):
        evaluate(agent, env, 1, seed=None)
    with pytest.raises(ValueError, match="seed is -2"):
        RandomAgent(BOX1, env.action_space, seed=-2)
    dqn = DQNAgent(env.observation_space, env.action_space, dict(hidden_sizes=[8]))
    for horizon in [dict(steps=0), dict(steps=2.5), dict(episodes=True)]:
        with pytest.raises(ValueError, match="expected a positive int or None"):
            dqn.set_training_horizon(**horizon)
        with pytest.raises(ValueError, match="expected a positive int or None"):
            agent.set_training_horizon(**horizon)
    wrong = RandomAgent(BOX1, env.action_space)
    with pytest.raises(ValueError, match=r"env observation shape is \(4,\).*\(1,\)"):
        train(wrong, env, episodes=1, progress=False)


class _ResetRecorder(gym.Wrapper):
    def __init__(self, env):
        super().__init__(env)
        self.starts = []

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        self.starts.append(np.array(obs))
        return obs, info


def test_evaluating_on_the_training_env_does_not_repeat_training_start_states():
    env = _ResetRecorder(gym.make("CartPole-v1"))
    agent = RandomAgent(env.observation_space, env.action_space)
    train(agent, env, episodes=4, eval_every=1, eval_episodes=1, seed=0, progress=False)
    # resets alternate train, eval, train, eval, ...
    train_starts = env.starts[0::2]
    eval_starts = env.starts[1::2]
    assert len(train_starts) == 4
    for i in range(4):
        for j in range(i + 1, 4):
            assert not np.array_equal(train_starts[i], train_starts[j])
    assert all(np.array_equal(eval_starts[0], e) for e in eval_starts)


def test_train_sets_dqn_horizon_for_its_schedule():
    env = gym.make("CartPole-v1")
    agent = DQNAgent(env.observation_space, env.action_space, dict(hidden_sizes=[8]))
    train(agent, env, steps=300, seed=0, progress=False)
    assert agent.horizon_steps == 300
    episodic = DQNAgent(env.observation_space, env.action_space, dict(hidden_sizes=[8]))
    train(episodic, env, episodes=3, seed=0, progress=False)
    assert episodic.horizon_episodes == 3 and episodic.horizon_steps is None


# ------------------------------------------------------------------ learning outcomes
def test_qlearning_solves_raw_umaze_within_30_episodes():
    env = MazeEnv(maze="umaze")
    agent = QLearningAgent(env.observation_space, env.action_space, dict(alpha=0.5), seed=0)
    train(agent, env, episodes=30, seed=0, progress=False)
    evals = evaluate(agent, env, episodes=5, seed=1)
    assert all(r.success for r in evals)
    assert all(r.length == 4 for r in evals)  # the shortest path (diagonal moves allowed)


def test_short_dqn_run_on_cartpole_clearly_beats_random():
    env = gym.make("CartPole-v1")
    cfg = dict(
        hidden_sizes=[64, 64],
        learning_rate=1e-3,
        learning_starts=500,
        batch_size=64,
        train_freq=4,
        gradient_steps=1,
        target_update_interval=250,
        exploration_fraction=0.2,
        exploration_final_eps=0.02,
    )
    dqn = DQNAgent(env.observation_space, env.action_space, cfg, seed=0)
    train(dqn, env, steps=10_000, seed=0, progress=False)
    dqn_mean = np.mean([r.return_ for r in evaluate(dqn, env, 10, seed=99)])
    rnd = RandomAgent(env.observation_space, env.action_space, seed=0)
    random_mean = np.mean([r.return_ for r in evaluate(rnd, env, 10, seed=99)])
    assert random_mean < 40
    assert dqn_mean >= 100 and dqn_mean >= 4 * random_mean, (dqn_mean, random_mean)


# ------------------------------------------------------------------ best-policy retention
def test_keep_best_restores_the_policy_of_the_best_scripted_evaluation(monkeypatch):
    from langadapt.agents import training

    env = MazeEnv(maze="umaze")
    agent = QLearningAgent(env.observation_space, env.action_space, dict(alpha=0.5), seed=0)
    scripted = iter([1.0, 5.0, 3.0, 5.0, 2.0, 0.5])  # best: the 4th (later of two ties)
    tables = []

    def scripted_evaluate(agent, env, episodes, seed, total_steps=0, after_episode=0):
        tables.append(agent.snapshot())
        score = next(scripted)
        return [EpisodeRecord(after_episode, score, 1, False, 0.0, "eval", total_steps)]

    monkeypatch.setattr(training, "play", scripted_evaluate)
    result = train(agent, env, episodes=10, eval_every=2, seed=0, progress=False, keep_best=True)
    assert len(tables) == 5  # after episodes 2, 4, ..., 10; the last one is the final policy
    assert result.best.episode == 8 and result.best.mean_return == 5.0
    assert result.last.episode == 10 and result.last.mean_return == 2.0
    assert agent.table.keys() == tables[3].keys()
    for key, row in tables[3].items():
        np.testing.assert_array_equal(agent.table[key], row)
    assert result.last_policy.keys() == tables[4].keys()
    evals = [r.return_ for r in result if r.phase == "eval"]
    assert evals == [1.0, 5.0, 3.0, 5.0, 2.0]


def test_keep_best_evaluates_the_final_policy_and_restores_dqn_weights():
    env = gym.make("CartPole-v1")
    agent = DQNAgent(
        env.observation_space,
        env.action_space,
        dict(hidden_sizes=[8], learning_starts=50, train_freq=1),
        seed=0,
    )
    result = train(
        agent,
        env,
        steps=700,
        eval_every_steps=300,
        eval_episodes=2,
        seed=0,
        progress=False,
        keep_best=True,
    )
    evaluations = sorted({(r.episode, r.total_steps) for r in result if r.phase == "eval"})
    assert evaluations[-1][1] == 700  # the final policy (after a partial episode) evaluated
    assert [s for _, s in evaluations[:-1]] == sorted(s for _, s in evaluations[:-1])
    assert all(s >= 300 * (i + 1) for i, (_, s) in enumerate(evaluations[:-1]))
    best_steps = result.best.total_steps
    agent_now = agent.snapshot()
    agent.restore(result.last_policy)
    if best_steps != 700:
        assert any(not torch.equal(agent_now[k], v) for k, v in agent.snapshot().items())
    with pytest.raises(ValueError, match="keep_best needs an evaluation schedule: set eval_every"):
        train(agent, env, steps=10, progress=False, keep_best=True)


def test_train_leaves_the_global_random_generators_alone():
    import random

    env = gym.make("CartPole-v1")
    random.seed(7)
    np.random.seed(7)
    torch.manual_seed(7)
    before = (random.getstate(), np.random.get_state()[1].copy(), torch.get_rng_state())
    agent = DQNAgent(
        env.observation_space, env.action_space, dict(hidden_sizes=[8], learning_starts=20), seed=3
    )
    assert torch.equal(torch.get_rng_state(), before[2])  # the seeded initialisation too
    train(agent, env, steps=100, eval_every=2, eval_episodes=1, seed=5, progress=False)
    assert random.getstate() == before[0]
    np.testing.assert_array_equal(np.random.get_state()[1], before[1])
    assert torch.equal(torch.get_rng_state(), before[2])


# ------------------------------------------------------------------ description keys
class _Described(gym.Wrapper):
    """Puts a description of the maze cell into info (what LanguageObservation does)."""

    def reset(self, **kwargs):
        obs, info = self.env.reset(**kwargs)
        info["description"] = f"cell {obs.tolist()}"
        return obs, info

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        info["description"] = f"cell {obs.tolist()}"
        return obs, reward, terminated, truncated, info


def test_step_learner_runs_callbacks_in_order_and_takes_an_action_override():
    from langadapt.agents import Budget, Callback, StepLearner

    env = MazeEnv(maze="umaze")
    events: list[tuple[str, int, int]] = []

    class Log(Callback):
        def on_start(self, run):
            events.append(("start", run.episodes, run.steps))

        def on_record(self, run, record):
            events.append((record.phase, run.episodes, run.steps))

        def on_end(self, run):
            events.append(("end", run.episodes, run.steps))

    class LowestMove:  # an override: every action becomes the lowest legal move
        advised = marks_demonstrations = False

        def bind(self, env):
            self.env, self.progress = env, []

        def __call__(self, policy, obs, legal_moves, action, progress):
            self.progress.append(progress)
            return min(legal_moves)

    agent = QLearningAgent(env.observation_space, env.action_space, seed=0)
    override = LowestMove()
    result = StepLearner(agent, override).learn(env, Budget(episodes=2, seed=0), [Log()])
    assert events[0] == ("start", 0, 0) and events[-1] == ("end", 2, result.records[-1].total_steps)
    assert [e[:2] for e in events[1:-1]] == [("train", 1), ("train", 2)]
    assert override.env is env and override.progress[0] == 0.0
    assert override.progress[-1] == 0.5  # by episodes: the second of two
    assert all(np.count_nonzero(row) == 1 for row in agent.table.values())  # learned as taken
    with pytest.raises(ValueError, match="train needs episodes=... or steps="):
        StepLearner(agent).learn(env, Budget(seed=0))
    with pytest.raises(ValueError, match="steps is -1"):
        Budget(steps=-1)


def test_description_keyed_table_trains_on_descriptions_and_rejects_vectors():
    env = _Described(MazeEnv(maze="umaze"))
    agent = QLearningAgent(
        env.observation_space, env.action_space, dict(alpha=0.5, key="description"), seed=0
    )
    train(agent, env, episodes=30, seed=0, progress=False)
    assert all(r.success for r in evaluate(agent, env, 3, seed=1))
    assert agent.act("cell [0.0, 0.0]", [0, 1]) in (0, 1)
    with pytest.raises(ValueError, match="keyed by descriptions: pass the description text"):
        agent.act(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match=r'gives no info\["description"\]'):
        train(agent, MazeEnv(maze="umaze"), episodes=1, progress=False)
    with pytest.raises(ValueError, match="bins=4 needs key='observation'"):
        QLearningAgent(BOX4, spaces.Discrete(2), dict(key="description", bins=4))


_FRESH_PROCESS = """
import json, sys
from langadapt import adapters
from langadapt.adapters import LanguageObservation
from langadapt.agents import QLearningAgent
from langadapt.environments import MazeEnv

env = LanguageObservation(MazeEnv(maze="double_t_maze"),
                          adapters.make("language", MazeEnv(maze="double_t_maze")))
agent = QLearningAgent(env.observation_space, env.action_space)  # key: the default
agent.load(sys.argv[1])
agent.bind(env)
actions = []
for cell in [c for c in env.unwrapped.free_cells() if c != env.unwrapped.goal]:
    obs, info = env.reset(options={"start": list(cell)})
    actions.append(agent.act(agent.observe(obs, info), info["legal_moves"], False))
print(json.dumps(actions))
"""


@pytest.mark.heavy
def test_default_language_table_acts_identically_in_a_fresh_process_without_cache(tmp_path):
    import os
    import subprocess
    import sys

    from langadapt import adapters
    from langadapt.adapters import LanguageObservation

    env = LanguageObservation(
        MazeEnv(maze="double_t_maze"), adapters.make("language", MazeEnv(maze="double_t_maze"))
    )
    # built the ordinary way (no key given): a LanguageObservation supplies descriptions
    agent = QLearningAgent(env.observation_space, env.action_space, dict(alpha=0.5), seed=0)
    train(agent, env, episodes=60, seed=0, progress=False)
    assert agent.table_key == "description"
    want = []
    for cell in [c for c in env.unwrapped.free_cells() if c != env.unwrapped.goal]:
        obs, info = env.reset(options={"start": list(cell)})
        want.append(agent.act(info["description"], info["legal_moves"], False))
    agent.save(tmp_path / "table.pt")
    environ = dict(
        os.environ, LANGADAPT_CACHE_DIR=str(tmp_path / "no-cache-here"), HF_HUB_OFFLINE="1"
    )
    out = subprocess.run(
        [sys.executable, "-c", _FRESH_PROCESS, str(tmp_path / "table.pt")],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=environ,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == want
    # no description or embedding cache: at most the encoder's OpenVINO export (once per
    # machine, adapters.encoder_openvino)
    assert {path.name for path in (tmp_path / "no-cache-here").glob("*")} <= {"encoders"}
