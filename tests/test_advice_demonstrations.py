"""Advice learnt as demonstrations: DQfD's large-margin term, marked transitions in the
replay buffer (and in its saved file), and the agents that cannot use them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from gymnasium import spaces
from test_minigrid import DOORKEY, each_adapter, needs_minigrid

from langadapt import adapters
from langadapt.agents import DQNAgent, make_agent, train
from langadapt.agents.dqn import large_margin_loss
from langadapt.environments import MazeEnv
from langadapt.environments.minigrid import make_minigrid
from langadapt.roles.advisor import AdvisedActions, AdvisorConfig, LLMAdvisor

BOX2 = spaces.Box(low=-1.0, high=1.0, shape=(2,), dtype=np.float32)

# Three states, three actions: Q values, the advised actions a_E, margin 0.8.
Q = [[1.0, 0.5, 0.2],   # a_E = 0: max(1.0, 0.5 + 0.8, 0.2 + 0.8) - 1.0 = 0.3
     [0.0, 0.9, 0.3],   # a_E = 0: max(0.0, 0.9 + 0.8, 0.3 + 0.8) - 0.0 = 1.7
     [2.0, 1.0, 1.1]]   # a_E = 0: max(2.0, 1.8, 1.9) - 2.0 = 0 (leads by more than the margin)
ADVISED = [[0], [0], [0]]


@pytest.fixture(autouse=True)
def one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_large_margin_term_on_three_states_matches_the_hand_computation():
    q = torch.tensor(Q, requires_grad=True)
    actions = torch.tensor(ADVISED)
    loss = large_margin_loss(q, actions, torch.tensor([1.0, 1.0, 1.0]), 0.8)
    torch.testing.assert_close(loss, torch.tensor((0.3 + 1.7 + 0.0) / 3))
    loss.backward()
    # d/dQ: +1/3 on the maximising action (margin included), -1/3 on a_E; 0 where J_E = 0
    third = 1.0 / 3.0
    want = torch.tensor([[-third, third, 0.0], [-third, third, 0.0], [0.0, 0.0, 0.0]])
    torch.testing.assert_close(q.grad, want)
    # only marked transitions count (the mean is over the whole batch)
    unmarked_second = large_margin_loss(q, actions, torch.tensor([1.0, 0.0, 1.0]), 0.8)
    torch.testing.assert_close(unmarked_second, torch.tensor(0.3 / 3))
    torch.testing.assert_close(
        large_margin_loss(q, torch.tensor([[1], [1], [2]]), torch.ones(3), 0.0),
        torch.tensor((0.5 + 0.0 + 0.9) / 3))  # margin 0: max_a Q - Q(a_E)


def _agent(**params) -> DQNAgent:
    settings = dict(hidden_sizes=[4], batch_size=3, learning_starts=100, total_steps=1000,
                    learning_rate=0.01) | params
    return DQNAgent(BOX2, spaces.Discrete(3), settings, seed=0)


def _fill(agent: DQNAgent, marked: list[bool]) -> None:
    for i, demonstration in enumerate(marked):
        obs = np.array([0.1 * i, -0.2 * i], np.float32)
        agent.learn(obs, i % 3, 0.5, obs[::-1].copy(), i == 2, False, demonstration=demonstration)


def test_dqn_adds_the_weighted_term_on_marked_transitions_only():
    losses = {}
    for weight in (0.0, 2.0):
        agent = _agent(margin_weight=weight, margin=0.8)
        _fill(agent, [True, False, True])
        rows = np.random.default_rng()
        rows.bit_generator.state = agent.rng.bit_generator.state
        idx = rows.integers(0, 3, size=(1, 3))[0]
        buf = agent.buffer
        with torch.no_grad():
            q = agent.q_net(torch.from_numpy(buf.obs[idx]))
            term = large_margin_loss(q, torch.from_numpy(buf.actions[idx]),
                                     torch.from_numpy(buf.demonstrations[idx]), 0.8).item()
        agent.train_steps(1)
        losses[weight] = (agent.last_loss, term)
    (plain, _), (with_term, term) = losses[0.0], losses[2.0]
    assert term > 0.0
    assert with_term == pytest.approx(plain + 2.0 * term, rel=1e-5)


def test_advised_transitions_are_marked_and_survive_save_and_load_of_the_buffer(tmp_path):
    env = MazeEnv(maze="medium", step_reward=0.0)
    agent = make_agent("dqn", env.observation_space, env.action_space, seed=0,
                       hidden_sizes=[8], learning_starts=50, batch_size=8, buffer_size=400)
    advisor = LLMAdvisor({"source": "oracle", "probability": 1.0, "decay_fraction": 1.0,
                          "replace": "any", "learn_as": "demonstrations"}, seed=0)
    oracle_moves = []
    suggest = advisor.suggest

    def recorded(legal_moves):
        oracle_moves.append(suggest(legal_moves))
        return oracle_moves[-1]

    advisor.suggest = recorded
    train(agent, env, steps=300, seed=0, progress=False, advisor=advisor)
    buf = agent.buffer
    marked = buf.demonstrations[: buf.size].astype(bool)
    assert buf.size == 300 and marked.sum() == advisor.counters["advised"] == len(oracle_moves)
    assert 0 < marked.sum() < 300  # p falls from 1 to 0 over training: late steps are not
    assert buf.actions[: buf.size, 0][marked].tolist() == oracle_moves
    path = tmp_path / "buffer.pt"
    agent.save_replay_buffer(path)
    other = make_agent("dqn", env.observation_space, env.action_space, seed=1,
                       hidden_sizes=[8], buffer_size=400)
    other.load_replay_buffer(path)
    for name in ("obs", "next_obs", "actions", "rewards", "terminated", "next_masks",
                 "demonstrations"):
        np.testing.assert_array_equal(getattr(other.buffer, name), getattr(buf, name))
    assert (other.buffer.size, other.buffer.pos) == (300, 300)
    assert other.buffer.has_demonstrations and other.buffer.has_illegal
    batch = other.buffer.sample(np.random.default_rng(0), 1, 16, torch.device("cpu"))
    assert batch.demonstrations is not None and batch.demonstrations.shape == (1, 16)
    smaller = make_agent("dqn", env.observation_space, env.action_space, buffer_size=100)
    with pytest.raises(ValueError, match="saved buffer holds 400 transitions .* holds 100"):
        smaller.load_replay_buffer(path)
    agent.save(tmp_path / "agent.pt")
    with pytest.raises(ValueError, match="holds kind='dqn'"):
        other.load_replay_buffer(tmp_path / "agent.pt")


def test_advice_learnt_as_actions_marks_nothing():
    env = MazeEnv(maze="umaze", step_reward=0.0)
    agent = make_agent("dqn", env.observation_space, env.action_space, seed=0,
                       hidden_sizes=[8], learning_starts=1000)
    advisor = LLMAdvisor({"source": "oracle", "probability": 1.0, "replace": "any"}, seed=0)
    train(agent, env, steps=60, seed=0, progress=False, advisor=advisor)
    assert advisor.counters["advised"] > 0
    assert not agent.buffer.has_demonstrations and not agent.buffer.demonstrations.any()


@pytest.mark.parametrize("kind", ["qlearning", "random"])
def test_demonstrations_on_an_agent_that_cannot_use_them_name_the_agent_and_setting(kind):
    env = MazeEnv(maze="umaze")
    agent = make_agent(kind, env.observation_space, env.action_space, seed=0)
    advisor = LLMAdvisor({"source": "oracle", "learn_as": "demonstrations"})
    with pytest.raises(ValueError, match=f"advisor learn_as: demonstrations needs an agent "
                                         f"that learns from demonstrations \\(dqn\\), but this "
                                         f"agent is {kind}"):
        train(agent, env, steps=10, seed=0, progress=False, advisor=advisor)
    assert advisor.counters["advised"] == 0  # refused before the first step
    with pytest.raises(ValueError, match="AdvisedActions: advisor learn_as: demonstrations"):
        AdvisedActions(env, {"source": "oracle", "learn_as": "demonstrations"}, total_steps=9)


def test_until_confident_needs_demonstrations_and_skips_states_the_agent_is_sure_of():
    with pytest.raises(ValueError, match="until_confident is true, which needs learn_as: "
                                         "demonstrations \\(got learn_as: actions\\)"):
        AdvisorConfig(until_confident=True)
    agent = _agent(margin=0.8)
    with torch.no_grad():  # Q = (1.0, 0.1, 0.0) everywhere
        agent.q_net[-1].weight.zero_()
        agent.q_net[-1].bias.copy_(torch.tensor([1.0, 0.1, 0.0]))
    obs = np.zeros(2, np.float32)
    assert agent.confident(obs) and agent.confident(obs, [0, 2])
    assert not agent.confident(obs, [1, 2])  # 0.1 - 0.0 < 0.8
    env = MazeEnv(maze="umaze")
    advisor = LLMAdvisor({"source": "random", "probability": 1.0, "replace": "any",
                          "learn_as": "demonstrations", "until_confident": True})
    advisor.bind(env)
    assert advisor(agent, obs, [0, 1, 2], 0, 0.0) == 0 and not advisor.advised
    advisor(agent, obs, [1, 2], 2, 0.0)
    assert advisor.advised and advisor.counters["advised"] == 1


@needs_minigrid
@pytest.mark.parametrize("adapter", ["raw", "language", "llm"])
def test_oracle_advice_is_learnt_as_demonstrations_on_every_kind_of_state(adapter):
    """DoorKey-5x5 through each adapter (a counting encoder, an echoing LLM): the advisor
    reads the raw state, DQN learns from the adapter's vectors with the term switched on."""
    env = adapters.LanguageObservation(make_minigrid(DOORKEY),
                                       each_adapter(make_minigrid(DOORKEY))[adapter])
    agent = make_agent("dqn", env.observation_space, env.action_space, seed=0,
                       hidden_sizes=[16], learning_starts=40, batch_size=16)
    advisor = LLMAdvisor({"source": "oracle", "probability": 1.0, "decay_fraction": 1.0,
                          "learn_as": "demonstrations"}, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "different from the unwrapped"
        train(agent, env, steps=120, seed=0, progress=False, advisor=advisor)
    buf = agent.buffer
    assert 0 < buf.demonstrations[: buf.size].sum() == advisor.counters["advised"]
    assert agent.n_updates > 0 and np.isfinite(agent.last_loss)


def test_the_check_a_config_layer_calls_names_every_agent_that_cannot_use_demonstrations():
    import langadapt.roles  # noqa: F401  (registers the LLM roles as agents)
    from langadapt.agents.loop import check_demonstrations
    from langadapt.agents.registry import AGENTS

    for name, cls in AGENTS.items():
        check_demonstrations(cls, False)  # advice as actions suits every step learner
        if name == "dqn":
            check_demonstrations(cls, True)
            continue
        with pytest.raises(ValueError, match=f"learn_as: demonstrations .* agent is {name};"):
            check_demonstrations(cls, True)
    assert {"qlearning", "random", "llm_policy"} <= set(AGENTS)
