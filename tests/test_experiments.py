"""Experiment files, the runner, the report and the installed `langadapt` command."""

from __future__ import annotations

import csv
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import run_cli, started_runs

from langadapt.experiments.config import experiment_from_dict, load_config
from langadapt.experiments.report import write_report
from langadapt.experiments.results import read_episodes
from langadapt.experiments.runner import finished_runs, run_experiment, runs_of
from langadapt.experiments.schema import ConfigError
from langadapt.experiments.stats import summarise

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))
LANGADAPT = Path(sys.executable).parent / "langadapt"


def tiny_config(tmp_path: Path, **changes) -> dict:
    """A two-seed umaze experiment small enough to run in seconds."""
    data = {
        "name": "tiny",
        "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
        "adapters": [{"type": "raw"}, {"type": "language"}],
        "agents": [{"type": "qlearning"}, {"type": "random"}],
        "training": {"episodes": 6},
        "seeds": 2,
        "evaluation": {"every": 3, "episodes": 2, "final_episodes": 3},
        "output": str(tmp_path / "out"),
        "cache_dir": str(tmp_path / "cache"),
    }
    data.update(changes)
    return data


def write_yaml(path: Path, data) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ----------------------------------------------------------------------------- validation


def test_every_shipped_config_is_valid():
    names = {path.name for path in CONFIGS}
    assert {
        "quickstart.yaml",
        "sailing.yaml",
        "maze_umaze.yaml",
        "maze_double_t.yaml",
        "maze_medium.yaml",
        "maze_large.yaml",
        "cartpole.yaml",
    } <= names
    for path in CONFIGS:  # the GRPO files too: experiments with an agent of type grpo
        config = load_config(path)
        assert config.seed_list, path


def test_missing_file_is_named(tmp_path):
    with pytest.raises(ConfigError, match="no-such.yaml: no such experiment file"):
        load_config(tmp_path / "no-such.yaml")


def test_invalid_yaml_is_named(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("name: x\nadapters: [raw\n")
    with pytest.raises(ConfigError, match="broken.yaml: not valid YAML"):
        load_config(path)


def test_unknown_environment_lists_the_known_ones(tmp_path):
    path = write_yaml(
        tmp_path / "e.yaml", tiny_config(tmp_path, environment={"id": "langadapt/Nope-v0"})
    )
    with pytest.raises(ConfigError) as error:
        load_config(path)
    message = str(error.value)
    assert "e.yaml" in message and "environment.id" in message and "Nope-v0" in message
    for known in ("langadapt/Maze-v0", "langadapt/Sailing-v0", "langadapt/CartPole-v0"):
        assert known in message


def test_unknown_adapter_and_agent_names_list_the_valid_ones(tmp_path):
    bad_adapter = write_yaml(
        tmp_path / "a.yaml", tiny_config(tmp_path, adapters=[{"type": "telepathy"}])
    )
    with pytest.raises(ConfigError) as error:
        load_config(bad_adapter)
    assert "adapters.0.type" in str(error.value)
    assert "'raw', 'language' or 'llm'" in str(error.value)
    bad_agent = write_yaml(tmp_path / "b.yaml", tiny_config(tmp_path, agents=[{"type": "ppo"}]))
    with pytest.raises(ConfigError) as error:
        load_config(bad_agent)
    assert "agents.0.type" in str(error.value)
    assert "'qlearning', 'dqn'" in str(error.value) and "'random'" in str(error.value)


def test_unknown_keys_are_errors_with_their_path(tmp_path):
    data = tiny_config(tmp_path)
    data["evaluation"]["evry"] = 3
    data["colour"] = "blue"
    with pytest.raises(ConfigError) as error:
        experiment_from_dict(data, "mine.yaml")
    message = str(error.value)
    assert "mine.yaml" in message
    assert "evaluation.evry: unknown key" in message
    assert "colour: unknown key" in message


def test_bad_agent_hyperparameter_is_named(tmp_path):
    data = tiny_config(tmp_path, agents=[{"type": "qlearning", "params": {"alfa": 0.5}}])
    with pytest.raises(ConfigError, match=r"agents\.0\.params\.alfa: unknown key"):
        experiment_from_dict(data, "x.yaml")


def test_training_needs_exactly_one_length(tmp_path):
    data = tiny_config(tmp_path, training={"episodes": 3, "steps": 100})
    with pytest.raises(ConfigError, match="exactly one of episodes or steps"):
        experiment_from_dict(data, "x.yaml")


def test_duplicate_adapter_names_need_labels(tmp_path):
    data = tiny_config(tmp_path, adapters=[{"type": "raw"}, {"type": "raw"}])
    with pytest.raises(ConfigError, match="raw appears more than once"):
        experiment_from_dict(data, "x.yaml")
    data = tiny_config(tmp_path, adapters=[{"type": "raw"}, {"type": "raw", "label": "raw2"}])
    assert [a.name for a in experiment_from_dict(data).adapters] == ["raw", "raw2"]


# ----------------------------------------------------------------------------- running


@pytest.fixture(scope="module")
def finished_tiny_run(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("tiny")
    config = experiment_from_dict(tiny_config(tmp_path))
    out = run_experiment(config, progress=False, log=lambda _: None)
    return config, out


def test_a_run_writes_every_output_file(finished_tiny_run):
    _, out = finished_tiny_run
    for name in (
        "config.yaml",
        "episodes.csv",
        "summary.csv",
        "summary.md",
        "learning_curves.png",
        "final_returns.png",
    ):
        assert (out / name).is_file() and (out / name).stat().st_size > 0, name


def test_episode_rows_match_the_experiment(finished_tiny_run):
    config, out = finished_tiny_run
    episodes = read_episodes(out / "episodes.csv")
    combinations = len(runs_of(config))
    assert combinations == 2 * 2 * 2
    train = [e for e in episodes if e.phase == "train"]
    final = [e for e in episodes if e.phase == "final"]
    evals = [e for e in episodes if e.phase == "eval"]
    learning = combinations // 2  # the random agent learns nothing: no training, final only
    assert {e.agent for e in train + evals} == {"qlearning"}
    assert len(train) == config.training.episodes * learning
    assert len(final) == config.evaluation.final_episodes * combinations
    # evaluations after training episodes 3 and 6, two greedy episodes each
    assert len(evals) == 2 * config.evaluation.episodes * learning
    assert sorted({e.episode for e in evals}) == [3, 6]
    assert {(e.adapter, e.agent, e.seed) for e in episodes} == {
        (r.adapter.name, r.agent.name, r.seed) for r in runs_of(config)
    }


def test_summary_equals_a_recomputation_from_the_csv(finished_tiny_run):
    config, out = finished_tiny_run
    with open(out / "episodes.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    with open(out / "summary.csv", newline="") as handle:
        summary = {(r["adapter"], r["agent"]): r for r in csv.DictReader(handle)}
    assert len(summary) == 4
    for (adapter, agent), row in summary.items():
        mine = [r for r in rows if r["adapter"] == adapter and r["agent"] == agent]
        finals = [r for r in mine if r["phase"] == "final"]
        per_seed = {}
        for r in finals:
            per_seed.setdefault(r["seed"], []).append(float(r["return"]))
        seed_means = [sum(v) / len(v) for v in per_seed.values()]
        assert float(row["final_return_mean"]) == pytest.approx(
            sum(seed_means) / len(seed_means), abs=1e-4
        )
        success = sum(int(r["success"]) for r in finals) / len(finals)
        assert float(row["final_success_rate"]) == pytest.approx(success, abs=1e-4)
        assert int(row["llm_calls"]) == sum(int(r["llm_calls"]) for r in mine)
        assert int(row["cache_hits"]) == sum(int(r["cache_hits"]) for r in mine)
        assert int(row["seeds"]) == 2
        if len(set(seed_means)) > 1:
            assert float(row["final_return_low"]) < float(row["final_return_high"])
    markdown = (out / "summary.md").read_text()
    assert "| raw | qlearning | 2 |" in markdown


def test_report_rebuilds_an_identical_summary(finished_tiny_run, tmp_path):
    _, out = finished_tiny_run
    copy = tmp_path / "copy"
    shutil.copytree(out, copy)
    for name in ("summary.csv", "summary.md", "learning_curves.png", "final_returns.png"):
        (copy / name).unlink()
    write_report(copy, log=None)
    for name in ("summary.csv", "summary.md"):
        assert (copy / name).read_text() == (out / name).read_text()
    assert (copy / "learning_curves.png").is_file()


def test_an_existing_results_folder_is_protected(finished_tiny_run, tmp_path):
    config, out = finished_tiny_run
    with pytest.raises(ConfigError, match="already holds results of this experiment"):
        run_experiment(config, progress=False, log=lambda _: None)
    longer = config.training.model_copy(update={"episodes": 7})
    other = config.model_copy(update={"training": longer})
    with pytest.raises(ConfigError, match="holds the results of a different experiment"):
        run_experiment(other, out_dir=out, resume=True, progress=False, log=lambda _: None)
    assert (out / "summary.csv").is_file()  # nothing already written was lost


def test_resume_with_more_seeds_keeps_the_finished_runs_and_fewer_are_refused(tmp_path,
                                                                             monkeypatch):
    config = experiment_from_dict(tiny_config(tmp_path, agents=[{"type": "random"}], seeds=[0]))
    out = run_experiment(config, progress=False, log=lambda _: None)
    before = set(finished_runs(out))
    started = started_runs(monkeypatch)
    more = config.model_copy(update={"seeds": [0, 1]})
    run_experiment(more, out_dir=out, resume=True, progress=False, log=lambda _: None)
    assert set(started) == {r.key for r in runs_of(more)} - before and started
    assert {e.seed for e in read_episodes(out / "episodes.csv")} == {0, 1}
    with pytest.raises(ConfigError, match=r"changed: seeds"):
        run_experiment(config, out_dir=out, resume=True, progress=False, log=lambda _: None)
    other = config.model_copy(update={"seeds": [1]})  # not a superset: refused too
    with pytest.raises(ConfigError, match=r"changed: seeds"):
        run_experiment(other, out_dir=out, resume=True, progress=False, log=lambda _: None)


def test_resume_after_a_crash_redoes_only_unfinished_runs(tmp_path, monkeypatch):
    config = experiment_from_dict(tiny_config(tmp_path, agents=[{"type": "qlearning"}]))
    started = started_runs(monkeypatch, finished_before_crash=2)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, progress=False, log=lambda _: None)
    out = config.output_dir
    finished = set(finished_runs(out))
    assert finished == set(started[:2])
    stamps = {key: (out / "runs" / key / "episodes.csv").stat().st_mtime_ns for key in finished}

    started = started_runs(monkeypatch)
    run_experiment(config, resume=True, progress=False, log=lambda _: None)
    assert set(started) == {r.key for r in runs_of(config)} - finished
    for key, stamp in stamps.items():
        assert (out / "runs" / key / "episodes.csv").stat().st_mtime_ns == stamp
    episodes = read_episodes(out / "episodes.csv")
    assert len([e for e in episodes if e.phase == "train"]) == 6 * len(runs_of(config))


def test_force_replaces_and_seeds_count_expands(tmp_path):
    config = experiment_from_dict(tiny_config(tmp_path, agents=[{"type": "random"}], seeds=[4, 7]))
    assert config.seed_list == [4, 7]
    out = run_experiment(config, progress=False, log=lambda _: None)
    stale = out / "runs" / "old__run__seed9"
    stale.mkdir()
    (out / "notes.txt").write_text("mine")
    run_experiment(config, force=True, progress=False, log=lambda _: None)
    seeds = {e.seed for e in read_episodes(out / "episodes.csv")}
    assert seeds == {4, 7}
    assert not stale.exists()  # the earlier results were replaced ...
    assert (out / "notes.txt").read_text() == "mine"  # ... and nothing else was touched


def test_force_never_removes_a_folder_that_holds_no_results(tmp_path):
    precious = tmp_path / "project"
    precious.mkdir()
    (precious / "thesis.tex").write_text("years of work")
    config = experiment_from_dict(tiny_config(tmp_path, agents=[{"type": "random"}]))
    with pytest.raises(ConfigError, match="not a langadapt results folder"):
        run_experiment(config, out_dir=precious, force=True, progress=False, log=lambda _: None)
    assert (precious / "thesis.tex").read_text() == "years of work"
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    with pytest.raises(ConfigError, match="is a file; expected a results folder"):
        run_experiment(config, out_dir=a_file, force=True, progress=False, log=lambda _: None)


def test_bad_environment_parameters_fail_before_anything_is_written(tmp_path):
    config = experiment_from_dict(
        tiny_config(tmp_path, environment={"id": "langadapt/Maze-v0", "params": {"maze": "nope"}})
    )
    with pytest.raises(ValueError, match="nope"):
        run_experiment(config, progress=False, log=lambda _: None)
    assert not config.output_dir.exists()


def test_summary_of_nothing_reached_says_never(tmp_path):
    episodes_file = tmp_path / "episodes.csv"
    episodes_file.write_text(
        "adapter,agent,seed,phase,episode,return,length,success,wall_time,llm_calls,cache_hits,"
        "llm_fallbacks\n"
        "raw,random,0,train,1,-0.1,100,0,0.01,0,0,0\n"
        "raw,random,0,final,1,-0.1,100,0,0.01,0,0,0\n"
    )
    (row,) = summarise(read_episodes(episodes_file), threshold=None)
    assert row.seeds_reaching_threshold == 0 and math.isnan(row.episodes_to_threshold)
    assert math.isnan(row.final_return_low)


# ----------------------------------------------------------------------------- the command


# In this process (tests/test_cli.py runs the installed command itself).
def test_help_works_for_every_command(capsys):
    code, out, _ = run_cli(capsys, "--help")
    assert code == 0
    for command in ("run", "describe", "prerender", "report", "bench"):
        assert command in out
        code, sub, _ = run_cli(capsys, command, "--help")
        assert code == 0 and "usage: langadapt " + command in sub


def test_describe_prints_sample_states(capsys):  # given states: tests/test_cli.py
    code, out, err = run_cli(capsys, "describe", "sailing", "--steps", "3")
    assert code == 0, err
    assert len(out.strip().splitlines()) == 4
    assert "wind" in out


def test_cli_reports_bad_input_plainly(tmp_path, capsys):
    cases = {
        ("run", str(tmp_path / "nope.yaml")): "no such experiment file",
        ("describe", "maze", "--state", "1,2,3"): "shape (2,)",
        ("describe", "chess"): "maze",
        ("prompt", "chess", "--role", "policy"): "unknown environment 'chess'",
    }
    for args, message in cases.items():
        code, _, err = run_cli(capsys, *args)
        assert code == 2 and message in err and "Traceback" not in err, (args, err)


def test_per_adapter_hyperparameters_override_and_are_checked(tmp_path):
    agent = {
        "type": "qlearning",
        "params": {"alpha": 0.2},
        "per_adapter": {"raw": {"bins": 4, "bounds": [[0, 4], [0, 4]]}},
    }
    config = experiment_from_dict(tiny_config(tmp_path, agents=[agent]))
    assert config.agents[0].params_for("raw") == {
        "alpha": 0.2,
        "bins": 4,
        "bounds": [[0, 4], [0, 4]],
    }
    assert config.agents[0].params_for("language") == {"alpha": 0.2}
    unknown = dict(agent, per_adapter={"rwa": {"bins": 4}})
    with pytest.raises(ConfigError, match="per_adapter names rwa, expected adapter names"):
        experiment_from_dict(tiny_config(tmp_path, agents=[unknown]))
    bad = dict(agent, per_adapter={"raw": {"bins": 0}})
    with pytest.raises(ConfigError, match=r"agents\.0\.per_adapter\.raw\.bins"):
        experiment_from_dict(tiny_config(tmp_path, agents=[bad]), "x.yaml")


@pytest.mark.heavy
def test_describe_with_the_embedded_llm_names_its_backend(tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", LANGADAPT_CACHE_DIR=str(tmp_path))
    result = subprocess.run(
        [str(LANGADAPT), "describe", "maze", "--maze", "umaze", "--adapter", "llm",
         "--backend", "llamacpp", "--state", "1,1"],
        capture_output=True, text=True, cwd=ROOT, env=env, timeout=300,
    )
    assert result.returncode == 0, result.stderr
    header, line = result.stdout.strip().splitlines()
    assert header.startswith("# LLM backend: llamacpp, model SmolLM2-135M-Instruct")
    assert line.startswith("state [1.0, 1.0]: ") and len(line) > len("state [1.0, 1.0]: ") + 10


def test_parallel_jobs_give_the_same_episodes_as_one_process(finished_tiny_run, tmp_path):
    config, out = finished_tiny_run
    parallel = config.model_copy(update={"output": str(tmp_path / "parallel")})
    run_experiment(parallel, jobs=2, progress=False, log=lambda _: None)

    def without_wall_time(folder: Path) -> list[tuple]:
        with open(folder / "episodes.csv", newline="") as handle:
            return [
                tuple(v for k, v in row.items() if k != "wall_time")
                for row in csv.DictReader(handle)
            ]

    assert without_wall_time(parallel.output_dir) == without_wall_time(out)


@pytest.mark.parametrize(
    ("seeds", "message"),
    [
        ([], "seeds: the seed list is empty"),
        ([1, 1], "seeds: seeds must be unique, 1 appears more than once"),
        ([-1], r"seeds: seeds must be between 0 and 1000000000, got \[-1\]"),
        (0, "seeds: a seed count must be between 1 and 1000, got 0"),
    ],
)
def test_unusable_seeds_are_named(tmp_path, seeds, message):
    with pytest.raises(ConfigError, match=message):
        experiment_from_dict(tiny_config(tmp_path, seeds=seeds), "x.yaml")
    assert experiment_from_dict(tiny_config(tmp_path, seeds=3)).seed_list == [0, 1, 2]


@pytest.mark.parametrize(
    ("adapter", "message"),
    [
        ({"type": "language", "settings": {"describr_options": {}}},
         r"adapters\.0\.settings\.describr_options: unknown key"),
        ({"type": "raw", "settings": {"bins": 3}}, r"adapters\.0\.settings\.bins: unknown key"),
        ({"type": "llm", "settings": {"backend": "gpt"}},
         r'adapters\.0\.settings\.backend="gpt": input should be '),
        ({"type": "llm", "settings": {"temperatur": 0.5}},
         r"adapters\.0\.settings\.temperatur: unknown key"),
        ({"type": "llm", "settings": {"backend": "ollama", "action_history_length": -1}},
         r"adapters\.0\.settings\.action_history_length=-1: input should be greater"),
        ({"type": "raw", "label": "raw/x"}, r'adapters\.0\.label="raw/x": string should match'),
        ({"type": "raw", "label": "a__b"}, r'adapters\.0\.label="a__b": string should match'),
    ],
)
def test_bad_adapter_settings_and_labels_fail_when_the_file_is_read(tmp_path, adapter, message):
    with pytest.raises(ConfigError, match=message):
        experiment_from_dict(tiny_config(tmp_path, adapters=[adapter]), "x.yaml")


def test_report_refuses_folders_that_are_not_results(finished_tiny_run, tmp_path):
    _, out = finished_tiny_run
    broken = tmp_path / "broken"
    shutil.copytree(out, broken)
    (broken / "episodes.csv").write_text("adapter,agent\nraw,random\n")
    with pytest.raises(ValueError, match="missing columns seed"):
        write_report(broken, log=None)
    (broken / "config.yaml").write_text("")
    with pytest.raises(ConfigError, match="config.yaml: expected a mapping"):
        write_report(broken, log=None)


def test_cli_names_bad_options_and_unreachable_servers_without_a_traceback(capsys):
    cases = {
        ("describe", "sailing", "--maze", "umaze"): "--maze 'umaze' is for the maze",
        ("describe", "maze", "--steps", "-1"): "--steps -1: expected a number of steps >= 0",
        ("describe", "maze", "--model", "llama3.2"): "--model only apply with --adapter llm",
        ("describe", "maze", "--adapter", "llm", "--backend", "ollama",
         "--host", "http://127.0.0.1:9"): "http://127.0.0.1:9",
    }
    for args, message in cases.items():
        code, _, err = run_cli(capsys, *args)
        assert code == 2, (args, err)
        assert message in err and "Traceback" not in err, err
