"""Instruction following: tell the agent what to do in words, find where that is, reward it.

elsciRL's distinctive feature (Osborne et al., arXiv 2507.08705), with ground truth:

1. **instructions** (:mod:`.spec`): one sentence, a chain done in order, or a task sentence
   an LLM breaks into a chain (:func:`make_chain`, :func:`decompose_task`, :func:`split_task`);
2. **search** (:mod:`.search`): exploration episodes record the descriptions of the states
   visited (:func:`explore`); each sub-goal is matched to them by MiniLM cosine with a
   threshold, a margin and a top-k (:func:`match`), weak matches flagged;
3. **feedback** (:mod:`.feedback`): ``none``, ``simulated`` (ground truth) or ``llm`` judges
   the best candidates for up to three rounds and a rule refines the match (:func:`refine`;
   default ``probe``, chosen by measurement);
4. **optimise** (:mod:`.wrapper`): :class:`InstructionFollowing`, a gymnasium wrapper that pays
   each sub-goal once per episode, in order (potential-based or instruction-only), and shows
   the agent which sub-goal is current;
5. **results** (:mod:`.results`, :mod:`.evaluation`): follow rates, pictures, and
   :func:`evaluate_matching`, the measurement behind docs/instructions.md, on the shipped maze
   set with ground truth (:func:`load_instruction_set`).

:func:`prepare_instructions` runs 1-3 from an ``instructions:`` block
(:class:`InstructionsConfig`) and returns an :class:`InstructionPlan` whose ``wrap`` gives
the training environment. See docs/instructions.md.
"""

from .data import InstructionItem, SubGoalTruth, load_instruction_set, shipped_set_path
from .evaluation import evaluate_following, evaluate_matching, maze_exploration
from .feedback import (
    DEFAULT_PER_ROUND,
    DEFAULT_RULE,
    FEEDBACK_SOURCES,
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
from .wrapper import FORMS, InstructionFollowing, SubGoal, cell_check

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_PER_ROUND",
    "DEFAULT_RULE",
    "DEFAULT_THRESHOLD",
    "DEFAULT_TOP_K",
    "FEEDBACK_SOURCES",
    "FORMS",
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
    "evaluate_following",
    "evaluate_matching",
    "explore",
    "follow_rate",
    "junctions",
    "load_instruction_set",
    "make_chain",
    "match",
    "match_picture",
    "match_scores",
    "maze_exploration",
    "prepare_instructions",
    "refine",
    "shipped_set_path",
    "split_task",
    "truth_cells",
    "usable_subgoals",
]
