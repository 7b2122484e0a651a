"""What a table row's LLM roles did: the share of their answers a fallback replaced (an
``llm_policy``'s random legal moves, an ``llm`` adapter's rule-describer descriptions, an
advisor's missing advice), the mark and notes every table gives such a row, and the models
the row asked. Read from ``done.json`` records and the experiment file alone. See
docs/configuration.md (LLM rows: fallbacks and models).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from ..agents import AGENTS
from ..llm import BACKENDS
from ..llm.gguf_check import DEFAULT_GGUF_NAME
from .config import ROLE_BACKEND_PARAMS
from .schema import ExperimentConfig

FALLBACK_LIMIT = 0.10
"""Above this share of one role's answers replaced by its fallback, a row's score is marked
as not the model's (:data:`NOT_THE_MODEL`)."""

NOT_THE_MODEL = "†"
"""The mark of a row whose score is not the model's (a note under the table says why)."""

Fallbacks = Mapping[str, tuple[float, float]]
"""Per LLM role of a row (``adapter``, ``agent``, ``advisor``, ...): (answers replaced by
the fallback, answers asked)."""

ROLE_WORDS = {
    "adapter": ("descriptions", "came from the rule describer, not the LLM (the LLM failed "
                "and the adapter's `fallback` is on)"),
    "agent": ("decisions", "were random legal moves (the reply broke the schema or the "
              "call failed)"),
    "advisor": ("advice requests", "gave no advice, the agent's own action stood (the reply "
                "broke the schema or the call failed)"),
}
"""What one fallback of each role is, as a note says it."""


def _number(value: Any) -> float:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else 0.0


def role_fallbacks(record: Mapping[str, Any]) -> dict[str, tuple[float, float]]:
    """Per LLM role of one ``done.json``: (fallbacks, answers asked). An adapter asks for a
    description per new state (answered, cached or replaced); a role with ``decisions``
    counts those; any other role its LLM calls and cache hits."""
    found: dict[str, tuple[float, float]] = {}
    adapter = record.get("adapter_stats")
    if isinstance(adapter, Mapping):
        fell = _number(adapter.get("llm_fallbacks"))
        answered = max(_number(adapter.get("llm_calls")) - _number(adapter.get("llm_failures")),
                       0.0)
        asked = answered + _number(adapter.get("llm_cache_hits")) + fell
        if asked:
            found["adapter"] = (fell, asked)
    roles = record.get("llm_roles")
    for role, stats in (roles.items() if isinstance(roles, Mapping) else ()):
        if not isinstance(stats, Mapping) or "llm_fallbacks" not in stats:
            continue
        fell = _number(stats.get("llm_fallbacks"))
        asked = (_number(stats.get("decisions")) if "decisions" in stats else
                 _number(stats.get("llm_calls")) + _number(stats.get("llm_cache_hits")))
        if asked or fell:
            found[str(role)] = (fell, max(asked, fell))
    return found


def added(first: Fallbacks, second: Fallbacks) -> dict[str, tuple[float, float]]:
    """Two rows' (or runs') fallbacks, role by role."""
    total = dict(first)
    for role, (fell, asked) in second.items():
        before = total.get(role, (0.0, 0.0))
        total[role] = (before[0] + fell, before[1] + asked)
    return total


def fallback_share(fallbacks: Fallbacks) -> float:
    """The largest share of one role's answers a fallback replaced (nan: no LLM role)."""
    return max((fell / asked for fell, asked in fallbacks.values() if asked), default=math.nan)


def share_text(share: float) -> str:
    """``100%``, ``37%``, ``2.5%``, ``<0.1%``: never 100% unless every answer fell back."""
    if share >= 0.1:
        return f"{min(100 * share, 99.0) if share < 1 else 100:.0f}%"
    return f"{100 * share:.1f}%" if share >= 0.001 else "<0.1%"


def fallback_mark(share: float) -> str:
    """What the agent cell of a row whose largest role :func:`fallback_share` is ``share``
    carries: `` † (100% fallbacks)`` above :data:`FALLBACK_LIMIT`, `` (3% fallbacks)`` below
    it, nothing without fallbacks."""
    if not share > 0:
        return ""
    marked = f" {NOT_THE_MODEL}" if share > FALLBACK_LIMIT else ""
    return f"{marked} ({share_text(share)} fallbacks)"


def fallback_notes(rows: Mapping[tuple[str, str], Fallbacks]) -> list[str]:
    """One bold line per (adapter, agent) role that fell back, worded for the role, and the
    reason of the :data:`NOT_THE_MODEL` mark when a row carries it."""
    lines, marked = [], False
    for (adapter, agent), fallbacks in rows.items():
        for role, (fell, asked) in fallbacks.items():
            if not fell:
                continue
            noun, what = ROLE_WORDS.get(role, ("LLM answers", "were replaced by a fallback"))
            share = fell / asked
            over = share > FALLBACK_LIMIT
            marked |= over
            lines.append(
                f"- **{adapter} / {agent}: {fell:,.0f} of {asked:,.0f} {noun} of its {role} "
                f"({share_text(share)}) {what}**"
                + (f": {NOT_THE_MODEL} its score is not the model's." if over else
                   "; the rest are the model's."))
    if marked:
        lines.insert(0, f"- {NOT_THE_MODEL} **Not the model's score**: more than "
                     f"{FALLBACK_LIMIT:.0%} of one LLM role's answers of the row were "
                     "replaced by its fallback, so the row measures the fallback as much as the "
                     "model.")
    return lines


def description_notes(rows: Mapping[tuple[str, str], Sequence[tuple[int, int]]]) -> list[str]:
    """One line per (adapter, agent) row with an LLM adapter: how many distinct descriptions
    its states got, per run (seed), in bold when some run's LLM gave two states one
    description (merged states look alike to the agent: what decides a language row)."""
    lines = []
    for (adapter, agent), runs in rows.items():
        if not runs:
            continue
        merged = any(distinct < states for states, distinct in runs)
        counts = "; ".join(dict.fromkeys(
            f"{states:,} states got {distinct:,} distinct description"
            + ("" if distinct == 1 else "s") for states, distinct in runs))
        lines.append(
            f"- **{adapter} / {agent}: its LLM adapter merges states** ({counts}, over "
            f"{len(runs)} run{'s' if len(runs) != 1 else ''}): states it merged look the same "
            "to the agent." if merged else
            f"- {adapter} / {agent}: its LLM adapter gave every state a description of its "
            f"own ({counts}).")
    return lines


# ----------------------------------------------------------------------------- models


def model_label(spec: Any) -> str:
    """``backend model`` of a backend spec as the file gives it (a backend's default model
    when the spec names none; ``auto`` as it is: the server running decides)."""
    if not isinstance(spec, str | Mapping):
        return "?"
    fields = {"backend": spec} if isinstance(spec, str) else dict(spec)
    choice = str(fields.get("backend", "auto"))
    model = fields.get("model")
    if model is None and choice in BACKENDS:
        model = BACKENDS[choice].model_fields["model"].default or DEFAULT_GGUF_NAME
    if model is None:
        return choice
    name = str(model)
    if name.lower().endswith(".gguf"):
        name = Path(name).name.removesuffix(".gguf").removesuffix(".GGUF")
    return f"{choice} {name}"


def row_models(config: ExperimentConfig, adapter: str, agent: str) -> str:
    """The models a row of ``config`` asks (its LLM adapter's, agent's, advisor's and
    reward shaping's), distinct, joined by commas ('' without any)."""
    specs: list[Any] = []
    for spec in config.adapters:
        if spec.name == adapter and spec.type == "llm":
            settings = spec.settings
            specs.append({"backend": settings.get("backend", "auto"),
                          **({"model": settings["model"]} if "model" in settings else {})})
    for spec in config.agents:
        if spec.name != agent:
            continue
        key = ROLE_BACKEND_PARAMS.get(spec.type)
        if key is not None:
            default = AGENTS[spec.type].config_model.model_fields[key].default
            specs.append(spec.params_for(adapter).get(key, default))
        advisor, shaping = spec.advisor, spec.reward_shaping or config.environment.reward_shaping
        if advisor is not None and advisor.get("source", "llm") == "llm":
            specs.append(advisor.get("backend", "llamacpp"))
        if shaping is not None and shaping.get("potential", "llm") == "llm":
            specs.append(shaping.get("backend", "llamacpp"))
    return ", ".join(dict.fromkeys(model_label(s) for s in specs))
