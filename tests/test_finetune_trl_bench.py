"""The TRL GRPO benchmark (`langadapt bench finetune-trl`): one step of each side on a tiny
random-weight Llama built here (no download), the environment reward TRL is given checked
by hand on umaze, the one-line error without trl, and the CLI's opt-in wiring."""

from __future__ import annotations

import importlib.util
import math

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")
pytest.importorskip("trl")

import torch  # noqa: E402
from finetune_fixtures import umaze_tokenizer  # noqa: E402

from langadapt.benchmarks import finetune_trl_bench as bench  # noqa: E402
from langadapt.environments import language_for  # noqa: E402
from langadapt.environments.maze import MazeEnv  # noqa: E402
from langadapt.experiments.cli import main  # noqa: E402
from langadapt.finetune import LoRAPolicy, MazeTask  # noqa: E402


def _tokenizer():
    return umaze_tokenizer({"{", "}", '"', "action", ":", '{"', '":'})


@pytest.fixture(scope="module")
def tiny_model():
    """A factory of fresh, identical 2-layer random Llamas (each side needs its own copy:
    LoRA is put on the model in place)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = _tokenizer()

    def build():
        torch.manual_seed(0)
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64,
            num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=512, eos_token_id=tokenizer.eos_token_id,
            bos_token_id=tokenizer.bos_token_id, pad_token_id=tokenizer.pad_token_id,
            tie_word_embeddings=False)
        model = LlamaForCausalLM(config)
        model.eval()
        return model, tokenizer

    return build


def test_one_step_of_each_side_gives_a_finite_row(tiny_model, capsys):
    figures = bench.run(steps=1, model=tiny_model, verbose=True)
    assert figures["rss_isolated"] is False
    for side in bench.SIDES:
        for field in bench.ROW_FIELDS:
            if field == "side":
                continue
            value = figures[f"{side}_{field}"]
            assert isinstance(value, (int, float)) and math.isfinite(value), (side, field, value)
        assert figures[f"{side}_steps"] == 1
        assert figures[f"{side}_seconds_per_step_wall"] > 0
        assert figures[f"{side}_peak_rss_mb"] > 0
        assert 0.0 <= figures[f"{side}_state_accuracy"] <= 1.0
    assert figures["langadapt_illegal_fraction"] == 0.0  # scored samples are always legal
    assert 0.0 <= figures["trl_illegal_fraction"] <= 1.0
    for ratio in ("steps_per_second_ratio", "cpu_steps_per_second_ratio"):
        assert math.isfinite(figures[ratio]) and figures[ratio] > 0
    shown = capsys.readouterr().out
    assert "seconds / step (wall)" in shown and "peak RSS (MB)" in shown


def test_the_reward_trl_gets_is_the_environment_return(tiny_model):
    env = MazeEnv(maze="umaze")
    task = MazeTask(env)
    policy = LoRAPolicy(language_for(env), model=tiny_model(), lora={"r": 4}, progress=False)
    settings = bench.bench_settings(1)
    reward = bench.EnvironmentReward(policy, task, settings)
    worst = -0.001 * (1 - 0.99 ** 20) / (1 - 0.99)  # 20 steps, never the goal
    assert reward.worst == pytest.approx(worst, rel=1e-12)
    # (2, 3) is just above the goal (3, 3): 3 = down steps into it, 1.0 exactly; the first
    # "action": N of a reply counts (SmolLM2 writes '{\n  "action": "1",\n  "legalActions')
    texts = ['{"action": 3}', '{\n  "action": "3",\n  "legalActions', '{"action": 3} ok']
    assert reward.rewards([(2, 3)] * 3, texts) == [1.0, 1.0, 1.0]
    # no action, or an illegal one (left of (2, 3) is a wall; 9 is no action of the maze)
    texts = ["down", "Action: 3", '{"act": 3}', '{"action": 0}', '{"action": 9}', ""]
    assert reward.rewards([(2, 3)] * len(texts), texts) == [reward.worst] * len(texts)
    assert (reward.samples, reward.illegal, reward.exact) == (9, 6, 1)
    # a legal first move, then the policy: with a one-hot policy that always takes a shortest
    # move the rollout is (1,1) -right-> (1,2) -down-right-> (2,3) -down-> goal
    cache = {}
    for cell in task.cells:
        best = min(task.optimal_actions(cell))
        cache[task.key(cell)] = np.array([float(a == best) for a in task.legal(cell)])
    expected = -0.001 + 0.99 * -0.001 + 0.99 ** 2 * 1.0
    assert reward.rewards([(1, 1)], ['{"action": 1}'], cache) == [
        pytest.approx(expected, abs=1e-12)]
    # TRL's calling convention: chat completions and the dataset's cell column
    values = reward(prompts=[[], []], completions=[
        [{"role": "assistant", "content": '{"action": 3}'}],
        [{"role": "assistant", "content": "nonsense"}]], cell=[[2, 3], [2, 3]],
        trainer_state=None)
    assert values == [1.0, reward.worst]


def test_without_trl_the_benchmark_names_the_extra(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "trl" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install 'langadapt\[trl\]'"):
        bench.run(steps=1)
    assert main(["bench", "finetune-trl", "--steps", "1"]) == 2


def test_the_cli_runs_it_only_when_named(capsys):
    assert main(["bench", "--steps", "2"]) == 2
    assert "--steps apply only to an opt-in benchmark (finetune-trl)" in capsys.readouterr().err
    assert main(["bench", "finetune-trl", "--maze", "nowhere"]) == 2
    assert "unknown maze 'nowhere'" in capsys.readouterr().err
    assert main(["bench", "finetune-trl", "--steps", "0"]) == 2
    assert main(["bench", "finetune-trl", "--only", "llm"]) == 2
