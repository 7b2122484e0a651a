"""Use an installed langadapt wheel the way a user's project does: from outside the checkout.

Run by ``make wheel-smoke`` with the python of a fresh virtual environment that has only the
wheel (and its dependencies) installed, from a temporary directory::

    python wheel_smoke.py WHEEL CHECKOUT [SOURCE]

(SOURCE: the tree the wheel was built from, when not the checkout: ``make wheel`` builds from
the last commit.) It checks that

1. the wheel's top-level import names are exactly ``{"langadapt"}``;
2. every package of the checkout (a folder with an ``__init__.py``, but ``tests``) is in the
   wheel as ``langadapt.<folder>``, and so are the package data: the experiment files
   ``configs/*.yaml`` (as ``langadapt/configs/``) and the prompt templates;
3. every module of the installed package imports (or needs an optional extra's package,
   named), and it is the installed copy (not the checkout);
4. the installed llama.cpp build's CPU features are printed and ``langadapt doctor`` passes;
   every adapter builds by name and describes/encodes a maze state;
5. the ``langadapt`` command works from outside the checkout: ``--version``, ``run --list``
   and ``finetune --list`` name every packaged file, ``run quickstart --check`` resolves the
   bare name to the installed copy, and ``langadapt run`` trains and evaluates a tiny
   experiment end to end and writes its summary.

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


# Folders of the checkout with an __init__.py that run from a checkout only (setup.py's
# NOT_SHIPPED): the wheel must not hold them.
NOT_SHIPPED = ("tests", "benchmarks")

# Package data that must ship: (folder in the checkout, glob) -> the same path under langadapt/.
PACKAGE_DATA = (("configs", "*.yaml"), ("roles/templates/policy_search", "*.txt"))


def checkout_packages(root: Path) -> dict[str, Path]:
    """``{langadapt.<dotted>: folder}`` of every package under ``root`` (a folder with an
    ``__init__.py`` whose parents are packages too), `NOT_SHIPPED` and hidden folders left
    out."""
    found: dict[str, Path] = {}

    def walk(folder: Path, prefix: str) -> None:
        for child in sorted(folder.iterdir()):
            if (child.is_dir() and child.name.isidentifier() and child.name not in NOT_SHIPPED
                    and (child / "__init__.py").is_file()):
                name = f"{prefix}.{child.name}"
                found[name] = child
                walk(child, name)

    walk(root, "langadapt")
    return found


def check_contents(wheel: Path, checkout: Path, source: Path) -> None:
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
    in_wheel = {n[: -len("/__init__.py")].replace("/", ".") for n in names
                if n.endswith("/__init__.py")}
    missing = []
    for package, folder in checkout_packages(checkout).items():
        if package not in in_wheel:
            relative = folder.relative_to(checkout)
            committed = (source / relative / "__init__.py").is_file()
            missing.append(f"{package} ({relative}/)" + (
                "" if committed else ": not in the tree the wheel was built from; is it "
                "committed?"))
    if missing:
        raise SystemExit(f"wheel {wheel.name} lacks packages of the checkout: "
                         + "; ".join(missing))
    shipped = sorted(n for n in names if n.split("/")[:2] in (
        ["langadapt", folder] for folder in NOT_SHIPPED))
    if shipped:
        raise SystemExit(f"wheel {wheel.name} holds files that run from a checkout only: "
                         + ", ".join(shipped[:5]))
    print(f"packages: {sorted(in_wheel)}")
    for folder, pattern in PACKAGE_DATA:
        files = sorted((checkout / folder).glob(pattern))
        if not files:
            raise SystemExit(f"no {folder}/{pattern} in the checkout {checkout}")
        absent = [f.name for f in files if f"langadapt/{folder}/{f.name}" not in names]
        if absent:
            raise SystemExit(f"wheel {wheel.name} lacks package data langadapt/{folder}/: "
                             f"{', '.join(absent)}")
        print(f"package data langadapt/{folder}/{pattern}: {len(files)} files")


def check_imports(checkout: Path) -> None:
    import langadapt

    location = Path(langadapt.__file__).resolve()
    if checkout in location.parents:
        raise SystemExit(f"langadapt imported from the checkout ({location}), not the wheel")
    modules, needing_extras = [langadapt.__name__], []
    extras = optional_dependencies()
    for info in pkgutil.walk_packages(langadapt.__path__, prefix="langadapt."):
        try:
            importlib.import_module(info.name)
        except ModuleNotFoundError as missing:  # allowed only for an optional extra's package
            top = (missing.name or "").split(".")[0]
            if top not in extras:
                raise
            needing_extras.append(f"{info.name} ({top}: extra {extras[top]})")
            continue
        modules.append(info.name)
    print(f"imported {len(modules)} modules from {location.parent}"
          + (f"; needing an extra not installed: {', '.join(needing_extras)}"
             if needing_extras else ""))


def optional_dependencies() -> dict[str, str]:
    """``{import name: extra}`` of the packages only langadapt's extras require."""
    from importlib.metadata import requires

    found: dict[str, str] = {}
    for requirement in requires("langadapt") or []:
        if "extra ==" in requirement:
            name = requirement.split(";")[0].strip()
            for cut in "<>=!~[ ":
                name = name.split(cut)[0]
            extra = requirement.split("extra ==")[1].strip().strip("'\"")
            found.setdefault(name.lower().replace("-", "_"), extra)
    return found


def check_llama_cpp() -> None:
    """The llama.cpp build installed here: its CPU features, then ``langadapt doctor`` (a
    build that crashes on this CPU stops the smoke with the doctor's one line, not a
    segfault)."""
    from langadapt.llm.native_check import system_info

    print(f"llama.cpp build: {system_info()}")
    with tempfile.TemporaryDirectory() as tmp:
        print(langadapt("doctor", cwd=tmp).strip().splitlines()[-1])


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


def langadapt(*args: str, cwd: str) -> str:
    """Run the installed ``langadapt`` command; its stdout, or exit naming the failure."""
    command = [str(Path(sys.executable).with_name("langadapt")), *args]
    done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=900)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)} failed ({done.returncode}):\n"
                         f"{done.stdout}\n{done.stderr}")
    return done.stdout


def check_cli(checkout: Path) -> None:
    from importlib.metadata import version

    with tempfile.TemporaryDirectory() as tmp:
        shown = langadapt("--version", cwd=tmp).strip()
        if shown != f"langadapt {version('langadapt')}":
            raise SystemExit(f"langadapt --version printed {shown!r}; the wheel is "
                             f"{version('langadapt')}")
        listed = langadapt("run", "--list", cwd=tmp) + langadapt("finetune", "--list", cwd=tmp)
        names = {line.split()[0] for line in listed.splitlines() if line.startswith("  ")}
        expected = {f.stem for f in (checkout / "configs").glob("*.yaml")}
        if names != expected:
            raise SystemExit(f"langadapt run/finetune --list name {sorted(names)}; the packaged "
                             f"files are {sorted(expected)}")
        print(f"langadapt --version: {shown}; --list: {len(names)} packaged files")
        import langadapt as package

        checked = langadapt("run", "quickstart", "--check", cwd=tmp).strip()
        installed = Path(package.__file__).resolve().parent
        if installed not in Path(checked.split(":", 1)[0]).resolve().parents:
            raise SystemExit(f"langadapt run quickstart did not resolve to the packaged file "
                             f"under {installed}: {checked}")
        print(f"langadapt run quickstart --check: {checked}")

        config = Path(tmp) / "wheel_smoke.yaml"
        config.write_text(TINY_EXPERIMENT, encoding="utf-8")
        out = Path(tmp) / "results"
        stdout = langadapt("run", str(config), "--out", str(out), "--no-progress", cwd=tmp)
        summaries = list(out.rglob("summary.md"))
        if not summaries:
            raise SystemExit(f"langadapt run wrote no summary.md under {out}:\n{stdout}")
        print(f"langadapt run: {summaries[0].read_text(encoding='utf-8').splitlines()[0]}")


def main() -> None:
    wheel, checkout = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    source = Path(sys.argv[3]).resolve() if len(sys.argv) > 3 else checkout
    check_top_level(wheel)
    check_contents(wheel, checkout, source)
    check_imports(checkout)
    check_llama_cpp()
    check_adapters()
    check_cli(checkout)
    print("wheel smoke: passed")


if __name__ == "__main__":
    main()
