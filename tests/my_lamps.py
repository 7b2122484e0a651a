"""A user's own environment with a ``Dict`` observation, as docs/environments.md writes it:
a corridor whose goal is at either end, observed as ``{"cell": Discrete(5), "goal":
Discrete(2)}``, its registration and its language spec (the describer receives the dict).
tests/test_dict_observations.py copies it into a user's folder as ``my_lamps.py``."""

import gymnasium as gym
from gymnasium import spaces

from langadapt.environments import Describer, LanguageSpec, register_language

ENDS = ("left", "right")


class Lamps(gym.Env):
    """Walk to the end of a five-cell corridor where the lamp is lit."""

    def __init__(self, length=5):
        self.length = length
        self.observation_space = spaces.Dict(
            {"cell": spaces.Discrete(length), "goal": spaces.Discrete(2)})
        self.action_space = spaces.Discrete(2)

    def observation(self):
        return {"cell": self.cell, "goal": self.goal}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell, self.goal, self.steps = self.length // 2, int(self.np_random.integers(2)), 0
        return self.observation(), {}

    def step(self, action):
        self.cell = max(0, min(self.length - 1, self.cell + (1 if action == 1 else -1)))
        self.steps += 1
        done = self.cell == (self.length - 1) * self.goal
        return self.observation(), float(done), done, self.steps >= 20, {"is_success": done}


class LampsDescriber(Describer):
    env_name = "Lamps"
    state_shape = None  # the observation as the environment gives it: a dict
    n_actions = 2

    def describe(self, state, legal_moves, last_action):
        lamp = ENDS[state["goal"]]
        return f"You stand in cell {state['cell']} of five; the lamp is lit at the {lamp} end."


gym.register(id="Lamps-v0", entry_point=Lamps)
register_language(Lamps, lambda env, **options: LanguageSpec(
    describer=LampsDescriber(), action_names=("left", "right"),
    task="Walk to the end of the corridor where the lamp is lit.",
    state_of=lambda env: env.observation()))
