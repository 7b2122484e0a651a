"""SB3 features extractors named in experiment files (``extractor:`` of an sb3 agent):
``sentence_attention`` pools a sentence set with attention conditioned on its first sentence
(the mission); ``sentence_grounded`` starts that attention from the encoder's own
mission-sentence similarity; ``babyai11`` is BabyAI 1.1's model of symbolic views (Hui et
al. 2020): a bag-of-words embedding of the view, a GRU over the mission's words and FiLM.
Imported with SB3 (the ``sb3`` extra). See docs/agents.md ("Features extractors").
"""

from __future__ import annotations

import torch
from gymnasium import spaces
from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
from torch import nn

from ..environments.minigrid import MISSION_WORDS, VOCABULARY, observation_size

__all__ = ["EXTRACTORS", "BabyAI11Extractor", "GroundedSentenceSet", "SentenceSetAttention"]


def _flat_size(space: spaces.Space, extractor: str) -> int:
    if not isinstance(space, spaces.Box) or len(space.shape) != 1:
        raise ValueError(f"extractor {extractor} takes a flat Box observation; got {space}")
    return int(space.shape[0])


def _frame_size(size: int, frames: int, actions: int, extractor: str) -> int:
    """Values of one frame of an observation of ``size`` values: ``frames`` frames, then
    ``actions`` values of the last actions (adapters.memory)."""
    if size <= actions or (size - actions) % frames:
        raise ValueError(f"extractor {extractor} expects {frames} frames then {actions} action "
                         f"values (the adapter's memory); the observation has {size} values")
    return (size - actions) // frames


class SentenceSetAttention(BaseFeaturesExtractor):
    """A sentence set (`adapters.representation`: ``max_sentences`` rows of ``[present,
    vector, numbers]``, then any raw values) -> features, frame by frame (``frames`` of them, then
    ``actions`` values: the adapter's memory). Each sentence goes through one shared layer;
    ``heads`` queries made from row 0 (the mission) attend over the present rows 1.. (their
    order does not matter); each frame gives row 0's encoding, the pooled heads and the raw
    values' encoding; all frames and the actions go through one layer of ``features_dim``."""

    #: Whether the scores start from the encoder's own mission-sentence similarity.
    grounded = False

    def __init__(self, observation_space: spaces.Box, max_sentences: int = 24,
                 dimension: int = 384, numbers: int = 0, frames: int = 1, actions: int = 0,
                 hidden: int = 128, heads: int = 4, features_dim: int = 256) -> None:
        super().__init__(observation_space, features_dim)
        name = "sentence_grounded" if self.grounded else "sentence_attention"
        size = _flat_size(observation_space, name)
        frame = _frame_size(size, frames, actions, name)
        needed = max_sentences * (1 + dimension + numbers)
        if frame < needed or hidden % heads:
            raise ValueError(
                f"extractor {name} expects a sentence set of {max_sentences} rows of 1 + "
                f"{dimension} + {numbers} values ({needed}) per frame; a frame of the "
                f"observation has {frame} values (a language adapter with embedding: "
                "sentence_set and its max_sentences)"
                if frame < needed else f"hidden={hidden} is not a multiple of heads={heads}")
        self.rows, self.dimension, self.heads = max_sentences, dimension, heads
        self.row, self.frame, self.frames, self.actions = 1 + dimension + numbers, frame, \
            frames, actions
        self.raw_size = frame - needed
        self.sentence = nn.Sequential(nn.Linear(dimension + numbers, hidden), nn.ReLU())
        self.query = nn.Linear(hidden, hidden)
        self.key = nn.Linear(hidden, hidden)
        self.value = nn.Linear(hidden, hidden)
        if self.grounded:  # the learnt scores start at zero, the encoder's similarity rules
            nn.init.zeros_(self.query.weight)
            nn.init.zeros_(self.query.bias)
            self.log_scale = nn.Parameter(torch.tensor(float(GROUNDING_SCALE)).log())
        self.raw = (nn.Sequential(nn.Linear(self.raw_size, hidden), nn.ReLU())
                    if self.raw_size else None)
        inputs = frames * hidden * (3 if self.raw_size else 2) + actions
        self.out = nn.Sequential(nn.Linear(inputs, features_dim), nn.ReLU())

    def scores(self, rows: torch.Tensor, encoded: torch.Tensor) -> torch.Tensor:
        """``(batch, heads, 1, members)`` attention scores of the rows 1.. (absent ones too)."""
        batch = rows.shape[0]
        context, members = encoded[:, 0], encoded[:, 1:]
        width = context.shape[-1] // self.heads
        query = self.query(context).reshape(batch, self.heads, 1, width)
        key = self.key(members).reshape(batch, -1, self.heads, width).transpose(1, 2)
        scores = (query @ key.transpose(-1, -2)) / width**0.5
        if self.grounded:
            vectors = rows[:, :, 1: 1 + self.dimension]
            similarity = nn.functional.cosine_similarity(vectors[:, :1], vectors[:, 1:], dim=-1)
            scores = scores + (self.log_scale.exp() * similarity)[:, None, None, :]
        return scores

    def pool(self, rows: torch.Tensor) -> torch.Tensor:
        """One frame's sentence rows ``(batch, rows, row)`` -> row 0's encoding and the pooled
        heads ``(batch, 2 * hidden)``."""
        batch = rows.shape[0]
        present, encoded = rows[:, 1:, 0] > 0.5, self.sentence(rows[:, :, 1:])
        scores = self.scores(rows, encoded)
        scores = scores.masked_fill(~present[:, None, None, :], float("-inf"))
        weights = torch.nan_to_num(torch.softmax(scores, dim=-1))  # no member: zeros
        width = encoded.shape[-1] // self.heads
        value = self.value(encoded[:, 1:]).reshape(batch, -1, self.heads, width).transpose(1, 2)
        return torch.cat([encoded[:, 0], (weights @ value).reshape(batch, -1)], dim=1)

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        batch = observations.shape[0]
        frames = observations[:, : self.frames * self.frame].reshape(
            batch * self.frames, self.frame)
        rows = frames[:, : self.rows * self.row].reshape(-1, self.rows, self.row)
        parts = [self.pool(rows)]
        if self.raw is not None:
            parts.append(self.raw(frames[:, self.rows * self.row:]))
        out = [torch.cat(parts, dim=1).reshape(batch, -1)]
        if self.actions:
            out.append(observations[:, -self.actions:])
        return self.out(torch.cat(out, dim=1))


#: The grounded pooling's initial scale of the mission-sentence cosine similarity (scores):
#: a similarity 0.3 higher weighs e^3 = 20 times more at the start.
GROUNDING_SCALE = 10.0


class GroundedSentenceSet(SentenceSetAttention):
    """`SentenceSetAttention` whose scores start from the frozen encoder's cosine similarity
    of the mission (row 0) and each sentence, times a learnt scale (initially
    `GROUNDING_SCALE`); the learnt query-key scores start at zero and are added to it."""

    grounded = True


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
                 words: int = 4096 + len(VOCABULARY) + 1, frames: int = 1,
                 actions: int = 0) -> None:
        super().__init__(observation_space, frames * (channels + 4) + actions)
        size = _flat_size(observation_space, "babyai11")
        frame = observation_size(view_size, mission_words)
        if size != frames * frame + actions:
            raise ValueError(
                f"extractor babyai11 expects {frames} MiniGrid/BabyAI raw observation(s) of "
                f"{frame} values (view_size={view_size}, mission_words={mission_words}) and "
                f"{actions} action values; the observation has {size} (use it on raw "
                "views of a langadapt/BabyAI-* or langadapt/MiniGrid-* level)")
        self.view_size, self.mission_words = view_size, mission_words
        self.frame, self.frames, self.actions = frame, frames, actions
        self.cells = nn.Embedding(3 * self.MAX_CODE, channels)
        self.register_buffer("offsets", torch.arange(3) * self.MAX_CODE, persistent=False)
        self.stem = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU(),
            nn.Conv2d(channels, channels, 3, padding=1), nn.BatchNorm2d(channels), nn.ReLU())
        self.word = nn.Embedding(words, channels, padding_idx=0)
        self.mission = nn.GRU(channels, channels, batch_first=True)
        self.films = nn.ModuleList([_FiLM(channels, channels) for _ in range(2)])

    def forward(self, observations: torch.Tensor) -> torch.Tensor:
        batch = observations.shape[0]
        frames = observations[:, : self.frames * self.frame].reshape(-1, self.frame)
        out = [self.one_frame(frames).reshape(batch, -1)]
        if self.actions:
            out.append(observations[:, -self.actions:])
        return torch.cat(out, dim=1)

    def one_frame(self, observations: torch.Tensor) -> torch.Tensor:
        """Features of single raw observations ``(batch, frame)``."""
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
    "sentence_grounded": GroundedSentenceSet,
    "babyai11": BabyAI11Extractor,
}

