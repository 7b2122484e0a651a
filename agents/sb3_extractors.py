"""SB3 features extractors named in experiment files (``extractor:`` of an sb3 agent):
``sentence_attention`` pools a sentence set with attention conditioned on its first sentence
(the mission); ``babyai11`` is BabyAI 1.1's model of symbolic views (Hui et al. 2020): a
bag-of-words embedding of the view, a GRU over the mission's words and FiLM. Imported with
SB3 (the ``sb3`` extra). See docs/agents.md ("Features extractors").
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from ..environments.minigrid import MISSION_WORDS, VOCABULARY, observation_size

__all__ = ["EXTRACTORS", "BabyAI11Extractor", "SentenceSetAttention"]


def _flat_size(space: spaces.Space, extractor: str) -> int:
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"extractor {extractor} takes a flat Box observation; got {space}")
    return int(space.shape[0])


class SentenceSetAttention(BaseFeaturesExtractor):
    """A sentence set (`adapters.sentence_set`: ``max_sentences`` rows of ``[present,
    vector]``, then any raw values) -> features. Each sentence goes through one shared
    layer; ``heads`` queries made from row 0 (the mission) attend over the present rows
    1.. (their order does not matter); the output is row 0's encoding, the pooled heads and
    the raw values' encoding, through one layer of ``features_dim``."""

    def __init__(self, observation_space: spaces.Box, max_sentences: int = 24,
                 dimension: int = 384, hidden: int = 128, heads: int = 4,
                 features_dim: int = 256) -> None:
        super().__init__(observation_space, features_dim)
        size = _flat_size(observation_space, "sentence_attention")
        needed = max_sentences * (1 + dimension)
        if size < needed or hidden % heads:
            raise ValueError(
                f"extractor sentence_attention expects a sentence set of {max_sentences} rows "
                f"of 1 + {dimension} values ({needed}); the observation has {size} values "
                "(a language adapter with embedding: sentence_set and its max_sentences)"
                if size < needed else f"hidden={hidden} is not a multiple of heads={heads}")
        self.rows, self.dimension, self.heads = max_sentences, dimension, heads
        self.raw_size = size - needed
        self.sentence = nn.Sequential(nn.Linear(dimension, hidden), nn.ReLU())
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        self.raw = (nn.Sequential(nn.Linear(self.raw_size, hidden), nn.ReLU())
                    if self.raw_size else None)
        inputs = hidden * (3 if self.raw_size else 2)
        self.out = nn.Sequential(nn.Linear(inputs, features_dim), nn.ReLU())

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        batch = observations.shape[0]
        rows = observations[:, : self.rows * (1 + self.dimension)].reshape(
            batch, self.rows, 1 + self.dimension)
        present, encoded = rows[:, 1:, 0] > 0.5, self.sentence(rows[:, :, 1:])
        context, members = encoded[:, 0], encoded[:, 1:]
        width = context.shape[-1] // self.heads
        query = self.query(context).reshape(batch, self.heads, 1, width)
        key = self.key(members).reshape(batch, -1, self.heads, width).transpose(1, 2)
        value = self.value(members).reshape(batch, -1, self.heads, width).transpose(1, 2)
        scores = (query @ key.transpose(-1, -2)) / width**0.5  # (batch, heads, 1, members)
        scores = scores.masked_fill(~present[:, None, None, :], float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))  # no member: zeros
        pooled = (weights @ value).reshape(batch, -1)
        parts = [context, pooled]
        if self.raw is not None:
            parts.append(self.raw(observations[:, -self.raw_size:]))
        return self.out(torch.cat(parts, dim=1))


class _FiLM(nn.Module):
    """BabyAI 1.1's FiLM block: two 3x3 convolutions, the second modulated by the mission."""

    def __init__(self, condition: int, channels: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn2 = nn.BatchNorm2d(channels)
        self.weight = nn.Linear(condition, channels)
        self.bias = nn.Linear(condition, channels)

    def forward(self, x: torch.Tensor, condition: torch.Tensor) -> torch.Tensor:
        x = self.conv2(torch.relu(self.bn1(self.conv1(x))))
        weight, bias = self.weight(condition), self.bias(condition)
        return torch.relu(self.bn2(x * weight[:, :, None, None] + bias[:, :, None, None]))


class BabyAI11Extractor(BaseFeaturesExtractor):
    """A MiniGrid/BabyAI raw observation (`environments.minigrid`: the ``view_size``² x 3
    view, the compass, ``mission_words`` word ids, the bag of words) -> features, as BabyAI
    1.1's model: each cell's three codes embedded and summed (bag of words), two 3x3
    convolutions, two residual FiLM blocks conditioned on a GRU over the mission's words,
    max-pooled over the view; the compass appended."""

    #: Largest code of a view cell (minigrid's object, colour and state codes are below it).
    MAX_CODE = 147

    def __init__(self, observation_space: spaces.Box, view_size: int = 7,
                 mission_words: int = MISSION_WORDS, channels: int = 128,
                 words: int = 4096 + len(VOCABULARY) + 1) -> None:
        super().__init__(observation_space, channels + 4)
        size = _flat_size(observation_space, "babyai11")
        if size != observation_size(view_size, mission_words):
            raise ValueError(
                f"extractor babyai11 expects a MiniGrid/BabyAI raw observation of "
                f"{observation_size(view_size, mission_words)} values (view_size={view_size}, "
                f"mission_words={mission_words}); the observation has {size} (use it on raw "
                "views of a langadapt/BabyAI-* or langadapt/MiniGrid-* level)")
        self.view_size, self.mission_words = view_size, mission_words
        self.cells = nn.Embedding(3 * self.MAX_CODE, channels)
        self.register_buffer("offsets", torch.arange(3) * self.MAX_CODE, persistent=False)
        self.stem = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.word = nn.Embedding(words, channels, padding_idx=0)
        self.mission = nn.GRU(channels, channels, batch_first=True)
        self.films = nn.ModuleList([_FiLM(channels, channels) for _ in range(2)])

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        batch, v = observations.shape[0], self.view_size
        view = observations[:, : 3 * v * v].long().clamp(0, self.MAX_CODE - 1).reshape(
            batch, v, v, 3)
        x = self.cells(view + self.offsets).sum(dim=3).permute(0, 3, 1, 2)  # (b, c, v, v)
        x = self.stem(x)
        compass = observations[:, 3 * v * v: 3 * v * v + 4]
        ids = observations[:, 3 * v * v + 4: 3 * v * v + 4 + self.mission_words].long()
        ids = ids.clamp(0, self.word.num_embeddings - 1)
        lengths = (ids > 0).sum(dim=1).clamp(min=1).cpu()
        packed = nn.utils.rnn.pack_padded_sequence(self.word(ids), lengths, batch_first=True,
                                                   enforce_sorted=False)
        _, hidden = self.mission(packed)
        condition = hidden[-1]
        for film in self.films:
            x = film(x, condition) + x
        pooled = torch.amax(x, dim=(2, 3))
        return torch.cat([pooled, compass], dim=1)


#: The extractors an experiment file may name, by name.
EXTRACTORS: dict[str, type[BaseFeaturesExtractor]] = {
    "sentence_attention": SentenceSetAttention,
    "babyai11": BabyAI11Extractor,
}

