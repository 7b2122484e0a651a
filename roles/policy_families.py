"""What a proposer writes and reads: the policy families (:class:`TabularPolicy`,
:class:`LinearPolicy`), the proposal schema and parser, :class:`ActionGrid` (a table's
discretised Box actions), and the prompts of :class:`~langadapt.roles.LLMPolicySearch`: its
three checked template files and their variables. See docs/policy-search.md."""

from __future__ import annotations

import itertools
import json
import math
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from gymnasium import spaces

from ..agents import LinearBoxPolicy

Family = Literal["tabular", "linear"]
#: The JSON key holding the proposal: ``{"actions": [...]}`` or ``{"weights": [[...], ...]}``.
PROPOSAL_KEYS: dict[str, str] = {"tabular": "actions", "linear": "weights"}


class TabularPolicy:
    """One action per state index; an illegal table action falls back to the lowest legal one."""

    family: Family = "tabular"

    def __init__(self, table: Sequence[int] | np.ndarray, n_actions: int) -> None:
        table = np.asarray(table)
        if table.ndim != 1 or table.size == 0 or not np.issubdtype(table.dtype, np.integer):
            raise ValueError(f"table is {table!r}, expected a non-empty 1-d array of ints")
        if table.min() < 0 or table.max() >= n_actions:
            raise ValueError(f"table has actions outside [0, {n_actions}): {table.tolist()}")
        self.table = table.astype(np.int64)
        self.n_actions = n_actions

    def action(self, state: int, legal: np.ndarray) -> tuple[int, bool]:
        """(action, whether the table's own action was legal) in state index ``state``."""
        a = int(self.table[state])
        if legal[a]:
            return a, True
        return int(np.flatnonzero(legal)[0]), False

    def to_json(self) -> list[int]:
        return self.table.tolist()


class LinearPolicy:
    """``argmax_a (W @ [obs, 1])[a]`` among the legal actions (lowest action on ties)."""

    family: Family = "linear"

    def __init__(self, weights: Sequence[Sequence[float]] | np.ndarray, obs_dim: int,
                 n_actions: int) -> None:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (n_actions, obs_dim + 1):
            raise ValueError(
                f"weights have shape {w.shape}, expected ({n_actions}, {obs_dim + 1}): one row "
                "per action, one column per observation dimension plus a bias"
            )
        if not np.isfinite(w).all():
            raise ValueError(f"weights contain NaN or inf: {w.tolist()}")
        self.weights = w
        self.obs_dim = obs_dim
        self.n_actions = n_actions

    def scores(self, obs: np.ndarray) -> np.ndarray:
        return self.weights[:, :-1] @ np.asarray(obs, dtype=np.float64) + self.weights[:, -1]

    def action(self, obs: np.ndarray, legal: np.ndarray) -> tuple[int, bool]:
        scores = np.where(legal, self.scores(obs), -np.inf)
        return int(np.argmax(scores)), True

    def to_json(self) -> list[list[float]]:
        return self.weights.tolist()


Policy = TabularPolicy | LinearPolicy | LinearBoxPolicy


def proposal_schema(family: Family, n_actions: int, n_states: int = 0, obs_dim: int = 0
                    ) -> dict[str, Any]:
    """The JSON schema of a proposal: ``{"actions": [n_states ints from the action enum]}``
    or ``{"weights": n_actions rows of obs_dim + 1 numbers}``."""
    if family == "tabular":
        value: dict[str, Any] = {
            "type": "array",
            "items": {"type": "integer", "enum": list(range(n_actions))},
            "minItems": n_states,
            "maxItems": n_states,
        }
    else:
        value = {
            "type": "array",
            "items": {
                "type": "array",
                "items": {"type": "number"},
                "minItems": obs_dim + 1,
                "maxItems": obs_dim + 1,
            },
            "minItems": n_actions,
            "maxItems": n_actions,
        }
    key = PROPOSAL_KEYS[family]
    return {"type": "object", "properties": {key: value}, "required": [key],
            "additionalProperties": False}


def _no_constants(name: str) -> float:
    raise ValueError(f"{name} is not a number JSON allows")


def parse_proposal(
    text: str, family: Family, n_actions: int, n_states: int = 0, obs_dim: int = 0
) -> Policy:
    """The policy a reply proposes; ValueError saying what is wrong (in words a model can act
    on) for anything else: text around the JSON, a missing key, a table of the wrong length
    or with actions outside the action set, weights of the wrong shape, NaN or inf."""
    key = PROPOSAL_KEYS[family]
    try:
        value = json.loads(text.strip(), parse_constant=_no_constants)
    except (json.JSONDecodeError, ValueError) as error:
        raise ValueError(f"the reply is not one JSON object ({error})") from None
    except RecursionError:
        raise ValueError("the reply nests lists or objects too deeply to be a policy") from None
    if not isinstance(value, dict) or set(value) != {key}:
        got = sorted(value) if isinstance(value, dict) else type(value).__name__
        raise ValueError(f'expected a JSON object with the single key "{key}", got {got}')
    data = value[key]
    if family == "tabular":
        if not isinstance(data, list):
            raise ValueError(f'"{key}" must be a list of {n_states} actions')
        if len(data) != n_states:
            raise ValueError(
                f'"{key}" has {len(data)} entries, expected {n_states} (one per state)')
        bad = [
            i for i, a in enumerate(data)
            if isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < n_actions
        ]
        if bad:
            raise ValueError(
                f'"{key}" has entries that are not actions 0..{n_actions - 1} at states '
                f"{bad[:10]} (e.g. {data[bad[0]]!r})"
            )
        return TabularPolicy(np.asarray(data, dtype=np.int64), n_actions)
    rows = data if isinstance(data, list) else None
    if rows is None or len(rows) != n_actions or any(
        not isinstance(r, list) or len(r) != obs_dim + 1 for r in rows
    ):
        shape = [len(r) if isinstance(r, list) else None for r in rows] if rows else data
        raise ValueError(
            f'"{key}" must be {n_actions} rows of {obs_dim + 1} numbers, got {shape!r}'
        )
    flat = [v for r in rows for v in r]
    if any(isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
           for v in flat):
        raise ValueError(f'"{key}" must hold finite numbers only')
    return LinearPolicy(rows, obs_dim, n_actions)


def random_policy(rng: np.random.Generator, family: Family, n_actions: int, n_states: int = 0,
                  obs_dim: int = 0, scale: float = 1.0) -> Policy:
    """A uniformly random table, or weights uniform in ``[-scale, scale]``."""
    if family == "tabular":
        return TabularPolicy(rng.integers(n_actions, size=n_states), n_actions)
    return LinearPolicy(rng.uniform(-scale, scale, size=(n_actions, obs_dim + 1)), obs_dim,
                        n_actions)


class ActionGrid:
    """Action index in ``[0, n_actions)`` <-> action vector of a one-dimensional Box."""

    def __init__(self, space: spaces.Box, bins: int | Sequence[int], low: np.ndarray,
                 high: np.ndarray) -> None:
        dims = len(low)
        sizes = [int(bins)] * dims if isinstance(bins, int) else list(bins)
        if len(sizes) != dims:
            raise ValueError(f"action_bins is {bins!r}, expected one int or {dims} ints (one "
                             "per action dimension)")
        self.levels = [np.linspace(lo, hi, n) for lo, hi, n in zip(low, high, sizes, strict=True)]
        self.sizes = sizes
        self.n_actions = int(np.prod(sizes))
        self.vectors = np.array(list(itertools.product(*self.levels)), dtype=space.dtype)

    def vector(self, index: int) -> np.ndarray:
        """The action vector of ``index`` (a copy)."""
        return self.vectors[index].copy()

    def index(self, action: np.ndarray) -> int:
        """The index of the grid vector nearest to ``action`` (per dimension)."""
        nearest = [int(np.abs(lv - a).argmin()) for lv, a in zip(self.levels, action, strict=True)]
        return int(np.ravel_multi_index(nearest, self.sizes))

    def layout(self, names: Sequence[str]) -> str:
        """The actions in words (for prompts): how an index is built and each level's value."""
        radix = [int(np.prod(self.sizes[d + 1:])) for d in range(len(self.sizes))]
        terms = " + ".join(f"j{d}*{r}" if r > 1 else f"j{d}" for d, r in enumerate(radix))
        lines = [f"{self.n_actions} action indices, each one vector of {len(names)} values: "
                 f"action = {terms}, where"]
        lines += [f"- j{d} is the value of {name} ("
                  + ", ".join(f"{k}: {v:.3g}" for k, v in enumerate(self.levels[d])) + ")"
                  for d, name in enumerate(names)]
        return "\n".join(lines)


TEMPLATE_DIR = Path(__file__).parent / "templates" / "policy_search"
TEMPLATE_FILES = ("system.txt", "user.txt", "correction.txt")

#: Every variable a template may use, and what it holds.
TEMPLATE_VARIABLES: dict[str, str] = {
    "task_hints": "the task_hints setting (what the task is, what the return means)",
    "family": "tabular or linear",
    "actions": "the actions, e.g. '0 = push left, 1 = push right'",
    "n_actions": ("number of actions (a Box action space: its dimensions; a table over "
                  "discretised Box actions: its action indices)"),
    "n_states": "number of table states (tabular; 0 for linear)",
    "state_layout": "how a state index is built from the observation (tabular)",
    "observation_names": "the observation's dimensions, comma-separated",
    "parameter_shape": "the weight matrix shape, e.g. '2 x 5' (linear)",
    "policy_description": "what the policy is and how it acts (family-specific)",
    "output_format": "the JSON form of an answer",
    "evaluation_episodes": "episodes each policy is evaluated on",
    "rounds": "number of rounds (proposals) of the search",
    "round": "this round's number (1 = first proposal)",
    "best_policy": "the kept policy as JSON",
    "best_return": "its mean return",
    "last_proposal": "the last proposal as JSON ('none' before the first)",
    "last_return": "its mean return ('none' when there is none)",
    "last_outcome": "the last proposal, its return and whether it was kept, in words",
    "score_history": "the recent rounds' mean returns",
    "trajectories": "the best and worst episodes so far (state, action, reward)",
    "max_trajectory_length": "steps of each trajectory shown (the last ones)",
    "error": "correction only: what was wrong with the reply",
    "reply": "correction only: the reply (empty when the backend refused it)",
}


class TemplateError(ValueError):
    """A template file that is missing or uses a variable that does not exist."""


def template_variables(text: str) -> list[str]:
    """The ``$name`` / ``${name}`` variables a template uses (in order, once each)."""
    names: list[str] = []
    for match in string.Template.pattern.finditer(text):
        name = match.group("named") or match.group("braced")
        if name and name not in names:
            names.append(name)
        if match.group("invalid") is not None:
            raise ValueError(f"a '$' at character {match.start()} starts no variable name "
                             "(write $$ for a dollar sign)")
    return names


def load_templates(folder: str | Path | None = None) -> dict[str, string.Template]:
    """The three templates of ``folder`` (default: the packaged ones), checked: TemplateError
    naming the file for a missing one and naming file and variable for an unknown variable."""
    folder = TEMPLATE_DIR if folder is None else Path(folder)
    missing = [name for name in TEMPLATE_FILES if not (folder / name).is_file()]
    if missing:
        raise TemplateError(f"template file {folder / missing[0]} does not exist (a template "
                            f"folder needs {', '.join(TEMPLATE_FILES)})")
    templates = {}
    for name in TEMPLATE_FILES:
        path = folder / name
        text = path.read_text(encoding="utf-8")
        try:
            used = template_variables(text)
        except ValueError as error:
            raise TemplateError(f"template file {path}: {error}") from None
        unknown = [v for v in used if v not in TEMPLATE_VARIABLES]
        if unknown:
            raise TemplateError(
                f"template file {path} uses unknown variable ${unknown[0]}"
                + (f" (and {', '.join('$' + v for v in unknown[1:])})" if unknown[1:] else "")
                + f"; expected variables: {', '.join(TEMPLATE_VARIABLES)}"
            )
        templates[name.removesuffix(".txt")] = string.Template(text)
    return templates


@dataclass
class Trajectory:
    """One episode as the prompt shows it: its return, round and last steps."""

    return_: float
    round: int
    length: int
    steps: list[tuple[Any, int, float]]


def prompt_variables(search: Any) -> dict[str, str]:
    """The values of every :data:`TEMPLATE_VARIABLES` entry for ``search``'s current round
    (an :class:`~langadapt.roles.LLMPolicySearch`)."""
    cfg = search.config
    key = PROPOSAL_KEYS[cfg.family]
    if cfg.family == "tabular":
        output_format = (f'{{"{key}": [a list of exactly {search.n_states} actions, one per '
                         f"state in state order, each one of "
                         f"{', '.join(map(str, range(search.n_actions)))}]}}")
        description = (f"The policy is a table: the action to take in each of the "
                       f"{search.n_states} states.\n"
                       + search.discretisation.layout(search.observation_names))
    elif search.box:
        output_format, description = _box_text(search, key)
    else:
        cols = search.obs_dim + 1
        output_format = (f'{{"{key}": [{search.n_actions} rows, one per action, each a list '
                         f"of {cols} numbers]}}")
        terms = " + ".join(f"w[{i}]*{n}" for i, n in enumerate(search.observation_names))
        description = (
            f"The policy is linear: each action a has a row w of {cols} numbers and the "
            f"score {terms} + w[{cols - 1}]; the action with the highest score is taken. "
            f"The weights are a {search.n_actions} x {cols} matrix (row a = action a).")
    last = search.last_proposal
    if last is None:
        last_outcome = "none yet"
    else:
        verdict = ("kept as the new best" if search.last_kept
                   else f"not kept (the best stays at {fmt(search.best_return)})")
        last_outcome = (f"{json.dumps(shown(last))} scored {fmt(search.last_return)}, "
                        f"{verdict}")
    recent = search.scores[-cfg.history_size:] if cfg.history_size else []
    history = ", ".join(f"{r}: {fmt(s)}{' (kept)' if k else ''}" for r, s, k in recent)
    return {
        "task_hints": cfg.task_hints or "maximise the return.",
        "family": cfg.family,
        "actions": (", ".join(f"{i} = {n}" for i, n in enumerate(search.action_names))
                    if not search.box else "a vector: " + ", ".join(
                        f"{n} in [{fmt(lo)}, {fmt(hi)}]" for n, lo, hi in
                        zip(search.action_names, search.low, search.high, strict=True))),
        "n_actions": str(search.n_outputs),
        "n_states": str(search.n_states),
        "state_layout": (search.discretisation.layout(search.observation_names)
                         if search.discretisation is not None else ""),
        "observation_names": ", ".join(search.observation_names),
        "parameter_shape": (f"{search.n_outputs} x {search.obs_dim + 1}"
                            if cfg.family == "linear" else ""),
        "policy_description": description,
        "output_format": output_format,
        "evaluation_episodes": str(cfg.evaluation_episodes),
        "rounds": str(cfg.rounds),
        "round": str(search.round),
        "best_policy": json.dumps({key: shown(search.best)}) if search.best else "none",
        "best_return": fmt(search.best_return),
        "last_proposal": json.dumps({key: shown(last)}) if last else "none",
        "last_return": fmt(search.last_return) if last else "none",
        "last_outcome": last_outcome,
        "score_history": history or "none yet",
        "trajectories": trajectories_text(search),
        "max_trajectory_length": str(cfg.max_trajectory_length),
        "error": "",
        "reply": "",
    }


def _box_text(search: Any, key: str) -> tuple[str, str]:
    """(output format, policy description) of a linear policy on a Box action space."""
    cols, rows = search.obs_dim + 1, search.n_outputs
    output_format = (f'{{"{key}": [{rows} rows, one per action dimension, each a list of '
                     f"{cols} numbers]}}")
    best = search.best if isinstance(search.best, LinearBoxPolicy) else search.candidate
    names = search.observation_names
    if search.obs_stats is not None:
        inputs = ("s_i = (x_i - mean_i) / std_i, the observation normalised by the mean and "
                  "std of the observations seen so far: " + "; ".join(
                      f"{n}: mean {fmt(m)}, std {fmt(d)}"
                      for n, m, d in zip(names, best.mean, best.std, strict=True)))
    else:
        inputs = "s_i = the observation's dimension i"
    terms = " + ".join(f"w[{i}]*s_{i}" for i in range(len(names)))
    description = (
        f"The policy is linear: action dimension j has a row w of {cols} numbers and the value "
        f"{terms} + w[{cols - 1}], clipped to that dimension's range. Observation dimensions: "
        f"{', '.join(f's_{i} = {n}' for i, n in enumerate(names))}; {inputs}. The weights are "
        f"a {rows} x {cols} matrix (row j = action dimension j).")
    return output_format, description


def trajectories_text(search: Any) -> str:
    """The trajectories the prompt shows, one line each."""
    state = "state" if search.config.family == "tabular" else "observation"
    head = (f"Each step is ({state}, action, reward); the last "
            f"{search.config.max_trajectory_length} steps of each episode are shown.")
    if search.config.replay_buffer:
        parts = [head, "Best episodes so far:"]
        parts += [_trajectory_line(t) for t in search.best_trajectories]
        worst = [t for t in search.worst_trajectories
                 if not any(t is b for b in search.best_trajectories)]
        if worst:
            parts.append("Worst episodes so far:")
            parts += [_trajectory_line(t) for t in worst]
    elif search.latest_trajectory is not None:
        parts = [head, "Latest episode:", _trajectory_line(search.latest_trajectory)]
    else:
        parts = []
    return "\n".join(parts)


def _trajectory_line(t: Trajectory) -> str:
    steps = " ".join(
        f"({json.dumps(s, separators=(',', ':'))},{a},{fmt(r)})" for s, a, r in t.steps)
    return f"- return {fmt(t.return_)} in {t.length} steps (round {t.round}): {steps}"


def shown(policy: Policy) -> Any:
    """A policy as the prompt shows it: weights to 3 decimals (shown 16-digit weights, SmolLM2
    copies them and its reply runs past max_tokens)."""
    if isinstance(policy, (LinearPolicy, LinearBoxPolicy)):
        return np.round(policy.weights, 3).tolist()
    return policy.to_json()


def fmt(value: float | None) -> str:
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return "none"
    return f"{value:.4g}"
