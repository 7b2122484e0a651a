"""Faults around results folders and the experiment runner (issue 22): symbolic links in a
results folder, two writers at once, SIGTERM to a parent with workers, a full disk, a
changed config on resume, coerced config values, an unreachable Ray address, LLM answers
outside cache_dir and old done.json counter names. Each test reproduces a case that used to
go wrong; budgets are tiny and every server is on 127.0.0.1."""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import LANGADAPT, QUIET, raw_config
from experiment_fixtures import one_line_error as _main
from fake_ollama import FakeOllama, example_for

from langadapt.experiments import cli, folders, one_run
from langadapt.experiments import report as report_module
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.executors import RayUnavailableError, check_reachable
from langadapt.experiments.folders import LOCK_FILE, ResultsFolderError, folder_lock
from langadapt.experiments.report import run_curves, write_report
from langadapt.experiments.results import read_run_record
from langadapt.experiments.runner import check_results, finished_runs, run_experiment, runs_of
from langadapt.experiments.schema import ConfigError


@pytest.fixture()
def finished(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path))
    return config, run_experiment(config, **QUIET)


def _one_line(message: str) -> None:
    assert "\n" not in message.strip(), message


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, queue = [], [pid]
    while queue:
        for child in children.get(queue.pop(), []):
            found.append(child)
            queue.append(child)
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has exited; only its parent's wait is missing


def _wait_for(condition, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def _kill(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# ----------------------------------------------------------------------------- row 2: links


def test_report_never_writes_through_a_symlinked_summary(finished, tmp_path):
    _, out = finished
    outside = tmp_path / "precious.md"
    outside.write_text("years of work")
    (out / "summary.md").unlink()
    (out / "summary.md").symlink_to(outside)
    with pytest.raises(ResultsFolderError) as error:
        write_report(out, log=None)
    _one_line(str(error.value))
    assert "summary.md" in str(error.value) and "symbolic link" in str(error.value)
    assert outside.read_text() == "years of work"
    assert cli.main(["report", str(out)]) == 2  # the CLI prints it as one line
    assert outside.read_text() == "years of work"


def test_force_removes_a_symlinked_runs_folder_not_what_it_points_to(finished, tmp_path):
    config, out = finished
    elsewhere = tmp_path / "elsewhere"
    (out / "runs").rename(elsewhere)
    (out / "runs").symlink_to(elsewhere)
    before = {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()}
    with pytest.raises(ResultsFolderError, match="runs is a symbolic link"):
        run_experiment(config, resume=True, **QUIET)  # without --force: refused
    run_experiment(config, force=True, **QUIET)
    assert {p: p.read_bytes() for p in elsewhere.rglob("*") if p.is_file()} == before
    assert (out / "runs").is_dir() and not (out / "runs").is_symlink()
    assert check_results(out) == {}


def test_a_file_that_fails_half_written_leaves_the_previous_one(finished, monkeypatch):
    _, out = finished
    good = (out / "learning_curves.png").read_bytes()

    def half_a_plot(episodes, path, title="", **options):
        Path(path).write_bytes(b"\x89PNG half")
        raise RuntimeError("plotting broke")

    monkeypatch.setattr(report_module, "plot_learning_curves", half_a_plot)
    with pytest.raises(RuntimeError):
        write_report(out, log=None)
    assert (out / "learning_curves.png").read_bytes() == good
    assert not [p.name for p in out.iterdir() if ".tmp" in p.name]


# ----------------------------------------------------------------------------- row 9: lock


def _endless(tmp_path: Path, **changes) -> Path:
    """An experiment file whose runs go on for minutes (the tests stop them)."""
    data = raw_config(tmp_path, agents=[{"type": "qlearning"}], seeds=1,
                      training={"episodes": 10_000_000}, evaluation={"final_episodes": 1})
    data.update(changes)
    path = tmp_path / "endless.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.mark.heavy
def test_a_second_writer_is_refused_naming_the_first(tmp_path):
    path = _endless(tmp_path)
    out = tmp_path / "out"
    first = subprocess.Popen([str(LANGADAPT), "run", str(path), "--no-progress"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lock = out / LOCK_FILE
        _wait_for(lambda: lock.is_file() and str(first.pid) in lock.read_text()
                  and (out / "runs").is_dir(), 120, "the first run to start")
        config = experiment_from_dict(yaml.safe_load(path.read_text()))
        for attempt in (lambda: write_report(out, log=None),
                        lambda: run_experiment(config, resume=True, **QUIET)):
            with pytest.raises(ResultsFolderError) as error:
                attempt()
            _one_line(str(error.value))
            assert f"process {first.pid}" in str(error.value)
        assert first.poll() is None  # the first run goes on undisturbed
        first.send_signal(signal.SIGTERM)
        _, stderr = first.communicate(timeout=30)
        assert first.returncode == 143 and "interrupted (stopped by SIGTERM)" in stderr
        assert "Traceback" not in stderr
        assert f"continue with: langadapt run {path} --no-progress --out {out} --resume" in stderr
    finally:
        _kill([first.pid])
        first.wait(timeout=30)
    assert str(first.pid) in lock.read_text()  # a stale lock file: its holder is gone ...
    with folder_lock(out):  # ... and the next writer takes it
        assert lock.read_text().split()[0] == str(os.getpid())


@pytest.mark.heavy
def test_without_flock_a_lock_whose_pid_is_gone_is_taken_over(tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    gone = subprocess.Popen(["true"])
    gone.wait()
    (out / LOCK_FILE).write_text(f"{gone.pid} {socket.gethostname()}\n")

    def no_flock(*args):
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(folders.fcntl, "flock", no_flock)
    with folder_lock(out):
        assert (out / LOCK_FILE).read_text().split()[0] == str(os.getpid())
    (out / LOCK_FILE).write_text(f"{os.getppid()} {socket.gethostname()}\n")  # alive
    with pytest.raises(ResultsFolderError, match=f"process {os.getppid()} on"):
        with folder_lock(out):
            pass


# ----------------------------------------------------------------------------- row 3: SIGTERM


@pytest.mark.heavy
def test_sigterm_to_the_parent_stops_its_workers_and_resume_finishes(tmp_path, monkeypatch):
    """`run --jobs 2`, both workers waiting for the LLM; SIGTERM to the parent alone: no
    process of it is left within 10 s, and --resume finishes the experiment."""
    if not sys.platform.startswith("linux"):
        pytest.skip("reads /proc")
    gate = threading.Event()

    def held_reply(body):
        gate.wait(120)
        return json.dumps(example_for(body.get("format")))

    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    with FakeOllama(models=("tiny",), reply=held_reply) as server:
        spec = {"backend": "ollama", "model": "tiny", "host": server.host, "timeout": 300}
        data = raw_config(tmp_path, agents=[{"type": "llm_policy", "params": {"backend": spec}}],
                          evaluation={"final_episodes": 1}, training={"episodes": 1})
        path = tmp_path / "llm.yaml"
        path.write_text(yaml.safe_dump(data))
        parent = subprocess.Popen(
            [str(LANGADAPT), "run", str(path), "--jobs", "2", "--no-progress"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        family: list[int] = []
        try:
            def both_asked() -> bool:
                if parent.poll() is not None:  # say why, rather than wait out the timeout
                    raise AssertionError(f"langadapt run exited ({parent.returncode}) before "
                                         f"both workers asked: {parent.stderr.read()[-2000:]}")
                return server.chat_requests >= 2

            _wait_for(both_asked, 180, "both workers to ask the LLM")
            family = _descendants(parent.pid)
            assert len(family) >= 2
            parent.send_signal(signal.SIGTERM)  # the parent only
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and any(map(_alive, family)):
                time.sleep(0.1)
            left = [pid for pid in family if _alive(pid)]
            assert not left, f"processes left after SIGTERM to the parent: {left}"
            _, stderr = parent.communicate(timeout=30)
            assert parent.returncode == 143 and "Traceback" not in stderr, stderr
        finally:
            gate.set()
            _kill([*family, parent.pid])
            parent.wait(timeout=30)
        out = tmp_path / "out"
        assert len(finished_runs(out)) < len(runs_of(experiment_from_dict(data)))
        run_experiment(experiment_from_dict(data), resume=True, **QUIET)
    assert check_results(out) == {}


# ----------------------------------------------------------------------------- row 12: disk


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device", "summary.md")


@pytest.mark.parametrize(("module", "writer"), [(report_module, "write_text"),
                                                (one_run, "write_json")])
def test_a_full_disk_is_one_line_and_resume_keeps_what_was_written(
        tmp_path, monkeypatch, capsys, module, writer):
    config = experiment_from_dict(raw_config(tmp_path))
    out = config.output_dir
    monkeypatch.setattr(module, writer, _no_space)
    with pytest.raises(ResultsFolderError) as error:
        run_experiment(config, **QUIET)
    message = str(error.value)
    _one_line(message)
    assert str(out) in message and "No space left on device" in message
    assert "ENOSPC" in message and "--resume" in message
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)))
    assert cli.main(["run", str(path), "--resume", "--no-progress"]) == 2
    stderr = capsys.readouterr().err.strip()
    assert len(stderr.splitlines()) == 1 and "No space left on device" in stderr
    kept = finished_runs(out)
    monkeypatch.undo()
    redone: list[str] = []
    real = one_run.execute_run

    def record(data, key, out_dir):
        redone.append(key)
        return real(data, key, out_dir)

    monkeypatch.setattr(one_run, "execute_run", record)
    run_experiment(config, resume=True, **QUIET)
    assert not set(redone) & set(kept)  # nothing already written was lost
    assert check_results(out) == {}


# ----------------------------------------------------------------------------- changed config


def test_resume_with_a_changed_config_names_the_changed_keys(finished, tmp_path):
    config, _ = finished
    data = raw_config(tmp_path, training={"episodes": 5})
    data["agents"][0]["params"] = {"alpha": 0.3}
    with pytest.raises(ConfigError) as error:
        run_experiment(experiment_from_dict(data), resume=True, **QUIET)
    message = str(error.value)
    _one_line(message)
    assert "training.episodes: 4 -> 5" in message
    assert "agents.0.params.alpha added (0.3)" in message


# ----------------------------------------------------------------------------- strict values


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        ({"training": {"episodes": True}},
         "training.episodes=true: input should be a valid integer"),
        ({"seeds": [True, False]}, "seeds: expected a list of integer seeds or a count, got true"),
        ({"seeds": True}, "seeds: expected a list of integer seeds or a count, got true"),
        ({"evaluation": {"every": 2, "keep_best": "yes"}},
         'evaluation.keep_best="yes": input should be a valid boolean'),
        ({"evaluation": {"threshold": True}},
         "evaluation.threshold=true: input should be a valid number"),
        ({"executor": {"jobs": "2"}}, 'executor.jobs="2": input should be a valid integer'),
        ({"torch_threads": 1.5}, "torch_threads=1.5: input should be a valid integer"),
    ],
)
def test_booleans_and_strings_are_not_coerced_into_numbers(tmp_path, changes, expected):
    with pytest.raises(ConfigError) as error:
        experiment_from_dict(raw_config(tmp_path, **changes), "x.yaml")
    assert expected in str(error.value)


# ----------------------------------------------------------------------------- Ray address


def test_an_address_where_no_ray_cluster_answers_fails_fast_in_one_line():
    with socket.socket() as silent:  # accepts connections, never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        address = f"127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        with pytest.raises(RayUnavailableError) as error:
            check_reachable(address, timeout=0.5)
        assert time.monotonic() - started < 5
    _one_line(str(error.value))
    assert address in str(error.value)


@pytest.mark.heavy
def test_ray_address_in_the_environment_is_checked_before_ray_starts(tmp_path):
    pytest.importorskip("ray")
    with socket.socket() as unused:
        unused.bind(("127.0.0.1", 0))
        address = f"127.0.0.1:{unused.getsockname()[1]}"
    env = dict(os.environ, RAY_ADDRESS=address, HF_HUB_OFFLINE="1")
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)))
    result = subprocess.run([str(LANGADAPT), "run", str(path), "--executor", "ray",
                             "--address", "auto"], capture_output=True, text=True,
                            timeout=120, env=env)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert address in result.stderr and "gcs_client" not in result.stderr
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- LLM caches


def test_every_llm_role_answers_into_cache_dir_not_the_user_cache(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("LANGADAPT_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    with FakeOllama(models=("tiny",)) as server:
        spec = {"backend": "ollama", "model": "tiny", "host": server.host}
        agents = [
            {"type": "llm_policy", "params": {"backend": spec}},
            {"type": "qlearning", "label": "advised", "advisor": {"source": "llm",
                                                                  "backend": spec},
             "reward_shaping": {"potential": "llm", "backend": spec}},
        ]
        data = raw_config(tmp_path, agents=agents, seeds=1)
        run_experiment(experiment_from_dict(data), **QUIET)
        asked = server.chat_requests
        assert asked > 0
        again = raw_config(tmp_path, agents=agents, seeds=1, output=str(tmp_path / "again"))
        run_experiment(experiment_from_dict(again), **QUIET)
        assert server.chat_requests == asked  # every answer came from cache_dir's store
    assert (tmp_path / "cache" / one_run.STORE_FILE).is_file()
    assert not (home / ".cache" / "langadapt").exists()  # the user cache was never written


def test_a_cache_folder_of_the_previous_layout_is_adopted_and_read(tmp_path, caplog):
    from langadapt.llm import open_store

    cache = tmp_path / "cache"
    with FakeOllama(models=("tiny",)) as server:
        llm = {"type": "llm", "settings": {"backend": "ollama", "model": "tiny",
                                           "host": server.host, "action_history_length": 0}}
        run_experiment(experiment_from_dict(raw_config(tmp_path, adapters=[llm], seeds=1,
                                                       agents=[{"type": "random"}])), **QUIET)
        asked = server.chat_requests
        open_store(cache / one_run.STORE_FILE, 1).close()  # the WAL is written back
        os.replace(cache / one_run.STORE_FILE, cache / "descriptions.sqlite")  # the old name
        again = raw_config(tmp_path, adapters=[llm], seeds=1, agents=[{"type": "random"}],
                           output=str(tmp_path / "again"))
        with caplog.at_level(logging.INFO, logger="langadapt.llm.store"):
            run_experiment(experiment_from_dict(again), **QUIET)
        assert asked > 0 and server.chat_requests == asked  # the old answers were read
    assert caplog.text.count("copied the old cache file") == 1
    assert (cache / "descriptions.sqlite.adopted").is_file()


@pytest.mark.parametrize("kind", ["llm_policy", "llm_policy_search"])
def test_agent_backend_specs_get_the_cache_unless_they_name_one(tmp_path, kind):
    key = one_run.ROLE_BACKEND_PARAMS[kind]
    store = str(tmp_path / "c" / one_run.STORE_FILE)
    config = experiment_from_dict(raw_config(tmp_path, adapters=[{"type": "raw"}],
                                             agents=[{"type": kind}]))
    (agent,) = config.agents
    assert one_run.agent_params(agent, "raw", str(tmp_path / "c"))[key] == {
        "backend": "llamacpp", "cache_path": store}
    own = {"backend": "ollama", "cache_path": None}
    assert one_run.backend_with_cache(own, str(tmp_path / "c")) == own
    assert one_run.backend_with_cache("ollama", "") == "ollama"


# ----------------------------------------------------------------------------- old counters


def test_a_folder_with_old_counter_names_in_done_json_still_loads(finished, monkeypatch):
    config, out = finished
    for done in (out / "runs").glob("*/done.json"):
        record = json.loads(done.read_text())
        record["llm_roles"] = {"agent": {"decisions": 7, "llm_calls": 2, "cache_hits": 5,
                                         "fallbacks": 1, "seconds": 0.25}}
        done.write_text(json.dumps(record))
    record = read_run_record(next((out / "runs").glob("*/done.json")))
    assert record["llm_roles"]["agent"] == {"decisions": 7, "llm_calls": 2, "llm_cache_hits": 5,
                                            "llm_fallbacks": 1, "llm_seconds": 0.25}
    assert set(finished_runs(out)) == {run.key for run in runs_of(config)}
    redone: list[str] = []
    monkeypatch.setattr(one_run, "execute_run", lambda data, key, out_dir: redone.append(key))
    run_experiment(config, resume=True, **QUIET)
    assert redone == []
    write_report(out, log=None)
    curves, _ = run_curves(out)
    assert len(curves) == len(runs_of(config))


# --------------------------------------------------- --force, comparisons, report cells and writers


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _someone_elses(folder: Path) -> dict[str, bytes]:
    """A folder of another tool's files, named like ours (the red team's case)."""
    (folder / "runs" / "tb").mkdir(parents=True)
    (folder / "runs" / "tb" / "events.out").write_bytes(b"their tensorboard events")
    (folder / "config.yaml").write_text("model: resnet50\nlr: 0.1\n")
    (folder / "summary.md").write_text("# their summary\n")
    return _snapshot(folder)


def test_force_never_empties_a_folder_whose_config_yaml_is_not_an_experiment(tmp_path, capsys):
    theirs = tmp_path / "theirs"
    before = _someone_elses(theirs)
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)))
    code, err = _main(capsys, "run", str(path), "--out", str(theirs), "--no-progress")
    assert code == 2 and "not a langadapt results folder" in err
    assert "--force" not in err  # never suggest deleting someone else's files
    code, err = _main(capsys, "run", str(path), "--out", str(theirs), "--force", "--no-progress")
    assert code == 2 and str(theirs) in err and "not a langadapt results folder" in err
    assert _snapshot(theirs) == before


def test_force_removes_only_what_the_runner_wrote(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path))
    out = run_experiment(config, **QUIET)
    assert (out / ".langadapt-results").is_file()
    (out / "runs" / "tb").mkdir()
    (out / "runs" / "tb" / "events.out").write_bytes(b"mine")
    (out / "notes.md").write_text("mine too")
    (out / "runs" / "old__run__seed9").mkdir()  # a run of an earlier experiment: ours
    (out / "config.yaml").write_text("not: [an experiment any more\n")  # the marker decides
    run_experiment(config, force=True, **QUIET)
    assert (out / "runs" / "tb" / "events.out").read_bytes() == b"mine"
    assert (out / "notes.md").read_text() == "mine too"
    assert not (out / "runs" / "old__run__seed9").exists()
    assert check_results(out) == {}


def _finished(tmp_path: Path, name: str) -> Path:
    data = raw_config(tmp_path, agents=[{"type": "random"}], seeds=1,
                      output=str(tmp_path / name))
    return run_experiment(experiment_from_dict(data), **QUIET)


@pytest.fixture()
def two_folders(tmp_path):
    return _finished(tmp_path, "a"), _finished(tmp_path, "b")


def test_a_comparison_never_writes_through_planted_links(two_folders, tmp_path, capsys):
    a, b = two_folders
    out = tmp_path / "cmp"
    out.mkdir()
    victims = {}
    for name in ("summary.md", "summary.csv"):
        victims[name] = tmp_path / f"precious-{name}"
        victims[name].write_text("years of work")
        (out / name).symlink_to(victims[name])
    code, err = _main(capsys, "report", str(a), str(b), "--out", str(out))
    assert code == 2 and "summary.csv is a symbolic link" in err
    assert all(v.read_text() == "years of work" for v in victims.values())
    assert sorted(p.name for p in out.iterdir()) == [".langadapt.lock", "summary.csv",
                                                     "summary.md"]  # no temporary file left
    before = (a / "summary.md").read_bytes()
    code, err = _main(capsys, "report", str(a), str(b), "--out", str(a))
    assert code == 2 and f"--out {a} is a results folder" in err
    assert (a / "summary.md").read_bytes() == before
    for name in victims:
        (out / name).unlink()
    assert cli.main(["report", str(a), str(b), "--out", str(out)]) == 0
    assert not (out / "summary.md").is_symlink()


def test_a_comparison_checks_each_episodes_csv_against_its_runs(two_folders, tmp_path,
                                                                monkeypatch, capsys):
    from langadapt.experiments import results

    a, b = two_folders
    kept = (a / "episodes.csv").read_text()
    last = kept.rstrip("\n").rsplit("\n", 1)[1]
    (a / "episodes.csv").write_text(kept + (last + "\n") * 50)  # crafted rows
    code, err = _main(capsys, "report", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert code == 2 and f"{a / 'episodes.csv'} does not match runs/" in err
    (a / "episodes.csv").write_text(kept)
    monkeypatch.setattr(results, "MAX_EPISODES_BYTES", 100)
    code, err = _main(capsys, "report", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert code == 2 and "episodes.csv: " in err and "expected at most 100 bytes" in err
    assert not (tmp_path / "cmp").exists()


def test_names_that_start_like_formulas_are_text_in_summary_csv(tmp_path):
    import csv

    from langadapt.experiments.report import compare_folders

    folders = [_finished(tmp_path, name) for name in ("=cmd|' -C calc'!A0", "@SUM(1+1)")]
    compare_folders(folders, tmp_path / "cmp")
    with open(tmp_path / "cmp" / "summary.csv", newline="") as handle:
        cells = [cell for row in csv.reader(handle) for cell in row]
    assert "'=cmd|' -C calc'!A0/raw" in cells and "'@SUM(1+1)/raw" in cells
    assert not [c for c in cells if c[:1] in ("=", "+", "-", "@", "\t", "\r")]


def test_an_llms_text_in_rounds_csv_is_text_not_a_formula(tmp_path, monkeypatch):
    import csv

    from langadapt.experiments import report as search_report

    out = _finished(tmp_path, "search")
    entry = dict.fromkeys(search_report.ROUND_COLUMNS, 0) | {
        "adapter": "raw", "agent": "llm", "error": "=HYPERLINK(\"http://x\")",
        "proposer": "@SUM(A1)", "proposal": "+1"}
    monkeypatch.setattr(search_report, "run_curves", lambda folder: ([], [entry]))
    search_report.write_search_report(out, log=None)
    with open(out / "rounds.csv", newline="") as handle:
        row = next(csv.DictReader(handle))
    assert row["error"] == "'=HYPERLINK(\"http://x\")" and row["proposer"] == "'@SUM(A1)"
    assert row["proposal"] == '"+1"'  # JSON text: quoted, so never a formula


def test_tensorboard_never_writes_through_a_planted_link(tmp_path):
    pytest.importorskip("tensorboard")
    data = raw_config(tmp_path, agents=[{"type": "qlearning"}], seeds=1,
                      logging={"tensorboard": True})
    config = experiment_from_dict(data)
    out = run_experiment(config, **QUIET)
    run = out / "runs" / "raw__qlearning__seed0"
    (run / "done.json").unlink()  # unfinished: --resume trains it again
    shutil.rmtree(run / "tb")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes").write_text("years of work")
    (run / "tb").symlink_to(victim)
    run_experiment(config, resume=True, **QUIET)
    assert [p.name for p in victim.iterdir()] == ["notes"]
    assert (run / "tb").is_dir() and not (run / "tb").is_symlink()
    assert any((run / "tb").iterdir())


@pytest.mark.heavy
def test_a_suite_report_is_refused_while_another_process_writes_the_folder(tmp_path):
    import subprocess
    import time

    pytest.importorskip("rliable")
    from test_suite_protocol import _config, _episodes

    from langadapt.experiments.folders import ResultsFolderError
    from langadapt.experiments.suite import SUITE_FILE, write_suite_report

    config = _config(tasks={"goto": {"goal": "goto"}}, output=str(tmp_path))
    (tmp_path / SUITE_FILE).write_text(yaml.safe_dump(config.resolved(), sort_keys=False))
    _episodes(tmp_path / "goto" / "episodes.csv", {("raw", "random", 0): [1, 0]})
    lock = tmp_path / ".langadapt.lock"
    holder = subprocess.Popen([sys.executable, "-c", (
        "import fcntl, os, sys, time\n"
        f"fd = os.open({str(lock)!r}, os.O_RDWR | os.O_CREAT)\n"
        "fcntl.flock(fd, fcntl.LOCK_EX)\n"
        "os.write(fd, f'{os.getpid()} {os.uname().nodename}'.encode())\n"
        "time.sleep(60)\n")])
    try:
        deadline = time.monotonic() + 30
        while not (lock.exists() and lock.read_text()) and time.monotonic() < deadline:
            time.sleep(0.1)
        with pytest.raises(ResultsFolderError, match=f"is being written by langadapt process "
                                                     f"{holder.pid}"):
            write_suite_report(tmp_path, log=None, task_reports=False)
        assert not (tmp_path / "suite.md").exists()
    finally:
        holder.kill()
        holder.wait()
    write_suite_report(tmp_path, log=None, task_reports=False)
    assert (tmp_path / "suite.md").is_file()


def test_a_suites_task_folder_that_is_a_link_is_never_read_written_or_emptied(tmp_path,
                                                                               capsys):
    pytest.importorskip("rliable")
    other = run_experiment(experiment_from_dict(raw_config(
        tmp_path, agents=[{"type": "random"}], seeds=1, output=str(tmp_path / "other"))),
        **QUIET)
    (other / "notes.md").write_text("another experiment's notes")
    suite = raw_config(tmp_path, agents=[{"type": "random"}], seeds=1,
                       output=str(tmp_path / "suite"),
                       tasks={"a": {"maze": "umaze"}, "b": {"maze": "umaze"}})
    path = tmp_path / "suite.yaml"
    path.write_text(yaml.safe_dump(suite))
    assert cli.main(["run", str(path), "--no-progress"]) == 0
    shutil.rmtree(tmp_path / "suite" / "b")
    (tmp_path / "suite" / "b").symlink_to(other)
    before = _snapshot(other)
    code, err = _main(capsys, "report", str(tmp_path / "suite"))
    assert code == 2 and f"{tmp_path / 'suite' / 'b'} is a symbolic link" in err
    assert "--force" not in err
    for extra in (["--force"], ["--resume"]):
        code, err = _main(capsys, "run", str(path), *extra, "--no-progress")
        assert code == 2 and "b is a symbolic link" in err
    assert _snapshot(other) == before


def test_reports_link_refusals_never_suggest_force(finished, tmp_path, capsys):
    _, out = finished
    (tmp_path / "elsewhere.md").write_text("kept")
    (out / "summary.md").unlink()
    (out / "summary.md").symlink_to(tmp_path / "elsewhere.md")
    code, err = _main(capsys, "report", str(out))
    assert code == 2 and "summary.md is a symbolic link" in err and "--force" not in err
    code, err = _main(capsys, "run", str(out / "config.yaml"), "--resume", "--no-progress")
    assert code == 2 and "or pass --force" in err  # run has --force: it removes the link


def test_a_comparison_never_writes_inside_a_results_folder(two_folders, tmp_path, capsys):
    a, b = two_folders
    before = _snapshot(a)
    for out in (a / "runs", a / "runs" / "deeper", a):
        code, err = _main(capsys, "report", str(a), str(b), "--out", str(out))
        assert code == 2 and f"--out {out} is " in err and "a results folder" in err
    assert _snapshot(a) == before and not (a / "runs" / "deeper").exists()
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0


def test_a_comparison_bounds_the_rows_it_reads(two_folders, tmp_path, capsys, monkeypatch):
    a, b = two_folders
    rows = sum(len((f / "episodes.csv").read_text().splitlines()) - 1 for f in (a, b))
    monkeypatch.setattr(report_module, "MAX_COMPARED_ROWS", rows - 1)
    code, err = _main(capsys, "report", str(a), str(b), "--out", str(tmp_path / "cmp"))
    assert code == 2 and f"{rows:,} rows of episodes.csv in all; a comparison reads at most " \
        f"{rows - 1:,}" in err
    assert not (tmp_path / "cmp").exists()
    monkeypatch.setattr(report_module, "MAX_COMPARED_ROWS", rows)
    assert cli.main(["report", str(a), str(b), "--out", str(tmp_path / "cmp")]) == 0
