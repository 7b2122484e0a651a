"""The Q-network of :class:`agents.DQNAgent`: an MLP stored in one flat parameter tensor.

Why one flat tensor: the optimiser, gradient clipping and target updates then each act on a
single tensor (one kernel call instead of one per layer), and the per-layer weights are views
into it. Three ways to evaluate the same function:

- :meth:`QNetwork.forward`: ordinary autograd-compatible torch forward (general use, tests).
- :meth:`QNetwork.forward_train` + :meth:`QNetwork.backward_into_grad`: the training step's
  forward pass (keeping the activations) and a hand-written backward pass for this MLP that
  writes the gradient straight into ``flat.grad``. For networks this small the autograd
  engine's bookkeeping costs as much as the arithmetic; the tests check the gradient
  against autograd.
- :meth:`QNetwork.numpy_forward`: one observation, computed with numpy on *views* of the
  parameter storage, for acting (a few microseconds instead of tens through ``nn.Module``).
  Optimiser steps and ``load_state_dict`` write in place, so the views always see the current
  weights without copying.

Initialisation is exactly ``nn.Linear``'s default (as Stable-Baselines3's DQN uses).
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

ACTIVATIONS = ("relu", "tanh")


class QNetwork(nn.Module):
    """MLP from a flat observation vector to one value per action."""

    def __init__(self, obs_dim: int, n_actions: int, hidden_sizes: list[int], activation: str):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation is {activation!r}, expected one of {list(ACTIVATIONS)}")
        self.obs_dim = obs_dim
        self.n_actions = n_actions
        self.activation = activation
        sizes = [obs_dim, *hidden_sizes, n_actions]
        self.layer_shapes = list(zip(sizes[1:], sizes[:-1], strict=True))  # (out, in)
        linears = [nn.Linear(i, o) for o, i in self.layer_shapes]
        total = sum(o * i + o for o, i in self.layer_shapes)
        self.flat = nn.Parameter(torch.empty(total))
        with torch.no_grad():
            for (w, b), lin in zip(self._split(self.flat), linears, strict=True):
                w.copy_(lin.weight)
                b.copy_(lin.bias)
        self._cache: dict[str, list] = {}

    def _split(self, t: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
        out, pos = [], 0
        for o, i in self.layer_shapes:
            w = t[pos : pos + o * i].view(o, i)
            pos += o * i
            out.append((w, t[pos : pos + o]))
            pos += o
        return out

    def _apply(self, fn, *args, **kwargs):  # .to(), .float(), ... may replace the storage
        self._cache = {}
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self._cache = {}

    # ------------------------------------------------------------------ autograd path
    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        layers = self._split(self.flat)
        h = obs
        last = len(layers) - 1
        for i, (w, b) in enumerate(layers):
            h = F.linear(h, w, b)
            if i < last:
                h = torch.relu(h) if self.activation == "relu" else torch.tanh(h)
        return h

    def layer_params(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(weight, bias) per layer: detached views of ``flat`` (in-place edits change it)."""
        if "params" not in self._cache:
            self._cache["params"] = self._split(self.flat.detach())
        return self._cache["params"]

    # ------------------------------------------------------------- manual training path
    def grad_views(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """(weight, bias) views of ``flat.grad`` (allocated once, overwritten every step)."""
        if self.flat.grad is None or "grads" not in self._cache:
            if self.flat.grad is None:
                self.flat.grad = torch.zeros_like(self.flat)
            self._cache["grads"] = self._split(self.flat.grad)
        return self._cache["grads"]

    def forward_train(self, x: torch.Tensor) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """Output and the inputs of every layer (``x`` first), without autograd."""
        params = self.layer_params()
        inputs = [x]
        h = x
        last = len(params) - 1
        for i, (w, b) in enumerate(params):
            h = torch.addmm(b, h, w.t())
            if i < last:
                if self.activation == "relu":
                    h.relu_()
                else:
                    h.tanh_()
                inputs.append(h)
        return h, inputs

    def backward_into_grad(self, grad_out: torch.Tensor, inputs: list[torch.Tensor]) -> None:
        """Write d(loss)/d(flat) into ``flat.grad`` given d(loss)/d(output) of the first
        ``len(grad_out)`` rows of the batch that :meth:`forward_train` saw."""
        rows = grad_out.shape[0]
        params = self.layer_params()
        grads = self.grad_views()
        g = grad_out
        for i in range(len(params) - 1, -1, -1):
            inp = inputs[i][:rows]
            gw, gb = grads[i]
            torch.mm(g.t(), inp, out=gw)
            torch.sum(g, 0, out=gb)
            if i > 0:
                g = g.mm(params[i][0])
                if self.activation == "relu":
                    g.mul_(inp > 0)
                else:
                    g.mul_(1.0 - inp * inp)

    # ------------------------------------------------------------------- acting path
    def numpy_forward(self, obs: np.ndarray) -> np.ndarray:
        """Q-values of one flat float32 observation, computed with numpy (no autograd)."""
        views = self._cache.get("numpy")
        if views is None:
            views = [(w.numpy(), b.numpy()) for w, b in self.layer_params()]
            self._cache["numpy"] = views
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
