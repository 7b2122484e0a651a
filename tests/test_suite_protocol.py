"""The evaluation protocol of a suite: held-out seeds, the suite config and report, and the
statistics through rliable."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import yaml

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.one_run import HeldOutEpisodes
from langadapt.experiments.results import EPISODE_COLUMNS, runs_of
from langadapt.experiments.schema import ConfigError

rliable = pytest.importorskip("rliable")

SUITE = "langadapt/BabyAI-MixedTrainLocal-v0"


def _config(**changes):
    data = {
        "name": "protocol",
        "environment": {"id": SUITE, "params": {"goal": "goto"}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "qlearning"}],
        "training": {"steps": 200},
        "seeds": [0, 1],
        "evaluation": {"every": 2, "episodes": 2,
                       "heldout_seeds": {"first": 1_000_000, "count": 4}},
        "cache_dir": "",
    }
    data.update(changes)
    return experiment_from_dict(data)


def test_evaluation_seeds_overlapping_training_seeds_are_refused_with_the_overlap_named():
    with pytest.raises(ConfigError, match=r"1000003: run seed 1000003 \(its first training"):
        _config(seeds=[0, 1_000_003])
    held = {"every": 2, "heldout_seeds": {"first": 100_000, "count": 10}}
    with pytest.raises(ConfigError, match=r"100001: run seed 1 \+ 100000 \(its evaluations "
                                          r"during training\)"):
        _config(evaluation=held)
    _config(evaluation={"heldout_seeds": {"first": 100_000, "count": 10}})  # none during


def test_final_episodes_must_agree_with_the_held_out_count():
    with pytest.raises(ConfigError, match="final_episodes=20 but heldout_seeds.count=4"):
        _config(evaluation={"final_episodes": 20, "heldout_seeds": {"first": 10**6,
                                                                    "count": 4}})
    assert _config().evaluation.final_episodes == 4


def test_held_out_seeds_never_reach_training_and_every_run_plays_the_same_episodes(monkeypatch):
    pytest.importorskip("minigrid")
    from langadapt.environments.minigrid import MiniGridBridge
    from langadapt.experiments.one_run import train_run

    resets: list[tuple[int | None, str]] = []
    original = MiniGridBridge.reset

    def recording_reset(self, *, seed=None, options=None):
        out = original(self, seed=seed, options=options)
        resets.append((seed, self.mission))
        return out

    monkeypatch.setattr(MiniGridBridge, "reset", recording_reset)
    config = _config()
    held = list(config.evaluation.heldout_seeds.seeds)
    finals = []
    for run in runs_of(config):
        resets.clear()
        rows = []
        train_run(config, run, rows.append)
        seeds = [seed for seed, _ in resets]
        assert seeds[-len(held):] == held  # the final evaluation: the held-out seeds in order
        training = seeds[:-len(held)]
        assert not set(training) & set(held)  # never before it
        assert run.seed in training and run.seed + 100_000 in training
        assert len([r for r in rows if r["phase"] == "final"]) == len(held)
        finals.append([mission for _, mission in resets[-len(held):]])
    assert finals[0] == finals[1]  # seed 0 and seed 1 evaluate on the same episodes


def test_held_out_episodes_restart_on_a_seeded_reset_and_refuse_more_than_held_out():
    gymnasium = pytest.importorskip("gymnasium")
    env = HeldOutEpisodes(gymnasium.make("langadapt/Maze-v0"), [7, 8])
    env.reset(seed=123)
    env.reset()
    with pytest.raises(ValueError, match="only 2 held-out seeds"):
        env.reset()
    env.reset(seed=0)  # a new evaluation starts at the first seed again
    assert env.next_index == 1


def test_iqm_and_intervals_equal_rliables_on_a_fixed_array():
    from rliable import library, metrics

    from langadapt.experiments.stats import aggregate_estimates

    scores = np.array([[0.1, 0.5, 0.9, 0.3, 0.0], [0.2, 0.6, 1.0, 0.35, 0.05],
                       [0.15, 0.4, 0.8, 0.5, 0.1], [0.3, 0.7, 0.95, 0.2, 0.0],
                       [0.0, 0.55, 0.85, 0.4, 0.2]])
    np.random.seed(0)
    points, intervals = library.get_interval_estimates(
        {"x": scores}, lambda m: np.array([metrics.aggregate_iqm(m), metrics.aggregate_mean(m)]),
        reps=2000)
    ours = aggregate_estimates(scores, reps=2000, seed=0)
    assert ours["iqm"] == pytest.approx((points["x"][0], *intervals["x"][:, 0]))
    assert ours["mean"] == pytest.approx((points["x"][1], *intervals["x"][:, 1]))
    assert ours["mean"][0] == pytest.approx(scores.mean())
    assert ours == aggregate_estimates(scores, reps=2000, seed=0)  # seeded: a rebuilt report


def test_a_suite_is_one_experiment_per_task_and_an_unknown_goal_names_the_five(tmp_path):
    from langadapt.experiments.one_run import make_env
    from langadapt.experiments.runner import run_experiment
    from langadapt.experiments.suite import run_suite, task_configs

    config = _config(tasks={"goto": {"goal": "goto"}, "bad": {"goal": "fetch"}},
                     environment={"id": SUITE, "params": {"num_dists": 2}},
                     output=str(tmp_path / "suite"))
    tasks = task_configs(config)
    assert tasks["goto"].environment.params == {"num_dists": 2, "goal": "goto"}
    assert tasks["goto"].output_dir == tmp_path / "suite" / "goto"
    assert tasks["goto"].tasks is None and tasks["goto"].name == "protocol-goto"
    with pytest.raises(ConfigError, match="goal='fetch': expected one of goto, pickup, open, "
                                          "putnext, pick_up_seq_go_to"):
        make_env(tasks["bad"])
    with pytest.raises(ConfigError, match="protocol, task bad: environment.params: goal='fetch'"):
        run_suite(config)  # before any task trains or anything is written
    assert not (tmp_path / "suite").exists()
    with pytest.raises(ConfigError, match="is a suite"):
        run_experiment(config)
    with pytest.raises(ConfigError, match="tasks"):
        _config(tasks={})


def _episodes(path: Path, runs: dict[tuple[str, str, int], list[int]],
              best: dict[tuple[str, str, int], list[int]] | None = None) -> None:
    path.parent.mkdir(parents=True)
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, EPISODE_COLUMNS)
        writer.writeheader()
        for phase, table in (("final", runs), ("best", best or {})):
            for (adapter, agent, seed), successes in table.items():
                for success in successes:
                    writer.writerow({"adapter": adapter, "agent": agent, "seed": seed,
                                     "phase": phase, "episode": 0, "return": float(success),
                                     "length": 5, "success": success, "wall_time": 0.1,
                                     "llm_calls": 0, "cache_hits": 0, "llm_fallbacks": 0})


def test_the_suite_report_gives_per_task_success_the_suite_iqm_and_balrogs_figures(tmp_path):
    from langadapt.experiments.suite import SUITE_FILE, write_suite_report

    config = _config(tasks={"goto": {"goal": "goto"}, "open": {"goal": "open"}},
                     output=str(tmp_path))
    (tmp_path / SUITE_FILE).write_text(yaml.safe_dump(config.resolved(), sort_keys=False))
    _episodes(tmp_path / "goto" / "episodes.csv",
              {("raw", "dqn", 0): [1, 1, 0, 0], ("raw", "dqn", 1): [1, 1, 1, 1],
               ("raw", "llm_policy", 0): [1, 0, 0, 0]},
              best={("raw", "dqn", 0): [1, 1, 1, 1], ("raw", "dqn", 1): [1, 1, 1, 1]})
    _episodes(tmp_path / "open" / "episodes.csv",
              {("raw", "dqn", 0): [0, 0, 0, 0], ("raw", "dqn", 1): [1, 0, 0, 0],
               ("raw", "llm_policy", 0): [1, 1, 0, 0]},
              best={("raw", "dqn", 0): [1, 1, 0, 0], ("raw", "dqn", 1): [1, 0, 0, 0]})
    markdown = write_suite_report(tmp_path, log=None, task_reports=False)
    rows = {line.split(" | ")[1]: line for line in markdown.splitlines()
            if line.startswith("| raw |")}
    assert " | 75.0 [50.0, 100.0] | 12.5 [0.0, 25.0] | " in rows["dqn"]  # per task, over runs
    assert " | 2 | runs | " in rows["dqn"]  # runs and what the intervals resample
    # one run: the mean over its 8 episodes, no IQM
    assert " | — | 37.5 [" in rows["llm_policy"] and "episodes (one run)" in rows["llm_policy"]
    # the kept best policy: its own row, on the same held-out episodes
    assert " | 100.0 [100.0, 100.0] | 37.5 [25.0, 50.0] | " in rows["dqn (best)"]
    assert "| GPT-4o | 2024-09-24 | 77.6 ± 3.7 | 25 | – | – | – | – | – |" in markdown
    assert ("| Gemini-2.5-Pro-Exp-03-25 | 2025-04-25 | 80.0 ± 5.7 | 10 | 100 | 100 | 100 | 0 "
            "| 100 |") in markdown
    assert "held-out seeds [1000000, 1000004), 4 episodes per task" in markdown
    assert (tmp_path / "performance_profile.png").stat().st_size > 0
    with open(tmp_path / "suite.csv") as handle:
        table = list(csv.DictReader(handle))
    assert {"adapter": "raw", "agent": "dqn", "task": "open", "seed": "1",
            "success_rate": "0.25", "episodes": "4"} in table


def test_without_rliable_the_suite_names_the_extra_and_summaries_say_so(monkeypatch, tmp_path):
    import sys

    from langadapt.experiments.report import seed_scores_markdown
    from langadapt.experiments.suite import run_suite

    monkeypatch.setitem(sys.modules, "rliable", None)  # import rliable now fails
    with pytest.raises(ConfigError, match=r"need rliable .*pip install 'langadapt\[stats\]'"):
        run_suite(_config(tasks={"goto": {"goal": "goto"}}, output=str(tmp_path / "s")))
    assert not (tmp_path / "s").exists()
    from langadapt.experiments.results import Episode

    row = Episode("raw", "dqn", 0, "final", 0, 1.0, 3, True, 0.1, 0, 0)
    assert "pip install 'langadapt[stats]'" in seed_scores_markdown([row])


def test_the_shipped_suite_files_share_tasks_and_held_out_episodes():
    from langadapt.experiments.config import load_config

    configs = Path(__file__).resolve().parents[1] / "configs"
    dqn = load_config(configs / "babyai_suite.yaml")
    llm = load_config(configs / "babyai_suite_llm.yaml")
    assert list(dqn.tasks) == ["goto", "pickup", "open", "putnext", "pick_up_seq_go_to"]
    assert dqn.tasks == llm.tasks and dqn.environment == llm.environment
    assert dqn.environment.params == {"num_dists": 0}
    assert dqn.evaluation.heldout_seeds == llm.evaluation.heldout_seeds
    assert dqn.evaluation.heldout_seeds.count >= 100 and len(dqn.seed_list) == 5
    assert [a.name for a in dqn.adapters] == ["raw", "language", "language_whitened"]
    assert [a.name for a in dqn.agents] == ["maskable_ppo", "dqn"]
    assert dqn.training_for(dqn.agents[0]).n_envs == 8
    assert dqn.evaluation.keep_best
    assert [a.type for a in llm.agents] == ["llm_policy", "random"]
