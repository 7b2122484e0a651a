"""What a resumed run says about itself: ``CPU s`` (done.json's ``cpu_seconds``) counts the
processes before the interrupt too (the checkpoint carries them), TensorBoard's steps do not
go back (the resumed writer purges the events past the checkpoint), the header says which
runs go on from a checkpoint and at which step, and the interrupt line names ``--out``."""

from __future__ import annotations

import json
from importlib.util import find_spec
from pathlib import Path

import pytest
from experiment_fixtures import raw_config

from langadapt.agents.checkpoints import Checkpoint, Checkpoints, read_checkpoint
from langadapt.experiments import cli
from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.runner import run_experiment

KEY = "raw__qlearning__seed0"


def _interrupted_after_a_checkpoint(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    **changes) -> tuple[dict, Path]:
    """A qlearning run stopped (KeyboardInterrupt) a few episodes after its first
    checkpoint; its data and folder."""
    data = raw_config(tmp_path, agents=[{"type": "qlearning"}], seeds=1,
                      training={"steps": 4000},
                      logging={"checkpoint_every_steps": 1000, **changes})
    original = Checkpoints.on_record
    after: list[int] = []

    def stop_later(self, run, record):
        original(self, run, record)
        if self.resume is None and self._last_steps and record.phase == "train":
            after.append(run.steps)
            if len(after) > 8:
                raise KeyboardInterrupt

    monkeypatch.setattr(Checkpoints, "on_record", stop_later)
    with pytest.raises(KeyboardInterrupt):
        run_experiment(experiment_from_dict(data), progress=False, log=lambda _: None)
    monkeypatch.setattr(Checkpoints, "on_record", original)
    return data, Path(data["output"])


def test_a_resumed_run_counts_its_cpu_seconds_and_says_where_it_goes_on(tmp_path, monkeypatch):
    data, out = _interrupted_after_a_checkpoint(tmp_path, monkeypatch)
    kept = read_checkpoint(out / "runs" / KEY / "checkpoint.safetensors")
    cpu_before, wall_before = kept.spent
    assert 0 < cpu_before < 1000 and 0 < wall_before < 1000
    monkeypatch.setattr(Checkpoint, "spent", (1000.0, 2000.0))  # the earlier processes'
    lines: list[str] = []
    run_experiment(experiment_from_dict(data), resume=True, progress=False, log=lines.append)
    assert (f"0 finished, 1 continues from its checkpoint ({KEY} at step {kept.steps:,}), "
            "0 start afresh") in lines[0]
    done = json.loads((out / "runs" / KEY / "done.json").read_text())
    assert 1000 < done["cpu_seconds"] < 1100 and 2000 < done["wall_time"] < 2100


@pytest.mark.skipif(find_spec("tensorboard") is None, reason="needs the tensorboard extra")
def test_tensorboard_steps_do_not_go_back_after_a_resume(tmp_path, monkeypatch):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    data, out = _interrupted_after_a_checkpoint(tmp_path, monkeypatch, tensorboard=True)
    kept = read_checkpoint(out / "runs" / KEY / "checkpoint.safetensors")
    before = EventAccumulator(str(out / "runs" / KEY / "tb"))
    before.Reload()
    assert max(e.step for e in before.Scalars("rollout/ep_rew_mean")) > kept.steps
    run_experiment(experiment_from_dict(data), resume=True, progress=False, log=lambda _: None)
    events = EventAccumulator(str(out / "runs" / KEY / "tb"))
    events.Reload()
    steps = [e.step for e in events.Scalars("rollout/ep_rew_mean")]
    assert steps == sorted(set(steps)) and steps[-1] >= 3900  # one curve, to the end


def test_the_interrupt_line_names_the_out_folder_in_the_resume_command(tmp_path, capsys,
                                                                       monkeypatch):
    import yaml

    data = raw_config(tmp_path, agents=[{"type": "qlearning"}], seeds=1)
    path = tmp_path / "e.yaml"
    path.write_text(yaml.safe_dump(data))

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("langadapt.experiments.runner.run_experiment", interrupted)
    code = cli.main(["run", str(path), "--no-progress", "--force"])
    err = capsys.readouterr().err
    assert code == 130
    assert (f"continue with: langadapt run {path} --no-progress --out {tmp_path / 'out'} "
            "--resume") in err
