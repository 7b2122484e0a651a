"""CartPole-v1 (gymnasium's, held inside) with this project's conventions. See
docs/environments.md.
"""

from __future__ import annotations

import importlib.util
import math
from typing import Annotated, Any, Literal

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv as GymCartPoleEnv
from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

from ._checks import (
    RENDER_MODES,
    RenderMode,
    StepLimit,
    check_action,
    check_reset_options,
    checked,
    episode_over_error,
)
from .language import Describer, LanguageSpec, bin_index, check_edges, make_bins, register_language
from .rendering import canvas, draw_line, fill_disk, fill_rect


def pygame_available() -> bool:
    """Whether pygame is importable (then ``rgb_array`` uses gymnasium's own renderer)."""
    return importlib.util.find_spec("pygame") is not None


class CartPoleEnv(gym.Env[np.ndarray, int]):
    """Balance a pole on a cart (docs/environments.md, "CartPole")."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 50}

    @checked
    def __init__(self, max_steps: StepLimit = 500, render_mode: RenderMode = None) -> None:
        self.max_steps, self.render_mode = max_steps, render_mode
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


# --------------------------------------------------------------------------- language
CARTPOLE_TASK = (
    "You balance a pole on a cart that moves along a track. Keep the pole upright and the "
    "cart within 2.4 m of the center for as long as possible; the episode ends when the "
    "pole leans more than 0.21 rad (12 degrees) or the cart leaves the track. Action 0 "
    "pushes the cart to the left, action 1 pushes it to the right. Positive numbers mean "
    "right: a positive pole angle leans right. Pushing the cart toward the side the pole "
    "is falling to brings it back upright."
)
CARTPOLE_COMPACT_TASK = ("CartPole: keep the pole upright. Positive is right; push toward the "
                         "side the pole falls to.")


class CartPoleBins(BaseModel):
    """Bin edges of `CartPoleDescriber`, on absolute values in SI units (docs/adapters.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    angle: tuple[float, float, float] = (0.02, 0.07, 0.14)
    angular_velocity: tuple[float, float, float] = (0.05, 0.5, 1.5)
    position: tuple[float, float] = (0.5, 1.6)
    velocity: tuple[float, float, float] = (0.05, 0.5, 1.5)

    @model_validator(mode="after")
    def _increasing(self) -> CartPoleBins:
        for name in ("angle", "angular_velocity", "position", "velocity"):
            edges = getattr(self, name)
            check_edges(name, edges, len(edges))
        return self


Decimals = Annotated[int, Strict(), Field(ge=0, le=6)]  # decimal places shown

_SPEED = ("", " slowly", "", " quickly")


class CartPoleSteps(BaseModel):
    """Rounding steps of `CartPoleDescriber` with ``style="numbers"`` (SI units)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    angle: float = Field(0.01, gt=0, description="pole angle, rad")
    angular_velocity: float = Field(0.1, gt=0, description="pole angular velocity, rad/s")
    position: float = Field(0.1, gt=0, description="cart position, m")
    velocity: float = Field(0.1, gt=0, description="cart velocity, m/s")


def _rounded(value: float, step: float) -> tuple[float, str]:
    """``value`` rounded to a multiple of ``step``, and its magnitude as text."""
    rounded = round(value / step) * step
    decimals = max(0, -math.floor(math.log10(step) + 1e-9))
    return rounded, f"{abs(rounded):.{decimals}f}"


class CartPoleDescriber(Describer):
    """CartPole: state ``[x, x_dot, angle, angle_dot]`` (positive = right), in bins
    (`CartPoleBins`) or, with ``style="numbers"``, rounded to `CartPoleSteps` (docs/adapters.md)."""

    env_name = "CartPole"
    state_shape = (4,)
    n_actions = 2
    bounds = (
        ("cart position", -4.8, 4.8),
        ("cart velocity", -math.inf, math.inf),
        ("pole angle", -0.41887903, 0.41887903),
        ("pole angular velocity", -math.inf, math.inf),
    )

    @checked
    def __init__(
        self,
        bins: Any = None,  # a CartPoleBins, a dict of its fields or None (make_bins checks)
        include_numbers: bool = False,
        decimals: Decimals = 2,
        style: Literal["bins", "numbers"] = "bins",
        steps: Any = None,  # a CartPoleSteps, a dict of its fields or None
    ) -> None:
        self.bins = make_bins(CartPoleBins, bins)
        self.steps = make_bins(CartPoleSteps, steps)
        self.include_numbers = bool(include_numbers)
        self.decimals = decimals
        self.style = style

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        if self.style == "numbers":
            return self._numbers(*(float(v) for v in state))
        x, x_dot, angle, omega = (float(v) for v in state)
        bins = self.bins
        lean = "right" if angle > 0 else "left"
        tilt = bin_index(abs(angle), bins.angle)
        pole = ("is upright", f"leans slightly {lean}", f"leans {lean}", f"leans far {lean}")[tilt]
        spin = bin_index(abs(omega), bins.angular_velocity)
        if spin == 0:
            rotation = "is nearly still"
        else:
            turn = "right" if omega > 0 else "left"
            verb = "is falling" if tilt == 0 or turn == lean else "is swinging back"
            rotation = f"{verb} {turn}{_SPEED[spin]}"
        side = "right" if x > 0 else "left"
        place = bin_index(abs(x), bins.position)
        cart = ("near the center", f"{side} of the center", f"near the {side} edge")[place]
        pace = bin_index(abs(x_dot), bins.velocity)
        if pace == 0:
            motion = "standing still"
        else:
            motion = f"moving {'right' if x_dot > 0 else 'left'}{_SPEED[pace]}"
        text = f"The pole {pole} and {rotation}; the cart is {cart}, {motion}."
        if self.include_numbers:
            d = self.decimals
            text += (
                f" (cart position {x:.{d}f} m, cart velocity {x_dot:.{d}f} m/s, pole angle "
                f"{angle:.{d}f} rad, pole angular velocity {omega:.{d}f} rad/s)"
            )
        return text

    def _numbers(self, x: float, x_dot: float, angle: float, omega: float) -> str:
        steps = self.steps
        a, a_text = _rounded(angle, steps.angle)
        pole = "is upright" if a == 0 else f"leans {_side(a)} by {a_text} rad"
        w, w_text = _rounded(omega, steps.angular_velocity)
        turn = "is not turning" if w == 0 else f"turns {_side(w)} at {w_text} rad/s"
        p, p_text = _rounded(x, steps.position)
        cart = "at the center" if p == 0 else f"{p_text} m {_side(p)} of the center"
        v, v_text = _rounded(x_dot, steps.velocity)
        motion = "standing still" if v == 0 else f"moving {_side(v)} at {v_text} m/s"
        return f"The pole {pole} and {turn}; the cart is {cart}, {motion}."


def _side(value: float) -> str:
    return "right" if value > 0 else "left"


@checked
def _language(env: CartPoleEnv, decimals: Decimals = 2, **options: Any) -> LanguageSpec:
    describer = CartPoleDescriber(**options)

    def numbers(state: np.ndarray) -> tuple[str, str, str, str]:
        return tuple(f"{float(v) + 0.0:.{decimals}f}" for v in np.round(state, decimals))

    def numbers_then_sentence(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        x, x_dot, angle, omega = numbers(state)
        return (f"Cart position: {x} m\nCart velocity: {x_dot} m/s\n"
                f"Pole angle: {angle} rad\nPole angular velocity: {omega} rad/s\n"
                + describer.describe(state, legal_moves, None))  # show() checked them

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        x, x_dot, angle, omega = numbers(state)
        return f"x {x}, v {x_dot}, angle {angle}, angular v {omega}"

    return LanguageSpec(describer, ("push left", "push right"), CARTPOLE_TASK,
                        lambda e: np.array(e.state, dtype=np.float32), numbers_then_sentence,
                        compact, CARTPOLE_COMPACT_TASK)


register_language(CartPoleEnv, _language)
