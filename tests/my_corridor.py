"""A user's own environment module, as a researcher writes one: an environment, its
registration and its language spec at import time, and no ``if __name__ == "__main__"``
anywhere (tests/test_own_envs.py copies it into a user's folder; the docs' YAML blocks name
it as ``my_corridor:Corridor-v0``)."""

import gymnasium as gym
import numpy as np
from gymnasium import spaces

from langadapt.environments import Describer, LanguageSpec, register_language


class Corridor(gym.Env):
    """Walk right along five cells to the end."""

    def __init__(self, length=5):
        self.length = length
        self.observation_space = spaces.Box(0, length - 1, shape=(1,), dtype=np.float32)
        self.action_space = spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.cell, self.steps = 0, 0
        return np.array([self.cell], dtype=np.float32), {}

    def step(self, action):
        self.cell = max(0, min(self.length - 1, self.cell + (1 if action == 1 else -1)))
        self.steps += 1
        done = self.cell == self.length - 1
        return (np.array([self.cell], dtype=np.float32), float(done), done,
                self.steps >= 20, {"is_success": done})


class CorridorDescriber(Describer):
    env_name = "Corridor"
    state_shape = (1,)
    n_actions = 2

    def describe(self, state, legal_moves, last_action):
        return f"You are {4 - int(state[0])} cells from the end of the corridor."


gym.register(id="Corridor-v0", entry_point=Corridor)
register_language(Corridor, lambda env, **options: LanguageSpec(
    describer=CorridorDescriber(), action_names=("left", "right"),
    task="Walk to the end of the corridor.",
    state_of=lambda env: np.array([env.cell], dtype=np.float32)))
