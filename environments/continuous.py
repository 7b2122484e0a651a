"""Language specs of gymnasium's continuous-control tasks Pendulum-v1 and
MountainCarContinuous-v0 (used as ``gymnasium.make(...)``).

Their actions are a Box: no legal-move list (the describers take none), the action space is
stated in words in the task, and ``action_names`` name the action's dimensions. Each sentence
says what is true of the state:

- Pendulum: the angle from upright (counterclockwise positive, as rendered), whether the
  pendulum is above or below the pivot, and its angular velocity, toward or away from upright.
- MountainCarContinuous: the car's position, which slope of the valley it is on, how far the
  flag is, and its velocity.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from .describers import Describer
from .language import LanguageSpec, register_language

__all__ = ["MountainCarContinuousDescriber", "PendulumDescriber"]

PENDULUM_TASK = (
    "You swing a pendulum up and keep it upright by applying a torque at its pivot. The angle "
    "is 0 when the pendulum points straight up and grows counterclockwise. The action is one "
    "number, the torque, from -2 to 2: a positive torque turns the pendulum counterclockwise. "
    "Every step costs angle^2 + 0.1 * angular velocity^2 + 0.001 * torque^2; an episode lasts "
    "200 steps."
)
MOUNTAINCAR_TASK = (
    "You drive a car out of a valley to the flag on the right hilltop, at position 0.45. The "
    "engine is too weak to climb straight up: rock back and forth to build momentum. The "
    "action is one number, the force, from -1 (push left) to 1 (push right). Reaching the "
    "flag earns 100; every step costs 0.1 * force^2; an episode ends at the flag or after "
    "999 steps."
)
VALLEY_BOTTOM = -math.pi / 6  # the lowest point of the track, height sin(3x)
FLAG = 0.45


class PendulumDescriber(Describer):
    """The angle from upright, above or below the pivot, and the angular velocity, from
    Pendulum's observation (cos angle, sin angle, angular velocity)."""

    env_name = "Pendulum"
    state_shape = (3,)
    bounds = (("cos(angle)", -1.0, 1.0), ("sin(angle)", -1.0, 1.0),
              ("angular velocity", -8.0, 8.0))

    def describe(self, state: Any, legal_moves: tuple[int, ...], last_action: Any) -> str:
        cos, sin, omega = (float(v) for v in state)
        angle = math.degrees(math.atan2(sin, cos))
        if abs(angle) < 0.5:
            where = "The pendulum points straight up."
        else:
            side = "counterclockwise" if angle > 0 else "clockwise"
            height = ("above" if abs(angle) < 89.5 else "below" if abs(angle) > 90.5
                      else "level with")
            where = (f"The pendulum is {abs(angle):.0f} degrees {side} from upright, {height} "
                     "the pivot.")
        if abs(omega) < 0.005:
            return where + " It is almost at rest."
        direction = "counterclockwise" if omega > 0 else "clockwise"
        heading = ("" if abs(angle) < 0.5 else
                   ", toward upright" if angle * omega < 0 else ", away from upright")
        return where + f" It turns {direction} at {abs(omega):.2f} rad/s{heading}."


class MountainCarContinuousDescriber(Describer):
    """The car's position, slope, distance to the flag and velocity, from
    MountainCarContinuous's observation (position, velocity)."""

    env_name = "MountainCarContinuous"
    state_shape = (2,)
    bounds = (("position", -1.2, 0.6), ("velocity", -0.07, 0.07))

    def describe(self, state: Any, legal_moves: tuple[int, ...], last_action: Any) -> str:
        position, velocity = (float(v) for v in state)
        if abs(position - VALLEY_BOTTOM) < 0.02:
            slope = "at the bottom of the valley"
        else:
            slope = ("on the left slope" if position < VALLEY_BOTTOM else
                     "on the right slope" if position < FLAG else "at the flag")
        flag = (f", {FLAG - position:.2f} left of the flag" if position < FLAG else "")
        where = f"The car is at position {position:.2f}, {slope}{flag}."
        if abs(velocity) < 0.0005:
            return where + " It is almost at rest."
        direction = "right" if velocity > 0 else "left"
        return where + f" It moves {direction} at {abs(velocity):.3f} per step."


def _pendulum(env: PendulumEnv, **options: Any) -> LanguageSpec:
    def state_of(e: PendulumEnv) -> np.ndarray:
        theta, omega = e.state
        return np.array([math.cos(theta), math.sin(theta), omega], dtype=np.float32)

    return LanguageSpec(PendulumDescriber(**options), ("torque",), PENDULUM_TASK, state_of)


def _mountain_car(env: Continuous_MountainCarEnv, **options: Any) -> LanguageSpec:
    return LanguageSpec(MountainCarContinuousDescriber(**options), ("force",), MOUNTAINCAR_TASK,
                        lambda e: np.array(e.state, dtype=np.float32))


register_language(PendulumEnv, _pendulum)
register_language(Continuous_MountainCarEnv, _mountain_car)
