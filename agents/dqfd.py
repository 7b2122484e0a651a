"""DQfD's supervised large-margin term (Hester et al. 2018), added by DQN on transitions learnt
as demonstrations.
"""

from __future__ import annotations

import torch


def large_margin_loss(
    q: torch.Tensor, actions: torch.Tensor, marked: torch.Tensor, margin: float
) -> torch.Tensor:
    """DQfD's supervised loss over a batch: the mean of ``marked * J_E`` with
    ``J_E = max_a [Q(s,a) + l(a_E,a)] - Q(s,a_E)``, ``l = margin`` for ``a != a_E``, 0 for
    ``a_E``.

    ``q``: (B, n_actions) values; ``actions``: (B, 1) int64 advised actions ``a_E``;
    ``marked``: (B,) 1.0 for transitions learnt as demonstrations, 0.0 for the others (so
    the term's weight grows with the share of demonstrations in the batch). ``J_E`` is 0
    when ``a_E`` leads every other action by at least ``margin``. The max runs over all
    actions: the learner is not told which were legal in ``s``.
    """
    margins = torch.full_like(q, margin).scatter_(1, actions, 0.0)
    j_e = (q + margins).max(dim=1).values - q.gather(1, actions).squeeze(1)
    return (marked * j_e).mean()
