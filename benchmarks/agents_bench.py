"""Benchmark of the agents: DQN against Stable-Baselines3 on CartPole-v1, tabular Q-learning
on the raw mazes and on discretised raw Sailing.

(a) Throughput: our ``DQNAgent`` (``double_dqn=False``, the algorithm of SB3's DQN) and
    SB3's ``DQN`` train on gymnasium's CartPole-v1 with raw observations and the
    rl-baselines3-zoo hyperparameters for the same number of steps, seed by seed,
    alternating, in this process; the figure is the ratio of environment steps per second
    (ours / SB3) over the paired runs. Both run with ``torch.set_num_threads(1)``.
(b) Best-policy retention (``--keep-best``, not part of ``run()``: about an hour on two
    cores): 10 seeds x 50k steps with the zoo settings, a greedy evaluation of 10 held-out
    episodes every 2,500 steps; our ``train(keep_best=True)`` against SB3 with
    ``EvalCallback`` (best model). Each seed's last and retained policies are then scored by
    the greedy mean return over 20 further held-out episodes; a seed counts at >= 475.
(c) Tabular Q-learning: greedy success rate on the raw mazes (umaze, double_t_maze, medium,
    large) and on raw Sailing discretised into bins.

Stable-Baselines3 is optional: without it the comparisons say so and only our figures run.
``run(quick=True)`` uses fewer seeds and steps (a smoke run, not the published figures).
"""

from __future__ import annotations

import importlib.util
import tempfile
import time
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from ..agents import DQNAgent, QLearningAgent, evaluate, train
from ..environments import MazeEnv, SailingEnv

#: rl-baselines3-zoo hyperparameters for DQN on CartPole-v1 (hyperparams/dqn.yml).
ZOO_CARTPOLE: dict[str, Any] = {
    "learning_rate": 2.3e-3,
    "batch_size": 64,
    "buffer_size": 100_000,
    "learning_starts": 1000,
    "gamma": 0.99,
    "target_update_interval": 10,
    "train_freq": 256,
    "gradient_steps": 128,
    "exploration_fraction": 0.16,
    "exploration_final_eps": 0.04,
}
NET_ARCH = [256, 256]
EVAL_EPISODES = 20
EVAL_SEED = 10_000
SUCCESS_RETURN = 475.0
#: Evaluation schedule of the best-policy retention runs (both libraries).
KEEP_BEST_EVERY_STEPS = 2_500
KEEP_BEST_EPISODES = 10
#: Our evaluations during training reset with seed + this (environments._checks.EVAL_SEED_OFFSET).
HELD_OUT_OFFSET = 100_000

MAZES = ("umaze", "double_t_maze", "medium", "large")
MAZE_Q = {"alpha": 0.5, "gamma": 0.99, "epsilon_decay": 0.97}
#: Sailing observation [x, theta]: x in 20 bins over the river; theta moves in steps of 0.1,
#: so 33 bins centred on -1.6, -1.5, ..., 1.6 give every heading its own bin.
SAILING_Q = {
    "alpha": 0.1,
    "gamma": 0.99,
    "epsilon_decay": 0.995,
    "bins": [20, 33],
    "bounds": [(-11.0, 11.0), (-1.65, 1.65)],
}


def _print(line: str) -> None:
    print(line, flush=True)


def sb3_available() -> bool:
    """Whether Stable-Baselines3 is installed (the comparisons need it)."""
    return importlib.util.find_spec("stable_baselines3") is not None


def greedy_mean(policy: Callable[[np.ndarray], int], episodes: int = EVAL_EPISODES) -> float:
    """Mean return of ``policy`` on CartPole-v1 over ``episodes`` episodes, the first reset
    with ``EVAL_SEED`` (the same held-out starts for every contender)."""
    env = gym.make("CartPole-v1")
    returns = []
    reset_seed: int | None = EVAL_SEED
    for _ in range(episodes):
        obs, _ = env.reset(seed=reset_seed)
        reset_seed = None
        total, done = 0.0, False
        while not done:
            obs, reward, terminated, truncated, _ = env.step(policy(obs))
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return float(np.mean(returns))


# ------------------------------------------------------------------------------- DQN
def ours_cartpole(
    seed: int, steps: int, double_dqn: bool = False, keep_best: bool = False
) -> dict[str, float]:
    """Train our DQN with the zoo settings: training steps/s and the greedy mean of the last
    policy (and, with ``keep_best``, of the retained one)."""
    env = gym.make("CartPole-v1")
    agent = DQNAgent(
        env.observation_space,
        env.action_space,
        dict(ZOO_CARTPOLE, hidden_sizes=NET_ARCH, double_dqn=double_dqn),
        seed=seed,
    )
    schedule = (
        dict(
            keep_best=True,
            eval_every_steps=KEEP_BEST_EVERY_STEPS,
            eval_episodes=KEEP_BEST_EPISODES,
            eval_env=gym.make("CartPole-v1"),
        )
        if keep_best
        else {}
    )
    t0 = time.perf_counter()
    result = train(agent, env, steps=steps, seed=seed, progress=False, **schedule)
    elapsed = time.perf_counter() - t0

    def policy(obs: np.ndarray) -> int:
        return agent.act(obs, None, False)

    out = {"steps_per_s": steps / elapsed, "seconds": elapsed}
    if keep_best:
        out["best_eval_mean"] = greedy_mean(policy)
        out["best_chosen_at_step"] = float(result.best.total_steps)
        agent.restore(result.last_policy)
    out["eval_mean"] = greedy_mean(policy)
    return out


def sb3_cartpole(seed: int, steps: int, keep_best: bool = False) -> dict[str, float]:
    """The same with Stable-Baselines3's DQN (identical hyperparameters and step count);
    ``keep_best`` adds SB3's ``EvalCallback`` with the same schedule and scores its best
    model."""
    from stable_baselines3 import DQN
    from stable_baselines3.common.callbacks import EvalCallback
    from stable_baselines3.common.env_util import make_vec_env

    model = DQN(
        "MlpPolicy",
        gym.make("CartPole-v1"),
        policy_kwargs={"net_arch": NET_ARCH},
        seed=seed,
        verbose=0,
        device="cpu",
        **ZOO_CARTPOLE,
    )
    with tempfile.TemporaryDirectory() as folder:
        callback = None
        if keep_best:
            eval_env = make_vec_env("CartPole-v1", n_envs=1, seed=seed + HELD_OUT_OFFSET)
            callback = EvalCallback(
                eval_env,
                n_eval_episodes=KEEP_BEST_EPISODES,
                eval_freq=KEEP_BEST_EVERY_STEPS,
                best_model_save_path=folder,
                deterministic=True,
                verbose=0,
            )
        t0 = time.perf_counter()
        model.learn(total_timesteps=steps, callback=callback)
        elapsed = time.perf_counter() - t0
        out = {
            "steps_per_s": steps / elapsed,
            "seconds": elapsed,
            "eval_mean": greedy_mean(lambda obs: int(model.predict(obs, deterministic=True)[0])),
        }
        if keep_best:
            best = DQN.load(f"{folder}/best_model.zip", device="cpu")
            out["best_eval_mean"] = greedy_mean(
                lambda obs: int(best.predict(obs, deterministic=True)[0])
            )
    return out


def dqn_benchmark(quick: bool) -> dict[str, float | str]:
    """Part (a): throughput side by side, seed by seed, and each run's greedy mean."""
    steps = 10_000 if quick else 50_000
    seeds = [0] if quick else [0, 1, 2]
    compare = sb3_available()
    _print(f"DQN on CartPole-v1, zoo settings, {steps} steps, torch threads = 1")
    if not compare:
        _print("Stable-Baselines3 is not installed: no comparison (pip install stable-baselines3)")
    _print(
        f"{'seed':>4} {'ours steps/s':>13} {'ours eval':>10} {'SB3 steps/s':>12} {'SB3 eval':>9}"
    )
    ours: dict[int, dict[str, float]] = {}
    sb3: dict[int, dict[str, float]] = {}
    for seed in seeds:
        ours[seed] = ours_cartpole(seed, steps)
        if compare:
            sb3[seed] = sb3_cartpole(seed, steps)
        s = sb3.get(seed)
        _print(
            f"{seed:>4} {ours[seed]['steps_per_s']:>13.0f} {ours[seed]['eval_mean']:>10.1f} "
            + (f"{s['steps_per_s']:>12.0f} {s['eval_mean']:>9.1f}" if s else f"{'-':>12} {'-':>9}")
        )
    ours_seconds = sum(r["seconds"] for r in ours.values())
    out: dict[str, float | str] = {
        "dqn_cartpole_steps": float(steps),
        "dqn_ours_steps_per_s": len(seeds) * steps / ours_seconds,
    }
    for s in seeds:
        out[f"dqn_ours_eval_seed{s}"] = ours[s]["eval_mean"]
    if compare:
        sb3_seconds = sum(r["seconds"] for r in sb3.values())
        out["dqn_sb3_steps_per_s"] = len(seeds) * steps / sb3_seconds
        out["dqn_throughput_ratio"] = sb3_seconds / ours_seconds  # same steps: time ratio
        _print(f"throughput ours / SB3 (seeds {seeds}): {out['dqn_throughput_ratio']:.2f}x")
        for s in seeds:
            out[f"dqn_sb3_eval_seed{s}"] = sb3[s]["eval_mean"]
    return out


def keep_best_benchmark(seeds: list[int], steps: int = 50_000) -> dict[str, float]:
    """Part (b): seeds whose last / retained policy reaches a greedy mean >= 475."""
    compare = sb3_available()
    _print(
        f"DQN on CartPole-v1, zoo settings, {steps} steps, evaluation of {KEEP_BEST_EPISODES} "
        f"episodes every {KEEP_BEST_EVERY_STEPS} steps; greedy mean over {EVAL_EPISODES} "
        "held-out episodes"
    )
    if not compare:
        _print("Stable-Baselines3 is not installed: no comparison (pip install stable-baselines3)")
    _print(f"{'seed':>4} {'ours last':>10} {'ours best':>10} {'SB3 last':>9} {'SB3 best':>9}")
    out: dict[str, float] = {}
    for seed in seeds:
        o = ours_cartpole(seed, steps, keep_best=True)
        s = sb3_cartpole(seed, steps, keep_best=True) if compare else None
        out[f"ours_last_seed{seed}"] = o["eval_mean"]
        out[f"ours_best_seed{seed}"] = o["best_eval_mean"]
        if s is not None:
            out[f"sb3_last_seed{seed}"] = s["eval_mean"]
            out[f"sb3_best_seed{seed}"] = s["best_eval_mean"]
        _print(
            f"{seed:>4} {o['eval_mean']:>10.1f} {o['best_eval_mean']:>10.1f} "
            + (f"{s['eval_mean']:>9.1f} {s['best_eval_mean']:>9.1f}" if s else "")
        )
    for who in ("ours_last", "ours_best", "sb3_last", "sb3_best"):
        values = [out[f"{who}_seed{seed}"] for seed in seeds if f"{who}_seed{seed}" in out]
        if values:
            out[f"{who}_solved"] = float(sum(v >= SUCCESS_RETURN for v in values))
            _print(f"{who}: {sum(v >= SUCCESS_RETURN for v in values)}/{len(values)} seeds >= 475")
    return out


# ------------------------------------------------------------------------ Q-learning
def qlearning_benchmark(quick: bool) -> dict[str, float | str]:
    """Part (c): greedy success of tabular Q-learning on raw mazes and raw Sailing."""

    out: dict[str, float | str] = {}
    seeds = [0, 1] if quick else [0, 1, 2, 3, 4]
    maze_episodes = 100 if quick else 300
    _print(
        f"Q-learning, raw observations, {len(seeds)} seeds, greedy success over "
        f"{EVAL_EPISODES} episodes per seed"
    )
    for name in MAZES:
        env = MazeEnv(maze=name)
        rates, t0 = [], time.perf_counter()
        for seed in seeds:
            agent = QLearningAgent(env.observation_space, env.action_space, MAZE_Q, seed=seed)
            train(agent, env, episodes=maze_episodes, seed=seed, progress=False)
            rates += [r.success for r in evaluate(agent, env, EVAL_EPISODES, seed=EVAL_SEED)]
        rate = float(np.mean(rates))
        out[f"qlearning_maze_{name}_success"] = rate
        _print(
            f"  maze {name:<14} {maze_episodes} episodes: greedy success {rate:.0%} "
            f"({time.perf_counter() - t0:.1f} s)"
        )
    sail_episodes = 500 if quick else 1000
    env = SailingEnv()
    rates, t0 = [], time.perf_counter()
    for seed in seeds:
        agent = QLearningAgent(env.observation_space, env.action_space, SAILING_Q, seed=seed)
        train(agent, env, episodes=sail_episodes, seed=seed, progress=False)
        rates += [r.success for r in evaluate(agent, env, EVAL_EPISODES, seed=EVAL_SEED)]
    rate = float(np.mean(rates))
    out["qlearning_sailing_success"] = rate
    _print(
        f"  sailing (bins {SAILING_Q['bins']}) {sail_episodes} episodes: greedy success "
        f"{rate:.0%} ({time.perf_counter() - t0:.1f} s)"
    )
    return out


def run(quick: bool = False) -> dict[str, float | str]:
    """Run (a) and (c); print a table as it goes and return the named figures."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        out = dqn_benchmark(quick)
    finally:
        torch.set_num_threads(threads)
    out.update(qlearning_benchmark(quick))
    out["mode"] = "quick" if quick else "full"
    return out


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer seeds and steps")
    parser.add_argument(
        "--keep-best", type=int, metavar="SEEDS", help="run part (b) on seeds 0..SEEDS-1 only"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.keep_best:
        result = keep_best_benchmark(list(range(args.keep_best)))
    else:
        result = run(quick=args.quick)
    for key, value in result.items():
        print(f"{key}: {value:.4g}" if isinstance(value, float) else f"{key}: {value}")
