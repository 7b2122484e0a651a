"""Use an installed langadapt wheel the way a user's project does: from outside the checkout.

Run by ``make wheel-smoke`` with the python of a fresh virtual environment that has only the
wheel (and its dependencies) installed, from a temporary directory. It checks that

1. the wheel's top-level import names are exactly ``{"langadapt"}``;
2. every module of the installed package imports, and it is the installed copy (not the
   checkout);
3. every adapter builds by name and describes/encodes a maze state;
4. ``langadapt run`` trains and evaluates a tiny experiment end to end and writes its summary.

Exits non-zero with a message naming what failed.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

TINY_EXPERIMENT = """\
name: wheel_smoke
environment:
  id: langadapt/Maze-v0
  params: {maze: umaze}
adapters:
  - type: raw
  - type: language
agents:
  - type: qlearning
training: {episodes: 5}
seeds: 1
evaluation: {every: 5, episodes: 1, final_episodes: 1}
"""


def check_top_level(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/", 1)[0] for name in names if not name.split("/", 1)[0].endswith(
        (".dist-info", ".data"))}
    if top != {"langadapt"}:
        raise SystemExit(f"wheel {wheel.name} installs top-level names {sorted(top)}; "
                         "expected exactly ['langadapt']")
    print(f"top-level names: {sorted(top)} ({len(names)} files)")


def check_imports(checkout: Path) -> None:
    import langadapt

    location = Path(langadapt.__file__).resolve()
    if checkout in location.parents:
        raise SystemExit(f"langadapt imported from the checkout ({location}), not the wheel")
    modules = [langadapt.__name__]
    for info in pkgutil.walk_packages(langadapt.__path__, prefix="langadapt."):
        importlib.import_module(info.name)
        modules.append(info.name)
    print(f"imported {len(modules)} modules from {location.parent}")


def check_adapters() -> None:
    import gymnasium as gym
    import numpy as np

    import langadapt
    from langadapt.adapters import available_adapters

    env = gym.make("langadapt/Maze-v0", maze="umaze")
    state, info = env.reset(seed=0)
    for name in available_adapters():
        settings = {"backend": "llamacpp", "action_history_length": 0} if name == "llm" else {}
        adapter = langadapt.make_adapter(name, env, **settings)
        vector = adapter(state, info["legal_moves"])
        if not (isinstance(vector, np.ndarray) and vector.dtype == np.float32):
            raise SystemExit(f"adapter {name!r} returned {type(vector).__name__}")
        print(f"adapter {name!r}: vector {vector.shape}")


def check_cli() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "wheel_smoke.yaml"
        config.write_text(TINY_EXPERIMENT, encoding="utf-8")
        out = Path(tmp) / "results"
        command = [str(Path(sys.executable).with_name("langadapt")), "run", str(config),
                   "--out", str(out), "--no-progress"]
        done = subprocess.run(command, cwd=tmp, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n"
                             f"{done.stdout}\n{done.stderr}")
        summaries = list(out.rglob("summary.md"))
        if not summaries:
            raise SystemExit(f"langadapt run wrote no summary.md under {out}:\n{done.stdout}")
        print(f"langadapt run: {summaries[0].read_text(encoding='utf-8').splitlines()[0]}")


def main() -> None:
    wheel, checkout = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    check_top_level(wheel)
    check_imports(checkout)
    check_adapters()
    check_cli()
    print("wheel smoke: passed")


if __name__ == "__main__":
    main()
