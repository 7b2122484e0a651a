"""Instruction following (elsciRL's feature, with ground truth): instructions, search,
feedback, the optimisation wrapper and results; :func:`prepare_instructions` runs the
pipeline from an ``instructions:`` block. See docs/instructions.md."""

from .data import InstructionItem, SubGoalTruth, load_instruction_set, shipped_set_path
from .feedback import (
    DEFAULT_PER_ROUND,
    DEFAULT_RULE,
    JUDGE_SCHEMA,
    MAX_ROUNDS,
    REFINE_RULES,
    LLMFeedback,
    SimulatedFeedback,
    refine,
)
from .plan import InstructionPlan, InstructionsConfig, prepare_instructions
from .results import follow_rate, match_picture, match_scores
from .search import (
    DEFAULT_MARGIN,
    DEFAULT_THRESHOLD,
    DEFAULT_TOP_K,
    Exploration,
    Match,
    explore,
    match,
)
from .spec import SUBGOALS_SCHEMA, decompose_task, make_chain, split_task, usable_subgoals
from .truth import dead_ends, junctions, truth_cells
from .wrapper import InstructionFollowing, SubGoal, cell_check

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_PER_ROUND",
    "DEFAULT_RULE",
    "DEFAULT_THRESHOLD",
    "DEFAULT_TOP_K",
    "JUDGE_SCHEMA",
    "MAX_ROUNDS",
    "REFINE_RULES",
    "SUBGOALS_SCHEMA",
    "Exploration",
    "InstructionFollowing",
    "InstructionItem",
    "InstructionPlan",
    "InstructionsConfig",
    "LLMFeedback",
    "Match",
    "SimulatedFeedback",
    "SubGoal",
    "SubGoalTruth",
    "cell_check",
    "dead_ends",
    "decompose_task",
    "explore",
    "follow_rate",
    "junctions",
    "load_instruction_set",
    "make_chain",
    "match",
    "match_picture",
    "match_scores",
    "prepare_instructions",
    "refine",
    "shipped_set_path",
    "split_task",
    "truth_cells",
    "usable_subgoals",
]
