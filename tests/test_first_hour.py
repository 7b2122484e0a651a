"""A researcher's first hour (issue 43): progress inside runs, what runs cost, overrides of
any experiment file, merged suite reports, plots."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import raw_config, run_cli

from langadapt.experiments import runner as progress_module
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment


def test_runs_report_progress_lines_with_episodes_success_and_eta(tmp_path, monkeypatch):
    import threading
    from contextlib import contextmanager

    from langadapt.experiments import one_run

    monkeypatch.setattr(progress_module, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(progress_module, "LINE_SECONDS", 0.0)
    lines: list[str] = []
    train_line_logged = threading.Event()

    def log(line: str) -> None:
        lines.append(line)
        if line.startswith("[") and " train " in line:
            train_line_logged.set()

    real_run_rows = one_run.run_rows

    @contextmanager
    def run_rows_waiting_for_a_status(run_dir, keep=None):
        # the first training row waits until the watcher has reported it: the line is
        # checked whatever the machine's load (60 Q-learning episodes can end within a poll)
        with real_run_rows(run_dir, keep) as writer:
            real_writerow = writer.writerow

            def writerow(row):
                written = real_writerow(row)
                if row["phase"] == "train":
                    train_line_logged.wait(timeout=60)
                return written

            writer.writerow = writerow
            yield writer

    monkeypatch.setattr(one_run, "run_rows", run_rows_waiting_for_a_status)
    config = experiment_from_dict(raw_config(tmp_path, training={"episodes": 60}, seeds=1,
                                             agents=[{"type": "qlearning"}]))
    run_experiment(config, progress=True, log=log)
    status = [line for line in lines if line.startswith("[") and "done; " in line
              and " train " in line]
    assert status, lines
    assert "runs 0/1 done; raw__qlearning__seed0: train " in status[0]
    assert "/60 episodes (ETA " in status[0] and "success " in status[0]


def test_a_run_watch_reads_whole_rows_only_and_shows_llm_calls(tmp_path):
    from langadapt.experiments.results import EPISODE_COLUMNS, runs_of

    config = experiment_from_dict(raw_config(tmp_path, seeds=1, agents=[{"type": "random"}]))
    (run,) = runs_of(config)
    watch = progress_module.watch_for(config, run, tmp_path)
    row = {"adapter": "raw", "agent": "random", "seed": 0, "phase": "final", "episode": 0,
           "return": 1.0, "length": 5, "success": 1, "wall_time": 3.0, "llm_calls": 2,
           "cache_hits": 0, "llm_fallbacks": 0}
    watch.path.parent.mkdir(parents=True)
    with open(watch.path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, EPISODE_COLUMNS)
        writer.writeheader()
        writer.writerow(row)
        handle.write("raw,random,0,fin")  # a row being written: not read yet
    watch.read()
    assert watch.status() == ("raw__random__seed0: final 1/2 episodes (ETA 3 s), success "
                              "100%, 2 LLM calls, ~1.50 s/call")


def test_summary_gives_llm_and_cpu_seconds_per_adapter_and_agent(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path))
    out = run_experiment(config, progress=False, log=lambda _: None)
    with open(out / "summary.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert {row["llm_seconds"] for row in rows} == {"0.0000"}
    assert all(float(row["cpu_seconds"]) > 0 for row in rows)
    assert "| LLM calls | LLM s | CPU s | cache hits |" in (out / "summary.md").read_text()


# ----------------------------------------------------------------------------- overrides


def test_run_a_packaged_suite_with_set_and_tasks(capsys):
    code, out, err = run_cli(capsys, "run", "babyai_suite", "--check",
                             "--set", "training.steps=3000", "--set", "seeds=1",
                             "--tasks", "open,goto")
    assert (code, err) == (0, "")
    assert " x 1 seeds x 2 tasks), " in out


@pytest.mark.parametrize(("options", "message"), [
    (["--set", "training.stesp=3"], "training.stesp: unknown key (did you mean 'steps'?)"),
    (["--set", "trainig.steps=3"], "trainig: unknown key (did you mean 'training'?)"),
    (["--set", "evaluation.every=2.5"], "evaluation.every=2.5: input should be a valid integer"),
    (["--set", "agents.dqm.params.gamma=0.5"], "agents has no item 'dqm' (did you mean 'dqn'?)"),
    (["--set", "agents.dqn.params.gama=0.5"], "unknown key (did you mean 'gamma'?)"),
    (["--set", "seeds.x=1"], "seeds is 5, not a mapping or a list, so it has no key 'x'"),
    (["--set", "training"], "expected KEY=VALUE"),
    (["--tasks", "goto,opne"], "babyai_suite has no task 'opne'; its tasks: goto, pickup, "
                               "open, putnext, pick_up_seq_go_to"),
])
def test_bad_overrides_are_one_message_naming_what_was_expected(capsys, options, message):
    code, _, err = run_cli(capsys, "run", "babyai_suite", "--check", *options)
    assert code == 2 and message in err, err


def test_tasks_of_a_file_without_tasks_and_backend_without_an_llm_are_refused(capsys):
    code, _, err = run_cli(capsys, "run", "quickstart", "--check", "--tasks", "goto")
    assert code == 2 and "quickstart is not a suite (it has no tasks block)" in err
    code, _, err = run_cli(capsys, "run", "quickstart", "--check", "--backend", "openai")
    assert code == 2 and "quickstart has no LLM agent" in err


def test_overrides_are_recorded_in_the_results_folder(tmp_path, capsys):
    code, _, err = run_cli(capsys, "run", "babyai_suite_llm", "--no-progress",
                           "--out", str(tmp_path / "llm"), "--tasks", "goto",
                           "--set", "agents=[{type: random}]",
                           "--set", "evaluation.heldout_seeds.count=2",
                           "--set", f"cache_dir={tmp_path / 'cache'}")
    assert (code, err) == (0, "")
    suite = yaml.safe_load((tmp_path / "llm" / "suite.yaml").read_text())
    assert list(suite["tasks"]) == ["goto"] and suite["evaluation"]["final_episodes"] == 2
    task = yaml.safe_load((tmp_path / "llm" / "goto" / "config.yaml").read_text())
    assert [a["type"] for a in task["agents"]] == ["random"]


def test_backend_options_put_a_users_model_in_every_llm_agent_and_no_key(tmp_path, capsys,
                                                                          monkeypatch):
    from langadapt.experiments import cli_run

    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-not-a-real-key")
    seen = {}
    monkeypatch.setattr(cli_run, "_build_environments",
                        lambda config: seen.setdefault("config", config))
    code, _, err = run_cli(capsys, "run", "babyai_suite_llm", "--check", "--offline",
                           "--backend", "openai", "--model", "my-model", "--base-url",
                           "http://127.0.0.1:9/v1")
    assert (code, err) == (0, "")
    (agent,) = [a for a in seen["config"].agents if a.type == "llm_policy"]
    assert agent.params["backend"] == {"backend": "openai", "model": "my-model",
                                       "base_url": "http://127.0.0.1:9/v1"}
    assert "sk-test" not in yaml.safe_dump(seen["config"].resolved())
    code, _, err = run_cli(capsys, "run", "babyai_suite_llm", "--check", "--backend", "openai")
    assert code == 2 and "agents.0.params.backend: base_url: field required" in err


def test_backend_combines_with_set_on_the_backend_and_api_key_env_names_the_key(capsys,
                                                                               monkeypatch):
    from langadapt.experiments import cli_run

    seen = {}
    monkeypatch.setattr(cli_run, "_build_environments",
                        lambda config: seen.__setitem__("config", config))
    server = ["--backend", "openai", "--model", "m", "--base-url", "http://127.0.0.1:9/v1"]

    def backend(*options: str) -> dict:
        code, _, err = run_cli(capsys, "run", "babyai_suite_llm", "--check", "--offline",
                               *options)
        assert (code, err) == (0, "")
        (agent,) = [a for a in seen["config"].agents if a.type == "llm_policy"]
        return agent.params["backend"]

    assert backend(*server, "--set", "agents.llm_policy.params.backend.api_key_env=null"
                   )["api_key_env"] is None
    assert backend(*server, "--api-key-env", "MY_API_KEY")["api_key_env"] == "MY_API_KEY"
    assert backend(*server, "--api-key-env", "none")["api_key_env"] is None
    # a backend given by name is {backend: name} to a --set inside it
    assert backend("--set", "agents.llm_policy.params.backend.n_threads=1") == {
        "backend": "llamacpp", "n_threads": 1}
    code, _, err = run_cli(capsys, "run", "babyai_suite_llm", "--check", "--api-key-env", "K")
    assert code == 2 and "--api-key-env goes with --backend" in err


def test_init_writes_a_packaged_file_once(tmp_path, capsys):
    code, out, _ = run_cli(capsys, "init", "quickstart", str(tmp_path))
    assert code == 0 and "written:" in out
    from langadapt.experiments.config import load_config

    assert load_config(tmp_path / "quickstart.yaml").name == "quickstart"
    code, _, err = run_cli(capsys, "init", "quickstart", str(tmp_path / "quickstart.yaml"))
    assert code == 2 and "exists" in err
    code, _, err = run_cli(capsys, "init", "quickstrt")
    assert code == 2 and "(did you mean 'quickstart'?)" in err


# ----------------------------------------------------------------------------- suite tables


def _suite(tmp_path: Path, name: str, tasks: dict, agent: str = "random", **changes) -> Path:
    from langadapt.experiments.suite import run_suite

    data = {"name": name, "environment": {"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                                          "params": {"num_dists": 0}},
            "tasks": tasks, "adapters": [{"type": "raw"}], "agents": [{"type": agent}],
            "training": {"episodes": 1}, "seeds": [0],
            "evaluation": {"heldout_seeds": {"first": 1_000_000, "count": 2}},
            "output": str(tmp_path / name), "cache_dir": ""}
    data.update(changes)
    return run_suite(experiment_from_dict(data), progress=False, log=lambda _: None)


def test_report_merges_two_suite_folders_into_one_table_with_balrogs_rows(tmp_path, capsys):
    pytest.importorskip("minigrid")
    pytest.importorskip("rliable")
    five = {t: {"goal": t} for t in ("goto", "pickup", "open", "putnext", "pick_up_seq_go_to")}
    first = _suite(tmp_path, "dqnlike", five)
    second = _suite(tmp_path, "llmlike", {"goto": {"goal": "goto"}})
    out = tmp_path / "merged"
    code, stdout, err = run_cli(capsys, "report", str(first), str(second), "--out", str(out))
    assert (code, err) == (0, "")
    table = (out / "suite.md").read_text()
    assert "| adapter | agent | goto | pickup | open | putnext | pick_up_seq_go_to |" in table
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    (five_row,) = [r for r in rows if r.startswith("| dqnlike/raw | random |")]
    (one_row,) = [r for r in rows if r.startswith("| llmlike/raw | random |")]
    assert five_row.endswith("| 2 episodes per task (BALROG: 10) |")
    assert one_row.endswith("| tasks goto (BALROG: its 5); 2 episodes per task (BALROG: 10) |")
    assert one_row.split(" | ")[3:7] == ["—"] * 4  # the tasks it did not play
    assert "| GPT-4o | " in table  # BALROG's rows
    with open(out / "suite.csv", newline="") as handle:
        adapters = {row["adapter"] for row in csv.DictReader(handle)}
    assert adapters == {"dqnlike/raw", "llmlike/raw"}


def test_report_refuses_suites_of_different_environments_naming_them(tmp_path, capsys):
    pytest.importorskip("minigrid")
    pytest.importorskip("rliable")
    first = _suite(tmp_path, "a", {"goto": {"goal": "goto"}})
    second = _suite(tmp_path, "b", {"goto": {"goal": "goto"}},
                    environment={"id": "langadapt/BabyAI-MixedTrainLocal-v0",
                                 "params": {"num_dists": 1}})
    code, _, err = run_cli(capsys, "report", str(first), str(second), "--out",
                           str(tmp_path / "m"))
    assert code == 2
    assert "suites of different environments" in err
    assert f"{first}: langadapt/BabyAI-MixedTrainLocal-v0 {{'num_dists': 0}}" in err
    assert f"{second}: langadapt/BabyAI-MixedTrainLocal-v0 {{'num_dists': 1}}" in err
    code, _, err = run_cli(capsys, "report", str(first / "goto"), str(second / "goto"))
    assert code == 2 and f"langadapt report {first} {second}" in err
    code, _, err = run_cli(capsys, "report", str(first), str(second / "goto"))
    assert code == 2 and "a task folder of a suite; give the suite's folder" in err


def test_a_suite_report_gives_costs_and_marks_a_protocol_unlike_balrogs(tmp_path):
    pytest.importorskip("minigrid")
    pytest.importorskip("rliable")
    folder = _suite(tmp_path, "one", {"goto": {"goal": "goto"}})
    table = (folder / "suite.md").read_text()
    (row,) = [line for line in table.splitlines() if line.startswith("| raw | random |")]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[-4] == "0" and cells[-3] == "0.0" and float(cells[-2]) >= 0  # calls, LLM s, CPU
    assert cells[-1] == "tasks goto (BALROG: its 5); 2 episodes per task (BALROG: 10)"


# ----------------------------------------------------------------------------- plots


def test_plots_name_one_seed_singular_wrap_titles_and_end_greedy_curves_at_the_budget(
        tmp_path, monkeypatch):
    from matplotlib import pyplot

    from langadapt.experiments import plots
    from langadapt.experiments.results import read_episodes

    config = experiment_from_dict(raw_config(tmp_path, seeds=1, training={"steps": 400},
                                             agents=[{"type": "qlearning"}]))
    out = run_experiment(config, progress=False, log=lambda _: None)
    episodes = read_episodes(out / "episodes.csv")
    kept = []
    monkeypatch.setattr(pyplot, "close", kept.append)  # keep the figure to look at it
    title = "a title long enough to be clipped at both sides of a figure one panel wide " * 2
    plots.plot_learning_curves(episodes, tmp_path / "curves.png", title, x_axis="steps",
                               budgets={"qlearning": 400})
    (figure,) = kept
    evaluations = figure.axes[0]
    assert [t.get_text() for t in evaluations.get_legend().get_texts()] == ["raw (1 seed)"]
    width = int(figure.get_figwidth() * plots.TITLE_CHARACTERS_PER_INCH)
    assert all(len(line) <= width for line in figure._suptitle.get_text().split("\n"))
    trained = sum(e.length for e in episodes if e.phase == "train")  # the cut one not in
    final = sum(e.return_ for e in episodes if e.phase == "final") / 2
    (star,) = [line for line in evaluations.get_lines() if line.get_marker() == "*"]
    assert list(star.get_xdata()) == [400] and trained < 400  # the budget, past the rows
    assert list(star.get_ydata()) == pytest.approx([final])


def test_comparing_folders_of_different_environments_says_which_differ(tmp_path, capsys):
    small = {"seeds": 1, "agents": [{"type": "random"}], "training": {"episodes": 2}}
    umaze = run_experiment(experiment_from_dict(raw_config(
        tmp_path, output=str(tmp_path / "umaze"), **small)), progress=False, log=lambda _: None)
    medium = raw_config(tmp_path, output=str(tmp_path / "medium"), **small)
    medium["environment"] = {"id": "langadapt/Maze-v0", "params": {"maze": "medium"}}
    medium = run_experiment(experiment_from_dict(medium), progress=False, log=lambda _: None)
    code, out, err = run_cli(capsys, "report", str(umaze), str(medium), "--out",
                             str(tmp_path / "both"))
    assert (code, err) == (0, "")
    assert (f"The folders' environments differ: {umaze}: langadapt/Maze-v0 {{'maze': 'umaze'}}; "
            f"{medium}: langadapt/Maze-v0 {{'maze': 'medium'}}.") in out
    with open(tmp_path / "both" / "summary.csv", newline="") as handle:
        assert all(float(row["cpu_seconds"]) >= 0 for row in csv.DictReader(handle))


def test_set_training_shrinks_every_agents_budget_and_check_prints_each(tmp_path, capsys,
                                                                         monkeypatch):
    from langadapt.experiments import cli_run

    data = raw_config(tmp_path, agents=[{"type": "qlearning", "training": {"episodes": 9}},
                                        {"type": "dqn"}, {"type": "random"}])
    (tmp_path / "own.yaml").write_text(yaml.safe_dump(data))
    code, out, err = run_cli(capsys, "run", str(tmp_path / "own.yaml"), "--check",
                             "--set", "training.steps=30")
    assert (code, err) == (0, "")
    assert "note: training.steps=30 applies to every agent, qlearning's own training block " \
           "too" in out
    assert ("each run's budget: qlearning 30 steps; dqn 30 steps; random none (learns "
            "nothing: evaluated only)") in out
    # a later --set of one agent's own block wins
    code, out, err = run_cli(capsys, "run", str(tmp_path / "own.yaml"), "--check",
                             "--set", "training.episodes=3",
                             "--set", "agents.qlearning.training.episodes=5")
    assert (code, err) == (0, "") and "budget: qlearning 5 episodes; dqn 3 episodes;" in out
    seen = {}
    monkeypatch.setattr(cli_run, "_build_environments",
                        lambda config: seen.setdefault("config", config))
    code, out, err = run_cli(capsys, "run", "babyai_suite", "--check",
                             "--set", "training.steps=3000", "--set", "seeds=1")
    assert (code, err) == (0, "")
    assert "each run's budget: maskable_ppo 3,000 steps over 8 copies; dqn 3,000 steps" in out
    assert {seen["config"].training_for(a).steps for a in seen["config"].agents} == {3000}
