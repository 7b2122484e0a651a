"""A Dict environment's describer that keeps a numeric ``state_shape`` (issue 51): one line
naming the fix from ``language_for``, so from ``describe``, ``prompt`` and ``run`` alike,
never a traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import gymnasium as gym
import pytest
from experiment_fixtures import run_cli

from langadapt.environments import LanguageSpecError, language_for

LAMPS = Path(__file__).with_name("my_lamps.py").read_text(encoding="utf-8").replace(
    "state_shape = None  # the observation as the environment gives it: a dict",
    "state_shape = (2,)")

FIX = ("LampsDescriber has state_shape = (2,), so it takes numbers, but Lamps's observations "
       "are a Dict: set state_shape = None in LampsDescriber, and its describe receives each "
       "observation as the environment gives it")


@pytest.fixture
def numeric_lamps(tmp_path, monkeypatch):
    """my_lamps.py with a describer that keeps state_shape, in a folder of its own."""
    code = tmp_path / "code"
    code.mkdir()
    (code / "my_lamps.py").write_text(LAMPS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(code))
    sys.modules.pop("my_lamps", None)  # an earlier test's (the right describer) is not this one
    yield tmp_path
    sys.modules.pop("my_lamps", None)


def test_a_dict_describer_with_a_state_shape_is_one_line_with_the_fix(numeric_lamps, capsys):
    assert "state_shape = (2,)" in LAMPS
    import my_lamps  # noqa: F401  (registers Lamps-v0)

    with pytest.raises(LanguageSpecError) as caught:
        language_for(gym.make("Lamps-v0"))
    assert str(caught.value) == FIX
    for command in (["describe", "my_lamps:Lamps-v0"],
                    ["prompt", "my_lamps:Lamps-v0", "--backend", "ollama", "--host",
                     "http://127.0.0.1:9"]):
        code, _, err = run_cli(capsys, *command)
        assert (code, err) == (2, f"langadapt {command[0]}: error: {FIX}\n")
    experiment = numeric_lamps / "lamps.yaml"
    experiment.write_text(
        "name: lamps\nenvironment: {id: my_lamps:Lamps-v0}\nadapters: [{type: language}]\n"
        "agents: [{type: random}]\ntraining: {episodes: 1}\nseeds: 1\n"
        f"evaluation: {{final_episodes: 1}}\ncache_dir: {numeric_lamps / 'cache'}\n",
        encoding="utf-8")
    code, _, err = run_cli(capsys, "run", str(experiment), "--import", "my_lamps",
                           "--no-progress", "--out", str(numeric_lamps / "out"))
    assert (code, err) == (2, f"langadapt run: error: adapters.0 (language): {FIX}\n")
