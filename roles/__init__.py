"""The roles a language model plays in the RL loop — policy, advisor, reward shaping, policy
search, instruction following — and their non-LLM references (oracles). Every role's
``stats()`` uses the LLM layer's counter names; importing this package registers
``llm_policy``, ``llm_policy_search`` and ``oracle`` with :func:`agents.make_agent`. See
docs/llm-in-the-loop.md, docs/policy-search.md, docs/instructions.md."""

from ..agents import register_agent
from . import minigrid_oracle  # noqa: F401  (registers the MiniGrid/BabyAI oracles)
from .advisor import AdvisedActions, AdvisorConfig, LLMAdvisor, sb3_advice_callback
from .backends import LLM_COUNTERS, RoleCounters, make_llm_backend
from .instruction_chain import InstructionFollowing, SubGoal
from .instructions import InstructionPlan, InstructionsConfig, prepare_instructions
from .llm_policy import LLMPolicy, LLMPolicyConfig, decision_messages, show_prompt
from .oracle_agent import OracleAgent
from .oracles import MazeOracle, Oracle, oracle_for, register_oracle
from .policy_families import (
    LinearPolicy,
    TabularPolicy,
    load_templates,
    parse_proposal,
    proposal_schema,
)
from .policy_search import LLMPolicySearch, PolicySearchConfig
from .prompts import ActionParseError, DiscreteActionParser, check_legal, format_state
from .reward_shaping import RewardShaping, RewardShapingConfig, spearman_with_distance

register_agent("llm_policy", LLMPolicy)
register_agent("llm_policy_search", LLMPolicySearch)
register_agent("oracle", OracleAgent)

__all__ = [
    "LLM_COUNTERS",
    "ActionParseError",
    "AdvisedActions",
    "AdvisorConfig",
    "DiscreteActionParser",
    "InstructionFollowing",
    "InstructionPlan",
    "InstructionsConfig",
    "LLMAdvisor",
    "LLMPolicy",
    "LLMPolicyConfig",
    "LLMPolicySearch",
    "LinearPolicy",
    "MazeOracle",
    "Oracle",
    "OracleAgent",
    "PolicySearchConfig",
    "RewardShaping",
    "RewardShapingConfig",
    "RoleCounters",
    "SubGoal",
    "TabularPolicy",
    "check_legal",
    "decision_messages",
    "format_state",
    "load_templates",
    "make_llm_backend",
    "oracle_for",
    "parse_proposal",
    "prepare_instructions",
    "proposal_schema",
    "register_oracle",
    "sb3_advice_callback",
    "show_prompt",
    "spearman_with_distance",
]
