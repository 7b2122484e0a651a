"""The settings of :class:`~langadapt.roles.LLMPolicySearch` (documented in
docs/policy-search.md)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..llm import LLMBackend
from .counting import check_backend_spec
from .policy_search_prompts import load_templates

MAX_TABLE_STATES = 100_000
"""Most states a table may have (the product of ``bins``): the LLM writes one entry each."""
MAX_TABLE_ACTIONS = 10_000
"""Most discretised actions of a table on a Box (the product of ``action_bins``)."""


class PolicySearchConfig(BaseModel):
    """Settings of :class:`LLMPolicySearch` (the documents' names in brackets)."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    family: Literal["tabular", "linear"] = Field(
        "tabular", description="a table over discretised states, or argmax(W @ [obs, 1]) "
        "(Box actions: clip(W @ [obs, 1]))")
    proposer: Literal["llm", "random"] = Field(
        "llm", description="who writes candidates: the LLM, or random search")
    rounds: int = Field(100, gt=0, description="proposals after the initial policy (episodes)")
    evaluation_episodes: int = Field(
        5, gt=0, description="episodes each candidate is scored on (evaluation episodes)")
    replay_buffer: bool = Field(
        True, description="show the best and worst trajectories so far (else the latest one)")
    replay_buffer_size: int = Field(
        2, gt=0, description="how many best and how many worst trajectories are kept")
    max_trajectory_length: int = Field(
        20, gt=0, description="steps shown per trajectory, the last ones (max traj length)")
    reset_conversation: bool = Field(
        True, description="a fresh conversation every round (else earlier rounds stay in it)")
    conversation_chars: int = Field(
        12_000, gt=0, description="without reset: oldest rounds dropped beyond this size")
    history_size: int = Field(10, ge=0, description="recent rounds' scores shown")
    task_hints: str = Field("", description="what the task is, for the system prompt")
    structured_output: bool = Field(
        True, description="ask the backend for JSON fitting the proposal's schema")
    vary_seed: bool = Field(
        True, description="sampling seed = backend seed + round, so that with temperature > 0 "
        "a model does not answer every round with the same draws")
    bins: list[int] | None = Field(
        None, description="tabular: bins per dimension; none = the observation is the state")
    bounds: list[tuple[float, float]] | None = Field(
        None, description="tabular: (low, high) per dimension instead of the space's bounds")
    observation_names: list[str] | None = Field(None, description="names of the dimensions")
    action_names: list[str] | None = Field(None, description="names of the actions")
    action_bounds: list[tuple[float, float]] | None = Field(
        None, description="on a Box action space: the action range per dimension instead of "
        "the space's bounds (needed when they are infinite)")
    action_bins: int | list[int] | None = Field(
        None, description="tabular on a Box action space: values per action dimension (one int "
        "for all), evenly spaced from low to high inclusive")
    normalise: bool | None = Field(
        None, description="linear on a Box action space: act on observations normalised by "
        "the running mean and std of those seen, as ARS V2 does (default true)")
    initial: Literal["random", "zeros"] = Field(
        "random", description="round 0: a random policy (seeded) or all zeros")
    random_scale: float = Field(1.0, gt=0, description="random weights lie in [-s, s]")
    llm: Any = Field("llamacpp", description="backend spec for langadapt.llm.make_backend")
    templates: str | None = Field(None, description="folder of the three template files")
    max_tokens: int | None = Field(
        None, gt=0, description="longest reply; default: enough for the proposal's schema")

    @field_validator("llm")
    @classmethod
    def _backend_spec(cls, value: Any) -> Any:
        if isinstance(value, LLMBackend):
            return value
        if not isinstance(value, (str, dict)):
            raise ValueError(f"llm is {value!r}, expected a backend name or a dict spec")
        return check_backend_spec(value)  # a bad field fails now, not mid-run

    @field_validator("action_bins")
    @classmethod
    def _action_bins(cls, value: int | list[int] | None) -> int | list[int] | None:
        if value is not None and min([value] if isinstance(value, int) else value or [0]) < 2:
            raise ValueError(f"action_bins is {value!r}, expected ints of at least 2 (the "
                             "values of an action dimension include its low and high)")
        if value is not None and math.prod([value] if isinstance(value, int) else value
                                           ) > MAX_TABLE_ACTIONS:
            raise ValueError(f"action_bins is {value!r}: expected at most "
                             f"{MAX_TABLE_ACTIONS:,} actions in all (their product)")
        return value

    @field_validator("bins")
    @classmethod
    def _bins(cls, value: list[int] | None) -> list[int] | None:
        if value is not None and (min(value or [0]) < 1 or math.prod(value) > MAX_TABLE_STATES):
            raise ValueError(f"bins is {value!r}: expected ints of at least 1 making at most "
                             f"{MAX_TABLE_STATES:,} states in all (their product)")
        return value

    @field_validator("action_bounds", "bounds")
    @classmethod
    def _finite_ranges(cls, value: list[tuple[float, float]] | None, info: Any
                       ) -> list[tuple[float, float]] | None:
        for low, high in value or []:
            if not (math.isfinite(low) and math.isfinite(high) and low < high):
                raise ValueError(f"{info.field_name} has ({low}, {high}): expected finite "
                                 "(low, high) pairs with low < high")
        return value

    @model_validator(mode="after")
    def _templates_exist(self) -> PolicySearchConfig:
        if self.proposer == "llm":
            load_templates(self.templates)
        return self
