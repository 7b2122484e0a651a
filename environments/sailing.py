"""The Sailing channel task of elsciRL (after PPierzc's ai-learns-to-sail). See
docs/environments.md.
"""

from __future__ import annotations

import math
from typing import Annotated, Any

import gymnasium as gym
import numpy as np
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field, field_validator

from ._checks import (
    RENDER_MODES,
    Finite,
    Flag,
    RenderMode,
    StepLimit,
    check_action,
    check_finite,
    check_reset_options,
    checked,
    episode_over_error,
)
from .language import (
    Describer,
    LanguageSpec,
    bin_index,
    check_edges,
    make_bins,
    register_language,
)
from .rendering import canvas, draw_arrow, draw_line, fill_disk, fill_rect

#: Half the river's width: |x| > X_LIMIT is the bank.
X_LIMIT = 10.0
#: |theta| > ANGLE_LIMIT (sailing backwards) ends the episode.
ANGLE_LIMIT = math.pi / 2
#: The "dead zone" width of the speed curve, pi/12.
THETA_DEAD = math.pi / 12
#: Heading change of each action: 0 turns by -0.1 rad, 1 by +0.1 rad.
TURNS: tuple[float, float] = (-0.1, 0.1)


def boat_speed(theta: float) -> float:
    """Speed at heading `theta`: ``1 - exp(-theta**2 / (pi/12))`` (0 straight into the wind)."""
    return 1.0 - math.exp(-(theta * theta) / THETA_DEAD)


class SailingEnv(gym.Env[np.ndarray, int]):
    """Tack a boat up a river against the wind (docs/environments.md, "Sailing")."""

    metadata = {"render_modes": list(RENDER_MODES), "render_fps": 10}

    @checked
    def __init__(
        self,
        y_limit: Annotated[Finite, Field(gt=0)] = 25.0,
        max_steps: StepLimit = 500,
        reward_shaping: Flag = False,
        render_mode: RenderMode = None,
    ) -> None:
        self.y_limit, self.max_steps = y_limit, max_steps
        self.reward_shaping = reward_shaping
        self.render_mode = render_mode

        self.action_space = spaces.Discrete(2)
        self.observation_space = spaces.Box(
            low=np.array([-11.0, -1.6], dtype=np.float32),
            high=np.array([11.0, 1.6], dtype=np.float32),
            dtype=np.float32,
        )
        self.x = 0.0
        self.y = 0.0
        self.theta = 0.0
        #: (x, y) of every position of the current episode, for the rendered track.
        self.track: list[tuple[float, float]] = [(0.0, 0.0)]
        self._steps = 0
        self._active = False
        self._obs = np.zeros(2, dtype=np.float32)

    def _observation(self) -> np.ndarray:
        obs = self._obs
        obs[0] = self.x
        obs[1] = self.theta
        return obs.copy()

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """Put the boat at (0, 0) heading into the wind (or where ``options`` says)."""
        super().reset(seed=seed)
        x, y, theta = 0.0, 0.0, 0.0
        options = check_reset_options(options, ("x", "y", "theta"))
        if options:
            x = check_finite("x", options.get("x", x))
            y = check_finite("y", options.get("y", y))
            theta = round(check_finite("theta", options.get("theta", theta)), 1)
            if abs(x) > X_LIMIT or y > self.y_limit or abs(theta) > ANGLE_LIMIT:
                raise ValueError(
                    f"reset options x={x}, y={y}, theta={theta} lie in a terminal state; "
                    f"expected |x| <= {X_LIMIT}, y <= {self.y_limit}, |theta| <= pi/2"
                )
        self.x, self.y, self.theta = x, y, theta
        self.track = [(x, y)]
        self._steps = 0
        self._active = True
        return self._observation(), {"legal_moves": [0, 1], "is_success": False, "y": y}

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Turn, sail one step at the new heading, and return the gymnasium 5-tuple."""
        if type(action) is not int or not 0 <= action < 2:
            action = check_action(action, 2)
        if not self._active:
            raise episode_over_error(type(self).__name__)
        theta = round(self.theta + TURNS[action], 1)
        speed = boat_speed(theta)
        self.theta = theta
        self.x += speed * math.sin(theta)
        self.y += speed * math.cos(theta)
        self.track.append((self.x, self.y))
        self._steps += 1

        info: dict[str, Any] = {"legal_moves": [0, 1], "is_success": False, "y": self.y}
        if abs(self.x) > X_LIMIT:
            reward, terminated = -1.0, True
            info["termination"] = "bank"
        elif self.y > self.y_limit:
            reward, terminated = 1.0, True
            info["termination"] = "finish"
            info["is_success"] = True
        elif abs(theta) > ANGLE_LIMIT:
            reward, terminated = -1.0, True
            info["termination"] = "heading"
        else:
            reward = speed * math.cos(theta) / 10.0 if self.reward_shaping else 0.0
            terminated = False
        truncated = not terminated and self._steps >= self.max_steps
        self._active = not (terminated or truncated)
        return self._observation(), reward, terminated, truncated, info

    # ------------------------------------------------------------------ rendering
    def render(self) -> np.ndarray | str | None:
        """``rgb_array``: the river seen from above; ``ansi``: the same as text."""
        if self.render_mode == "ansi":
            return self.ansi()
        if self.render_mode == "rgb_array":
            return self.rgb_array()
        return None

    def ansi(self, rows: int = 14) -> str:
        """A text picture: banks '|', finish line '=', the boat as '^', '/', '\\', '>' or '<'.

        Columns are 1 unit of x; `rows` rows span y from 0 (bottom) to y_limit (top line).
        """
        width = int(2 * X_LIMIT) + 1
        if abs(self.theta) <= 0.3:
            boat = "^"
        elif abs(self.theta) < 1.2:
            boat = "/" if self.theta > 0 else "\\"
        else:
            boat = ">" if self.theta > 0 else "<"
        boat_col = int(round(self.x + X_LIMIT))
        boat_row = rows - 1 - int(round(self.y / self.y_limit * (rows - 1)))
        lines = []
        for row in range(rows):
            fill = "=" if row == 0 else " "
            chars = [fill] * width
            if row == boat_row and 0 <= boat_col < width:
                chars[boat_col] = boat
            left = boat if row == boat_row and boat_col < 0 else "|"
            right = boat if row == boat_row and boat_col >= width else "|"
            lines.append(left + "".join(chars) + right)
        lines.append(
            f"x={self.x:+.2f} y={self.y:.2f} theta={self.theta:+.1f} "
            f"(wind from the top, finish line y={self.y_limit:g})"
        )
        return "\n".join(lines)

    def rgb_array(self, width: int = 240, height: int = 300) -> np.ndarray:
        """The river from above: green banks, blue water, chequered finish line at the top,
        the boat's track as dots, the boat as a dark disk with a heading line, wind arrow red."""
        x_span = X_LIMIT + 2.0
        y_low, y_high = -1.0, self.y_limit + 2.0

        def to_px(x: float, y: float) -> tuple[float, float]:
            col = (x + x_span) / (2 * x_span) * (width - 1)
            row = (y_high - y) / (y_high - y_low) * (height - 1)
            return row, col

        image = canvas(height, width, (110, 170, 90))
        _, left = to_px(-X_LIMIT, 0.0)
        _, right = to_px(X_LIMIT, 0.0)
        fill_rect(image, 0, left, height, right + 1, (120, 170, 220))
        finish_row, _ = to_px(0.0, self.y_limit)
        square = 6
        for i, col in enumerate(range(int(left), int(right) + 1, square)):
            for j in range(2):
                color = (20, 20, 20) if (i + j) % 2 == 0 else (250, 250, 250)
                top = finish_row - square + j * square
                fill_rect(image, top, col, top + square, min(col + square, right + 1), color)
        for x, y in self.track[:-1]:
            r, c = to_px(x, y)
            fill_disk(image, r, c, 1.5, (250, 250, 250))
        r, c = to_px(self.x, self.y)
        tip = (r - 18 * math.cos(self.theta), c + 18 * math.sin(self.theta))
        draw_line(image, (r, c), tip, (30, 30, 40), 3)
        fill_disk(image, r, c, 6, (200, 60, 40))
        wind_col = right + (width - right) / 2
        draw_arrow(image, (6, wind_col), (40, wind_col), (200, 30, 30), 2, 7)
        return image


# --------------------------------------------------------------------------- language
SAILING_TASK = (
    "You steer a sailing boat up a river against the wind, which blows from straight "
    "ahead. Make progress upstream to the finish line without touching either bank. "
    "Heading straight into the wind makes no progress; sailing across it is fast. "
    "Action 0 turns the bow toward the harbor bank (left), action 1 toward the beach "
    "bank (right)."
)
SAILING_COMPACT_TASK = ("Sail upstream against the wind without touching a bank; sailing "
                        "across the wind is fast.")


class SailingBins(BaseModel):
    """Bin edges of `SailingDescriber`: ``position`` on ``|x| / half_width``, ``heading`` on
    ``|theta|`` (docs/adapters.md, "The describers")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    position: tuple[float, float, float, float] = (0.1, 0.3, 0.6, 0.85)
    heading: tuple[float, float, float, float] = (0.05, 0.45, 0.95, 1.35)

    @field_validator("position", "heading")
    @classmethod
    def _increasing(cls, edges: tuple[float, ...], info: Any) -> tuple[float, ...]:
        return check_edges(info.field_name, edges, 4)


_POSITIONS = (
    "in the middle of the river",
    "near the center of the river",
    "between the center and the edge of the river",
    "near the edge of the river",
    "very close to the edge of the river",
)
_HEADINGS = (
    "heading directly into the wind",
    "heading into the wind",
    "sailing close hauled",
    "cutting the wind",
    "sailing across the wind",
)




class SailingDescriber(Describer):
    """Sailing: state ``[x, theta]``: the position across the river, the heading relative to
    the wind and the last turn (docs/adapters.md, "The describers")."""

    env_name = "Sailing"
    state_shape = (2,)
    n_actions = 2
    uses_last_action = True

    @checked
    def __init__(self, half_width: Annotated[Finite, Field(gt=0)] = 10.0,
                 bins: Any = None) -> None:  # a SailingBins, a dict of its fields or None
        self.half_width = half_width
        self.bins = make_bins(SailingBins, bins)
        # The env's observation space: one step (speed <= 1) past a bank, |theta| <= 1.6.
        reach = self.half_width + 1.0
        self.bounds = (("x", -reach, reach), ("theta", -1.6, 1.6))

    def describe(
        self, state: np.ndarray, legal_moves: tuple[int, ...], last_action: int | None
    ) -> str:
        x, theta = float(state[0]), float(state[1])
        where = bin_index(abs(x) / self.half_width, self.bins.position)
        side = "harbor" if x < 0 else "beach"
        position = _POSITIONS[where] + ("" if where == 0 else f" on the {side} side")
        how = bin_index(abs(theta), self.bins.heading)
        heading = _HEADINGS[how]
        if how > 0:
            heading += " with the wind on the " + ("port" if theta > 0 else "starboard") + " side"
        text = f"The boat is {position}, {heading}."
        if last_action is not None:
            toward = "beach" if last_action == 1 else "harbor"
            if where > 0 and toward != side:
                toward = "center"
            text += f" It last turned toward the {toward}."
        return text



def _language(env: SailingEnv, **options: Any) -> LanguageSpec:
    options.setdefault("half_width", float(X_LIMIT))

    def compact(state: np.ndarray, legal_moves: tuple[int, ...]) -> str:
        return f"x {float(state[0]):.1f} of ±{X_LIMIT:g}, heading {float(state[1]):.1f} rad"

    return LanguageSpec(SailingDescriber(**options),
                        ("turn toward the harbor", "turn toward the beach"), SAILING_TASK,
                        lambda e: np.array([e.x, e.theta], dtype=np.float32),
                        compact_state=compact, compact_task=SAILING_COMPACT_TASK)


register_language(SailingEnv, _language)
