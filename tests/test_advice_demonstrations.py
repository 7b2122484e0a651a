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
from langadapt.agents.buffers import ReplayBuffer
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


pytestmark = pytest.mark.usefixtures("one_torch_thread")


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


def test_n_step_returns_run_over_advised_segments_only():
    """gamma 0.5, n 3; rewards 1, 2, 4, 8 marked, 16 not, 32 marked then truncated, 64 and
    128 marked (a new episode) then terminated."""
    buf = ReplayBuffer(8, 1, 2, n_step=3, gamma=0.5)
    steps = [(1, True, False, False), (2, True, False, False), (4, True, False, False),
             (8, True, False, False), (16, False, False, False), (32, True, False, True),
             (64, True, False, False), (128, True, True, False)]
    for t, (reward, marked, terminated, truncated) in enumerate(steps):
        buf.add(np.array([t]), 0, reward, np.array([t + 1]), terminated, np.ones(2, bool),
                marked, truncated)
    assert buf.segment_lengths.tolist() == [3, 3, 2, 1, 1, 1, 2, 1]
    draw = np.random.default_rng(5)
    idx = np.random.default_rng(5).integers(0, 8, size=(1, 32))[0]
    n = buf.sample(draw, 1, 32, torch.device("cpu")).n_step
    returns = {0: 1 + 0.5 * 2 + 0.25 * 4, 1: 2 + 0.5 * 4 + 0.25 * 8, 2: 4 + 0.5 * 8, 3: 8,
               4: 16, 5: 32, 6: 64 + 0.5 * 128, 7: 128}
    after = {0: 3, 1: 4, 2: 4, 3: 4, 4: 5, 5: 6, 6: 8, 7: 8}  # the state after the segment
    assert n.returns[0].tolist() == [returns[i] for i in idx]
    assert n.discounts[0].tolist() == [0.5 ** buf.segment_lengths[i] for i in idx]
    assert n.next_obs[0, :, 0].tolist() == [after[i] for i in idx]
    assert n.terminated[0].tolist() == [float(i >= 6) for i in idx]
    ring = ReplayBuffer(4, 1, 2, n_step=3, gamma=0.5)  # one episode of 6 marked steps
    for t in range(6):
        ring.add(np.array([t]), 0, 1.0, np.array([t + 1]), False, np.ones(2, bool), True)
    # positions 2, 3 hold steps 2, 3 (segments of 3, the second across the ring's end),
    # positions 0, 1 steps 4, 5 (the open segment: 2 and 1 steps so far)
    assert ring.segment_lengths.tolist() == [2, 1, 3, 3]
    n = ring.sample(np.random.default_rng(0), 1, 16, torch.device("cpu")).n_step
    picked = np.random.default_rng(0).integers(0, 4, size=16)
    want = {0: (1.5, 6), 1: (1.0, 6), 2: (1.75, 5), 3: (1.75, 6)}
    assert [(r, o) for r, o in zip(n.returns[0].tolist(), n.next_obs[0, :, 0].tolist(),
                                   strict=True)] == [want[int(i)] for i in picked]


def _add(buf: ReplayBuffer, reward: float, marked: bool) -> None:
    buf.add(np.array([reward]), 0, reward, np.array([reward]), False, np.ones(2, bool), marked)


def test_marked_transitions_are_kept_while_they_fill_at_most_half_the_buffer():
    buf = ReplayBuffer(8, 1, 2)
    for t in range(3):
        _add(buf, 100 + t, True)
    for t in range(20):
        _add(buf, t, False)
    assert sorted(buf.rewards[buf.demonstrations == 1].tolist()) == [100, 101, 102]
    assert sorted(buf.rewards[buf.demonstrations == 0].tolist()) == list(range(15, 20))
    for t in range(3):  # 6 marked: past half, the ring overwrites them too, down to 4
        _add(buf, 200 + t, True)
    for t in range(20):
        _add(buf, t, False)
    assert buf.marked == 4 == int(buf.demonstrations.sum())
    assert sorted(buf.rewards[buf.demonstrations == 0].tolist()) == [16, 17, 18, 19]


def test_an_advised_segment_does_not_run_across_kept_transitions():
    buf = ReplayBuffer(8, 1, 2, n_step=3, gamma=0.5)
    for reward, marked in [(1, False), (2, False), (4, True), (8, True), (16, False),
                           (32, False), (48, False), (56, False), (64, True), (128, True),
                           (256, True)]:
        _add(buf, reward, marked)
    # 64 and 128 went to slots 0 and 1; slots 2, 3 hold the kept 4 and 8, so 256 went to 4
    assert buf.rewards.tolist() == [64, 128, 4, 8, 256, 32, 48, 56]
    assert buf.segment_lengths.tolist()[:5] == [2, 1, 2, 1, 1]
    n = buf.sample(np.random.default_rng(1), 1, 16, torch.device("cpu")).n_step
    picked = np.random.default_rng(1).integers(0, 8, size=16)
    want = {0: 64 + 0.5 * 128, 1: 128, 2: 4 + 0.5 * 8, 3: 8, 4: 256, 5: 32, 6: 48, 7: 56}
    assert n.returns[0].tolist() == [want[int(i)] for i in picked]


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
                       hidden_sizes=[8], learning_starts=50, batch_size=8, buffer_size=400,
                       n_step=3)
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
                       hidden_sizes=[8], buffer_size=400, n_step=3)
    other.load_replay_buffer(path)
    assert buf.segment_lengths.max() == 3
    for name in ("obs", "next_obs", "actions", "rewards", "terminated", "next_masks",
                 "demonstrations", "segment_lengths"):
        np.testing.assert_array_equal(getattr(other.buffer, name), getattr(buf, name))
    assert (other.buffer.size, other.buffer.pos) == (300, 300)
    assert other.buffer.has_demonstrations and other.buffer.has_illegal
    batch = other.buffer.sample(np.random.default_rng(0), 1, 16, torch.device("cpu"))
    assert batch.demonstrations is not None and batch.demonstrations.shape == (1, 16)
    assert batch.n_step is not None and batch.n_step.next_obs.shape == batch.next_obs.shape
    one_step = make_agent("dqn", env.observation_space, env.action_space, buffer_size=400)
    with pytest.raises(ValueError, match="saved buffer has n_step 3, but this buffer has "
                                         "n_step 1"):
        one_step.load_replay_buffer(path)
    smaller = make_agent("dqn", env.observation_space, env.action_space, buffer_size=100)
    with pytest.raises(ValueError, match="saved buffer holds 400 transitions .* holds 100"):
        smaller.load_replay_buffer(path)
    agent.save(tmp_path / "agent.pt")
    with pytest.raises(ValueError, match="holds kind=.dqn., expected a replay buffer"):
        other.load_replay_buffer(tmp_path / "agent.pt")


def test_advice_learnt_as_actions_marks_nothing_and_auto_marks_on_dqn_only():
    env = MazeEnv(maze="umaze", step_reward=0.0)
    marked = {}
    for learn_as in ("actions", "auto"):
        agent = make_agent("dqn", env.observation_space, env.action_space, seed=0,
                           hidden_sizes=[8], learning_starts=1000)
        config = {"source": "oracle", "probability": 1.0, "replace": "any"}
        if learn_as == "actions":
            config["learn_as"] = "actions"  # else the default, auto
        advisor = LLMAdvisor(config, seed=0)
        train(agent, env, steps=60, seed=0, progress=False, advisor=advisor)
        assert advisor.counters["advised"] > 0
        marked[learn_as] = int(agent.buffer.demonstrations.sum())
    assert marked["actions"] == 0 and marked["auto"] > 0
    table = make_agent("qlearning", env.observation_space, env.action_space, seed=0)
    advisor = LLMAdvisor({"source": "oracle", "probability": 1.0, "replace": "any"}, seed=0)
    train(table, env, steps=60, seed=0, progress=False, advisor=advisor)  # auto: as actions
    assert advisor.counters["advised"] > 0


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
                                         "demonstrations or auto \\(got learn_as: actions\\)"):
        AdvisorConfig(learn_as="actions", until_confident=True)
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
                       hidden_sizes=[16], learning_starts=40, batch_size=16, n_step=4)
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


def test_dqn_adds_the_n_step_huber_term_toward_the_segment_returns():
    """Q = (1, 0, 0.5) everywhere, gamma 0.99, three marked steps of reward 0.5 ending in a
    terminal state; n = 2: targets 0.5 + 0.99 * 0.5 + 0.99^2 * 1 (then bootstrapping),
    0.5 + 0.99 * 0.5 (the segment ends in the terminal state), 0.5."""
    huber = {0: 0.5 * (0.5 + 0.99 * 0.5 + 0.99 ** 2 - 1.0) ** 2,
             1: 0.5 * (0.5 + 0.99 * 0.5 - 0.0) ** 2, 2: 0.0}
    losses = {}
    for n_step in (1, 2):
        agent = _agent(margin_weight=0.0, n_step=n_step)
        with torch.no_grad():
            for net in (agent.q_net, agent.target_net):
                net[-1].weight.zero_()
                net[-1].bias.copy_(torch.tensor([1.0, 0.0, 0.5]))
        _fill(agent, [True, True, True])
        draw = np.random.default_rng()
        draw.bit_generator.state = agent.rng.bit_generator.state
        idx = draw.integers(0, 3, size=(1, 3))[0]
        agent.train_steps(1)
        losses[n_step] = agent.last_loss
    assert losses[2] - losses[1] == pytest.approx(np.mean([huber[i] for i in idx]), rel=1e-5)


def test_a_users_own_override_marks_its_advice_as_demonstrations():
    class EveryOtherStep:  # advises the lowest legal move on every other step
        marks_demonstrations = True

        def bind(self, env):
            self.calls, self.advised = 0, False

        def __call__(self, policy, obs, legal_moves, action, progress):
            self.calls += 1
            self.advised = self.calls % 2 == 0
            return min(legal_moves) if self.advised else action

    env = MazeEnv(maze="umaze")
    agent = make_agent("dqn", env.observation_space, env.action_space, seed=0,
                       hidden_sizes=[8], learning_starts=1000)
    train(agent, env, steps=40, seed=0, progress=False, advisor=EveryOtherStep())
    assert agent.buffer.demonstrations[:40].tolist() == [0.0, 1.0] * 20


@pytest.mark.parametrize("kind", ["qlearning", "random"])
def test_demonstrations_on_an_agent_that_cannot_use_them_is_a_config_error(tmp_path, kind):
    from test_experiments import tiny_config

    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    data = tiny_config(tmp_path, agents=[{"type": kind, "advisor": {
        "source": "oracle", "learn_as": "demonstrations"}}])
    with pytest.raises(ConfigError, match=rf"x.yaml: agents\.0\.advisor\.learn_as: advisor "
                                          rf"learn_as: demonstrations needs .* agent is {kind}"):
        experiment_from_dict(data, "x.yaml")
    data["agents"] = [{"type": "dqn", "advisor": {"source": "oracle",
                                                  "learn_as": "demonstrations"}}]
    experiment_from_dict(data, "x.yaml")
