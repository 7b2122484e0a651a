"""Language states for continuous control (issue 44): the InvertedPendulum describer on
hand-made states, its sides against the simulator's own motion, the registration that imports
no mujoco, the language wrapper under gymnasium's env checker, and
configs/continuous_language_inverted_pendulum.yaml validated and run shrunk. (Pendulum's
wrapper passes the checker in test_continuous_control.py.)"""

from __future__ import annotations

import csv
import math
import subprocess
import sys
import warnings
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import yaml

from langadapt.environments import InvertedPendulumDescriber, language_for
from langadapt.environments.continuous import INVERTED_PENDULUM_TASK

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
pytestmark = pytest.mark.usefixtures("one_torch_thread")


ROWS = ("raw", "language", "language_raw", "language_numbers")
"""The continuous files' rows: raw, language alone, beside the raw state, numbers kept."""


def run_sac_shrunk(data: dict, tmp_path: Path) -> list[dict]:
    """Run a raw-vs-language SAC file at 250 steps, one seed, one final episode; its rows,
    which hold train and final rows of every adapter (raw, language, language beside raw)."""
    from langadapt.experiments.config import load_config
    from langadapt.experiments.runner import run_experiment

    data["agents"][0]["params"] |= {"learning_starts": 200}
    data |= {"seeds": [0], "training": {"steps": 250}, "cache_dir": str(tmp_path / "cache"),
             "evaluation": {"final_episodes": 1}}
    shrunk = tmp_path / "shrunk.yaml"
    shrunk.write_text(yaml.safe_dump(data))
    out = run_experiment(load_config(shrunk), tmp_path / "out", progress=False,
                         log=lambda _: None)
    with open(out / "episodes.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert {(r["adapter"], r["phase"]) for r in rows} == {
        (adapter, phase) for adapter in ROWS for phase in ("train", "final")}
    return rows


def _mujoco() -> None:
    pytest.importorskip("mujoco", reason="the mujoco extra (in dev) runs InvertedPendulum-v5")


def test_the_inverted_pendulum_describer_says_where_and_how_fast():
    describe = InvertedPendulumDescriber()
    # x 0.12 (right), angle 0.06 rad = 3.44 degrees right (8.02 short of 11.46), the cart
    # moving left, the pole turning right: away from upright
    assert describe([0.12, 0.06, -0.2, 0.5]) == (
        "The cart is 0.12 right of the rail's center, 0.88 from its right end. The pole leans "
        "3.4 degrees right, 8.0 short of the 11.5 that ends the episode. The cart moves left at "
        "0.20 m/s; the pole turns right at 0.50 rad/s, away from upright.")
    assert describe([0.0, 0.0, 0.0, 0.0]) == (
        "The cart is at the center of the rail. The pole is upright. The cart is almost at "
        "rest; the pole is almost still.")
    # the mirror image: every side flips, the magnitudes stay
    assert describe([-0.7, -0.1, 1.25, 0.3]) == (
        "The cart is 0.70 left of the rail's center, 0.30 from its left end. The pole leans "
        "5.7 degrees left, 5.7 short of the 11.5 that ends the episode. The cart moves right at "
        "1.25 m/s; the pole turns right at 0.30 rad/s, toward upright.")
    # past the rail's (soft) end and past the angle that ends the episode
    past = describe([1.06, 0.25, 1.3, 8.4])
    assert past.startswith("The cart is at the right end of the rail. The pole leans 14.3 "
                           "degrees right, past the 11.5 that ends the episode.")
    assert "0.2 rad" in INVERTED_PENDULUM_TASK
    assert "from -3 (push left) to 3 (push right)" in INVERTED_PENDULUM_TASK
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        describe([0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match="finite|nan"):
        describe([math.nan, 0.0, 0.0, 0.0])


def test_the_sides_are_the_simulators_pushing_right_moves_the_cart_right_and_tips_the_pole_left():
    """The describer's right is MuJoCo's +x as rendered: a force of +3 moves the cart right and
    the pole, left behind, leans left; a pole leaning right with no force falls further right."""
    _mujoco()
    env = gym.make("InvertedPendulum-v5")
    spec = language_for(env)
    assert spec.action_names == ("force",) and spec.n_actions == 1
    env.reset(seed=0)
    env.unwrapped.set_state(np.zeros(2), np.zeros(2))
    for _ in range(3):
        obs, *_ = env.step(np.array([3.0], dtype=np.float32))
    text = spec.describe(obs)
    assert "The cart is 0.18 right of the rail's center" in text
    assert "The pole leans 22.9 degrees left, past" in text
    assert "The cart moves right" in text and "the pole turns left" in text
    assert spec.state_of(env.unwrapped).tolist() == pytest.approx(obs.tolist())
    env.reset(seed=0)
    env.unwrapped.set_state(np.array([0.0, 0.05]), np.zeros(2))
    obs, *_ = env.step(np.array([0.0], dtype=np.float32))
    text = spec.describe(obs)
    assert "degrees right" in text and "the pole turns right" in text
    assert text.endswith("away from upright.")


def test_registering_inverted_pendulum_imports_no_mujoco():
    """langadapt.environments imports without mujoco (the core install) and does not load it;
    the spec is found once gymnasium's class is imported."""
    code = ("import sys; sys.modules['mujoco'] = None\n"
            "import langadapt.environments as e\n"
            "from langadapt.environments import language_for\n"
            "assert 'gymnasium.envs.mujoco' not in sys.modules\n"
            "assert language_for('Pendulum-v1').action_names == ('torque',)\n"
            "print(e.InvertedPendulumDescriber()([0.5, 0, 0, 0]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("The cart is 0.50 right of the rail's center")
    _mujoco()
    for env_id in ("InvertedPendulum-v5", "InvertedPendulum-v4"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # v4's deprecation
            assert language_for(env_id).describer.env_name == "InvertedPendulum"
    with pytest.raises(ValueError, match="no language spec for environment 'HopperEnv'.*"
                                         "InvertedPendulumEnv"):
        language_for("Hopper-v5")


def test_the_inverted_pendulum_language_wrapper_passes_gymnasiums_env_checker():
    _mujoco()
    from gymnasium.utils.env_checker import check_env

    from langadapt import adapters
    from langadapt.adapters import LanguageObservation

    env = LanguageObservation(
        gym.make("InvertedPendulum-v5").unwrapped,
        adapters.make("language", gym.make("InvertedPendulum-v5"), encoder=adapters.get_encoder()))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check_env(env, skip_render_check=True)
    # besides every wrapper's "unwrapped" warning, only the force range [-3, 3]
    assert [str(w.message) for w in caught if "unwrapped" not in str(w.message)
            and "symmetric and normalized space" not in str(w.message)] == []
    obs, info = env.reset(seed=0)
    assert obs.shape == (384,) and obs.dtype == np.float32
    assert info["description"].startswith("The cart is")
    obs, *_ = env.step(np.array([-2.5], dtype=np.float32))
    assert env.history[-1][1] == (-2.5,)
    assert env.observation_space.contains(obs)


def test_the_inverted_pendulum_file_validates_and_runs_shrunk(tmp_path):
    """SAC on raw and language InvertedPendulum states: 250 steps, one seed; the language rows
    are the describer's sentences."""
    _mujoco()
    pytest.importorskip("stable_baselines3")
    from langadapt.experiments.config import load_config

    path = CONFIGS / "continuous_language_inverted_pendulum.yaml"
    assert load_config(path).seeds == 3
    data = yaml.safe_load(path.read_text())
    assert data["environment"]["id"] == "InvertedPendulum-v5"
    assert [a["type"] for a in data["adapters"]] == ["raw", "language", "language", "language"]
    assert data["adapters"][2]["settings"] == {"with_raw": True}
    assert data["adapters"][3]["settings"] == {"numbers": 8}
    assert data["agents"][0]["params"]["algorithm"] == "SAC"
    assert data["torch_threads"] == 1 and data["seeds"] == 3
    assert data["evaluation"]["final_episodes"] > 0
    rows = run_sac_shrunk(data, tmp_path)
    # the episode cut by the budget is not a row
    for adapter in ROWS:
        steps = sum(int(r["length"]) for r in rows
                    if r["adapter"] == adapter and r["phase"] == "train")
        assert 150 < steps <= 250
    # a return counts the steps the pole stayed up (v5 pays nothing for the falling step)
    assert all(float(r["return"]).is_integer() and 0 <= float(r["return"]) <= int(r["length"])
               for r in rows)
