"""Gymnasium tasks that need a langadapt extra: one line naming the install command when
its package is missing (instead of gymnasium's error from deep inside ``gymnasium.make``)."""

from __future__ import annotations

import importlib.util

import gymnasium

__all__ = ["EXTRAS", "missing_extra"]

#: entry-point prefix -> (langadapt extra, the modules its tasks import)
EXTRAS: dict[str, tuple[str, tuple[str, ...]]] = {
    "gymnasium.envs.mujoco": ("mujoco", ("mujoco", "imageio")),
    "gymnasium.envs.box2d": ("box2d", ("Box2D",)),
}


def missing_extra(env_id: str) -> str | None:
    """One line naming ``env_id``, what is missing and ``pip install 'langadapt[extra]'``
    when a registered id's entry point needs an extra that is not installed; else None."""
    try:
        entry = gymnasium.spec(env_id).entry_point
    except gymnasium.error.Error:
        return None
    if not isinstance(entry, str):
        return None
    for prefix, (extra, modules) in EXTRAS.items():
        if entry.startswith(prefix):
            absent = [m for m in modules if importlib.util.find_spec(m) is None]
            if absent:
                return (f"environment {env_id} needs {', '.join(absent)} (not installed): "
                        f"pip install 'langadapt[{extra}]'")
    return None
