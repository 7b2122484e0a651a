"""DQfD's supervised large-margin term (Hester et al. 2018), added by DQN on transitions learnt
as demonstrations."""

from __future__ import annotations

import torch


def large_margin_loss(
    q: torch.Tensor, actions: torch.Tensor, marked: torch.Tensor, margin: float
) -> torch.Tensor:
    """Mean over the batch of ``marked * (max_a [Q(s,a) + l(a_E,a)] - Q(s,a_E))``, ``l = margin``
    for ``a != a_E`` else 0; ``q`` (B, n), ``actions`` (B, 1) int64, ``marked`` (B,) of 0/1."""
    margins = torch.full_like(q, margin).scatter_(1, actions, 0.0)
    j_e = (q + margins).max(dim=1).values - q.gather(1, actions).squeeze(1)
    return (marked * j_e).mean()
