"""GRPO fine-tuning: advantages, skipped groups, LoRA-only updates, adapter round trip, the
maze reward, the transformers backend, resume and bad input — on a tiny random-weight Llama
built here with a word-level tokenizer (no download, no GGUF)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("transformers")
pytest.importorskip("peft")

import torch  # noqa: E402
from finetune_fixtures import umaze_tokenizer  # noqa: E402
from pydantic import ValidationError  # noqa: E402

from langadapt.environments import language_for  # noqa: E402
from langadapt.environments.maze import MazeEnv  # noqa: E402
from langadapt.finetune import (  # noqa: E402
    GRPOSettings,
    GRPOTrainer,
    LoRAPolicy,
    LoRASettings,
    MazeTask,
    group_advantages,
)
from langadapt.llm import LLMUnavailableError, StructuredOutputError, make_backend  # noqa: E402
from langadapt.llm.transformers_backend import (  # noqa: E402
    TransformersBackend,
    continuation_log_probs,
    load_causal_lm,
    require_finetune,
)
from langadapt.roles import LLMPolicyConfig, decision_messages  # noqa: E402


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A 2-layer Llama with random weights and a word-level tokenizer over the umaze prompts."""
    from transformers import LlamaConfig, LlamaForCausalLM

    tokenizer = umaze_tokenizer({"Action", ":", "{", "}", '"', "action"})
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    model = LlamaForCausalLM(config)
    folder = tmp_path_factory.mktemp("tiny_llama")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def umaze() -> MazeEnv:
    return MazeEnv(maze="umaze")


def _policy(tiny_model_dir: Path, env: MazeEnv, **kw) -> LoRAPolicy:
    return LoRAPolicy(language_for(env), model=tiny_model_dir, lora={"r": 4}, **kw)


def _greedy_probs(policy: LoRAPolicy, task: MazeTask) -> list[np.ndarray]:
    return policy.distributions([task.observe(c) for c in task.cells])


# ------------------------------------------------------------------ advantages
def test_group_advantages_on_a_hand_made_batch():
    rewards = [[1.0, 0.0, 0.0, 1.0], [2.0, 2.0, 2.0, 2.0], [0.0, 1.0, 2.0, 3.0]]
    adv, active = group_advantages(rewards, eps=0.0)
    assert active.tolist() == [True, False, True]
    np.testing.assert_allclose(adv[0], [1.0, -1.0, -1.0, 1.0])
    np.testing.assert_allclose(adv[1], 0.0)
    std = np.std([0.0, 1.0, 2.0, 3.0])
    np.testing.assert_allclose(adv[2], (np.array([0.0, 1.0, 2.0, 3.0]) - 1.5) / std)


def test_the_probability_floor_drops_only_terms_past_it():
    from langadapt.finetune.grpo import floored_advantages

    adv = torch.tensor([-1.0, -1.0, 1.0, 1.0, 0.5])
    probs = torch.tensor([0.01, 0.30, 0.99, 0.50, 0.97])
    assert floored_advantages(adv, probs, 0.02).tolist() == [0.0, -1.0, 0.0, 1.0, 0.5]
    assert floored_advantages(adv, probs, 0.0).tolist() == adv.tolist()


def test_nan_reward_is_an_error_naming_it():
    with pytest.raises(ValueError, match=r"reward nan in group 1 \(sample 2\)"):
        group_advantages([[0.0, 1.0, 2.0], [1.0, 0.0, float("nan")]])


def test_group_size_below_two_is_rejected():
    with pytest.raises(ValidationError, match=r"group_size\n.*greater than or equal to 2 "
                                              r".*input_value=1,"):
        GRPOSettings(group_size=1)


def test_an_empty_lora_target_module_name_is_rejected():
    with pytest.raises(ValidationError, match=r"target_modules\.1\n.*at least 1 character "
                                              r".*input_value=''"):
        LoRASettings(target_modules=["q_proj", ""])


# ------------------------------------------------------------------ the reward
def test_reward_steps_a_real_maze_with_oracle_shaping(umaze):
    task = MazeTask(umaze)
    assert task.to_goal[(3, 1)] == 4 and task.to_goal[(2, 1)] == 3  # up, up-right, down-right, down
    reward, nxt, done, _ = task.step((3, 1), 2, shaping=0.99)  # up
    assert (nxt, done) == ((2, 1), False)
    assert reward == pytest.approx(umaze.step_reward + 0.99 * -3 - (-4))
    reward, nxt, done, _ = task.step((2, 3), 3, shaping=0.99)  # down, onto the goal
    assert (nxt, done) == ((3, 3), True)
    assert reward == pytest.approx(umaze.goal_reward + 0.0 - (-1))
    assert task.optimal_actions((1, 2)) == {7}  # down-right
    assert task.step((3, 1), 2)[0] == pytest.approx(umaze.step_reward)


def test_a_nan_potential_fails_at_the_step(umaze):
    task = MazeTask(umaze, potential=lambda cell: float("nan"))
    with pytest.raises(ValueError, match="expected finite numbers"):
        task.step((3, 1), 2, shaping=0.99)


def test_the_default_reward_is_the_environments_return_without_an_oracle():
    settings = GRPOSettings()
    assert (settings.reward, settings.shaping, settings.group_actions) == (
        "return", "none", "cover")


# ------------------------------------------------------------------ the policy
def test_every_sampled_action_is_legal_and_distributions_sum_to_one(tiny_model_dir, umaze):
    policy = _policy(tiny_model_dir, umaze)
    task = MazeTask(umaze)
    for cell, probs in zip(task.cells, _greedy_probs(policy, task), strict=True):
        assert probs.shape == (len(task.legal(cell)),)
        assert probs.sum() == pytest.approx(1.0)
    trainer = GRPOTrainer(policy, task, {"steps": 1, "group_size": 3, "horizon": 4})
    for cell, probs in zip(task.cells, _greedy_probs(policy, task), strict=True):
        legal = task.legal(cell)
        for action in trainer.first_actions(legal, probs):
            assert action in legal
        for _ in range(20):
            assert trainer._draw(legal, probs) in legal  # noqa: SLF001
    row = trainer.step()
    assert row["samples"] == 3 * len(task.cells)


def test_cover_puts_every_legal_action_in_a_group_even_when_the_policy_is_sure(
        tiny_model_dir, umaze):
    trainer = GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), {"group_size": 4})
    sure = np.array([1.0, 0.0, 0.0])
    for _ in range(10):
        group = trainer.first_actions((0, 2, 5), sure)
        assert sorted(group[:3]) == [0, 2, 5] and group[3] == 0
    sampled = GRPOTrainer(trainer.policy, trainer.task, {"group_actions": "sampled"})
    assert sampled.first_actions((0, 2, 5), sure) == [0, 0, 0, 0]


def test_shared_prefix_scores_equal_whole_prompt_scores(tiny_model_dir, umaze):
    policy = _policy(tiny_model_dir, umaze)
    task = MazeTask(umaze)
    states = [task.observe(c) for c in task.cells]
    whole = policy.distributions(states)
    shared = policy.distributions(states, shared_prefix=True)
    for a, b in zip(whole, shared, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)


def test_continuations_of_several_tokens_reuse_the_prompt_cache(tiny_model_dir):
    lm, _, _ = load_causal_lm(tiny_model_dir)
    prompt, continuations = [5, 9, 11, 3], [[7], [8, 12, 4], [20, 6]]
    with torch.no_grad():
        scores = continuation_log_probs(lm, prompt, continuations)
        for k, cont in enumerate(continuations):
            logits = lm(torch.tensor([prompt + cont])).logits[0].log_softmax(-1)
            want = sum(float(logits[len(prompt) - 1 + j, t]) for j, t in enumerate(cont))
            assert float(scores[k]) == pytest.approx(want, abs=1e-4)


def test_two_grpo_steps_change_only_the_lora_weights(tiny_model_dir, umaze):
    policy = _policy(tiny_model_dir, umaze)
    before = {n: p.detach().clone() for n, p in policy.lm.named_parameters()}
    trainer = GRPOTrainer(policy, MazeTask(umaze), {"steps": 2, "learning_rate": 1e-2})
    trainer.train(progress=False)
    assert len(trainer.history) == 2 and sum(r["groups_skipped"] < r["states"]
                                             for r in trainer.history) == 2
    changed = {n for n, p in policy.lm.named_parameters() if not torch.equal(p, before[n])}
    assert changed and all("lora_" in n for n in changed)
    assert any("lora_B" in n for n in changed)
    frozen = [n for n, p in policy.lm.named_parameters() if not p.requires_grad]
    assert frozen and not changed & set(frozen)


def test_zero_spread_groups_are_skipped_and_counted(tiny_model_dir):
    env = MazeEnv(maze="umaze", goal_reward=0.0, step_reward=0.0)  # every reward is 0
    policy = _policy(tiny_model_dir, env)
    before = policy.adapter_state()
    trainer = GRPOTrainer(policy, MazeTask(env), {"steps": 1, "horizon": 3})
    row = trainer.step()
    assert row["groups_skipped"] == row["states"] == 6 and row["zero_spread_fraction"] == 1.0
    assert np.isnan(row["loss"])
    after = policy.adapter_state()
    assert all(torch.equal(before[k], after[k]) for k in before)


def test_single_move_cells_are_zero_spread_groups(tiny_model_dir, umaze):
    task = MazeTask(umaze)
    single = sum(len(task.legal(c)) == 1 for c in task.cells)
    assert single >= 1
    trainer = GRPOTrainer(_policy(tiny_model_dir, umaze), task, {"steps": 1})
    assert trainer.step()["groups_skipped"] >= single


def test_return_credits_the_rest_of_an_episode(tiny_model_dir, umaze):
    task = MazeTask(umaze)
    trainer = GRPOTrainer(_policy(tiny_model_dir, umaze), task, {"gamma": 0.9, "horizon": 5})
    # from the cell next to the goal, moving onto it ends the episode at once; otherwise the
    # policy's own moves follow: the goal reached after t moves, or 5 moves of step_reward
    # (a rollout that loops ends with the step limit's reward)
    values, counts = trainer.returns([(2, 3)] + [(3, 1)] * 20, [3] + [2] * 20)
    assert values[0] == pytest.approx(umaze.goal_reward)
    step, goal, gamma = umaze.step_reward, umaze.goal_reward, 0.9
    possible = [sum(step * gamma**k for k in range(t)) + goal * gamma**t for t in range(1, 5)]
    possible.append(sum(step * gamma**k for k in range(5)))
    for value in values[1:]:
        assert min(abs(value - p) for p in possible) < 1e-9
    assert counts["success"] == 1 + sum(v > 0 for v in values[1:])
    one_step = GRPOTrainer(trainer.policy, task, {"reward": "step"})
    assert one_step.returns([(3, 1)], [2])[0][0] == pytest.approx(umaze.step_reward)


def test_reward_only_grpo_solves_a_corridor_in_seconds(tiny_model_dir, monkeypatch):
    """Environment reward only (no oracle): a 3-cell corridor, start at one end, goal at the
    other, one decision in the middle; the tiny model's untrained greedy policy walks away
    from the goal there, GRPO on the return turns it around."""
    from langadapt.environments import maze as maze_module

    monkeypatch.setitem(maze_module.MAZE_LAYOUTS, "corridor", maze_module._layout(  # noqa: SLF001
        "corridor", "11111 / 10001 / 11111", (1, 1), (1, 3)))
    monkeypatch.setitem(maze_module.MAZE_LAYOUTS, "corridor_mirrored", maze_module._layout(  # noqa: SLF001
        "corridor_mirrored", "11111 / 10001 / 11111", (1, 3), (1, 1)))
    for name in ("corridor", "corridor_mirrored"):
        env = MazeEnv(maze=name, max_steps=10)
        policy = _policy(tiny_model_dir, env)
        trainer = GRPOTrainer(policy, MazeTask(env), {"steps": 15, "learning_rate": 5e-2,
                                                      "group_size": 2, "stop_after_tied": None})
        if trainer.evaluate()["greedy_shortest"] == 0.0:
            break
    else:
        pytest.fail("the untrained tiny model walks to the goal in both corridors")
    trainer.train(progress=False)
    assert trainer.final["greedy_shortest"] == 1.0 and trainer.final["state_accuracy"] == 1.0
    # it stopped with the policy it judged solved three steps in a row, before an update
    assert len(trainer.history) < 15
    assert [r["greedy_shortest"] for r in trainer.history[-2:]] == [1.0, 1.0]


# ------------------------------------------------------------------ saving, resuming
def test_a_compact_policy_is_scored_on_llm_policys_compact_prompt(tiny_model_dir, umaze,
                                                                 tmp_path):
    task = MazeTask(umaze)
    state, legal = task.observe(task.cells[0])
    compact = _policy(tiny_model_dir, umaze, prompt_style="compact")
    verbose = _policy(tiny_model_dir, umaze)
    assert compact.messages(state, legal) == decision_messages(
        language_for(umaze), state, legal, style="compact")
    assert verbose.messages(state, legal) == decision_messages(language_for(umaze), state, legal)
    assert len(compact.messages(state, legal)[1]["content"]) < len(
        verbose.messages(state, legal)[1]["content"])
    # the two prompts give the untrained model other distributions over the same moves
    assert not np.allclose(_greedy_probs(compact, task)[0], _greedy_probs(verbose, task)[0])
    compact.save_adapter(tmp_path / "adapter")
    info = json.loads((tmp_path / "adapter" / "policy.json").read_text())
    assert info["prompt_style"] == "compact"
    # llm_policy acts as trained only on the prompts the adapter was trained on
    backend = {"backend": "transformers", "model": str(tiny_model_dir),
               "adapter": str(tmp_path / "adapter")}
    assert LLMPolicyConfig(backend=backend, prompt_style="compact").prompt_style == "compact"
    with pytest.raises(ValidationError, match="trained on 'compact' prompts; expected "
                       "prompt_style: compact"):
        LLMPolicyConfig(backend=backend)
    with pytest.raises(ValueError, match="prompt_style is 'short'"):
        _policy(tiny_model_dir, umaze, prompt_style="short")
    with pytest.raises(ValidationError, match="prompt_style"):
        GRPOSettings(prompt_style="short")
    with pytest.raises(ValueError, match="prompts in the 'compact' style, settings.prompt_style "
                       "is 'verbose'"):
        GRPOTrainer(compact, task, {"steps": 1})


def test_a_saved_adapter_reloads_with_the_same_greedy_actions(tiny_model_dir, umaze, tmp_path):
    task = MazeTask(umaze)
    policy = _policy(tiny_model_dir, umaze)
    GRPOTrainer(policy, task, {"steps": 2, "learning_rate": 5e-2}).train(progress=False)
    trained = _greedy_probs(policy, task)
    policy.save_adapter(tmp_path / "adapter")
    info = json.loads((tmp_path / "adapter" / "policy.json").read_text())
    assert info["decoding"] == "structured"

    again = LoRAPolicy(language_for(umaze), model=tiny_model_dir, adapter=tmp_path / "adapter")
    fresh = _policy(tiny_model_dir, umaze)
    reloaded, untrained = _greedy_probs(again, task), _greedy_probs(fresh, task)
    for a, b in zip(trained, reloaded, strict=True):
        np.testing.assert_allclose(a, b, atol=1e-5)
    assert [again.greedy(*task.observe(c)) for c in task.cells] == [
        task.legal(c)[int(np.argmax(p))] for c, p in zip(task.cells, trained, strict=True)]
    assert any(not np.allclose(a, b, atol=1e-4) for a, b in zip(trained, untrained,
                                                                strict=True))


def test_resuming_gives_the_log_of_an_uninterrupted_run(tiny_model_dir, umaze, tmp_path):
    settings = {"steps": 3, "checkpoint_every": 1, "horizon": 6, "learning_rate": 1e-2}
    whole = GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), settings,
                        out=tmp_path / "whole", seed=5)
    whole.train(progress=False)
    first = GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), settings,
                        out=tmp_path / "cut", seed=5)
    first.step()
    first.checkpoint()
    first.step()  # interrupted after this step, before its checkpoint: it is run again
    resumed = GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), settings,
                          out=tmp_path / "cut", seed=5)
    assert resumed.step_index == 1
    resumed.train(progress=False)
    timing = {"step_seconds", "train_seconds", "train_cpu_seconds", "wall_seconds",
              "cpu_seconds", "rss_mb", "peak_rss_mb"}
    a = [{k: v for k, v in r.items() if k not in timing} for r in whole.history]
    b = [{k: v for k, v in r.items() if k not in timing} for r in resumed.history]
    assert [r["step"] for r in b] == [0, 1, 2]
    for x, y in zip(a, b, strict=True):
        assert x.keys() == y.keys()
        for k in x:
            assert x[k] == pytest.approx(y[k], rel=1e-5, nan_ok=True), k


def test_training_resumes_from_its_checkpoint(tiny_model_dir, umaze, tmp_path):
    settings = {"steps": 2, "checkpoint_every": 1}
    first = GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), settings,
                        out=tmp_path, seed=3)
    first.step()
    first.checkpoint()
    weights = first.policy.adapter_state()
    resumed = GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), settings,
                          out=tmp_path, seed=3)
    assert resumed.step_index == 1 and len(resumed.history) == 1
    state = resumed.policy.adapter_state()
    assert all(torch.equal(weights[k], state[k]) for k in weights)
    resumed.train(progress=False)
    lines = (tmp_path / "log.csv").read_text().splitlines()
    assert [line.split(",")[0] for line in lines[1:]] == ["0", "1"]
    with pytest.raises(ValueError, match="other settings"):
        GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze),
                    {**settings, "group_size": 3}, out=tmp_path)
    # a checkpoint of a release without prompt_style was made with its default, verbose
    path = tmp_path / "checkpoint" / "trainer.pt"
    state = torch.load(path, weights_only=True)
    del state["settings"]["prompt_style"]
    torch.save(state, path)
    assert GRPOTrainer(_policy(tiny_model_dir, umaze), MazeTask(umaze), settings,
                       out=tmp_path).step_index == 2
    with pytest.raises(ValueError, match=r"other settings \(\['prompt_style'\]\)"):
        GRPOTrainer(_policy(tiny_model_dir, umaze, prompt_style="compact"), MazeTask(umaze),
                    {**settings, "prompt_style": "compact"}, out=tmp_path)


# ------------------------------------------------------------------ the backend
def test_transformers_backend_answers_enum_schemas_by_scoring(tiny_model_dir, tmp_path):
    backend = make_backend({"backend": "transformers", "model": str(tiny_model_dir),
                            "cache_path": None})
    assert isinstance(backend, TransformersBackend)
    schema = {"type": "object", "properties": {"action": {"type": "integer", "enum": [1, 3]}},
              "required": ["action"], "additionalProperties": False}
    reply = backend.complete("You move.", "Pick.", schema=schema)
    assert json.loads(reply)["action"] in (1, 3)
    assert backend.complete("You move.", "Pick.", schema=schema) == reply
    assert backend.stats()["llm_calls"] == 1 and backend.stats()["llm_cache_hits"] == 1
    with pytest.raises(StructuredOutputError, match="finite set"):
        backend.complete("You move.", "Talk.", schema={"type": "string"})
    text = backend.complete("You move.", "Pick.", max_tokens=2)
    assert isinstance(text, str)


def test_llm_policy_with_the_trained_adapter_takes_the_trained_greedy_actions(
        tiny_model_dir, umaze, tmp_path):
    from langadapt.roles.llm_policy import LLMPolicy

    task = MazeTask(umaze)
    policy = _policy(tiny_model_dir, umaze)
    untrained = [policy.greedy(*task.observe(c)) for c in task.cells]
    GRPOTrainer(policy, task, {"steps": 2, "learning_rate": 5e-2}).train(progress=False)
    trained = [policy.greedy(*task.observe(c)) for c in task.cells]
    policy.save_adapter(tmp_path / "adapter")

    def agent(adapter: Path | None) -> LLMPolicy:
        backend = {"backend": "transformers", "model": str(tiny_model_dir),
                   "temperature": 0.0, "cache_path": None}
        if adapter is not None:
            backend["adapter"] = str(adapter)
        made = LLMPolicy(umaze.observation_space, umaze.action_space, {"backend": backend})
        made.bind(umaze)
        assert made.config.decoding == "structured"
        return made

    tuned, plain = agent(tmp_path / "adapter"), agent(None)
    for cell in task.cells:
        state, legal = task.observe(cell)
        assert tuned.messages(state, legal) == policy.messages(state, legal)
    assert [tuned.act(*task.observe(c), explore=False) for c in task.cells] == trained
    trainer = GRPOTrainer(policy, task)  # the trainer's evaluation: the same actions
    assert trainer.greedy_actions([task.observe(c) for c in task.cells]) == trained
    assert [plain.act(*task.observe(c), explore=False) for c in task.cells] == untrained
    assert tuned.stats()["llm_fallbacks"] == 0 and tuned.stats()["parse_failures"] == 0


# ------------------------------------------------------------------ bad input
def test_bad_model_paths_and_lora_targets(tiny_model_dir, umaze, tmp_path):
    spec = language_for(umaze)
    with pytest.raises(ValueError, match="does not exist; expected a Hugging Face model"):
        LoRAPolicy(spec, model=tmp_path / "nowhere")
    (tmp_path / "weights.bin").write_bytes(b"\0")
    with pytest.raises(ValueError, match="is not a .gguf file"):
        LoRAPolicy(spec, model=tmp_path / "weights.bin")
    from transformers import T5Config

    T5Config(d_model=8, num_layers=1, num_heads=1, d_kv=4, d_ff=8).save_pretrained(
        tmp_path / "t5")
    with pytest.raises(ValueError, match="is not a causal language model"):
        LoRAPolicy(spec, model=tmp_path / "t5")
    with pytest.raises(ValueError, match=r"target_modules \['c_attn'\] are not modules"):
        LoRAPolicy(spec, model=tiny_model_dir, lora=LoRASettings(target_modules=["c_attn"]))
    with pytest.raises(ValueError, match="no adapter_config.json"):
        TransformersBackend(model=tiny_model_dir, adapter=tmp_path)


def test_a_missing_extra_names_it():
    with pytest.raises(LLMUnavailableError, match=r"langadapt\[finetune\]"):
        require_finetune("transformers", "no_such_package_for_langadapt")


def _grpo_experiment(model_dir: Path, **params) -> dict:
    """A tiny experiment: GRPO (the tiny Llama) beside DQN on umaze's raw states."""
    grpo = {"model": str(model_dir), "lora": {"r": 2}, "steps": 2, "group_size": 2,
            "checkpoint_every": 1, **params}
    return {
        "name": "tiny", "environment": {"id": "langadapt/Maze-v0",
                                        "params": {"maze": "umaze", "max_steps": 10}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "grpo", "params": grpo},
                   {"type": "dqn", "params": {"learning_starts": 1, "hidden_sizes": [8]}}],
        "training": {"episodes": 4}, "seeds": [0], "cache_dir": "",
        "evaluation": {"every": 2, "episodes": 1, "final_episodes": 2},
    }


def _rows(path: Path) -> list[dict[str, str]]:
    import csv

    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_a_grpo_step_succeeds_only_when_its_greedy_policy_is_judged_to():
    from langadapt.finetune.agent import step_records

    nan = float("nan")
    history = [{"step": k, "reward_mean": 0.5, "env_steps": 10, "step_seconds": 1.0,
                "rollout_success": 1.0, "greedy_success": g}
               for k, g in enumerate([0.0, 0.0, 1.0])]
    # a maze: step k's policy is judged at the start of step k + 1, the last by the final one
    maze = step_records(history, {"greedy_success": 1.0}, judged=True)
    assert [r.success for r in maze] == [False, True, True]
    assert [r.episode for r in maze] == [1, 2, 3] and maze[-1].total_steps == 30
    assert [r.success for r in step_records(history, {"greedy_success": 0.0}, judged=True)
            ] == [False, True, False]
    # no step judged (MiniGrid, FrozenLake): rollouts that all succeeded claim nothing
    lake = [{**row, "greedy_success": nan} for row in history]
    assert not any(r.success for r in step_records(lake, {"greedy_success": 0.9},
                                                   judged=False))


def test_a_grpo_agent_stands_beside_dqn_in_one_experiment(tiny_model_dir, tmp_path, capfd):
    from langadapt.experiments.cli import main

    path, out = _write(tmp_path, _grpo_experiment(tiny_model_dir)), tmp_path / "results"
    capfd.readouterr()
    assert main(["finetune", str(path), "--out", str(out), "--no-progress"]) == 0  # run alias
    err = capfd.readouterr().err  # --no-progress: no bar at all, not even the model loading's
    assert "Loading weights" not in err and "%|" not in err and "it/s" not in err, err
    run = out / "runs" / "raw__grpo__seed0"
    for name in ("grpo/log.csv", "grpo/checkpoint/trainer.pt",
                 "grpo/adapter/adapter_config.json", "grpo/adapter/policy.json", "done.json"):
        assert (run / name).is_file(), name
    log = _rows(run / "grpo" / "log.csv")
    assert [r["step"] for r in log] == ["0", "1"]
    episodes = [r for r in _rows(out / "episodes.csv") if r["agent"] == "grpo"]
    assert [(r["phase"], r["episode"]) for r in episodes] == [
        ("train", "1"), ("train", "2"), ("final", "2"), ("final", "2")]
    assert [int(r["length"]) for r in episodes[:2]] == [int(r["env_steps"]) for r in log]
    assert float(episodes[0]["return"]) == pytest.approx(float(log[0]["reward_mean"]))
    summary = _rows(out / "summary.csv")
    assert {(r["adapter"], r["agent"]) for r in summary} == {("raw", "grpo"), ("raw", "dqn")}
    done = json.loads((run / "done.json").read_text())
    own = done["llm_roles"]["agent"]  # GRPO's own evaluation of the trained policy
    assert own["grpo_step"] == 2 and 0 <= own["grpo_state_accuracy"] <= 1
    policy = json.loads((run / "grpo" / "adapter" / "policy.json").read_text())
    assert policy["environment"] == {"id": "langadapt/Maze-v0",
                                     "params": {"maze": "umaze", "max_steps": 10}}


def test_a_grpo_run_without_a_folder_hands_back_its_rows_as_a_ray_worker_needs(
        tiny_model_dir):
    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.one_run import train_run
    from langadapt.experiments.results import find_run

    config = experiment_from_dict(_grpo_experiment(tiny_model_dir, steps=1))
    rows: list[dict] = []
    summary = train_run(config, find_run(config, "raw__grpo__seed0"), rows.append)  # no run_dir
    assert [r["phase"] for r in rows] == ["train", "final", "final"]
    assert summary["rows"] == 3 and summary["llm_roles"]["agent"]["grpo_step"] == 1


def test_an_unfinished_grpo_run_resumes_from_its_checkpoint(tiny_model_dir, tmp_path,
                                                            monkeypatch):
    from langadapt.experiments.cli import main

    config = _grpo_experiment(tiny_model_dir, steps=3)
    config["agents"] = config["agents"][:1]
    path, out = _write(tmp_path, config), tmp_path / "results"
    assert main(["run", str(path), "--out", str(out), "--no-progress"]) == 0
    run = out / "runs" / "raw__grpo__seed0"
    before = _rows(run / "grpo" / "log.csv")
    (run / "done.json").unlink()  # as if stopped after its last checkpoint
    steps = []
    original = GRPOTrainer.step
    monkeypatch.setattr(GRPOTrainer, "step", lambda self: steps.append(1) or original(self))
    assert main(["run", str(path), "--out", str(out), "--no-progress", "--resume"]) == 0
    assert steps == [] and _rows(run / "grpo" / "log.csv") == before  # nothing trained again
    assert (run / "done.json").is_file()
    assert [r["phase"] for r in _rows(run / "episodes.csv")] == ["train"] * 3 + ["final"] * 2


def test_no_loading_bars_turns_every_loading_bar_off_and_back(tiny_model_dir, umaze, capfd):
    import huggingface_hub.utils as hub_utils
    from transformers import modeling_gguf_pytorch_utils as gguf_utils
    from transformers.utils import logging as transformers_logging

    from langadapt.finetune.hf_model import no_loading_bars

    transformers_logging.enable_progress_bar()
    gguf_tqdm = gguf_utils.tqdm
    with no_loading_bars():
        assert not transformers_logging.is_progress_bar_enabled()
        assert hub_utils.are_progress_bars_disabled()
        assert gguf_utils.tqdm([1, 2], desc="GGUF").disable
    assert transformers_logging.is_progress_bar_enabled()
    assert not hub_utils.are_progress_bars_disabled() and gguf_utils.tqdm is gguf_tqdm
    capfd.readouterr()
    _policy(tiny_model_dir, umaze, progress=False)
    assert "Loading weights" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled()


# ------------------------------------------------------------------ the experiment file
def _write(tmp_path: Path, config: dict) -> Path:
    import yaml

    path = tmp_path / "ft.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _experiment(params: dict | None = None, env_id: str = "langadapt/Maze-v0",
                env_params: dict | None = None, adapters: tuple = ("raw",)) -> dict:
    return {"name": "bad", "environment": {"id": env_id, "params": env_params or {}},
            "adapters": [{"type": a} for a in adapters],
            "agents": [{"type": "grpo", "params": params or {}}], "training": {"episodes": 1}}


@pytest.mark.parametrize(("change", "message"), [
    ({"params": {"steps": 0}}, r"agents\.0\.params\.steps=0: input should be greater than or "
     r"equal to 1"),
    ({"params": {"group_size": 1}}, r"agents\.0\.params\.group_size=1: input should be "
     r"greater than or equal to 2"),
    ({"params": {"reward": None}}, r"agents\.0\.params\.reward=null: input should be "),
    ({"env_params": {"maze": "umaze", "goal_reward": 0.0, "step_reward": 0.0}},
     r"no reward source: environment\.params\.goal_reward is 0 and environment\.params\."
     r"step_reward is 0"),
    ({"env_params": {"maze": "umaze", "goal_reward": 0.0}, "params": {"reward": "step"}},
     r"no reward source: environment\.params\.goal_reward is 0 and params\.reward is step"),
    ({"env_id": "CartPole-v1"}, r"grpo on CartPole-v1\): grpo prompts with the environment's "
     r"language spec: no language spec for environment 'CartPoleEnv'"),
    ({"env_id": "langadapt/CartPole-v0"}, r"grpo on langadapt/CartPole-v0\): .* CartPoleEnv is "
     "none of them"),
    ({"adapters": ("raw", "language")}, r"grpo reads the raw state itself"),
    ({"env_id": "langadapt/BabyAI-GoToObj-v0", "params": {"states": "all"}},
     r"params\.states is 'all', which only a maze has"),
    ({"env_id": "langadapt/BabyAI-GoToObj-v0", "params": {"states": 2, "shaping": "oracle"}},
     r"params\.shaping is 'oracle', but MiniGridBridge has no oracle"),
])
def test_a_bad_grpo_agent_is_a_config_error_naming_the_key(change, message):
    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    if "BabyAI" in change.get("env_id", ""):
        pytest.importorskip("minigrid")
    with pytest.raises(ConfigError, match=message):
        experiment_from_dict(_experiment(**change))


def test_a_model_that_is_not_a_causal_lm_is_a_config_error_naming_the_key(tmp_path):
    from transformers import T5Config

    from langadapt.experiments.config import experiment_from_dict
    from langadapt.experiments.schema import ConfigError

    T5Config(d_model=8, num_layers=1, num_heads=1, d_kv=4, d_ff=8).save_pretrained(
        tmp_path / "t5")
    with pytest.raises(ConfigError, match=r"params\.model: model .*\(T5Config\) is not a causal"):
        experiment_from_dict(_experiment({"model": str(tmp_path / "t5")},
                                         env_params={"maze": "umaze"}))


def test_an_old_finetune_folder_is_refused_in_one_line(tiny_model_dir, tmp_path, capsys):
    import yaml

    from langadapt.experiments.cli import main

    out = tmp_path / "old"
    (out / "seed_0").mkdir(parents=True)
    (out / "config.yaml").write_text(yaml.safe_dump(
        {"name": "tiny", "environment": {"maze": "umaze"}, "grpo": {"steps": 2},
         "lora": {"r": 2}, "seeds": [0]}))
    path = _write(tmp_path, _grpo_experiment(tiny_model_dir))
    capsys.readouterr()
    assert main(["run", str(path), "--out", str(out), "--resume", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert "old `langadapt finetune`" in err and "runs/<run>/grpo/" in err and "--force" in err


# ------------------------------------------------------------------ MiniGrid / BabyAI
def _gotoobj():
    pytest.importorskip("minigrid")
    from langadapt.environments.minigrid import make_minigrid

    return make_minigrid("BabyAI-GoToObj-v0", legal_moves=[0, 1, 2])


def test_minigrid_task_holds_out_its_evaluation_episodes(tiny_model_dir):
    from langadapt.finetune import SnapshotTask

    task = SnapshotTask(_gotoobj, train_seed=100, eval_seed=0, eval_episodes=3,
                        eval_max_steps=2)
    rng = np.random.default_rng(0)
    first = task.starts(4, rng)
    assert task.next_seed == 104 and len(first) == 4  # nothing reached yet: all fresh
    reward, state, terminated, truncated = task.step(first[0], 0)  # turn left
    assert task.observe(first[0])[1] == (0, 1, 2) and task.key(state) != task.key(first[0])
    task.remember([state] * 10, success=False)  # a failed rollout's states are not starts
    assert task.starts(2, rng) and task.next_seed == 106 and not task.reached
    task.remember([state] * 10, success=True)
    mixed = task.starts(4, rng)
    assert task.next_seed == 108 and sum(s is state for s in mixed) == 2
    figures = task.evaluate(lambda observed: [2] * len(observed))
    assert figures["episodes"] == 3 and 1 <= figures["greedy_length"] <= 2
    # an evaluation episode that was a training start is refused
    leaky = SnapshotTask(_gotoobj, train_seed=3, eval_seed=0, eval_episodes=3)
    leaky.eval_seed = 3
    leaky.starts(1, rng)
    with pytest.raises(ValueError, match="was a training start"):
        leaky.evaluate(lambda observed: [2] * len(observed))
    with pytest.raises(ValueError, match="reach the training seeds"):
        SnapshotTask(_gotoobj, train_seed=2, eval_seed=0, eval_episodes=3)
    with pytest.raises(ValueError, match="has none"):
        task.step(first[0], 2, shaping=0.99)


def test_grpo_steps_on_babyai_and_the_trainers_greedy_actions_are_llm_policys(
        tiny_model_dir, tmp_path):
    from langadapt.finetune import SnapshotTask
    from langadapt.roles.llm_policy import LLMPolicy

    env = _gotoobj()
    policy = LoRAPolicy(language_for(env), model=tiny_model_dir, lora={"r": 4})
    task = SnapshotTask(_gotoobj, train_seed=100, eval_seed=0, eval_episodes=2,
                        eval_max_steps=3)
    trainer = GRPOTrainer(policy, task, {"steps": 2, "states": 2, "group_size": 3,
                                         "horizon": 3, "learning_rate": 5e-2,
                                         "checkpoint_every": 1}, out=tmp_path / "run")
    trainer.train(progress=False)
    assert len(trainer.history) == 2 and trainer.final["episodes"] == 2
    assert all(r["env_steps"] >= 6 for r in trainer.history)
    policy.save_adapter(tmp_path / "adapter")
    backend = {"backend": "transformers", "model": str(tiny_model_dir), "temperature": 0.0,
               "cache_path": None, "adapter": str(tmp_path / "adapter")}
    agent = LLMPolicy(env.observation_space, env.action_space, {"backend": backend})
    agent.bind(env)
    observed = []
    for seed in range(6):
        obs, info = env.reset(seed=seed)
        observed.append((obs, tuple(info["legal_moves"])))
        obs, _, _, _, info = env.step(2)
        observed.append((obs, tuple(info["legal_moves"])))
    assert [agent.act(obs, list(legal), explore=False) for obs, legal in observed] == (
        trainer.greedy_actions(observed))
    resumed = GRPOTrainer(LoRAPolicy(language_for(env), model=tiny_model_dir, lora={"r": 4}),
                          SnapshotTask(_gotoobj, train_seed=100, eval_seed=0,
                                       eval_episodes=2), trainer.settings, out=tmp_path / "run")
    assert resumed.step_index == 2 and resumed.task.next_seed == task.next_seed


def test_a_babyai_grpo_agent_is_judged_on_held_out_episodes_beside_random(tiny_model_dir,
                                                                          tmp_path):
    from langadapt.experiments.cli import main

    _gotoobj()
    grpo = {"model": str(tiny_model_dir), "lora": {"r": 2}, "steps": 1, "states": 2,
            "group_size": 3, "horizon": 2, "held_out": {"episodes": 3, "max_steps": 2}}
    config = {
        "name": "tiny_babyai", "cache_dir": "",
        "environment": {"id": "langadapt/BabyAI-GoToObj-v0",
                        "params": {"legal_moves": [0, 1, 2], "max_steps": 3}},
        "adapters": [{"type": "raw"}],
        "agents": [{"type": "grpo", "params": grpo}, {"type": "random"}],
        "training": {"episodes": 1}, "seeds": [0], "evaluation": {"final_episodes": 2},
    }
    out = tmp_path / "results"
    assert main(["run", str(_write(tmp_path, config)), "--out", str(out), "--no-progress"]) == 0
    done = json.loads((out / "runs" / "raw__grpo__seed0" / "done.json").read_text())
    own = done["llm_roles"]["agent"]
    assert own["grpo_episodes"] == 3 and 0.0 <= own["grpo_greedy_success"] <= 1.0
    final = [(r["agent"], r["phase"]) for r in _rows(out / "episodes.csv") if r["phase"] == "final"]
    assert final == [("grpo", "final")] * 2 + [("random", "final")] * 2


def test_a_slippery_frozenlake_grpo_agent_runs_on_its_held_out_seeds(tiny_model_dir, tmp_path):
    from langadapt.experiments.cli import main

    grpo = {"model": str(tiny_model_dir), "lora": {"r": 2}, "steps": 2, "states": 2,
            "group_size": 4, "horizon": 4, "held_out": {"seed": 0, "episodes": 8,
                                                         "max_steps": 10, "temperature": 0.5}}
    config = {
        "name": "tiny_lake", "cache_dir": "",
        "environment": {"id": "langadapt/FrozenLake-v0",
                        "params": {"map_name": "4x4", "is_slippery": True}},
        "adapters": [{"type": "raw"}], "agents": [{"type": "grpo", "params": grpo}],
        "training": {"episodes": 1}, "seeds": [0], "evaluation": {"final_episodes": 2},
    }
    out = tmp_path / "results"
    assert main(["run", str(_write(tmp_path, config)), "--out", str(out), "--no-progress"]) == 0
    run = out / "runs" / "raw__grpo__seed0"
    own = json.loads((run / "done.json").read_text())["llm_roles"]["agent"]
    assert own["grpo_episodes"] == 8 and 0.0 <= own["grpo_greedy_success"] <= 1.0
    assert own["grpo_sampled_episodes"] == 8 and own["grpo_sampled_temperature"] == 0.5
    assert 0.0 <= own["grpo_sampled_success"] <= 1.0
    log = _rows(run / "grpo" / "log.csv")
    assert len(log) == 2 and all(int(r["samples"]) == 8 for r in log)


def test_sampling_at_half_temperature_draws_from_the_squared_policy(tiny_model_dir):
    from langadapt.environments.frozenlake import FrozenLakeEnv
    from langadapt.finetune import SnapshotTask
    from langadapt.finetune.grpo import tempered

    env = FrozenLakeEnv(is_slippery=True)
    policy = LoRAPolicy(language_for(env), model=tiny_model_dir, lora={"r": 2})
    trainer = GRPOTrainer(policy, SnapshotTask(FrozenLakeEnv), {"states": 2})
    start = (env.reset(seed=0)[0], (0, 1, 2, 3))
    scored = []
    real = policy.distributions
    policy.distributions = lambda observed, *a, **kw: scored.append(len(observed)) or real(
        observed, *a, **kw)
    act = trainer.sampled_actions(0.5)
    draws = [a for _ in range(40) for a in act([start] * 50)]
    assert scored == [1]  # one observation, scored once
    expected = tempered(real([start], 16, shared_prefix=True)[0], 2.0)
    counts = np.bincount(draws, minlength=4) / len(draws)
    np.testing.assert_allclose(counts, expected, atol=0.04)  # 2000 draws: ~4 sigma
