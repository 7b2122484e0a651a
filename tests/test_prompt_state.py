"""``langadapt prompt --state`` lists the given state's legal moves (issue 51): the
environment's ``legal_moves_at(state)`` when it has one, else every action with a note —
never the reset state's."""

from __future__ import annotations

import sys

import pytest
from experiment_fixtures import run_cli
from fake_ollama import FakeOllama

DOORS = '''
import gymnasium as gym
from gymnasium import spaces

from langadapt.environments import Describer, LanguageSpec, register_language


class Doors(gym.Env):
    """A corridor of five cells: at an end, only the way back is legal."""

    def __init__(self):
        self.observation_space = spaces.Dict({"cell": spaces.Discrete(5)})
        self.action_space = spaces.Discrete(2)

    def legal_at(self, cell):
        return [1] if cell == 0 else [0] if cell == 4 else [0, 1]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell = 2
        return {"cell": 2}, {"legal_moves": self.legal_at(2)}

    def step(self, action):
        self.cell += 1 if action == 1 else -1
        info = {"legal_moves": self.legal_at(self.cell)}
        return {"cell": self.cell}, 0.0, False, False, info


class KnowsMoves(Doors):
    def legal_moves_at(self, state):
        return self.legal_at(state["cell"])


class DoorsDescriber(Describer):
    env_name = "Doors"
    state_shape = None
    n_actions = 2

    def describe(self, state, legal_moves, last_action):
        return f"You are in cell {state['cell']}."


gym.register(id="Doors-v0", entry_point=Doors)
gym.register(id="KnowsMoves-v0", entry_point=KnowsMoves)
register_language(Doors, lambda env, **options: LanguageSpec(
    describer=DoorsDescriber(), action_names=("back", "on"), task="Walk.",
    state_of=lambda env: {"cell": env.cell}))
'''


@pytest.fixture
def doors(tmp_path, monkeypatch):
    (tmp_path / "my_doors.py").write_text(DOORS, encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    sys.modules.pop("my_doors", None)


def _legal_line(out: str) -> str:
    return next(line for line in out.splitlines() if line.startswith("Legal actions"))


def test_prompt_state_lists_that_states_legal_moves_not_the_resets(doors, capsys):
    with FakeOllama(models=("tiny",)) as fake:
        llm = ["--backend", "ollama", "--host", fake.host, "--model", "tiny"]
        code, out, err = run_cli(capsys, "prompt", "my_doors:KnowsMoves-v0", *llm)
        assert code == 0, err
        assert _legal_line(out) == "Legal actions: 0 (back), 1 (on)."  # the reset's cell 2
        code, out, err = run_cli(capsys, "prompt", "my_doors:KnowsMoves-v0", *llm,
                                 "--state", '{"cell": 0}')
        assert code == 0, err
        assert "You are in cell 0." in out and _legal_line(out) == "Legal actions: 1 (on)."
        assert "-> action 1 (on)" in out
        code, out, err = run_cli(capsys, "prompt", "my_doors:Doors-v0", *llm,
                                 "--state", '{"cell": 4}')
        assert code == 0, err
        assert out.startswith("# legal moves of the given state: every action (Doors-v0 has "
                              "no legal_moves_at(state)")
        assert _legal_line(out) == "Legal actions: 0 (back), 1 (on)."
