"""The experiment file's JSON Schema (``langadapt schema``): :class:`ExperimentConfig`'s, with
each agent's ``params`` and each adapter's ``settings`` typed by its ``type`` from the pydantic
models the agents, adapters and backends validate with (an ``if``/``then`` per registered
name, ``register_agent``'s included). See docs/configuration.md."""

from __future__ import annotations

import copy
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import GenerateJsonSchema, PydanticOmit

from .schema import ExperimentConfig

REF = "#/$defs/{model}"


class _Serialisable(GenerateJsonSchema):
    """Fields with no JSON form (an adapter's cache object, a callable) are left out."""

    def handle_invalid_for_json_schema(self, schema: Any, error_info: str) -> dict[str, Any]:
        raise PydanticOmit


def _model(model: type[BaseModel], defs: dict[str, Any]) -> dict[str, Any]:
    """``model``'s validation schema, its definitions moved into ``defs``."""
    schema = model.model_json_schema(ref_template=REF, schema_generator=_Serialisable)
    defs.update(schema.pop("$defs", {}))
    return schema


def _by_type(block: dict[str, Any], key: str, kinds: dict[str, dict[str, Any]]) -> dict:
    """``block`` (an AgentSpec or AdapterSpec schema) with ``type`` one of ``kinds`` and, for
    each, ``key`` (and ``per_adapter``'s values) checked by that kind's schema."""
    block = copy.deepcopy(block)
    block["properties"]["type"] = {"enum": list(kinds), "title": "Type"}
    block["allOf"] = [
        {"if": {"properties": {"type": {"const": name}}, "required": ["type"]},
         "then": {"properties": {key: typed, **({"per_adapter": {"additionalProperties": typed}}
                                               if "per_adapter" in block["properties"] else {})}}}
        for name, typed in kinds.items()]
    return block


def _llm_settings(defs: dict[str, Any]) -> dict[str, Any]:
    """The llm adapter's own settings and, flat beside them, its backend's fields."""
    from ..adapters.llm import LLMAdapter
    from ..llm.factory import BACKENDS

    merged = _model(LLMAdapter, defs)
    for backend in BACKENDS.values():
        for name, field in _model(backend, defs).get("properties", {}).items():
            merged["properties"].setdefault(name, field)
    merged["properties"]["backend"] = {"enum": [*BACKENDS, "auto"], "default": "auto",
                                       "description": "which LLM server or library answers"}
    return merged


def experiment_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of an experiment file, for the agents registered now."""
    from .. import roles  # noqa: F401  (registers the LLM roles' agents and the oracle)
    from ..adapters.language import LanguageAdapter
    from ..agents.registry import AGENTS
    from .config import RawSettings

    schema = ExperimentConfig.model_json_schema(ref_template=REF,
                                                schema_generator=_Serialisable)
    defs = schema["$defs"]
    agents = {name: _model(cls.config_model, defs) for name, cls in AGENTS.items()}
    adapters = {"raw": _model(RawSettings, defs), "language": _model(LanguageAdapter, defs),
                "llm": _llm_settings(defs)}
    defs["AgentSpec"] = _by_type(defs["AgentSpec"], "params", agents)
    defs["AdapterSpec"] = _by_type(defs["AdapterSpec"], "settings", adapters)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}
