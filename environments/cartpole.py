"""CartPole-v1 (gymnasium's, held inside) with this project's conventions. See
docs/environments.md.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv as GymCartPoleEnv

from ._checks import (
    RENDER_MODES,
    check_action,
    check_render_mode,
    check_reset_options,
    check_step_limit,
    episode_over_error,
)
from .rendering import canvas, draw_line, fill_disk, fill_rect


def pygame_available() -> bool:
    """Whether pygame is importable (then ``rgb_array`` uses gymnasium's own renderer)."""
    return importlib.util.find_spec("pygame") is not None


class CartPoleEnv(gym.Env[np.ndarray, int]):
    """Balance a pole on a cart (docs/environments.md, "CartPole")."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 50}

    def __init__(self, max_steps: int = 500, render_mode: str | None = None) -> None:
        self.max_steps = check_step_limit("max_steps", max_steps)
        self.render_mode = check_render_mode(render_mode)
        self.use_pygame = render_mode == "rgb_array" and pygame_available()
        self.physics = GymCartPoleEnv(render_mode="rgb_array" if self.use_pygame else None)
        self.action_space = self.physics.action_space
        self.observation_space = self.physics.observation_space
        self._steps = 0
        self._active = False

    @property
    def state(self) -> tuple[float, float, float, float] | None:
        """(cart position, cart velocity, pole angle, pole angular velocity) in full precision,
        or None before the first reset."""
        if self.physics.state is None:
            return None
        x, x_dot, theta, theta_dot = (float(v) for v in self.physics.state)
        return x, x_dot, theta, theta_dot

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """CartPole-v1's reset (its ``low`` / ``high`` options), drawn from this env's RNG."""
        super().reset(seed=seed)
        self.physics.np_random = self.np_random  # one RNG: seeding this env seeds the physics
        options = check_reset_options(options, ("low", "high"))
        obs, _ = self.physics.reset(options=options or None)
        self._steps = 0
        self._active = True
        return obs, {"legal_moves": [0, 1], "is_success": False}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Push the cart and return the gymnasium 5-tuple."""
        if type(action) is not int or not 0 <= action < 2:
            action = check_action(action, 2)
        if not self._active:
            raise episode_over_error(type(self).__name__)
        obs, reward, terminated, _, _ = self.physics.step(action)
        self._steps += 1
        truncated = not terminated and self._steps >= self.max_steps
        self._active = not (terminated or truncated)
        return obs, float(reward), terminated, truncated, {
            "legal_moves": [0, 1], "is_success": truncated,
        }

    # ------------------------------------------------------------------ rendering
    def render(self) -> np.ndarray | str | None:
        """``rgb_array``: gymnasium's picture when pygame is installed, else the same scene
        drawn with numpy (400 x 600); ``ansi``: a text picture."""
        if self.render_mode == "ansi":
            return self.ansi()
        if self.render_mode == "rgb_array":
            if self.use_pygame:
                return self.physics.render()
            return self.rgb_array()
        return None

    def ansi(self, width: int = 49) -> str:
        """The track from -2.4 to 2.4 with the cart 'C' and the pole leaning '/', '|' or '\\'."""
        state = self.state or (0.0, 0.0, 0.0, 0.0)
        x, x_dot, theta, theta_dot = state
        limit = self.physics.x_threshold
        col = int(round((x + limit) / (2 * limit) * (width - 1)))
        col = min(max(col, 0), width - 1)
        lean = "|" if abs(theta) < 0.035 else ("/" if theta > 0 else "\\")
        pole = [" "] * width
        pole[min(max(col + (theta > 0.035) - (theta < -0.035), 0), width - 1)] = lean
        track = ["-"] * width
        track[col] = "C"
        return "\n".join([
            "".join(pole),
            "".join(track),
            f"x={x:+.3f} v={x_dot:+.3f} angle={math.degrees(theta):+.2f}deg "
            f"angular velocity={theta_dot:+.3f}",
        ])

    def rgb_array(self) -> np.ndarray:
        """The cart-pole scene drawn with numpy, in gymnasium's geometry (400 x 600 pixels)."""
        width, height = 600, 400
        image = canvas(height, width)
        state = self.state or (0.0, 0.0, 0.0, 0.0)
        x, _, theta, _ = state
        scale = width / (2 * self.physics.x_threshold)
        track_row = height - 100
        cart_col = x * scale + width / 2
        fill_rect(image, track_row, 0, track_row + 1, width, (0, 0, 0))
        fill_rect(image, track_row - 15, cart_col - 25, track_row + 15, cart_col + 25, (0, 0, 0))
        axle = (track_row - 7.5, cart_col)
        pole_length = scale * 2 * self.physics.length
        tip = (axle[0] - pole_length * math.cos(theta), axle[1] + pole_length * math.sin(theta))
        draw_line(image, axle, tip, (202, 152, 101), 10)
        fill_disk(image, axle[0], axle[1], 5, (129, 132, 203))
        return image

    def close(self) -> None:
        """Close the inner physics env (and its pygame surface, if any)."""
        self.physics.close()
