"""LLM decisions as distributions over known replies: `LLMBackend.score`, `decide`,
`enumerate_replies` — on a stand-in backend, a tiny random transformers model, and the
embedded SmolLM2 through llama.cpp (scores checked against an independent evaluation)."""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np
import pytest
from fake_ollama import FakeOllama

from langadapt.llm import (
    STATS_KEYS,
    Decision,
    LLMBackend,
    LLMError,
    LLMReplyError,
    decide,
    enumerate_replies,
    make_backend,
    reply_text,
)
from langadapt.llm.scoring import softmax

ACTION = {"type": "object", "properties": {"action": {"type": "integer", "enum": [1, 3]}},
          "required": ["action"], "additionalProperties": False}
MESSAGES = [{"role": "system", "content": "You move."}, {"role": "user", "content": "Pick."}]


class Scorer(LLMBackend):
    """A stand-in scoring backend: ``table`` maps a reply to its log-probability
    (default -1.0); ``fail`` makes the next call return that list instead."""

    name: ClassVar[str] = "scorer"
    supports_scoring: ClassVar[bool] = True
    table: dict[str, float] = {}

    def resolve_identity(self) -> str:
        return "scorer-1"

    def generate(self, messages, schema, max_tokens):  # pragma: no cover - unused
        raise AssertionError("a scoring backend should not generate here")

    def compute_scores(self, messages, replies, *, seed=0, deadline=None):
        bad = self.runtime.built("bad")
        if bad:
            return bad.pop(0)
        return [self.table.get(r, -1.0) for r in replies]


def scorer(**kw: Any) -> Scorer:
    return Scorer(cache_path=None, **kw)


# ------------------------------------------------------------------ enumerate_replies
def test_enumerate_replies_lists_finite_schemas_with_the_grammar_s_text():
    assert enumerate_replies(ACTION) == [({"action": 1}, '{ "action": 1}'),
                                         ({"action": 3}, '{ "action": 3}')]
    score = {"type": "object", "properties": {"score": {"type": "integer",
                                                        "enum": list(range(11))}},
             "required": ["score"], "additionalProperties": False}
    assert [t for _, t in enumerate_replies(score)][-1] == '{ "score": 10}'
    two = {"type": "object", "properties": {"ok": {"type": "boolean"},
                                            "dir": {"enum": ["left", "right"]}},
           "required": ["ok", "dir"]}
    listed = enumerate_replies(two)
    assert len(listed) == 4 and listed[0] == ({"ok": False, "dir": "left"},
                                              '{ "dir": "left", "ok": false}')
    assert enumerate_replies({"type": "boolean"}) == [(False, "false"), (True, "true")]
    assert reply_text({"judgement": -1}) == '{ "judgement": -1}'
    for free in ({"type": "integer"}, {"type": "string"},
                 {**ACTION, "additionalProperties": True},
                 {**ACTION, "required": []},
                 {"type": "object", "properties": {"n": {"type": "integer"}},
                  "required": ["n"]}):
        assert enumerate_replies(free) is None
    assert enumerate_replies({"type": "integer", "enum": list(range(300))}) is None


def test_softmax_temperature_and_minus_infinity():
    assert softmax([0.0, 0.0]) == [0.5, 0.5]
    assert softmax([math.log(0.25), math.log(0.75)]) == pytest.approx([0.25, 0.75])
    assert softmax([-1.0, -2.0], 0) == [1.0, 0.0]
    assert softmax([-1.0, -math.inf]) == [1.0, 0.0]
    hot = softmax([0.0, -1.0], 2.0)
    assert hot[1] == pytest.approx(math.exp(-0.5) / (1 + math.exp(-0.5)))


# ------------------------------------------------------------------ score: cache, errors
def test_every_stats_has_the_decision_and_prompt_counters():
    stats = scorer().stats()
    for key in ("llm_scored", "llm_generated", "llm_prompt_tokens", "llm_prompt_tokens_reused"):
        assert key in STATS_KEYS and stats[key] == 0


def test_scores_are_cached_and_a_rerun_makes_no_call(tmp_path):
    path = tmp_path / "answers.sqlite"
    first = Scorer(cache_path=path, table={"a": -0.5, "b": -math.inf})
    assert first.score(MESSAGES, ["a", "b", "c"]) == [-0.5, -math.inf, -1.0]
    assert first.stats()["llm_calls"] == 1
    assert first.score(MESSAGES, ["a", "b", "c"]) == [-0.5, -math.inf, -1.0]
    assert first.stats()["llm_calls"] == 1 and first.stats()["llm_cache_hits"] == 1
    # another order, other messages, another seed: other requests
    first.score(MESSAGES, ["b", "a", "c"])
    first.score(MESSAGES[1:], ["a", "b", "c"])
    first.score(MESSAGES, ["a", "b", "c"], seed=5)
    assert first.stats()["llm_calls"] == 4
    # a new process (new backend, same file): every request answered from the cache
    again = Scorer(cache_path=path, table={"a": 9.0})
    assert again.score(MESSAGES, ["a", "b", "c"]) == [-0.5, -math.inf, -1.0]
    assert again.stats()["llm_calls"] == 0 and again.stats()["llm_cache_hits"] == 1
    exported = tmp_path / "answers.jsonl"
    assert first.export_jsonl(exported) == 4
    fresh = Scorer(cache_path=tmp_path / "other.sqlite")
    assert fresh.import_jsonl(exported) == 4
    assert fresh.score(MESSAGES, ["a", "b", "c"]) == [-0.5, -math.inf, -1.0]
    assert fresh.stats()["llm_calls"] == 0


@pytest.mark.parametrize("bad, match", [
    ([float("nan"), -1.0], "NaN"),
    ([-math.inf, -math.inf], "-inf"),
    ([math.inf, -1.0], "NaN or \\+inf"),
    ([-1.0], "expected 2 numbers"),
    ("oops", "expected 2 numbers"),
])
def test_broken_scores_are_an_error_naming_the_backend_and_never_cached(bad, match):
    backend = scorer()
    backend.runtime.once("bad", lambda: [bad])
    with pytest.raises(LLMReplyError, match=match) as caught:
        backend.score(MESSAGES, ["a", "b"])
    assert "Scorer" in str(caught.value)
    assert backend.stats()["llm_failures"] == 1
    with pytest.raises(LLMReplyError):  # decide never falls back to a silent choice
        backend.runtime.built("bad").append(bad)
        decide(backend, MESSAGES, ACTION)
    assert backend.score(MESSAGES, ["a", "b"]) == [-1.0, -1.0]  # asked again: not cached
    assert backend.stats()["llm_calls"] == 3


def test_bad_arguments_are_refused_before_any_call():
    backend = scorer()
    for replies in ([], "ab", ["a", ""], ["a", 3]):
        with pytest.raises(ValueError, match="replies"):
            backend.score(MESSAGES, replies)
    with pytest.raises(ValueError, match="temperature"):
        decide(backend, MESSAGES, ACTION, temperature=-1)
    assert backend.stats()["llm_calls"] == 0


# ------------------------------------------------------------------ decide
def test_decide_scores_when_it_can_greedy_is_argmax_ties_go_first():
    backend = scorer(table={'{ "action": 3}': math.log(0.75), '{ "action": 1}': math.log(0.25)})
    decision = decide(backend, MESSAGES, ACTION)
    assert decision == Decision({"action": 3}, {'{"action": 1}': pytest.approx(0.25),
                                                '{"action": 3}': pytest.approx(0.75)},
                                "scored", '{ "action": 3}')
    assert decision.probability({"action": 1}) == pytest.approx(0.25)
    assert decision.probability({"action": 7}) == 0.0
    tie = decide(scorer(), MESSAGES, ACTION)
    assert tie.value == {"action": 1} and tie.probabilities == {'{"action": 1}': 0.5,
                                                                '{"action": 3}': 0.5}
    assert backend.stats()["llm_scored"] == 1 and backend.stats()["llm_generated"] == 0
    cold = decide(backend, MESSAGES, ACTION, temperature=0)
    assert cold.probabilities == {'{"action": 1}': 0.0, '{"action": 3}': 1.0}
    assert backend.stats()["llm_calls"] == 1 and backend.stats()["llm_cache_hits"] == 1


def test_decide_samples_with_rng_from_the_tempered_softmax():
    backend = scorer(table={'{ "action": 3}': math.log(0.75), '{ "action": 1}': math.log(0.25)})
    rng = np.random.default_rng(0)
    picks = [decide(backend, MESSAGES, ACTION, rng=rng).value["action"] for _ in range(2000)]
    assert picks.count(3) / len(picks) == pytest.approx(0.75, abs=0.04)
    hot = decide(backend, MESSAGES, ACTION, rng=rng, temperature=1e9)
    assert hot.probabilities["{\"action\": 1}"] == pytest.approx(0.5)
    seeded = [decide(backend, MESSAGES, ACTION, rng=np.random.default_rng(7)).value
              for _ in range(3)]
    assert seeded[0] == seeded[1] == seeded[2]
    assert backend.stats()["llm_calls"] == 1  # one request, answered from the cache after


def test_decide_generates_on_a_backend_without_log_probabilities(tmp_path):
    seen = []

    def reply(request):
        seen.append(request)
        return '{"action": 3}'

    with FakeOllama(models=["llama3.2"], reply=reply) as server:
        backend = make_backend({"backend": "ollama", "host": server.host, "model": "llama3.2",
                                "cache_path": None})
        assert backend.supports_scoring is False
        with pytest.raises(LLMError, match="cannot score"):
            backend.score(MESSAGES, ["a"])
        decision = decide(backend, MESSAGES, ACTION, max_tokens=12, seed=4)
        assert decision == Decision({"action": 3}, None, "generated", '{"action": 3}')
        assert decision.probability({"action": 3}) is None
    assert backend.stats()["llm_generated"] == 1 and backend.stats()["llm_scored"] == 0
    assert seen[0]["format"] == ACTION and seen[0]["options"]["num_predict"] == 12
    assert seen[0]["options"]["seed"] == 4


def test_decide_generates_free_form_values_even_on_a_scoring_backend():
    class Both(Scorer):
        def generate(self, messages, schema, max_tokens):
            return '{"n": 12}'

    backend = Both(cache_path=None)
    free = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    assert decide(backend, MESSAGES, free) == Decision({"n": 12}, None, "generated",
                                                       '{"n": 12}')
    assert backend.stats()["llm_generated"] == 1


# ------------------------------------------------------------------ transformers (tiny model)
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    """A 2-layer Llama with random weights and a word-level tokenizer (no download)."""
    pytest.importorskip("transformers")
    pytest.importorskip("peft")
    import torch
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    specials = ["[UNK]", "<|im_start|>", "<|im_end|>"]
    words = sorted(set("You move Pick go left right up down the a cell wall goal".split())
                   | {str(d) for d in range(10)}
                   | {"{", "}", '"', '":', "action", "system", "user", "assistant"})
    vocab = {w: i for i, w in enumerate(specials + words)}
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", eos_token="<|im_end|>",
        bos_token="<|im_start|>", pad_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id,
        pad_token_id=tokenizer.pad_token_id, tie_word_embeddings=False)
    folder = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _full_sequence_log_prob(lm, tokenizer, messages, reply) -> float:
    """log P(reply + end of turn | prompt) from one forward pass over the whole sequence."""
    import torch

    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer(text, add_special_tokens=False).input_ids
    cont = tokenizer(reply, add_special_tokens=False).input_ids + [tokenizer.eos_token_id]
    with torch.no_grad():
        logits = lm(torch.tensor([prompt + cont])).logits[0].double().log_softmax(-1)
    return sum(float(logits[len(prompt) - 1 + i, t]) for i, t in enumerate(cont))


def test_transformers_scores_are_full_sequence_log_probabilities(tiny_model_dir):
    backend = make_backend({"backend": "transformers", "model": str(tiny_model_dir),
                            "cache_path": None})
    assert backend.supports_scoring
    lm, tokenizer = backend.language_model()
    prompts = [MESSAGES, [{"role": "user", "content": "go left the cell"}],
               [{"role": "system", "content": "You move"}, {"role": "user", "content": "up"},
                {"role": "assistant", "content": '{ "action": 2}'},
                {"role": "user", "content": "down"}]]
    replies = ['{ "action": 1}', '{ "action": 3}', "left", "wall goal up"]
    for messages in prompts:
        scores = backend.score(messages, replies)
        expected = [_full_sequence_log_prob(lm, tokenizer, messages, r) for r in replies]
        assert scores == pytest.approx(expected, abs=1e-4)
        decision = decide(backend, messages, ACTION)
        probs = softmax(expected[:2])
        assert decision.method == "scored"
        assert decision.probabilities["{\"action\": 1}"] == pytest.approx(probs[0], abs=1e-4)
    assert backend.stats()["llm_scored"] == 3 and backend.stats()["llm_prompt_tokens"] > 0


# ------------------------------------------------------------------ llama.cpp / SmolLM2
@pytest.fixture(scope="module")
def smol():
    pytest.importorskip("llama_cpp")
    return make_backend({"backend": "llamacpp", "cache_path": None})


@pytest.fixture(scope="module")
def reference(smol):
    """A second llama.cpp context on the same GGUF file, keeping every position's logits:
    evaluates prompt + reply from scratch, independently of the scoring code."""
    from llama_cpp import Llama

    llama = Llama(model_path=str(smol.model_path), n_ctx=512, n_threads=smol.n_threads,
                  logits_all=True, verbose=False)
    yield llama
    llama.close()


def _cold_log_prob(reference, prompt: list[int], reply: str) -> float:
    cont = list(reference.tokenize(reply.encode(), add_bos=False, special=False))
    cont.append(reference.token_eos())  # SmolLM2's <|im_end|>
    reference.reset()
    reference.eval(prompt + cont)
    rows = np.asarray(reference.scores[len(prompt) - 1:len(prompt) + len(cont) - 1],
                      dtype=np.float64)
    top = rows.max(axis=1, keepdims=True)
    log_probs = rows - top - np.log(np.exp(rows - top).sum(axis=1, keepdims=True))
    return float(sum(log_probs[i, t] for i, t in enumerate(cont)))


def _maze_decisions(fewest: int = 2) -> list[tuple[list[dict[str, str]], dict]]:
    """llm_policy's decision prompts of every umaze cell with ``fewest`` moves or more."""
    from langadapt.environments import MazeEnv, language_for

    try:
        from langadapt.roles import DiscreteActionParser, decision_messages
    except ImportError:  # pragma: no cover - roles mid-refactor
        pytest.skip("langadapt.roles does not import")
    env = MazeEnv(maze="umaze")
    spec = language_for(env)
    parser = DiscreteActionParser(n_actions=spec.n_actions)
    out = []
    for cell in env.free_cells():
        moves = env.legal_moves_at(cell)
        if len(moves) >= fewest:
            out.append((decision_messages(spec, env.observation_of(cell), moves),
                        parser.schema(moves)))
    return out


@pytest.mark.slow  # a second context keeping all logits, ~12 prompt evaluations: ~45 s busy
def test_llamacpp_scores_equal_a_cold_full_evaluation_and_reuse_changes_nothing(
        smol, reference):
    from langadapt.llm.llamacpp import chat_prompt_tokens, end_of_turn_tokens

    llama = smol.llama()
    assert end_of_turn_tokens(llama) == [reference.token_eos()]
    decisions = _maze_decisions()[:3]
    for messages, schema in decisions:
        texts = [t for _, t in enumerate_replies(schema)]
        prompt = chat_prompt_tokens(llama, messages)
        before = smol.stats()
        warm = smol.score(messages, texts)
        after = smol.stats()
        cold = [_cold_log_prob(reference, prompt, t) for t in texts]
        assert warm == pytest.approx(cold, abs=1e-4)
        assert after["llm_prompt_tokens"] - before["llm_prompt_tokens"] == len(prompt)
        if before["llm_calls"]:  # the system prompt (and template) came from the prefix cache
            assert after["llm_prompt_tokens_reused"] - before["llm_prompt_tokens_reused"] > 20
    # the same request with nothing cached (cold llama.cpp state) gives the same scores
    messages, schema = decisions[-1]
    texts = [t for _, t in enumerate_replies(schema)]
    warm = smol.score(messages, texts, seed=1)  # another key: evaluated again, prompt reused
    llama.reset()
    cold = smol.score(messages, texts, seed=2)
    assert warm == pytest.approx(cold, abs=1e-4)


def test_greedy_decide_on_llamacpp_is_scored_and_matches_greedy_generation(smol):
    from langadapt.llm.llamacpp import chat_prompt_tokens

    smol = make_backend({"backend": "llamacpp", "cache_path": None})  # an empty cache
    decisions = _maze_decisions(fewest=3)  # 3 cells, 3-4 moves each
    assert len(decisions) == 3
    for messages, schema in decisions:
        decision = decide(smol, messages, schema)
        before = smol.stats()
        generated = smol.chat(messages, schema=schema, max_tokens=16)
        after = smol.stats()
        # generation counts its prompt too; scoring left all of it but the last token cached
        n_prompt = len(chat_prompt_tokens(smol.llama(), messages))
        assert after["llm_prompt_tokens"] - before["llm_prompt_tokens"] == n_prompt
        assert (after["llm_prompt_tokens_reused"] - before["llm_prompt_tokens_reused"]
                == n_prompt - 1)
        assert decision.method == "scored"
        assert sum(decision.probabilities.values()) == pytest.approx(1.0)
        assert decision.value == json.loads(generated), (messages[-1]["content"], generated,
                                                         decision.probabilities)
        assert generated.strip() == decision.reply  # the canonical text is what it writes
    stats = smol.stats()
    assert stats["llm_scored"] >= len(decisions) and stats["llm_generated"] == 0
    calls = stats["llm_calls"]
    for messages, schema in decisions:  # a rerun: every decision from the cache
        decide(smol, messages, schema)
    assert smol.stats()["llm_calls"] == calls
