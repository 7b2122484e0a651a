"""Reading an experiment file's YAML safely: bounded in size once aliases are expanded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .config_errors import ConfigError

MAX_YAML_VALUES = 100_000
"""Most values (scalars, lists, mappings) an experiment file may hold with its YAML aliases
expanded: nine levels of nine aliases are 637 bytes but 387 million values."""


def load_yaml(text: str, source: Path | str = "<config>") -> Any:
    """``yaml.safe_load(text)``, refusing (ConfigError naming ``source``) a document of more
    than :data:`MAX_YAML_VALUES` values once its aliases are expanded, a recursive alias and
    nesting too deep to read: an alias is cheap to write but every later step (validation,
    the fingerprint, ``config.yaml``) walks the expanded tree."""
    too_many = ConfigError(
        f"{source}: the YAML holds more than {MAX_YAML_VALUES:,} values once its aliases "
        f"(*name) are expanded; expected at most {MAX_YAML_VALUES:,}: write the values out, "
        "or use fewer aliases")
    loader = _CountingLoader(text, too_many)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_size(node, {}, set(), source) > MAX_YAML_VALUES:
            raise too_many
        return loader.construct_document(node)
    except RecursionError:
        raise ConfigError(f"{source}: the YAML is nested too deeply to read; expected an "
                          "experiment file of ordinary depth") from None
    finally:
        loader.dispose()


class _CountingLoader(yaml.SafeLoader):
    """A safe loader that stops composing past :data:`MAX_YAML_VALUES` nodes (so memory is
    bounded before aliases are counted)."""

    def __init__(self, text: str, too_many: ConfigError) -> None:
        super().__init__(text)
        self.composed, self.too_many = 0, too_many

    def compose_node(self, parent: Any, index: Any) -> Any:
        self.composed += 1
        if self.composed > MAX_YAML_VALUES:
            raise self.too_many
        return super().compose_node(parent, index)


def _expanded_size(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int],
                   source: Path | str) -> int:
    """Values under ``node`` with aliases expanded (a shared node counted at every use),
    stopping past :data:`MAX_YAML_VALUES`."""
    if id(node) in sizes:
        return sizes[id(node)]
    if id(node) in open_nodes:
        raise ConfigError(f"{source}: a recursive YAML alias (line {node.start_mark.line + 1}); "
                          "expected a file without cycles")
    open_nodes.add(id(node))
    size = 1
    if isinstance(node, yaml.SequenceNode):
        children = node.value
    elif isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    else:
        children = []
    for child in children:
        size += _expanded_size(child, sizes, open_nodes, source)
        if size > MAX_YAML_VALUES:
            break
    open_nodes.discard(id(node))
    sizes[id(node)] = size
    return size
