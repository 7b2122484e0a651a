"""Environment ids as experiment files and commands write them, resolved to gymnasium ids.

Three spellings: a langadapt id or any registered gymnasium id (``Taxi-v3``,
``langadapt/Maze-v0``); a MiniGrid or BabyAI level, bridged to its ``langadapt/`` id;
gymnasium's own ``module:EnvId`` convention, where ``module`` is imported first (its import
registers ``EnvId`` and, if it calls ``register_language``, its language spec). An
experiment's ``imports:`` list imports modules the same way before anything else is read.

Modules are imported with the current folder at the *end* of ``sys.path`` (as
``python -m`` would find them, but after installed packages, so a folder of the current
directory never shadows an installed package). Worker processes validate the experiment
again, so every worker, of a process pool or of Ray, imports the same modules.

A results folder's ``config.yaml`` is data: read with ``imports=False``
(:func:`resolve_env_id`), a ``module:EnvId`` whose module is not imported yet is kept as
text, never imported.
"""

from __future__ import annotations

import difflib
import importlib
import os
import sys
from collections.abc import Iterable

import gymnasium

from .. import environments
from ..environments.extras import missing_extra

__all__ = ["import_user_modules", "resolve_env_id", "suggest"]


def suggest(word: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known`` to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)"


def import_user_modules(names: Iterable[str], where: str = "imports") -> None:
    """Import each module of ``names``; ValueError naming the module and the import error."""
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.append(folder)  # last: installed packages win over same-named folders here
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: {name!r} is not a module name")
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001  (any failure of user code is one line)
            raise ValueError(f"{where}: cannot import module {name!r}: "
                             f"{type(error).__name__}: {error}") from None


def resolve_env_id(text: str, imports: bool = True) -> str:
    """The gymnasium id ``text`` names (see the module docstring); ValueError naming the id,
    the closest known ids and the import error of a ``module:EnvId``. With ``imports``
    False nothing is imported: an id naming a module not imported yet is returned as it is."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"environment id {text!r}: expected a gymnasium id such as "
                         "langadapt/Maze-v0 or my_package:MyEnv-v0")
    if ":" in text:
        module, _, env_id = text.partition(":")
        if not imports and module not in sys.modules:
            return text
        import_user_modules([module], where=f"environment {text!r}")
        if env_id not in gymnasium.registry:
            raise ValueError(f"module {module!r} was imported but registers no environment "
                             f"{env_id!r}{suggest(env_id, gymnasium.registry)}")
        return text  # gymnasium.make imports the module again (a no-op) and finds env_id
    if environments.minigrid.is_minigrid_id(text):
        text = "langadapt/" + text.removeprefix("langadapt/")  # the bridged level
    if text not in gymnasium.registry:
        ours = sorted(k for k in environments.ENV_IDS)
        raise ValueError(
            f"unknown environment {text!r}{suggest(text, gymnasium.registry)}; expected one "
            f"of {', '.join(ours)}, a MiniGrid or BabyAI level, any other registered "
            "gymnasium id, or your own as my_module:MyEnv-v0 (the module is imported first)")
    missing = missing_extra(text) if imports else None
    if missing:
        raise ValueError(missing)
    return text
