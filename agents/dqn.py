"""Deep Q-Network (Mnih et al. 2015) with Double DQN, in the shape of Stable-Baselines3's DQN.

The algorithm lives here; the replay buffer is :mod:`agents.buffers` and the network
:mod:`agents.policies` (the SB3 split into algorithm / buffer / policy).

Semantics follow SB3 so that its published hyperparameters (rl-baselines3-zoo) carry over:

- every call to :meth:`DQNAgent.learn` is one environment step (``num_timesteps += 1``);
- before ``learning_starts`` steps, exploring actions are uniformly random (legal) actions;
- epsilon falls linearly from ``exploration_initial_eps`` to ``exploration_final_eps`` over
  the first ``exploration_fraction`` of training and then stays there. Training length is
  ``total_steps`` when set, else what :func:`agents.train` announces through
  :meth:`DQNAgent.set_training_horizon` (a step budget, or else an episode budget in which
  case progress is counted in episodes);
- every ``train_freq`` steps, once more than ``learning_starts`` steps were taken,
  ``gradient_steps`` gradient steps are made on uniform batches of ``batch_size``;
- every ``target_update_interval`` steps the target network moves to the online network:
  copied when ``tau == 1``, else ``target = (1 - tau) * target + tau * online``;
- the target is ``r + gamma * (1 - terminated) * Q_target(s', a*)`` with
  ``a* = argmax_{a' legal} Q_online(s', a')`` (Double DQN, default) or
  ``max_{a' legal} Q_target(s', a')``: truncated transitions bootstrap, terminal ones do not;
- Huber (smooth L1) loss, Adam, gradient norm clipped to ``max_grad_norm``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field

from langadapt.agents.base import Agent, rng_state, set_rng_state
from langadapt.agents.buffers import ReplayBuffer
from langadapt.agents.policies import QNetwork


class DQNConfig(BaseModel):
    """Hyperparameters of :class:`DQNAgent` (all have defaults)."""

    model_config = ConfigDict(extra="forbid")

    hidden_sizes: list[int] = Field(
        default_factory=lambda: [256, 256], description="Widths of the hidden layers."
    )
    activation: str = Field("relu", description='Hidden activation: "relu" or "tanh".')
    learning_rate: float = Field(1e-3, gt=0.0, description="Adam learning rate.")
    buffer_size: int = Field(100_000, ge=1, description="Replay buffer capacity (transitions).")
    learning_starts: int = Field(
        1000, ge=0, description="Steps of uniformly random acting before training starts."
    )
    batch_size: int = Field(64, ge=1, description="Transitions per gradient step.")
    gamma: float = Field(0.99, ge=0.0, le=1.0, description="Discount factor.")
    train_freq: int = Field(4, ge=1, description="Train every this many environment steps.")
    gradient_steps: int = Field(
        1, ge=-1, description="Gradient steps per training round; -1 means train_freq."
    )
    target_update_interval: int = Field(
        1000, ge=1, description="Environment steps between target network updates."
    )
    tau: float = Field(1.0, gt=0.0, le=1.0, description="1.0 = hard copy; < 1 = soft update.")
    double_dqn: bool = Field(True, description="Select a* with the online net (Double DQN).")
    max_grad_norm: float = Field(10.0, gt=0.0, description="Gradient norm clipping threshold.")
    exploration_fraction: float = Field(
        0.1, gt=0.0, le=1.0, description="Fraction of training over which epsilon falls."
    )
    exploration_initial_eps: float = Field(1.0, ge=0.0, le=1.0, description="Epsilon at start.")
    exploration_final_eps: float = Field(0.05, ge=0.0, le=1.0, description="Epsilon at the end.")
    total_steps: int | None = Field(
        None,
        ge=1,
        description="Training length in steps for the epsilon schedule; None: set by train().",
    )


def dqn_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
    next_masks: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD targets ``r + gamma * (1 - terminated) * V(s')`` for a batch (actions on the last
    dimension, so batches of batches work too).

    ``V(s') = Q_target(s', argmax_{legal a'} Q_online(s', a'))`` when ``next_q_online`` is
    given (Double DQN), else ``max_{legal a'} Q_target(s', a')``. ``next_masks`` (bool,
    True = legal) restricts the argmax / max; ``None`` means every action is legal.
    ``terminated`` is 1.0 for terminal states only: truncated transitions bootstrap.
    """
    if next_q_online is not None:
        chooser = next_q_online
        if next_masks is not None:
            chooser = chooser.masked_fill(~next_masks, float("-inf"))
        best = chooser.argmax(dim=-1, keepdim=True)
        next_v = next_q_target.gather(-1, best).squeeze(-1)
    else:
        values = next_q_target
        if next_masks is not None:
            values = values.masked_fill(~next_masks, float("-inf"))
        next_v = values.max(dim=-1).values
    return rewards + gamma * (1.0 - terminated) * next_v


class DQNAgent(Agent):
    """DQN on flat (or flattened) Box observations and a Discrete action space."""

    kind = "dqn"
    config_model = DQNConfig
    config: DQNConfig

    def __init__(
        self,
        observation_space: spaces.Space,
        action_space: spaces.Space,
        config: DQNConfig | dict[str, Any] | None = None,
        seed: int = 0,
    ):
        super().__init__(observation_space, action_space, config, seed)
        cfg = self.config
        if not isinstance(observation_space, spaces.Box):
            raise ValueError(f"observation_space is {observation_space!r}, expected a Box space")
        if any(w < 1 for w in cfg.hidden_sizes):
            raise ValueError(f"hidden_sizes is {cfg.hidden_sizes}, expected positive widths")
        self.obs_dim = int(np.prod(self.obs_shape))
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(self.seed)
            self.q_net = QNetwork(self.obs_dim, self.n_actions, cfg.hidden_sizes, cfg.activation)
            self.target_net = QNetwork(
                self.obs_dim, self.n_actions, cfg.hidden_sizes, cfg.activation
            )
        self.target_net.load_state_dict(self.q_net.state_dict())
        self.target_net.requires_grad_(False)
        self.optimizer = _adam(self.q_net.parameters(), cfg.learning_rate)
        self.buffer = ReplayBuffer(cfg.buffer_size, (self.obs_dim,), self.n_actions)
        self.gradient_steps = cfg.train_freq if cfg.gradient_steps == -1 else cfg.gradient_steps
        if self.gradient_steps < 1:
            raise ValueError(f"gradient_steps is {cfg.gradient_steps}, expected >= 1 or -1")
        self.num_timesteps = 0
        self.episodes = 0
        self.n_updates = 0
        self.epsilon = cfg.exploration_initial_eps
        self.horizon_steps: int | None = cfg.total_steps
        self.horizon_episodes: int | None = None
        self._trained_since_sync = False
        self._last_batch: tuple[torch.Tensor, torch.Tensor] | None = None

    # --------------------------------------------------------------- schedule
    def set_training_horizon(self, steps: int | None = None, episodes: int | None = None) -> None:
        """Fix the length of training for the epsilon schedule (``config.total_steps`` wins)."""
        super().set_training_horizon(steps=steps, episodes=episodes)
        if self.config.total_steps is not None:
            return
        self.horizon_steps = steps
        self.horizon_episodes = None if steps is not None else episodes

    def progress(self) -> float:
        """Fraction of training done (0 to 1+), in steps or else in episodes."""
        if self.horizon_steps is not None:
            return self.num_timesteps / self.horizon_steps
        if self.horizon_episodes is not None:
            return self.episodes / self.horizon_episodes
        raise ValueError(
            "DQNAgent does not know how long training lasts, so its epsilon schedule is "
            "undefined: set config total_steps=... or call set_training_horizon(steps=...) "
            "(agents.train does this)"
        )

    def _update_epsilon(self) -> None:
        cfg = self.config
        p = self.progress()
        if p >= cfg.exploration_fraction:
            self.epsilon = cfg.exploration_final_eps
        else:
            start, end = cfg.exploration_initial_eps, cfg.exploration_final_eps
            self.epsilon = start + (end - start) * p / cfg.exploration_fraction

    # --------------------------------------------------------------- protocol
    def q_values(self, obs: Any) -> np.ndarray:
        """Online-network action values of one observation (float32 numpy array)."""
        return self.q_net.numpy_forward(self.check_obs(obs).reshape(-1)).copy()

    def act(self, obs: Any, legal_moves: Sequence[int] | None = None, explore: bool = True) -> int:
        """Epsilon-greedy (``explore``) or greedy action among the legal moves."""
        arr = self.check_obs(obs)
        mask = None if legal_moves is None else self.legal_mask(legal_moves, "legal_moves")
        if explore and (
            self.num_timesteps < self.config.learning_starts or self.rng.random() < self.epsilon
        ):
            if mask is None:
                return int(self.rng.integers(self.n_actions))
            legal = np.flatnonzero(mask)
            return int(legal[self.rng.integers(legal.size)])
        q = self.q_net.numpy_forward(arr.reshape(-1))
        if mask is not None:
            q = np.where(mask, q, -np.inf)
        return int(q.argmax())

    def learn(
        self,
        obs: Any,
        action: int,
        reward: float,
        next_obs: Any,
        terminated: bool,
        truncated: bool,
        next_legal_moves: Sequence[int] | None = None,
    ) -> None:
        """Store the transition, advance the schedules and train / update the target on time."""
        cfg = self.config
        arr = self.check_obs(obs)
        next_arr = self.check_obs(next_obs)
        a = self.check_action(action)
        reward, terminated, truncated = self.check_transition(reward, terminated, truncated)
        if terminated or next_legal_moves is None:
            next_mask = self._all_legal  # a terminal state's value is never used
        else:
            next_mask = self.legal_mask(next_legal_moves, "next_legal_moves")
        self.buffer.add(arr.reshape(-1), a, reward, next_arr.reshape(-1), terminated, next_mask)
        self.num_timesteps += 1
        if terminated or truncated:
            self.episodes += 1
        self._update_epsilon()
        t = self.num_timesteps
        if t % cfg.target_update_interval == 0:
            self.update_target()
        if t % cfg.train_freq == 0 and t > cfg.learning_starts:
            self.train_steps(self.gradient_steps)

    # --------------------------------------------------------------- training
    def update_target(self) -> None:
        """Hard copy (``tau == 1``) or Polyak step of the online weights into the target."""
        tau = self.config.tau
        if tau == 1.0 and not self._trained_since_sync:
            return  # the online net has not changed since the last copy
        with torch.no_grad():
            if tau == 1.0:
                self.target_net.flat.copy_(self.q_net.flat)
            else:
                self.target_net.flat.lerp_(self.q_net.flat, tau)
        self._trained_since_sync = False

    def target_q_values(
        self,
        next_obs: torch.Tensor,
        rewards: torch.Tensor,
        terminated: torch.Tensor,
        next_masks: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """TD targets of a batch with the current networks (see :func:`dqn_targets`)."""
        with torch.no_grad():
            next_q_target = self.target_net(next_obs)
            next_q_online = self.q_net(next_obs) if self.config.double_dqn else None
            return dqn_targets(
                rewards, terminated, self.config.gamma, next_q_target, next_q_online, next_masks
            )

    def train_steps(self, gradient_steps: int) -> None:
        """``gradient_steps`` gradient steps on uniformly sampled batches.

        Equivalent to the textbook loop (sample, compute targets, Huber loss, backward, clip,
        Adam step) but organised for speed: all batches of the round come from one index draw
        and one gather; the target network, which does not change during a round, is
        evaluated on all of them in one pass; with Double DQN the online network sees
        ``[obs; next_obs]`` in one forward pass; the backward pass is
        :meth:`QNetwork.backward_into_grad`.
        """
        cfg = self.config
        bsz, n, dim = cfg.batch_size, gradient_steps, self.obs_dim
        buf = self.buffer
        idx = buf.sample_indices(self.rng, n * bsz)
        obs = buf.obs[idx].reshape(n, bsz, dim)
        next_obs = buf.next_obs[idx].reshape(n, bsz, dim)
        actions = torch.from_numpy(buf.actions[idx].reshape(n, bsz, 1))
        rewards = torch.from_numpy(buf.rewards[idx].reshape(n, bsz))
        terminated = torch.from_numpy(buf.terminated[idx].reshape(n, bsz))
        masks = (
            torch.from_numpy(buf.next_masks[idx].reshape(n, bsz, self.n_actions))
            if buf.has_illegal
            else None
        )
        with torch.no_grad():
            next_q_target = self.target_net(torch.from_numpy(next_obs)).view(n, bsz, -1)
        if cfg.double_dqn:
            inputs = torch.from_numpy(np.concatenate([obs, next_obs], axis=1))  # (n, 2B, D)
            targets = None
        else:
            inputs = torch.from_numpy(obs)
            targets = dqn_targets(rewards, terminated, cfg.gamma, next_q_target, None, masks)
        # d(mean Huber)/d(Q(s, a)) = clamp(Q(s, a) - y, -1, 1) / B, scattered to column a.
        one_hot = torch.zeros(n, bsz, self.n_actions).scatter_(2, actions, 1.0 / bsz)
        net = self.q_net
        net.grad_views()  # allocates flat.grad once
        flat_grad = net.flat.grad
        max_norm = cfg.max_grad_norm
        q_taken = target = None
        for g in range(n):
            out, layer_inputs = net.forward_train(inputs[g])
            if targets is None:
                target = dqn_targets(
                    rewards[g],
                    terminated[g],
                    cfg.gamma,
                    next_q_target[g],
                    out[bsz:],
                    None if masks is None else masks[g],
                )
            else:
                target = targets[g]
            q_taken = out[:bsz].gather(1, actions[g]).squeeze(1)
            delta = (q_taken - target).clamp_(-1.0, 1.0)
            net.backward_into_grad(one_hot[g] * delta.unsqueeze(1), layer_inputs)
            # clip_grad_norm_ on the single flat gradient
            norm = torch.linalg.vector_norm(flat_grad)
            flat_grad.mul_((max_norm / (norm + 1e-6)).clamp_(max=1.0))
            self.optimizer.step()
        self.n_updates += n
        self._trained_since_sync = True
        if q_taken is not None:
            self._last_batch = (q_taken, target)

    @property
    def last_loss(self) -> float | None:
        """Huber loss of the last gradient step's batch, before that step (None before
        training)."""
        if self._last_batch is None:
            return None
        return float(F.smooth_l1_loss(*self._last_batch))

    # ------------------------------------------------------------ save / load
    def _header(self) -> dict[str, Any]:
        return super()._header() | {
            "hidden_sizes": list(self.config.hidden_sizes),
            "activation": self.config.activation,
        }

    def save(self, path: str | Path) -> None:
        """Write networks, optimiser, counters and RNG state to a torch file at ``path``.

        The replay buffer is not saved: a loaded agent acts identically and can continue
        training, refilling its buffer from new experience.
        """
        header = self._header() | {
            "num_timesteps": self.num_timesteps,
            "episodes": self.episodes,
            "n_updates": self.n_updates,
            "epsilon": self.epsilon,
            "horizon_steps": self.horizon_steps,
            "horizon_episodes": self.horizon_episodes,
            "rng": rng_state(self.rng),
            "config": self.config.model_dump(),
        }
        torch.save(
            {
                "header": json.dumps(header),
                "q_net": self.q_net.state_dict(),
                "target_net": self.target_net.state_dict(),
                "optimizer": self.optimizer.state_dict(),
            },
            Path(path),
        )

    def load(self, path: str | Path) -> None:
        """Restore a file written by :meth:`save` (loaded with ``weights_only=True``).

        ValueError if it holds another kind of agent or other shapes / layers.
        """
        header, payload = self.read_checked(path)
        self.q_net.load_state_dict(payload["q_net"])
        self.target_net.load_state_dict(payload["target_net"])
        self.optimizer.load_state_dict(payload["optimizer"])
        self.num_timesteps = int(header["num_timesteps"])
        self.episodes = int(header["episodes"])
        self.n_updates = int(header["n_updates"])
        self.epsilon = float(header["epsilon"])
        if self.config.total_steps is None:
            self.horizon_steps = header["horizon_steps"]
            self.horizon_episodes = header["horizon_episodes"]
        set_rng_state(self.rng, header["rng"])
        self._trained_since_sync = True


def _adam(params: Any, lr: float) -> torch.optim.Optimizer:
    """Adam (torch defaults: betas (0.9, 0.999), eps 1e-8, as SB3) with the fused kernel where
    this torch build has it."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, foreach=True)
