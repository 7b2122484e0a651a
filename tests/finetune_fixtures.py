"""A word-level tokenizer with a ChatML template over the umaze prompts, for the tiny
random-weight Llamas the fine-tuning tests build (no download, no GGUF)."""

from __future__ import annotations

from langadapt.environments import language_for
from langadapt.environments.maze import MazeEnv
from langadapt.roles import format_state

CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def umaze_tokenizer(extra_words: set[str] = frozenset()):
    """Every word of umaze's task, decision instruction and cell descriptions, the digits and
    ``extra_words``; ``<|im_end|>`` is end of turn."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    env = MazeEnv(maze="umaze")
    spec = language_for(env)
    texts = [spec.task, 'Reply with JSON {"action": N}, N one of the legal actions.']
    texts += [format_state(spec, env.observation_of(c), env.legal_moves_at(c))
              for c in env.free_cells()]
    specials = ["[UNK]", "<|im_start|>", "<|im_end|>"]
    splitter = pre_tokenizers.Whitespace()
    words = sorted({w for t in texts for w, _ in splitter.pre_tokenize_str(t)}
                   | {str(d) for d in range(10)} | set(extra_words))
    core = Tokenizer(models.WordLevel(vocab={w: i for i, w in enumerate(specials + words)},
                                      unk_token="[UNK]"))
    core.pre_tokenizer = splitter
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, unk_token="[UNK]", eos_token="<|im_end|>",
        bos_token="<|im_start|>", pad_token="<|im_end|>")
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer
