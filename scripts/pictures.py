"""Write the docs' environment pictures: ``python scripts/pictures.py [OUT_DIR]``.

Writes ``sailing.png`` (a tacking course), ``maze_<layout>.png`` per named layout and
``cartpole.png`` into OUT_DIR (default ``docs/images``); deterministic. A script, not
part of the package.
"""

from __future__ import annotations

import sys
from pathlib import Path

from langadapt.environments import MAZE_LAYOUTS, CartPoleEnv, MazeEnv, SailingEnv
from langadapt.environments.rendering import write_png


def sailing_picture() -> SailingEnv:
    """A SailingEnv after 30 steps of a tacking policy (heading +-0.8, go about at |x| > 5)."""
    env = SailingEnv(render_mode="rgb_array")
    env.reset(seed=0)
    target = 0.8
    for _ in range(30):
        if env.x > 5:
            target = -0.8
        elif env.x < -5:
            target = 0.8
        env.step(1 if env.theta < target else 0)
    return env


def render_all(out_dir: str | Path = "docs/images") -> list[Path]:
    """Render every environment into ``out_dir`` (created if missing); return the files."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [write_png(out / "sailing.png", sailing_picture().render())]
    for name in MAZE_LAYOUTS:
        maze = MazeEnv(name, render_mode="rgb_array")
        maze.reset(seed=0)
        written.append(write_png(out / f"maze_{name}.png", maze.render()))
    cartpole = CartPoleEnv(render_mode="rgb_array")
    cartpole.use_pygame = False  # the same numpy picture whether or not pygame is installed
    cartpole.reset(seed=0)
    for _ in range(8):
        cartpole.step(1)
    written.append(write_png(out / "cartpole.png", cartpole.render()))
    return written


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    for path in render_all(args[0] if args else "docs/images"):
        print(f"{path} ({path.stat().st_size // 1024} KB)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
