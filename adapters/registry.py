"""Adapters by name: ``adapters.make(name, env, **settings)``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from langadapt.adapters.describers import _resolve_env

__all__ = ["register_adapter", "make", "available_adapters"]

AdapterFactory = Callable[..., Any]
_FACTORIES: dict[str, AdapterFactory] = {}


def register_adapter(name: str, factory: AdapterFactory, overwrite: bool = False) -> None:
    """Make ``factory(env, **settings) -> adapter`` available as ``make(name, ...)``.

    ``env`` handed to the factory is an environment instance. Registering a taken name
    raises ValueError unless ``overwrite=True``.
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"adapter name {name!r}: expected a non-empty str")
    if not callable(factory):
        raise ValueError(f"factory {factory!r} for adapter {name!r}: expected a callable")
    if name in _FACTORIES and not overwrite and _FACTORIES[name] is not factory:
        raise ValueError(f"adapter name {name!r} is already registered; pass overwrite=True")
    _FACTORIES[name] = factory


def available_adapters() -> list[str]:
    """Names ``make`` accepts, sorted."""
    return sorted(_FACTORIES)


def make(name: str, env: Any, **settings: Any) -> Any:
    """Build the adapter registered as ``name`` for ``env`` (an instance or a gymnasium id)."""
    factory = _FACTORIES.get(name) if isinstance(name, str) else None
    if factory is None:
        raise ValueError(f"unknown adapter {name!r}; expected one of {available_adapters()}")
    return factory(_resolve_env(env) if isinstance(env, str) else env, **settings)
