"""Language specs of gymnasium's continuous-control tasks Pendulum-v1,
MountainCarContinuous-v0 and MuJoCo's InvertedPendulum-v5 (used as ``gymnasium.make(...)``).

Their actions are a Box: no legal-move list (the describers take none), the action space is
stated in words in the task, and ``action_names`` name the action's dimensions. Each sentence
says what is true of the state:

- Pendulum: the angle from upright (counterclockwise positive, as rendered), whether the
  pendulum is above or below the pivot, and its angular velocity, toward or away from upright.
- MountainCarContinuous: the car's position, which slope of the valley it is on, how far the
  flag is, and its velocity.
- InvertedPendulum: where the cart is on its rail and how far from the nearer end, which way
  and how far the pole leans and how far from the angle that ends the episode, and how fast
  each moves. Registered without importing mujoco (the ``mujoco`` extra): an instance of
  gymnasium's class exists only once its module is imported, so the class is looked up there.
"""

from __future__ import annotations

import math
import sys
from typing import Any

import numpy as np
from gymnasium.envs.classic_control.continuous_mountain_car import Continuous_MountainCarEnv
from gymnasium.envs.classic_control.pendulum import PendulumEnv

from .language import Describer, LanguageSpec, register_language

__all__ = ["InvertedPendulumDescriber", "MountainCarContinuousDescriber", "PendulumDescriber"]

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
INVERTED_PENDULUM_TASK = (
    "You keep a pole upright on a cart that slides along a rail from -1 (left end) to 1 "
    "(right end). The pole's angle is 0 when upright and grows as it leans right. The action "
    "is one number, the force on the cart, from -3 (push left) to 3 (push right). Every step "
    "with the pole upright earns 1; an episode ends when the pole leans more than 0.2 rad "
    "(11.5 degrees) or after 1000 steps."
)
VALLEY_BOTTOM = -math.pi / 6  # the lowest point of the track, height sin(3x)
FLAG = 0.45
RAIL_END = 1.0  # InvertedPendulum's slider range (soft: a fast cart passes it a little)
FALL_DEGREES = math.degrees(0.2)  # InvertedPendulum ends beyond 0.2 rad


def _side(value: float) -> str:
    return "right" if value > 0 else "left"


def _heading(upright: bool, angle: float, omega: float) -> str:
    """Where the angular velocity turns the angle (0 is upright): none when upright."""
    if upright:
        return ""
    return ", toward upright" if angle * omega < 0 else ", away from upright"


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
        heading = _heading(abs(angle) < 0.5, angle, omega)
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
        return where + f" It moves {_side(velocity)} at {abs(velocity):.3f} per step."


class InvertedPendulumDescriber(Describer):
    """The cart's place on the rail and its nearer end, the pole's lean and its margin to the
    angle that ends the episode, and both velocities, from InvertedPendulum's observation
    (cart position, pole angle, cart velocity, pole angular velocity; right is positive)."""

    env_name = "InvertedPendulum"
    state_shape = (4,)
    bounds = (("cart position", -math.inf, math.inf), ("pole angle", -math.inf, math.inf),
              ("cart velocity", -math.inf, math.inf),
              ("pole angular velocity", -math.inf, math.inf))

    def describe(self, state: Any, legal_moves: tuple[int, ...], last_action: Any) -> str:
        x, angle, velocity, omega = (float(v) for v in state)
        end = RAIL_END - abs(x)
        if abs(x) < 0.005:
            cart = "The cart is at the center of the rail."
        elif end < 0.005:
            cart = f"The cart is at the {_side(x)} end of the rail."
        else:
            cart = (f"The cart is {abs(x):.2f} {_side(x)} of the rail's center, {end:.2f} from "
                    f"its {_side(x)} end.")
        lean = math.degrees(abs(angle))
        if lean < 0.05:
            pole = " The pole is upright."
        else:
            margin = (f"{FALL_DEGREES - lean:.1f} short of" if lean < FALL_DEGREES else "past")
            pole = (f" The pole leans {lean:.1f} degrees {_side(angle)}, {margin} the "
                    f"{FALL_DEGREES:.1f} that ends the episode.")
        moves = ("The cart is almost at rest" if abs(velocity) < 0.005 else
                 f"The cart moves {_side(velocity)} at {abs(velocity):.2f} m/s")
        if abs(omega) < 0.005:
            turns = "the pole is almost still."
        else:
            turns = (f"the pole turns {_side(omega)} at {abs(omega):.2f} rad/s"
                     f"{_heading(lean < 0.05, angle, omega)}.")
        return cart + pole + f" {moves}; {turns}"


def _pendulum(env: PendulumEnv, **options: Any) -> LanguageSpec:
    def state_of(e: PendulumEnv) -> np.ndarray:
        theta, omega = e.state
        return np.array([math.cos(theta), math.sin(theta), omega], dtype=np.float32)

    return LanguageSpec(PendulumDescriber(**options), ("torque",), PENDULUM_TASK, state_of)


def _mountain_car(env: Continuous_MountainCarEnv, **options: Any) -> LanguageSpec:
    return LanguageSpec(MountainCarContinuousDescriber(**options), ("force",), MOUNTAINCAR_TASK,
                        lambda e: np.array(e.state, dtype=np.float32))


def _inverted_pendulum(env: Any, **options: Any) -> LanguageSpec:
    return LanguageSpec(InvertedPendulumDescriber(**options), ("force",), INVERTED_PENDULUM_TASK,
                        lambda e: np.concatenate([e.data.qpos, e.data.qvel]))


class _ImportedClass(type):
    """A stand-in whose ``isinstance`` asks gymnasium's class in ``modules`` when (and only
    when) that module is already imported: registers a task whose module needs an extra."""

    modules: tuple[str, ...] = ()

    def __instancecheck__(cls, instance: Any) -> bool:
        found = (getattr(sys.modules.get(m), cls.__name__, None) for m in cls.modules)
        return any(isinstance(t, type) and isinstance(instance, t) for t in found)


class InvertedPendulumEnv(metaclass=_ImportedClass):
    """gymnasium's MuJoCo InvertedPendulum (v5 and v4), looked up without importing mujoco."""

    modules = ("gymnasium.envs.mujoco.inverted_pendulum_v5",
               "gymnasium.envs.mujoco.inverted_pendulum_v4")


register_language(PendulumEnv, _pendulum)
register_language(Continuous_MountainCarEnv, _mountain_car)
register_language(InvertedPendulumEnv, _inverted_pendulum)
