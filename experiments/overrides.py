"""Changes to an experiment file from the command line, applied to its data before it is
validated like the file itself (docs/configuration.md, "Overrides"):

- ``--set KEY=VALUE``: ``KEY`` a dotted path (``training.steps``, ``evaluation.every``; into
  a list by position or by the item's name: ``agents.dqn.params.learning_rate``),
  ``VALUE`` read as YAML (``3000``, ``0.5``, ``null``, ``[0, 1]``, ``{a: 1}``);
- ``--tasks A,B``: only these tasks of a suite, in this order;
- ``--backend/--model/--base-url``: the LLM every LLM agent (``llm_policy``,
  ``llm_policy_search``) and advisor of the file asks, replacing their backend spec. An API
  key is never a setting: the openai backend reads it from the environment variable its
  ``api_key_env`` names (``OPENAI_API_KEY``).
"""

from __future__ import annotations

import json
from typing import Any

from .cli_common import UsageError

LLM_AGENT_KEYS = {"llm_policy": "backend", "llm_policy_search": "llm"}
"""The agent parameter holding the backend spec, per LLM agent type."""


def apply_set(data: dict[str, Any], assignment: str) -> None:
    """Apply one ``KEY=VALUE`` to ``data`` (the experiment's mapping) in place."""
    import yaml  # lazy: the command line starts fast
    key, equals, text = assignment.partition("=")
    parts = key.strip().split(".")
    if not equals or not all(parts):
        raise UsageError(f"--set {assignment!r}: expected KEY=VALUE with a dotted KEY, e.g. "
                         "--set training.steps=3000")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as error:
        raise UsageError(f"--set {key}: {text!r} is not a YAML value "
                         f"({' '.join(str(error).split())})") from None
    current: Any = data
    for depth, part in enumerate(parts):
        where = ".".join(parts[:depth]) or "the file"
        last = depth == len(parts) - 1
        if isinstance(current, list):
            index = _item(current, part, key, where)
            if last:
                current[index] = value
            current = current[index]
        elif isinstance(current, dict):
            if last:
                current[part] = value  # an unknown key is named by the validation
            elif current.get(part) is None:
                current[part] = {}
            current = current[part]
        else:
            raise UsageError(f"--set {key}: {where} is {json.dumps(current)}, not a mapping or a "
                             f"list, so it has no key {part!r}")


def _item(items: list[Any], part: str, key: str, where: str) -> int:
    """The position in ``items`` that ``part`` names: a number, or an item's label/type."""
    from .env_ids import suggest  # lazy: it imports gymnasium
    if part.isdigit() and int(part) < len(items):
        return int(part)
    names = [_name(item) for item in items]
    if part in names:
        return names.index(part)
    known = [n for n in names if n]
    raise UsageError(f"--set {key}: {where} has no item {part!r}{suggest(part, known)}; "
                     f"give a position 0..{len(items) - 1} or a name: {', '.join(known)}")


def _name(item: Any) -> str:
    if not isinstance(item, dict):
        return ""
    return str(item.get("label") or item.get("type") or "")


def select_tasks(data: dict[str, Any], text: str, source: str) -> None:
    """Keep only the tasks ``text`` names (comma-separated), in that order."""
    tasks = data.get("tasks") or {}
    if not tasks:
        raise UsageError(f"--tasks: {source} is not a suite (it has no tasks block)")
    wanted = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in wanted if name not in tasks]
    if unknown or not wanted:
        raise UsageError(f"--tasks {text}: {source} has no task "
                         f"{', '.join(map(repr, unknown)) or 'named'}; its tasks: "
                         f"{', '.join(tasks)}")
    data["tasks"] = {name: tasks[name] for name in dict.fromkeys(wanted)}


def set_backend(data: dict[str, Any], spec: dict[str, Any], source: str) -> int:
    """Replace the backend spec of every LLM agent and advisor by ``spec``; returns how
    many were replaced (a UsageError when the file has none)."""
    changed = 0
    for agent in data.get("agents") or []:
        key = LLM_AGENT_KEYS.get(agent.get("type"))
        if key is not None:
            agent.setdefault("params", {})[key] = dict(spec)
            changed += 1
        if isinstance(agent.get("advisor"), dict):
            agent["advisor"]["backend"] = dict(spec)
            changed += 1
    if not changed:
        raise UsageError(f"--backend: {source} has no LLM agent ({', '.join(LLM_AGENT_KEYS)}) "
                         "and no advisor whose backend it could set; set an llm adapter's or "
                         "reward shaping's backend with --set")
    return changed


def add_override_options(command: Any) -> None:
    """``--set``, ``--tasks`` and the backend options of ``langadapt run``."""
    command.add_argument("--set", dest="assignments", action="append", default=[],
                         metavar="KEY=VALUE", help="change one key of the file, validated like "
                         "the file (e.g. --set training.steps=3000 --set seeds=1; into a list "
                         "by name: --set agents.dqn.params.gamma=0.9); repeatable")
    command.add_argument("--tasks", metavar="A,B", help="a suite: only these tasks")
    command.add_argument("--backend", help="the LLM of every LLM agent and advisor of the file: "
                         "a backend name (openai, ollama, llamacpp, ...)")
    command.add_argument("--model", help="with --backend: the model name")
    command.add_argument("--base-url", help="with --backend openai: the server's API root, "
                         "e.g. http://127.0.0.1:8000/v1 (the key: $OPENAI_API_KEY)")


def apply_overrides(data: dict[str, Any], args: Any, source: str) -> list[str]:
    """Apply the override options of ``args`` to ``data``; returns them as written, for the
    error messages' source (empty when there are none)."""
    written = [f"--set {a}" for a in args.assignments]
    for assignment in args.assignments:
        apply_set(data, assignment)
    own = [_name(a) for a in data.get("agents") or [] if isinstance(a, dict) and a.get("training")]
    if own and any(a.startswith("training.") or a.startswith("training=")
                   for a in args.assignments):
        print(f"note: {', '.join(own)} keep their own training block; change it with --set "
              f"agents.{own[0]}.training.steps=...")
    if args.tasks is not None:
        select_tasks(data, args.tasks, source)
        written.append(f"--tasks {args.tasks}")
    if args.backend is None and (args.model is not None or args.base_url is not None):
        raise UsageError("--model and --base-url go with --backend (e.g. --backend openai "
                         "--model gpt-4o-mini --base-url https://api.openai.com/v1)")
    if args.backend is not None:
        spec = {"backend": args.backend, "model": args.model, "base_url": args.base_url}
        set_backend(data, {k: v for k, v in spec.items() if v is not None}, source)
        written.append(f"--backend {args.backend}")
    return written
