"""Package discovery for the one import name ``langadapt`` (everything else: pyproject.toml).

The repository root *is* the package ``langadapt`` (``package-dir = {"langadapt" = "."}``),
so setuptools' own discovery would find ``adapters``, ``agents``, ... as top-level names.
Here every folder with an ``__init__.py`` (but ``tests`` and ``benchmarks``, which run from a
checkout) becomes ``langadapt.<folder>``: a new sub-package ships without editing a list.
This script, which sits in the package's folder, is left out of the wheel.
"""

from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
NOT_SHIPPED = ("tests", "benchmarks")
"""Folders with an ``__init__.py`` that run from a checkout only (.ci/wheel_smoke.py checks)."""
SUBPACKAGES = find_packages(where=str(ROOT), exclude=[
    pattern for name in NOT_SHIPPED for pattern in (name, f"{name}.*")])


class BuildPy(build_py):
    """build_py without ``langadapt/setup.py``."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if Path(m[2]).resolve() != ROOT / "setup.py"]


setup(
    packages=["langadapt", *(f"langadapt.{name}" for name in SUBPACKAGES)],
    cmdclass={"build_py": BuildPy},
)
