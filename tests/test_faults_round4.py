"""The fourth red team's defects (issue 42), each as the case that failed: a results folder
that runs code when read, a comparison written through planted links, held-out seeds used by
copies of the environment, a lake generator that never ends, crafted or formula cells in
reports, foreign cache files, SB3 keywords of the wrong type, a path too long, absurd cached
vectors. Every bad case ends in one line naming the file, key or value, exit code 2."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import QUIET, raw_config

from langadapt.experiments import cli
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment


def _main(capsys, *args: str, lines: int = 1) -> tuple[int, str]:
    """The command's exit code and its error (``lines`` lines, no traceback)."""
    capsys.readouterr()
    code = cli.main(list(args))
    err = capsys.readouterr().err
    assert err.count("\n") == lines and "Traceback" not in err, err
    return code, err


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


# ----------------------------------------------------------------------------- 1: data, not code


@pytest.fixture()
def sent_folder(tmp_path, monkeypatch):
    """results/sent: a finished folder someone sent, with an evil.py its config.yaml imports
    (the red team's case); the working folder is tmp_path, as for a user in their project."""
    monkeypatch.chdir(tmp_path)
    config = experiment_from_dict(raw_config(tmp_path, output="results/sent"))
    out = run_experiment(config, **QUIET)
    (out / "evil.py").write_text('open("PWNED", "w").write("x")\n')
    data = yaml.safe_load((out / "config.yaml").read_text())
    data["imports"] = ["results.sent.evil"]
    _write(out / "config.yaml", data)
    return out


def test_reading_a_results_folder_never_imports_what_it_names(sent_folder, tmp_path, capsys):
    shutil.copytree(sent_folder, tmp_path / "results" / "other")
    assert cli.main(["report", "results/sent"]) == 0
    assert cli.main(["report", "results/sent", "results/other", "--out", "cmp"]) == 0
    code, err = _main(capsys, "run", "results/sent/config.yaml", "--resume", "--no-progress")
    assert code == 2 and "results.sent.evil" in err and "--import results.sent.evil" in err
    mine = _write(tmp_path / "mine.yaml", raw_config(tmp_path, output="results/sent"))
    code, err = _main(capsys, "run", str(mine), "--out", "results/sent", "--resume",
                      "--no-progress")
    assert code == 2 and "different experiment" in err
    code, err = _main(capsys, "run", "results/sent/config.yaml", "--check")
    assert code == 2 and "read as data" in err
    assert not (tmp_path / "PWNED").exists()


def test_a_results_folders_module_id_and_stdlib_import_are_data(sent_folder, tmp_path):
    data = yaml.safe_load((sent_folder / "config.yaml").read_text())
    data["imports"] = ["this"]  # a standard-library module that prints when imported
    data["environment"]["id"] = "results.sent.evil:Evil-v0"
    _write(sent_folder / "config.yaml", data)
    shutil.copytree(sent_folder, tmp_path / "results" / "other")
    assert cli.main(["report", "results/sent", "results/other", "--out", "cmp"]) == 0
    assert cli.main(["report", "results/sent"]) == 0
    assert not (tmp_path / "PWNED").exists() and "this" not in sys.modules


def test_resume_from_a_results_folders_file_imports_what_the_command_line_names(
        sent_folder, tmp_path, capsys):
    (sent_folder / "evil.py").write_text("MARK = 1\n")  # now the user trusts it
    code = cli.main(["run", "results/sent/config.yaml", "--resume", "--no-progress",
                     "--import", "results.sent.evil"])
    out = capsys.readouterr().out
    assert code == 0 and "a results folder's file; nothing it names is imported" in out


# ----------------------------------------------------------------------------- 2, 5, 6: compare


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


# ----------------------------------------------------------------------------- 3: copies' seeds


@pytest.mark.parametrize("where", ["file", "agent"])
def test_held_out_seeds_used_by_a_copy_of_the_environment_are_refused(tmp_path, capsys, where):
    training = {"episodes": 4, "n_envs": 8}
    agent = {"type": "qlearning", **({"training": training} if where == "agent" else {})}
    data = raw_config(tmp_path, agents=[agent], seeds=[0],
                      evaluation={"heldout_seeds": {"first": 1, "count": 5}},
                      training=training if where == "file" else {"episodes": 4})
    path = _write(tmp_path / "exp.yaml", data)
    code, err = _main(capsys, "run", str(path), "--check", lines=2)
    assert code == 2 and "held-out seeds [1, 6) overlap the seeds training uses — 1: run seed " \
        "0 + 1 (copy 1 of n_envs 8, its first training episode)" in err
    data["evaluation"]["heldout_seeds"]["first"] = 8  # past every copy's seed: accepted
    assert cli.main(["run", str(_write(path, data)), "--check"]) == 0


# ----------------------------------------------------------------------------- 4: bounded envs


def test_a_lake_generator_that_finds_no_lake_is_one_line_not_a_hang(tmp_path, capsys):
    data = raw_config(tmp_path, environment={"id": "langadapt/FrozenLakeMaps-v0",
                                             "params": {"size": 16, "frozen_probability": 0.05}})
    path = _write(tmp_path / "exp.yaml", data)
    for extra in (["--check"], ["--no-progress"]):
        code, err = _main(capsys, "run", str(path), *extra)
        assert code == 2 and "environment.params: size=16, frozen_probability=0.05: no lake " \
            "with a path from S to G in 10,000 draws (map seed 0)" in err
    assert not (tmp_path / "out").exists()


def test_the_bounded_lake_generator_draws_gymnasiums_lakes():
    from gymnasium.envs.toy_text.frozen_lake import generate_random_map

    from langadapt.environments.frozenlake import random_lake

    for size, probability in ((4, 0.8), (8, 0.6), (16, 0.5)):
        assert [random_lake(size, probability, seed) for seed in range(5)] == [
            generate_random_map(size, probability, seed=seed) for seed in range(5)]


def test_a_minigrid_level_made_huge_is_refused_when_the_file_is_checked(tmp_path, capsys):
    pytest.importorskip("minigrid")
    data = raw_config(tmp_path, agents=[{"type": "random"}],
                      environment={"id": "BabyAI-GoToObj-v0", "params": {"room_size": 1000}})
    code, err = _main(capsys, "run", str(_write(tmp_path / "exp.yaml", data)), "--check")
    assert code == 2 and "['room_size'] of 'BabyAI-GoToObj-v0' make a 1000x1000 grid; " \
        "expected at most 64 cells a side" in err


# ----------------------------------------------------------------------------- 7, 9: the store


def _foreign_database(path: Path) -> bytes:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db:
        db.execute("CREATE TABLE entries (id INTEGER, name TEXT)")
        db.execute("CREATE TABLE invoices (id INTEGER)")
        db.commit()
    return path.read_bytes()


def _journal_mode(path: Path) -> str:
    import sqlite3
    from contextlib import closing

    with closing(sqlite3.connect(path)) as db:
        return db.execute("PRAGMA journal_mode").fetchone()[0]


def test_a_cache_file_that_is_a_directory_or_foreign_is_refused_before_force(tmp_path, capsys):
    data = raw_config(tmp_path, adapters=[{"type": "language"}], agents=[{"type": "random"}])
    out = run_experiment(experiment_from_dict(raw_config(tmp_path)), **QUIET)
    before = sorted(p.name for p in out.iterdir())
    path = _write(tmp_path / "exp.yaml", data)
    store = tmp_path / "cache" / "cache.sqlite"
    store.mkdir(parents=True)
    for extra in (["--check"], ["--force", "--no-progress"]):
        code, err = _main(capsys, "run", str(path), *extra, lines=2)
        assert code == 2 and f"cache_dir: cache path {str(store)!r} is a directory" in err
    store.rmdir()
    kept = _foreign_database(store)
    for extra in (["--check"], ["--force", "--no-progress"]):
        code, err = _main(capsys, "run", str(path), *extra, lines=2)
        assert code == 2 and "is another program's SQLite database (tables invoices)" in err
    assert store.read_bytes() == kept and _journal_mode(store) == "delete"
    assert sorted(p.name for p in out.iterdir()) == before  # --force emptied nothing


def test_the_store_never_follows_a_link_nor_writes_another_programs_database(tmp_path):
    from langadapt.llm import CacheError, SQLiteStore

    theirs = tmp_path / "theirs.sqlite"
    kept = _foreign_database(theirs)
    with pytest.raises(CacheError, match="another program's SQLite database"):
        SQLiteStore(theirs)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    for target in (theirs, empty):
        link = tmp_path / f"link-{target.name}"
        link.symlink_to(target)
        with pytest.raises(CacheError, match=r"link-.* is a symbolic link"):
            SQLiteStore(link)
    assert theirs.read_bytes() == kept and _journal_mode(theirs) == "delete"
    assert empty.read_bytes() == b"" and not list(tmp_path.glob("*-wal"))


# ----------------------------------------------------------------------------- 10: long paths


@pytest.mark.parametrize(("key", "value", "expected"), [
    ("output", "x" * 5_000, "5,000 bytes, a name of 5,000"),
    ("output", "/".join(["abc"] * 1_100), "4,399 bytes, a name of 3"),
    ("cache_dir", "c" * 300, "300 bytes, a name of 300"),
])
def test_a_path_too_long_for_the_file_system_is_one_line(tmp_path, capsys, monkeypatch, key,
                                                         value, expected):
    monkeypatch.chdir(tmp_path)  # (relative paths: nothing made outside tmp_path, ever)
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path, **{key: value}))
    code, err = _main(capsys, "run", str(path), "--no-progress", lines=2)
    assert code == 2 and f"{key}: " in err and expected in err and "at most 4,096 bytes" in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- 11: vectors


@pytest.mark.parametrize("value", [3e38, -3e38, 2e3])
def test_a_cached_vector_of_absurd_length_is_encoded_again(tmp_path, value):
    import sqlite3
    from contextlib import closing

    import numpy as np
    from adapter_fixtures import CountingEncoder

    from langadapt.adapters.embedding_cache import EmbeddingCache, text_key

    encoder = CountingEncoder(name=f"absurd-{value}")
    path = tmp_path / "cache.sqlite"
    with closing(sqlite3.connect(path)) as db:  # a store holding a vector no encoder made
        db.execute("CREATE TABLE entries (key TEXT PRIMARY KEY, value BLOB NOT NULL, "
                   "meta TEXT NOT NULL, created TEXT NOT NULL)")
        blob = np.full(encoder.dimension, value, dtype=np.float32).tobytes()
        db.execute("INSERT INTO entries VALUES (?, ?, '{}', '2026-01-01')",
                   (text_key(encoder.name, "a lake"), blob))
        db.commit()
    cache = EmbeddingCache(encoder, path)
    vector = cache.get("a lake")
    assert cache.misses == 1 and np.array_equal(vector, encoder.encode_many(["a lake"])[0])
    assert np.linalg.norm(vector) < 10


# ----------------------------------------------------------------------------- 8: SB3 values


@pytest.mark.parametrize(("params", "expected"), [
    ({"policy_kwargs": {"activation_fn": "os.system"}},
     "policy_kwargs.activation_fn='os.system': a class, module or function cannot be written"),
    ({"learning_rate": "abc"}, "learning_rate='abc': expected a finite number"),
    ({"algorithm": "DQN", "buffer_size": "1e12"}, "buffer_size='1e12': expected an integer"),
    ({"algorithm": "DQN", "buffer_size": 10**12},
     "buffer_size=1000000000000: expected an integer from -1 to 10,000,000"),
    ({"algorithm": "DQN", "replay_buffer_class": "HerReplayBuffer"},
     "replay_buffer_class='HerReplayBuffer': expected null"),
    ({"policy_kwargs": {"net_arch": [8], "optimiser": "Adam"}},
     "policy_kwargs.optimiser: not a parameter of ActorCriticPolicy"),
    ({"policy": "LstmPolicy"}, "policy='LstmPolicy': expected one of SB3's MlpPolicy"),
])
def test_sb3_keyword_values_are_checked_by_type_when_the_file_is_read(tmp_path, capsys,
                                                                     params, expected):
    pytest.importorskip("stable_baselines3")
    data = raw_config(tmp_path, agents=[{"type": "sb3", "params": params}],
                      training={"steps": 64}, seeds=1)
    path = _write(tmp_path / "exp.yaml", data)
    code, err = _main(capsys, "run", str(path), "--check", lines=2)
    assert code == 2 and "agents.0.params" in err and expected in err, err
    code, err = _main(capsys, "run", str(path), "--no-progress", lines=2)
    assert code == 2 and expected in err and not (tmp_path / "out").exists()


def test_sb3_keywords_of_the_right_types_still_pass(tmp_path):
    pytest.importorskip("stable_baselines3")
    params = {"algorithm": "DQN", "learning_rate": 1e-3, "buffer_size": 1000, "gamma": 1,
              "train_freq": [4, "step"], "device": "cpu",
              "policy_kwargs": {"net_arch": [16, 16]}}
    data = raw_config(tmp_path, agents=[{"type": "sb3", "params": params}],
                      training={"steps": 64}, seeds=1)
    assert experiment_from_dict(data).agents[0].params["train_freq"] == [4, "step"]


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


@pytest.mark.parametrize(("environment", "expected"), [
    ({"id": "langadapt/Maze-v0", "params": {"maze": "random", "width": 100_001, "height": 9}},
     "width=100001 is too large for a random maze; expected an int from 5 to 201"),
    ({"id": "langadapt/Maze-v0", "params": {"maze": "umaze", "max_steps": 10**12}},
     "max_steps=1000000000000 is not allowed; expected a positive integer (1 to 1,000,000)"),
    ({"id": "langadapt/Sailing-v0", "params": {"max_steps": 10**9}},
     "max_steps=1000000000 is not allowed; expected a positive integer (1 to 1,000,000)"),
])
def test_environment_sizes_and_step_limits_are_bounded(tmp_path, capsys, environment, expected):
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path, environment=environment))
    code, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and expected in err


# ----------------------------------------------------------------------------- writers: TB


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
