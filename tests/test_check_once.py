"""Check once, trust inside (docs/DESIGN.md, issue 53): an agent checks its spaces once when
training starts, not every step. Spies count the agent-side check functions while DQN,
Q-learning and an SB3 PPO agent train and act on langadapt/Maze-v0 through
LanguageObservation; the counts are the same for 100 steps as for 300."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import pytest
from adapter_fixtures import CountingEncoder

from langadapt import adapters, agents
from langadapt.agents import base, loop, training

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Every agent-side check: (owner, name).
CHECKS = [(base.Agent, "check_obs"), (base.Agent, "check_input"),
          (base.Agent, "check_transition"), (base.Agent, "check_action"),
          (base.Agent, "legal_mask"), (base, "check_legal_moves"), (base, "check_action"),
          (base, "check_count"), (loop, "check_count"), (training, "check_count"),
          (loop, "check_env"), (training, "check_env")]
PER_STEP = ("check_obs", "check_input", "check_transition", "check_action", "legal_mask",
            "check_legal_moves")


def maze() -> gym.Env:
    env = gym.make("langadapt/Maze-v0", maze="umaze")
    return adapters.LanguageObservation(env, adapters.make("language", env,
                                                           encoder=CountingEncoder()))


def counted(monkeypatch, run, *args, **kwargs) -> tuple[dict[str, int], Any]:
    """The calls of each check while ``run(*args, **kwargs)`` runs, and what it returned."""
    counts: dict[str, int] = {}
    for owner, name in CHECKS:
        real = getattr(owner, name)

        def spy(*args, _real=real, _name=name, **kwargs):
            counts[_name] = counts.get(_name, 0) + 1
            return _real(*args, **kwargs)

        monkeypatch.setattr(owner, name, spy)
    result = run(*args, **kwargs)
    monkeypatch.undo()
    return counts, result


@pytest.mark.parametrize("kind, params", [
    ("dqn", dict(learning_starts=20, hidden_sizes=[16], batch_size=8, train_freq=1)),
    ("qlearning", {}),
])
def test_training_and_evaluation_check_at_their_start_not_per_step(monkeypatch, kind, params):
    figures = []
    for steps in (100, 300):
        env = maze()
        agent = agents.make_agent(kind, env.observation_space, env.action_space, seed=0,
                                  **params)
        trained, _ = counted(monkeypatch, agents.train, agent, env, steps=steps,
                             eval_every_steps=50, eval_episodes=2, progress=False)
        evaluated, records = counted(monkeypatch, agents.evaluate, agent, env, 3, seed=0)
        assert sum(r.length for r in records) >= 3
        figures.append((trained, evaluated))
    assert figures[0] == figures[1]  # independent of the number of steps
    trained, evaluated = figures[0]
    assert not {name for name in trained if name in PER_STEP}
    assert trained["check_env"] == 2  # the training env and the evaluation env, once each
    assert sum(trained.values()) <= 12  # train's arguments, the budget, the horizon
    assert evaluated == {"check_count": 4, "check_env": 1}  # evaluate's own arguments


def test_a_direct_call_still_checks_its_inputs():
    env = maze()
    agent = agents.make_agent("dqn", env.observation_space, env.action_space)
    with pytest.raises(ValueError, match=r"observation has shape \(3,\)"):
        agent.act([0.0, 0.0, 0.0], [0, 1])
    with pytest.raises(ValueError, match="repeat an action"):
        agent.act([0.0] * agent.obs_shape[0], [1, 1])


def test_an_sb3_ppo_agent_acts_without_per_step_checks(monkeypatch):
    pytest.importorskip("stable_baselines3")
    figures = []
    for steps in (64, 192):
        env = maze()
        agent = agents.make_agent("sb3", env.observation_space, env.action_space, seed=0,
                                  algorithm="PPO", n_steps=32, batch_size=32, n_epochs=1,
                                  deterministic=False)
        trained, _ = counted(monkeypatch, agents.train, agent, env, steps=steps,
                             eval_every_steps=32, eval_episodes=1, progress=False)
        assert not {name for name in trained if name in PER_STEP}
        figures.append(sum(trained.values()))
    assert figures[0] == figures[1] <= 12
