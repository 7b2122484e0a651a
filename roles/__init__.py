"""The roles a language model plays in the RL loop, and their non-LLM references.

- the policy: :class:`LLMPolicy` (agent type ``llm_policy``), prompts from the
  environment's language spec, replies read by :class:`DiscreteActionParser`;
- an advisor during training: :class:`LLMAdvisor`, an action override in the step
  learner's loop (sources ``llm``, ``oracle``, ``random``), :class:`AdvisedActions` and
  :func:`sb3_advice_callback` for Stable-Baselines3;
- a reward signal: :class:`RewardShaping` (potential-based, or the LLM as judge);
- an optimiser that writes whole policies: :class:`LLMPolicySearch` (agent type
  ``llm_policy_search``; tables or linear policies, proposer ``llm`` or ``random``);
- the reader of instructions: :class:`InstructionFollowing` and
  :func:`prepare_instructions` (:mod:`roles.instructions`: match instructions to the
  descriptions of explored states, refine with feedback, reward the sub-goals in order);
- oracles (:class:`MazeOracle`, :func:`oracle_for`), the upper bound of advice and
  potentials.

Every role has one ``stats()`` whose LLM counters use the LLM layer's names
(``llm_calls``, ``llm_cache_hits``, ``llm_fallbacks``, ``llm_seconds``). Importing this
package registers ``llm_policy`` and ``llm_policy_search`` with :func:`agents.make_agent`.
"""

from ..agents import register_agent
from . import minigrid_oracle  # noqa: F401  (registers the MiniGrid/BabyAI oracles)
from .advisor import AdvisedActions, AdvisorConfig, LLMAdvisor, sb3_advice_callback
from .counting import LLM_COUNTERS, RoleCounters, make_llm_backend
from .instructions import (
    InstructionFollowing,
    InstructionPlan,
    InstructionsConfig,
    SubGoal,
    evaluate_matching,
    prepare_instructions,
)
from .llm_policy import LLMPolicy, LLMPolicyConfig, decision_messages, show_prompt
from .oracles import MazeOracle, Oracle, oracle_for, register_oracle
from .policy_families import LinearPolicy, TabularPolicy, parse_proposal, proposal_schema
from .policy_search import LLMPolicySearch, PolicySearchConfig
from .policy_search_prompts import load_templates
from .prompts import ActionParseError, DiscreteActionParser, check_legal, format_state
from .reward_shaping import RewardShaping, RewardShapingConfig, spearman_with_distance

register_agent("llm_policy", LLMPolicy)
register_agent("llm_policy_search", LLMPolicySearch)

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
    "PolicySearchConfig",
    "RewardShaping",
    "RewardShapingConfig",
    "RoleCounters",
    "SubGoal",
    "TabularPolicy",
    "check_legal",
    "decision_messages",
    "evaluate_matching",
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
