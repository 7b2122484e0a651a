"""Faults and bad input around experiments: damaged results folders, unbounded counts, the
resume fingerprint, path safety and unreadable files. Each test reproduces one case that
used to end in a traceback, a silently wrong summary or a file written too early."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import pytest
import yaml
from experiment_fixtures import QUIET, raw_config, run_cli, started_runs

from langadapt.experiments import cli
from langadapt.experiments.config import experiment_from_dict, load_config
from langadapt.experiments.report import write_report
from langadapt.experiments.runner import (
    ResultsFolderError,
    check_results,
    finished_runs,
    run_experiment,
    runs_of,
)
from langadapt.experiments.schema import MAX_SEED, MAX_SEED_COUNT, ConfigError


@pytest.fixture()
def finished(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path))
    return config, run_experiment(config, **QUIET)


def _cut_last_lines(path: Path, lines: int) -> None:
    """Cut a file at a line boundary, dropping its last ``lines`` lines."""
    kept = path.read_text().splitlines(keepends=True)[:-lines]
    path.write_text("".join(kept))


# ----------------------------------------------------------------------------- item 5


def test_report_refuses_a_cut_episodes_csv_and_keeps_the_good_summary(finished):
    config, out = finished
    good = {name: (out / name).read_bytes() for name in ("summary.csv", "summary.md")}
    last = runs_of(config)[-1]
    rows_of_last = finished_runs(out)[last.key]
    _cut_last_lines(out / "episodes.csv", rows_of_last)  # a whole adapter x agent x seed gone
    with pytest.raises(ResultsFolderError) as error:
        write_report(out, log=None)
    message = str(error.value)
    assert last.key in message and "--resume" in message
    for name, content in good.items():
        assert (out / name).read_bytes() == content  # not overwritten with a worse summary
    # --resume merges the runs' files anew, and the report is whole again
    run_experiment(config, resume=True, **QUIET)
    assert check_results(out) == {}
    assert (out / "summary.csv").read_bytes() == good["summary.csv"]


def test_a_line_cut_in_the_middle_is_refused_naming_the_line(finished):
    _, out = finished
    path = out / "episodes.csv"
    path.write_text(path.read_text()[:-25])  # cut mid-row
    with pytest.raises(ResultsFolderError, match="line .*cut or edited"):
        write_report(out, log=None)


def test_report_of_an_interrupted_folder_says_run_with_resume(tmp_path, monkeypatch, capsys):
    config = experiment_from_dict(raw_config(tmp_path))
    started_runs(monkeypatch, 1)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(config, **QUIET)
    out = config.output_dir
    with pytest.raises(ResultsFolderError, match="interrupted — 3 runs .* run with --resume"):
        write_report(out, log=None)
    code, _, err = run_cli(capsys, "report", str(out))
    assert code == 2
    assert "interrupted — 3 runs" in err and "--resume" in err
    assert "not a langadapt results folder" not in err
    assert "Traceback" not in err


def test_resume_redoes_a_done_run_whose_csv_was_truncated(finished, monkeypatch):
    config, out = finished
    damaged = runs_of(config)[1].key
    _cut_last_lines(out / "runs" / damaged / "episodes.csv", 2)
    assert damaged not in finished_runs(out)
    redone = started_runs(monkeypatch)
    run_experiment(config, resume=True, **QUIET)
    assert redone == [damaged]
    assert check_results(out) == {}


# ----------------------------------------------------------------------------- item 6


@pytest.mark.parametrize(
    ("changes", "key"),
    [
        ({"seeds": 1_000_000_000}, "seeds"),
        ({"seeds": [0, 2**70]}, "seeds"),
        ({"seeds": list(range(MAX_SEED_COUNT + 1))}, "seeds"),
        ({"torch_threads": 100_000}, "torch_threads"),
        ({"training": {"episodes": 10**23}}, "training.episodes"),
        ({"training": {"steps": 10**12}}, "training.steps"),
        ({"evaluation": {"episodes": 10**9}}, "evaluation.episodes"),
        ({"evaluation": {"final_episodes": 10**9}}, "evaluation.final_episodes"),
        ({"evaluation": {"every": 10**12}}, "evaluation.every"),
        ({"executor": {"jobs": 10**6}}, "executor.jobs"),
        ({"executor": {"type": "ray", "cpus_per_run": 1e9}}, "executor.cpus_per_run"),
        ({"executor": {"type": "ray", "max_retries": 10**6}}, "executor.max_retries"),
    ],
)
def test_every_count_is_bounded_and_named(tmp_path, changes, key):
    with pytest.raises(ConfigError, match=rf"\b{key}\b"):
        experiment_from_dict(raw_config(tmp_path, **changes), "x.yaml")


def test_the_largest_allowed_seed_is_accepted(tmp_path):
    config = experiment_from_dict(raw_config(tmp_path, seeds=[MAX_SEED]))
    assert config.seed_list == [MAX_SEED]


def test_an_unbounded_count_on_the_command_line_writes_nothing(tmp_path, capsys):
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)))
    for args in (["--seeds", "1000000000"], ["--jobs", "100000000"]):
        code, _, err = run_cli(capsys, "run", str(path), *args, "--no-progress")
        assert code == 2, err
        assert "Traceback" not in err
        assert args[0].lstrip("-") in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- item 9


def _llm_adapter(**settings) -> dict:
    return {"type": "llm", "settings": {"backend": "ollama", "model": "m", **settings}}


def test_settings_that_do_not_change_results_leave_the_fingerprint_alone(tmp_path):
    base = raw_config(tmp_path, adapters=[_llm_adapter(host="http://a:1", concurrency=2)])
    same = raw_config(
        tmp_path / "elsewhere",
        name="renamed",
        description="other words",
        adapters=[_llm_adapter(host="http://b:2", concurrency=16, timeout=5, retries=1)],
        executor={"type": "ray", "address": "auto", "jobs": 3, "cpus_per_run": 2},
    )
    other_model = raw_config(tmp_path, adapters=[_llm_adapter(model="another")])
    other_seeds = raw_config(tmp_path, adapters=[_llm_adapter()], seeds=3)
    fingerprint = experiment_from_dict(base).fingerprint()
    assert experiment_from_dict(same).fingerprint() == fingerprint
    assert experiment_from_dict(other_model).fingerprint() != fingerprint
    assert experiment_from_dict(other_seeds).fingerprint() != fingerprint


def test_resume_accepts_a_changed_cache_folder_and_job_count(finished, tmp_path):
    config, out = finished
    moved = experiment_from_dict(
        {**config.model_dump(mode="json"), "cache_dir": str(tmp_path / "other-cache"),
         "executor": {"jobs": 2}}
    )
    run_experiment(moved, resume=True, **QUIET)
    assert check_results(out) == {}


@pytest.mark.parametrize("name", ["../../../x", "a/b", "..", ".hidden", "", "x" * 101, "a\\b"])
def test_name_must_be_a_plain_folder_name(tmp_path, name):
    with pytest.raises(ConfigError, match="name: .*not a plain folder name"):
        experiment_from_dict(raw_config(tmp_path, name=name), "x.yaml")


@pytest.mark.parametrize("value", [".nan", ".inf", "-.inf"])
def test_threshold_must_be_finite(tmp_path, value):
    path = tmp_path / "exp.yaml"
    path.write_text(
        yaml.safe_dump(raw_config(tmp_path)) + f"evaluation: {{every: 2, threshold: {value}}}\n"
    )
    threshold = yaml.safe_load(path.read_text())["evaluation"]["threshold"]
    assert not math.isfinite(threshold)  # what YAML reads: a float that is not a number
    with pytest.raises(ConfigError, match=r"evaluation.threshold=(NaN|-?Infinity): .*finite"):
        load_config(path)


def test_a_corrupt_config_yaml_in_the_results_folder_is_one_line_on_resume(
        finished, tmp_path, capsys):
    config, out = finished
    (out / "config.yaml").write_text("name: [unclosed\n  adapters: {{{\n")
    with pytest.raises(ConfigError) as error:
        run_experiment(config, resume=True, **QUIET)
    message = str(error.value)
    assert "\n" not in message and "config.yaml" in message and "--force" in message
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(raw_config(tmp_path)))
    code, _, err = run_cli(capsys, "run", str(path), "--resume", "--no-progress")
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert "config.yaml" in err and "Traceback" not in err


def test_a_config_file_that_is_not_utf8_is_named(tmp_path, capsys):
    path = tmp_path / "latin1.yaml"
    text = yaml.safe_dump(raw_config(tmp_path, description="café"), allow_unicode=True)
    path.write_bytes(text.encode("latin-1"))
    with pytest.raises(ConfigError, match=r"latin1\.yaml: not a UTF-8 text file"):
        load_config(path)
    code, _, err = run_cli(capsys, "run", str(path))
    assert code == 2 and "latin1.yaml" in err
    assert "Traceback" not in err


# ----------------------------------------------------------------------------- the CLI


def test_expected_problems_are_one_line_and_bugs_keep_their_traceback(tmp_path, monkeypatch):
    missing = tmp_path / "nope"
    assert cli.main(["report", str(missing)]) == 2  # an expected problem: a message

    # a bug raised with no frame of the user's code (a builtin here): its traceback is kept
    monkeypatch.setitem(cli.COMMANDS, "report", {}.pop)
    with pytest.raises(KeyError):
        cli.main(["report", str(missing)])

    # a ValueError of langadapt's own code (a function whose file lies in the package)
    namespace: dict = {}
    exec(compile('def internal_value_error(args):\n'
                 '    raise ValueError("an internal check that failed")\n',
                 str(Path(cli.__file__).with_name("_bug.py")), "exec"), namespace)
    monkeypatch.setitem(cli.COMMANDS, "report", namespace["internal_value_error"])
    with pytest.raises(ValueError, match="internal check"):
        cli.main(["report", str(missing)])


def test_episodes_record_llm_fallbacks(finished):
    _, out = finished
    with open(out / "episodes.csv", newline="") as handle:
        header = next(csv.reader(handle))
    assert "llm_fallbacks" in header


def test_a_summary_says_plainly_when_descriptions_were_fallbacks(tmp_path):
    from fake_ollama import FakeOllama

    with FakeOllama(models=("tiny",), mode="empty") as server:  # every reply is empty
        llm = {"type": "llm", "settings": {"backend": "ollama", "model": "tiny",
                                           "host": server.host, "fallback": True,
                                           "action_history_length": 0, "retries": 0}}
        config = experiment_from_dict(
            raw_config(tmp_path, adapters=[{"type": "raw"}, llm], agents=[{"type": "random"}],
                       seeds=1)
        )
        out = run_experiment(config, **QUIET)
    with open(out / "summary.csv", newline="") as handle:
        summary = {row["adapter"]: row for row in csv.DictReader(handle)}
    assert int(summary["llm"]["llm_fallbacks"]) > 0
    assert int(summary["raw"]["llm_fallbacks"]) == 0
    assert "llm: " in (out / "summary.md").read_text()
    assert "came from the rule describer, not the LLM" in (out / "summary.md").read_text()


def test_a_huge_network_fails_when_the_file_is_read(tmp_path):
    dqn = {"type": "dqn", "params": {"hidden_sizes": [10**9]}}
    with pytest.raises(ConfigError, match=r"agents\.0\.params\.hidden_sizes"):
        experiment_from_dict(raw_config(tmp_path, agents=[dqn]), "x.yaml")
    buffer = {"type": "dqn", "params": {"buffer_size": 10**12}}
    with pytest.raises(ConfigError, match=r"agents\.0\.params\.buffer_size"):
        experiment_from_dict(raw_config(tmp_path, agents=[buffer]), "x.yaml")
