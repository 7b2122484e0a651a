"""Bad experiment files and command-line values: every case one line naming the file, the
key or the value and what was expected, exit code 2, nothing written — YAML that expands
without bound (aliases, ``--set``), counts, sizes and step limits past their bounds, held-out
seeds training uses, paths too long for the file system, lakes that cannot be drawn."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from experiment_fixtures import one_line_error as _main
from experiment_fixtures import raw_config, run_cli
from experiment_fixtures import write_yaml as _write

from langadapt.experiments import cli
from langadapt.experiments.config import MAX_YAML_VALUES, experiment_from_dict
from langadapt.experiments.schema import ConfigError

# ----------------------------------------------------------------------------- YAML, bounds


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
    many = tmp_path / "many.yaml"  # no alias, but more values than the cap: not composed
    many.write_text("name: many\ndescription: [" + ", ".join(["1"] * 100_001) + "]\n")
    code, err = _main(capsys, "run", str(many), "--check")
    assert code == 2 and f"more than {MAX_YAML_VALUES:,} values" in err
    huge = tmp_path / "huge.yaml"
    huge.write_text("name: huge\ndescription: " + "x" * 5_000_000 + "\n")
    code, err = _main(capsys, "run", str(huge), "--check")
    assert code == 2 and "5,000,025 bytes; expected an experiment file of at most 4,000,000" in err


def test_a_few_aliases_still_load(tmp_path):
    path = tmp_path / "shared.yaml"
    path.write_text(
        "name: shared\nenvironment: {id: langadapt/Maze-v0}\nadapters: [{type: raw}]\n"
        "agents:\n  - {type: qlearning, label: a, params: &p {alpha: 0.3}}\n"
        "  - {type: qlearning, label: b, params: *p}\ntraining: {episodes: 2}\n")
    from langadapt.experiments.config import load_config

    assert [a.params for a in load_config(path).agents] == [{"alpha": 0.3}] * 2


def test_instruction_counts_are_bounded_when_the_file_is_checked(tmp_path, capsys):
    data = raw_config(tmp_path)
    data["environment"]["instructions"] = {"instruction": "reach the goal",
                                           "exploration_episodes": 10**12}
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = _main(capsys, "run", str(path), "--check", lines=2)
    assert code == 2 and "environment.instructions.exploration_episodes=1000000000000: input " \
        "should be less than or equal to 100000" in err


def test_a_cache_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    from langadapt.experiments.one_run import adapter_settings
    from langadapt.experiments.schema import AdapterSpec

    a_file = tmp_path / "cache"
    a_file.write_text("not a folder")
    for cache_dir in (a_file, a_file / "below"):
        path = tmp_path / "exp.yaml"
        path.write_text(yaml.safe_dump(raw_config(tmp_path, cache_dir=str(cache_dir))))
        code, err = _main(capsys, "run", str(path), "--check", lines=2)
        assert code == 2 and f"cache_dir: {str(cache_dir)!r}" in err and "is a file" in err
    with pytest.raises(ConfigError, match=r"cache_dir '.*cache' is a file"):  # made a file later
        adapter_settings(AdapterSpec(type="language"), str(a_file))
    assert a_file.read_text() == "not a folder" and not (tmp_path / "out").exists()


@pytest.mark.parametrize("steps", [1.5, 0, True])
def test_minigrid_max_steps_is_validated_naming_the_key(tmp_path, capsys, steps):
    pytest.importorskip("minigrid")
    data = raw_config(tmp_path, agents=[{"type": "random"}],
                      environment={"id": "MiniGrid-DoorKey-5x5-v0",
                                   "params": {"max_steps": steps}})
    path = tmp_path / "exp.yaml"
    path.write_text(yaml.safe_dump(data))
    code, err = _main(capsys, "run", str(path), "--no-progress")
    assert code == 2 and f"environment.params: max_steps={steps!r}: expected a whole number" in err
    assert not (tmp_path / "out").exists()


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


@pytest.mark.parametrize(("environment", "expected"), [
    ({"id": "langadapt/Maze-v0", "params": {"maze": "random", "width": 100_001, "height": 9}},
     "width=100001: input should be less than or equal to 201"),
    ({"id": "langadapt/Maze-v0", "params": {"maze": "umaze", "max_steps": 10**12}},
     "max_steps=1000000000000: input should be less than or equal to 1000000"),
    ({"id": "langadapt/Sailing-v0", "params": {"max_steps": 10**9}},
     "max_steps=1000000000: input should be less than or equal to 1000000"),
])
def test_environment_sizes_and_step_limits_are_bounded(tmp_path, capsys, environment, expected):
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path, environment=environment))
    code, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and expected in err


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


# ----------------------------------------------------------------------------------- SB3 keywords


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
    ({"policy_kwargs": {"net_arch": [100_000] * 3}}, "policy_kwargs.net_arch=[100000, 100000, "
     "100000]: expected layer widths from 1 to 65,536"),
    ({"algorithm": "SAC", "policy_kwargs": {"net_arch": {"pi": [8], "qf": [65_536] * 2}}},
     "policy_kwargs.net_arch.qf=[65536, 65536]: 4,294,967,296 weights between its layers; "
     "expected at most 100,000,000"),
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


# ----------------------------------------------------------------------------- --set values


def test_a_set_value_is_read_with_the_files_bounded_loader(tmp_path, capsys):
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path))
    levels = ["&a0 [x, x, x, x, x, x, x, x, x]"] + [
        f"&a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    bomb = "[" + ", ".join(levels) + "]"  # nine levels of nine aliases: 387 million values
    code, err = _main(capsys, "run", str(path), "--check",
                      "--set", f"agents.qlearning.params.alpha={bomb}")
    assert code == 2 and "--set agents.qlearning.params.alpha: the YAML holds more than " \
        f"{MAX_YAML_VALUES:,} values" in err


@pytest.mark.parametrize(("text", "agents"), [("5", 5), ("[5]", [5]), ("{a: 1}", {"a": 1})])
def test_agents_of_another_type_are_one_error_not_a_traceback(tmp_path, capsys, text, agents):
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path))
    assignment = f"agents={text}"
    code, err = _main(capsys, "run", str(path), "--check", "--set", assignment, lines=2)
    assert code == 2 and f"--set {assignment}: invalid experiment file" in err
    # a budget spread over every agent's own block: the same one error (was a TypeError)
    code, err = _main(capsys, "run", str(path), "--check", "--set", assignment,
                      "--set", "training.steps=50", lines=2)
    assert code == 2 and f"--set {assignment} --set training.steps=50: invalid experiment " \
        "file" in err
    _write(path, raw_config(tmp_path, agents=agents))  # the file's own, with --backend
    code, err = _main(capsys, "run", str(path), "--check", "--backend", "ollama")
    assert code == 2 and "has no LLM agent" in err


def test_a_set_value_with_a_newline_keeps_the_error_on_its_lines(tmp_path, capsys):
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path))
    code, err = _main(capsys, "run", str(path), "--check", "--set", "seeds=[1,\n  x]", lines=2)
    assert code == 2 and '"--set seeds=[1,\\n  x]"' in err


# ----------------------------------------------------------------------------- command lines


def test_describe_with_deeply_nested_state_json_is_one_line(capsys):
    nested = "[" * 50_000 + "]" * 50_000
    code, _, err = run_cli(capsys, "describe", "my_lamps:Lamps-v0", "--state", nested)
    assert code == 2 and err.count("\n") == 1 and "is not an observation of Lamps-v0" in err
    assert "Traceback" not in err and len(err) < 1_000


@pytest.mark.parametrize("args", [
    ["run", "EXP", "--check", "--out", "o" * 300],
    ["run", "EXP", "--out", "o" * 300, "--no-progress"],
    ["report", "r" * 300],
    ["report", "EXP", "EXP", "--out", "c" * 300],
    ["init", "quickstart", "i" * 300],
    ["evaluate", "EXP", "--out", "e" * 300],
    ["evaluate", "f" * 300, "--out", "x"],
    ["play", "EXP", "--out", "p" * 296 + ".gif"],
    ["play", "r" * 300],
])
def test_a_command_line_path_too_long_for_the_file_system_is_one_line(tmp_path, capsys,
                                                                      monkeypatch, args):
    monkeypatch.chdir(tmp_path)
    path = _write(tmp_path / "exp.yaml", raw_config(tmp_path))
    code, _, err = run_cli(capsys, *[str(path) if a == "EXP" else a for a in args])
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert "(300 bytes, a name of 300): expected a path of at most 4,096 bytes" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exp.yaml"]


def test_an_experiment_file_that_is_a_directory_or_a_fifo_says_what_it_is(tmp_path, capsys):
    import os

    (tmp_path / "folder.yaml").mkdir()
    os.mkfifo(tmp_path / "fifo.yaml")
    code, err = _main(capsys, "run", str(tmp_path / "folder.yaml"), "--check")
    assert code == 2 and "folder.yaml is a directory; expected an experiment YAML file" in err
    code, err = _main(capsys, "run", str(tmp_path / "fifo.yaml"), "--check")
    assert code == 2 and "fifo.yaml is not a regular file; expected an experiment YAML" in err


@pytest.mark.parametrize("args", [["--only", "vector"], ["finetune-trl"]])
def test_bench_steps_are_bounded(capsys, args):
    code, err = _main(capsys, "bench", *args, "--steps", "99999999999999999999")
    assert code == 2 and "--steps 99999999999999999999: expected an int from 1 to " \
        "1,000,000,000" in err


# ----------------------------------------------------------------------------- agents' sizes


@pytest.mark.parametrize(("params", "expected"), [
    ({"action_bins": 100_000_000}, "action_bins is 100000000: expected at most 10,000 actions"),
    ({"action_bins": [100, 1000]}, "expected at most 10,000 actions in all"),
    ({"bins": [1000, 1000]}, "bins is [1000, 1000]: expected ints of at least 1 making at most "
                             "100,000 states"),
    ({"action_bins": 3, "action_bounds": [[2.0, -2.0]]}, "action_bounds has (2.0, -2.0): "
                                                          "expected finite (low, high) pairs"),
    ({"action_bins": 3, "action_bounds": [[".inf", 1.0]]}, "action_bounds has (inf, 1.0)"),
    ({"action_bins": 3, "action_bounds": [[".nan", 1.0]]}, "action_bounds has (nan, 1.0)"),
])
def test_policy_search_tables_are_bounded_when_the_file_is_read(tmp_path, capsys, params,
                                                                expected):
    agent = {"type": "llm_policy_search", "params": {"proposer": "random", **params}}
    data = raw_config(tmp_path, agents=[agent], seeds=1,
                      environment={"id": "Pendulum-v1"}, training={"episodes": 2})
    text = yaml.safe_dump(data).replace("'.inf'", ".inf").replace("'.nan'", ".nan")
    path = tmp_path / "exp.yaml"
    path.write_text(text)
    code, err = _main(capsys, "run", str(path), "--check", lines=2)
    assert code == 2 and "agents.0.params" in err and expected in err


@pytest.mark.parametrize("algorithm", ["DQN", "SAC", "TD3"])
def test_sb3_off_policy_algorithms_on_copies_are_refused_when_the_file_is_read(
        tmp_path, capsys, algorithm):
    pytest.importorskip("stable_baselines3")
    env = {"id": "Pendulum-v1"} if algorithm != "DQN" else {"id": "CartPole-v1"}
    data = raw_config(tmp_path, agents=[{"type": "sb3", "params": {"algorithm": algorithm}}],
                      environment=env, training={"steps": 64, "n_envs": 2}, seeds=1)
    code, err = _main(capsys, "run", str(_write(tmp_path / "exp.yaml", data)), "--check")
    assert code == 2 and f"training.n_envs: agents.0 is SB3's {algorithm}" in err
    assert "set n_envs: 1 for it" in err


def test_transfer_parameters_that_draw_no_lake_fail_before_training(tmp_path, capsys):
    data = raw_config(tmp_path, seeds=[0], environment={
        "id": "langadapt/FrozenLakeMaps-v0", "params": {"size": 4}}, evaluation={
        "final_episodes": 1, "transfer": {
            "environment_params": {"size": 16, "frozen_probability": 0.05},
            "heldout_seeds": {"first": 500_000, "count": 2}}})
    path = _write(tmp_path / "exp.yaml", data)
    for extra in (["--check"], ["--no-progress"]):
        code, err = _main(capsys, "run", str(path), *extra)
        assert code == 2 and "evaluation.transfer.environment_params: size=16, " \
            "frozen_probability=0.05: no lake" in err
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------- --check builds

BROKEN_FIRST_OBSERVATION = '''\
import gymnasium as gym
import numpy as np
from gymnasium import spaces


class Broken(gym.Env):
    """A Dict observation whose first one holds nan or inf, or misses a key."""

    def __init__(self, first="nan"):
        self.first = first
        self.observation_space = spaces.Dict(
            {"x": spaces.Box(-np.inf, np.inf, (2,), np.float32), "k": spaces.Discrete(3)})
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        x = {"nan": np.nan, "inf": np.inf}.get(self.first, 0.0)
        obs = {"x": np.array([x, 0.0], np.float32), "k": 1}
        if self.first == "missing":
            del obs["k"]
        return obs, {}

    def step(self, action):
        return self.reset()[0], 0.0, True, False, {}


gym.register(id="BrokenFirst-v0", entry_point=Broken)
'''

SB3_ON = "agents.0.params (sb3 on adapters.0 (raw)'s observations, a Box of shape (2,)): "


@pytest.mark.parametrize(("changes", "expected"), [
    ({"agents": [{"type": "sb3", "params": {"policy": "CnnPolicy"}}]},
     SB3_ON + "You should use NatureCNN only with images not with Box(0.0, 4.0, (2,), float32) "
     "(you are probably using `CnnPolicy` instead of `MlpPolicy` or `MultiInputPolicy`)"),
    ({"agents": [{"type": "sb3", "params": {"algorithm": "SAC"}}]},
     SB3_ON + "SB3's SAC does not take action space Discrete(8) (it takes Box actions"),
    ({"agents": [{"type": "llm_policy_search",
                  "params": {"proposer": "random", "action_bins": [3, 3]}}],
      "environment": {"id": "Pendulum-v1"}},
     "agents.0.params (llm_policy_search on adapters.0 (raw)'s observations, a Box of shape "
     "(3,)): action_bins is [3, 3], expected one int or 1 ints (one per action dimension)"),
    ({"environment": {"id": "broken_first_obs:BrokenFirst-v0", "params": {"first": "nan"}}},
     "environment: the first observation of broken_first_obs:BrokenFirst-v0 (reset with seed "
     "0), as adapters.0 (raw) checks it: state {'x': array([nan, 0.], dtype=float32), 'k': 1} "
     "is not an observation of Dict("),
    ({"environment": {"id": "broken_first_obs:BrokenFirst-v0", "params": {"first": "inf"}}},
     "as adapters.0 (raw) checks it: state array([ 0., 1., 0., inf, 0.]) contains NaN or inf; "
     "expected finite values"),
    ({"environment": {"id": "broken_first_obs:BrokenFirst-v0",
                      "params": {"first": "missing"}}},
     "environment: the first observation of broken_first_obs:BrokenFirst-v0 (reset with seed "
     "0): The obs returned by the `reset()` method observation keys is not same as the "
     "observation space keys, obs keys: ['x'], space keys: ['k', 'x']"),
])
def test_check_builds_what_the_run_builds(tmp_path, capsys, monkeypatch, changes, expected):
    """What --check passes runs: each (adapter, agent) is built on the first observation, so
    an SB3 policy or algorithm that does not fit the spaces, a policy-search grid of the
    wrong length and a user's Dict observation with nan, inf or a missing key fail in one
    line at --check, and at run before anything is written."""
    pytest.importorskip("stable_baselines3")
    (tmp_path / "mods").mkdir()  # the user's code, outside the experiment file's folder
    (tmp_path / "mods" / "broken_first_obs.py").write_text(BROKEN_FIRST_OBSERVATION)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))
    data = raw_config(tmp_path, **{"agents": [{"type": "random"}], "seeds": 1,
                                   "training": {"steps": 64}, **changes})
    (tmp_path / "exp").mkdir()
    path = _write(tmp_path / "exp" / "exp.yaml", data)
    code, err = _main(capsys, "run", str(path), "--check")
    assert code == 2 and expected in err, err
    code, err = _main(capsys, "run", str(path), "--no-progress")
    assert code == 2 and expected in err and not (tmp_path / "out").exists()


def test_check_sends_no_prompt_and_loads_no_encoder(tmp_path, capsys):
    """An llm adapter is built and its input check run, its prompt never sent; the packaged
    MiniLM's layout stands in for the observation space (the same as the loaded model's)."""
    from fake_ollama import FakeOllama

    from langadapt import adapters
    from langadapt.experiments.one_run import PACKAGED_ENCODER

    with FakeOllama(models=["llama3.2"]) as fake:
        llm = {"type": "llm", "settings": {"backend": "ollama", "host": fake.host,
                                           "model": "llama3.2"}}
        data = raw_config(tmp_path, adapters=[{"type": "raw"}, {"type": "language"}, llm],
                          agents=[{"type": "dqn", "params": {"hidden_sizes": [8]}}])
        code, err = _main(capsys, "run", str(_write(tmp_path / "exp.yaml", data)), "--check",
                          lines=0)
        assert code == 0 and fake.chat_requests == 0
    for settings in ({}, {"embedding": "sentences", "normalise": "whiten"},
                     {"embedding": "sentence_set", "with_raw": True}):
        adapter = adapters.make("language", "langadapt/Maze-v0", **settings)
        assert adapter.observation_space_with(PACKAGED_ENCODER) == adapter.observation_space


def test_a_table_over_many_language_dimensions_is_one_line_naming_its_states(tmp_path, capsys):
    agent = {"type": "llm_policy_search",
             "params": {"proposer": "random", "family": "tabular"}}  # [-1, 1]: 3 values each
    data = raw_config(tmp_path, agents=[agent], seeds=1, adapters=[{"type": "language"}],
                      training={"episodes": 2})
    code, err = _main(capsys, "run", str(_write(tmp_path / "exp.yaml", data)), "--check")
    assert code == 2 and "a table over these 384 observation dimensions has about 10^183 " in err
    assert "states; expected at most 100,000 (fewer bins, or family: linear)" in err
