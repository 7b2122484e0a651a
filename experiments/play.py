"""``langadapt play``: a kept policy's episodes as a GIF (or MP4 where imageio's ffmpeg
writer is installed), each frame with the description the agent saw and the action it chose
under it. See docs/configuration.md ("Kept policies")."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from .. import environments
from .folders import ResultsFolderError, replacing
from .kept import load_run
from .one_run import FINAL_EVAL_SEED, make_env
from .received import received_config
from .schema import ExperimentConfig, UsageError

#: Characters per line of the text under a frame, and the most lines shown.
TEXT_WIDTH, TEXT_LINES = 72, 9


def caption(description: str, action: str, step: int, mission: str = "") -> str:
    """The text under one frame (the mission first where the description does not say it:
    a raw row's numbers)."""
    if mission and mission not in description:
        description = f"Mission: {mission}. {description}"
    wrapped = textwrap.wrap(description, TEXT_WIDTH) or [""]
    if len(wrapped) > TEXT_LINES:
        wrapped = [*wrapped[: TEXT_LINES - 1], "..."]
    return "\n".join([*wrapped, f"step {step}: {action}"])


def framed(frame: np.ndarray, text: str, width: int = 480) -> Image.Image:
    """``frame`` scaled to ``width`` pixels with ``text`` on a white band under it."""
    picture = Image.fromarray(np.asarray(frame, dtype=np.uint8))
    picture = picture.resize((width, max(1, round(picture.height * width / picture.width))),
                             Image.NEAREST)
    font = ImageFont.load_default(size=11)
    band = 14 * (text.count("\n") + 1) + 8
    out = Image.new("RGB", (width, picture.height + band), "white")
    out.paste(picture, (0, 0))
    ImageDraw.Draw(out).multiline_text((6, picture.height + 4), text, fill="black", font=font,
                                       spacing=3)
    return out


def play_run(run_dir: Path, out: Path, episodes: int = 1, seed: int | None = None,
             which: str = "final", fps: float = 4.0, log: Callable[[str], None] = print,
             assignments: Sequence[str] = ()) -> Path:
    """Render ``episodes`` of the kept ``which`` policy of ``run_dir`` (acting as the run
    evaluated it; resets with ``seed``, ``seed + 1``, ...: default the run's first held-out
    seed, else its final evaluation's) into ``out``; ``assignments`` (``--set`` lines)
    change the run's experiment as ``evaluate --set`` does (the adapter describes the
    environment they make)."""
    if out.suffix.lower() not in (".gif", ".mp4"):
        raise UsageError(f"--out {out}: expected a .gif or .mp4 file")
    loaded = load_run(run_dir, which, _changed(run_dir, assignments, log), log=log)
    try:
        env = loaded.make_env(render_mode="rgb_array")
    except (TypeError, ValueError) as error:
        raise ResultsFolderError(f"{loaded.config.environment.id} cannot render frames "
                                 f"(render_mode rgb_array): {error}") from None
    held = loaded.config.evaluation.heldout_seeds
    first = (seed if seed is not None else held.first if held is not None
             else loaded.run.seed + FINAL_EVAL_SEED)
    names = _action_names(env)
    loaded.agent.bind(env)
    images: list[Image.Image] = []
    successes = 0
    for episode in range(episodes):
        obs, info = env.reset(seed=first + episode)
        done, step = False, 0
        while not done:
            frame = env.render()
            if frame is None:
                raise ResultsFolderError(f"{loaded.config.environment.id} renders no frames")
            action = loaded.agent.act(loaded.agent.observe(obs, info), info.get("legal_moves"),
                                      explore=False)
            text = caption(str(info.get("description", "")), names(action), step,
                           str(info.get("mission", "")))
            images.append(framed(frame, f"episode {episode + 1}, seed {first + episode}\n"
                                        + text))
            obs, _, terminated, truncated, info = env.step(action)
            done, step = terminated or truncated, step + 1
        successes += bool(info.get("is_success", False))
        outcome = "success" if info.get("is_success") else "no success"
        images.append(framed(env.render(), f"episode {episode + 1}: {outcome} after {step} "
                                           "steps"))
    env.close()
    _write(images, out, fps)
    log(f"written: {out} ({len(images)} frames, {episodes} episodes, {successes} successes)")
    return out


def _changed(run_dir: Path, assignments: Sequence[str],
             log: Callable[[str], None]) -> ExperimentConfig | None:
    """The run's experiment read as a received folder's, with ``assignments`` applied (None:
    as the folder has it)."""
    if not assignments:
        return None
    config = received_config(run_dir.parent.parent, assignments, log)
    make_env(config).close()  # bad environment parameters: one line, before anything is drawn
    return config


def _action_names(env: Any) -> Callable[[Any], str]:
    """``action -> its name`` from the environment's language spec (its number otherwise)."""
    try:
        spec = environments.language_for(env)
    except (TypeError, ValueError, KeyError):
        return lambda action: f"action {action}"
    return lambda action: spec.action_label(int(action))


def _write(images: list[Image.Image], out: Path, fps: float) -> None:
    """The frames into ``out`` (link-safe, whole, then moved into place)."""
    size = max(image.width for image in images), max(image.height for image in images)
    frames = [_padded(image, size) for image in images]
    with replacing(out.parent, out.name) as temporary:
        if out.suffix.lower() == ".gif":
            frames[0].save(temporary, save_all=True, append_images=frames[1:],
                           duration=round(1000 / fps), loop=0)
            return
        try:
            import imageio.v3 as iio  # noqa: PLC0415  (optional: MP4 needs imageio-ffmpeg)

            iio.imwrite(temporary, [np.asarray(f) for f in frames], fps=fps, extension=".mp4")
        except (ImportError, ValueError, OSError) as error:
            raise UsageError(f"--out {out}: MP4 needs imageio with its ffmpeg writer (pip "
                             f"install imageio imageio-ffmpeg) ({error}); a .gif needs "
                             "nothing more") from None


def _padded(image: Image.Image, size: tuple[int, int]) -> Image.Image:
    if image.size == size:
        return image
    out = Image.new("RGB", size, "white")
    out.paste(image, (0, 0))
    return out
