"""Every ```yaml block of README.md and docs/*.md that is an experiment file, or a part of
one (a mapping of the experiment's top-level keys: ``agents:``, ``executor:``, ...), is
validated against the schema, a part on top of a small maze experiment (an
``environment:`` part without an ``id`` on top of its environment block). No server or model
is contacted: validation checks settings, not connections. Files a block names are checked
when it is read: the GGUF file the export section names is the packaged model under that
name; a block that needs what a run writes says so on its first line (``# needs: ...``)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
import yaml

from langadapt.experiments.config import experiment_from_dict
from langadapt.experiments.schema import ConfigError, ExperimentConfig

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCK = re.compile(r"^```ya?ml\n(.*?)^```", re.S | re.M)
BASE = {
    "name": "docs",
    "environment": {"id": "langadapt/Maze-v0", "params": {"maze": "umaze"}},
    "adapters": [{"type": "raw"}],
    "agents": [{"type": "qlearning"}],
    "training": {"episodes": 1},
}


def _experiment_blocks() -> list[tuple[str, dict]]:
    """(``page:line``, mapping) of each YAML block whose keys are all experiment keys."""
    found = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in BLOCK.finditer(text):
            data = yaml.safe_load(match.group(1))
            if (isinstance(data, dict) and set(data) <= set(ExperimentConfig.model_fields)
                    and not match.group(1).startswith("# needs:")):
                line = text.count("\n", 0, match.start()) + 1
                found.append((f"{page.relative_to(ROOT)}:{line}", data))
    return found


BLOCKS = _experiment_blocks()


@pytest.fixture(scope="module", autouse=True)
def _readme_thermostat_module(tmp_path_factory):
    """The README's own-environment example, saved as the module ``thermostat`` its
    experiment file names (``thermostat:Thermostat-v0``): the README's code runs as written."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("## Bring your own environment"):]
    code = section[section.index("```python\n") + len("```python\n"):section.index("```\n\n")]
    folder = tmp_path_factory.mktemp("readme")
    (folder / "thermostat.py").write_text(code, encoding="utf-8")
    sys.path.insert(0, str(folder))
    yield
    sys.path.remove(str(folder))


def test_the_docs_have_experiment_blocks():
    pages = {where.split(":")[0] for where, _ in BLOCKS}
    needing_files = [m for page in PAGES for m in BLOCK.findall(page.read_text(encoding="utf-8"))
                     if m.startswith("# needs:")]
    assert len(needing_files) == 1  # docs/finetune.md's trained adapter; keep these rare
    assert {"README.md", "docs/llm.md", "docs/configuration.md", "docs/environments.md"} <= pages


@pytest.mark.parametrize(("where", "data"), BLOCKS, ids=[where for where, _ in BLOCKS])
def test_a_docs_yaml_block_validates(where, data, tmp_path, monkeypatch):
    from langadapt.llm import default_gguf_path

    monkeypatch.chdir(tmp_path)
    (tmp_path / "umaze-policy.gguf").symlink_to(default_gguf_path())  # docs/finetune.md's export
    merged = {**BASE, **data}
    if "id" not in data.get("environment", {"id": None}):  # a part of the environment block
        merged["environment"] = {**BASE["environment"], **data["environment"]}
    experiment_from_dict(merged, where)


def test_a_nested_backend_in_llm_adapter_settings_says_to_write_it_flat():
    nested = {"backend": "openai", "base_url": "http://127.0.0.1:8000/v1", "model": "m"}
    with pytest.raises(ConfigError, match=r"adapters.0.settings.backend: an llm adapter takes "
                                          "the backend's keys flat"):
        experiment_from_dict({**BASE, "adapters": [{"type": "llm",
                                                    "settings": {"backend": nested}}]})
