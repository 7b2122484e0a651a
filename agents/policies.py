"""The Q-network of :class:`agents.DQNAgent`: an MLP, plus a fast single-observation path.

Acting evaluates the network on one observation per environment step. Going through
``nn.Module`` for that costs tens of microseconds of Python and tensor bookkeeping, more
than the arithmetic. :meth:`QNetwork.numpy_forward` computes the same function with numpy
on *views* of the parameter storage (``param.detach().numpy()`` shares memory), so it always
sees the current weights — optimiser steps and ``load_state_dict`` write in place — without
copying anything.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh}


class QNetwork(nn.Module):
    """MLP from a flat observation vector to one value per action."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: list[int], activation: str):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation is {activation!r}, expected one of {list(ACTIVATIONS)}")
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.activation = activation
        layers: list[nn.Module] = []
        last = obs_dim
        for width in hidden_sizes:
            layers += [nn.Linear(last, width), ACTIVATIONS[activation]()]
            last = width
        layers.append(nn.Linear(last, n_actions))
        self.net = nn.Sequential(*layers)
        self._views: list[tuple[np.ndarray, np.ndarray]] | None = None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs)

    def _apply(self, fn, *args, **kwargs):  # .to(), .float(), ... may replace the storage
        self._views = None
        return super()._apply(fn, *args, **kwargs)

    def linear_layers(self) -> list[nn.Linear]:
        return [m for m in self.net if isinstance(m, nn.Linear)]

    def refresh_views(self) -> None:
        """(Re)bind the numpy views used by :meth:`numpy_forward` to the parameter storage."""
        self._views = [
            (layer.weight.detach().numpy(), layer.bias.detach().numpy())
            for layer in self.linear_layers()
        ]

    def numpy_forward(self, obs: np.ndarray) -> np.ndarray:
        """Q-values of one flat float32 observation, computed with numpy (no autograd)."""
        if self._views is None:
            self.refresh_views()
        views = self._views
        h = obs
        last = len(views) - 1
        relu = self.activation == "relu"
        for i, (w, b) in enumerate(views):
            h = w @ h
            h += b
            if i < last:
                if relu:
                    np.maximum(h, 0.0, out=h)
                else:
                    np.tanh(h, out=h)
        return h
