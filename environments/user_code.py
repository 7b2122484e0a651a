"""The user's code an experiment names: the modules of ``imports:`` and ``--import``
(never one whose code lies in the folder of the file naming it) and the environment an id
names (``module:EnvId`` imports the module first). Errors are one-line ValueErrors naming
the module or the id, with the closest known names (:func:`suggest`). See
docs/configuration.md.
"""

from __future__ import annotations

import difflib
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import gymnasium

from . import ENV_IDS, minigrid
from .extras import missing_extra


def suggest(word: str, known: Iterable[str]) -> str:
    """``" (did you mean 'x'?)"`` for the closest of ``known`` to ``word``, else ``""``."""
    close = difflib.get_close_matches(word, list(known), n=3, cutoff=0.6)
    if not close:
        return ""
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)"


def import_user_modules(names: Iterable[str], where: str = "imports",
                        home: Path | None = None) -> None:
    """Import each module of ``names``; ValueError naming the module and the import error.

    ``home``: the folder of the file that names them. A module not imported yet whose code
    lies in that folder's tree is refused, not imported: a results folder someone sent keeps
    its code there, whatever its name or markers (``--import`` imports it, by choice)."""
    folder = os.getcwd()
    if folder not in sys.path:
        sys.path.append(folder)  # last: installed packages win over same-named folders here
    for name in names:
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"{where}: {name!r} is not a module name")
        found = _code_inside(name, home) if home is not None else None
        if found is not None:
            raise ValueError(
                f"{where}: module {name!r} is {found}, inside the folder of the file that "
                f"names it ({home}): a file never imports code from its own folder, read as "
                f"data (where a results folder someone sent keeps its code); pass --import "
                f"{name} to import it, only if you trust that code, or keep the module "
                "outside that folder")
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001  (any failure of user code is one line)
            raise ValueError(f"{where}: cannot import module {name!r}: "
                             f"{type(error).__name__}: {error}") from None


def _code_inside(name: str, home: Path) -> str | None:
    """Where a part of module ``name`` not imported yet would be read from (a file, a
    package's folder), if that is inside ``home``; found as the import system finds it
    (meta path, then each folder's path hook), running nothing."""
    root = os.path.realpath(home).rstrip(os.sep) + os.sep
    parts, search = name.split("."), None
    for depth in range(1, len(parts) + 1):
        fullname = ".".join(parts[:depth])
        module = sys.modules.get(fullname)
        if module is not None:  # imported already: nothing of it runs again
            search = list(getattr(module, "__path__", None) or []) or None
        else:
            places = (_top_level(fullname) if depth == 1 else _in_folders(fullname, search))
            if places is None:
                return None  # not found: the import's own error names it
            origin, search = places
            for place in [*(search or []), *([origin] if origin else [])]:
                if (os.path.realpath(place) + os.sep).startswith(root):
                    return place
        if search is None:
            return None  # a module, not a package: the name goes no deeper
    return None


def _top_level(name: str) -> tuple[str | None, list[str] | None] | None:
    """(file, package folders) of a top-level module, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None:
        return None
    folders = spec.submodule_search_locations
    return (spec.origin if spec.has_location else None,
            None if folders is None else list(folders))


def _in_folders(fullname: str, folders: list[str] | None
                ) -> tuple[str | None, list[str] | None] | None:
    """(file, package folders) of submodule ``fullname`` in its parent's ``folders``, found
    through each folder's path hook (a namespace package: its portions in every folder)."""
    portions: list[str] = []
    for folder in folders or []:
        finder = next((f for f in (_path_finder(hook, folder) for hook in sys.path_hooks)
                       if f is not None), None)
        spec = finder.find_spec(fullname) if hasattr(finder, "find_spec") else None
        if spec is None:
            continue
        if spec.loader is None:  # a namespace portion
            portions += list(spec.submodule_search_locations or [])
            continue
        locations = spec.submodule_search_locations
        return (spec.origin if spec.has_location else None,
                None if locations is None else list(locations))
    return (None, portions) if portions else None


def _path_finder(hook: Any, folder: str) -> Any:
    try:
        return hook(folder)
    except ImportError:
        return None


def resolve_env_id(text: str, imports: bool = True, home: Path | None = None) -> str:
    """The gymnasium id ``text`` names (a registered id, a MiniGrid/BabyAI level, or
    ``module:EnvId`` with ``module`` imported first); ValueError naming the id,
    the closest known ids and the import error of a ``module:EnvId``. With ``imports``
    False nothing is imported: an id naming a module not imported yet is returned as it is.
    ``home``: see :func:`import_user_modules`."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"environment id {text!r}: expected a gymnasium id such as "
                         "langadapt/Maze-v0 or my_package:MyEnv-v0")
    if ":" in text:
        module, _, env_id = text.partition(":")
        if not imports and module not in sys.modules:
            return text
        import_user_modules([module], where=f"environment {text!r}", home=home)
        if env_id not in gymnasium.registry:
            raise ValueError(f"module {module!r} was imported but registers no environment "
                             f"{env_id!r}{suggest(env_id, gymnasium.registry)}")
        return text  # gymnasium.make imports the module again (a no-op) and finds env_id
    if minigrid.is_minigrid_id(text):
        text = "langadapt/" + text.removeprefix("langadapt/")  # the bridged level
    if text not in gymnasium.registry:
        ours = sorted(k for k in ENV_IDS)
        raise ValueError(
            f"unknown environment {text!r}{suggest(text, gymnasium.registry)}; expected one "
            f"of {', '.join(ours)}, a MiniGrid or BabyAI level, any other registered "
            "gymnasium id, or your own as my_module:MyEnv-v0 (the module is imported first)")
    missing = missing_extra(text) if imports else None
    if missing:
        raise ValueError(missing)
    return text
