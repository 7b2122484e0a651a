"""The third red team's defects (issue 32) outside the LLM transport layer, each as the case
that failed: ``--force`` on someone else's folder, a YAML alias bomb, ``finetune-export``
through a planted link and on adapters it cannot merge faithfully, the BabyAI oracle's
silent failures and unbounded memo, and bounds the experiment file promised but did not
check. Every case ends in one line naming the value, exit code 2, nothing lost."""

from __future__ import annotations

from pathlib import Path

import yaml
from experiment_fixtures import QUIET, raw_config

from langadapt.experiments import cli
from langadapt.experiments.config import MAX_YAML_VALUES, experiment_from_dict
from langadapt.experiments.runner import check_results, run_experiment


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def _main(capsys, *args: str) -> tuple[int, str]:
    capsys.readouterr()
    code = cli.main(list(args))
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return code, err


# ----------------------------------------------------------------------------- row 1: --force


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


# ----------------------------------------------------------------------------- row 2: aliases


def _alias_bomb(path: Path, levels: int = 9) -> None:
    lines = ["name: bomb", "environment:", "  id: langadapt/Maze-v0", "  params:",
             "    a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"    a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]"
              for i in range(1, levels)]
    lines += ["adapters: [{type: raw}]", "agents: [{type: random}]", "training: {episodes: 2}"]
    path.write_text("\n".join(lines) + "\n")


def test_a_yaml_alias_bomb_is_one_line_before_it_expands(tmp_path, capsys):
    path = tmp_path / "bomb.yaml"
    _alias_bomb(path)
    assert path.stat().st_size < 700
    code, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and str(path) in err and f"{MAX_YAML_VALUES:,}" in err and "aliases" in err
    recursive = tmp_path / "loop.yaml"
    recursive.write_text("name: loop\nenvironment: &e {id: langadapt/Maze-v0, params: {x: *e}}\n")
    code, err = _main(capsys, "run", str(recursive), "--check")
    assert code == 2 and "recursive YAML alias" in err
    deep = tmp_path / "deep.yaml"
    deep.write_text("name: " + "[" * 100_000 + "]" * 100_000 + "\n")
    code, err = _main(capsys, "run", str(deep), "--check")
    assert code == 2 and str(deep) in err


def test_a_few_aliases_still_load(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text(
        "name: shared\nenvironment: {id: langadapt/Maze-v0}\nadapters: [{type: raw}]\n"
        "agents:\n  - {type: qlearning, label: a, params: &p {alpha: 0.3}}\n"
        "  - {type: qlearning, label: b, params: *p}\ntraining: {episodes: 2}\n")
    from langadapt.experiments.config import load_config

    assert [a.params for a in load_config(path).agents] == [{"alpha": 0.3}] * 2
