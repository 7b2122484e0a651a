"""Deep Q-Network (Double DQN by default) with SB3's semantics, and DQfD's large-margin and
n-step terms on transitions learnt as demonstrations. See docs/agents.md (DQNAgent)."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import torch
import torch.nn.functional as F
from gymnasium import spaces
from pydantic import BaseModel, ConfigDict, Field
from torch import nn

from .base import Agent, take
from .buffers import ReplayBatch, ReplayBuffer


class DQNConfig(BaseModel):
    """Hyperparameters of :class:`DQNAgent`, SB3's names and defaults but the DQfD terms
    (``margin``, ``margin_weight``, ``n_step``); each is explained in docs/agents.md (DQNAgent)."""

    model_config = ConfigDict(extra="forbid")

    hidden_sizes: list[Annotated[int, Field(ge=1, le=65_536)]] = Field(
        default_factory=lambda: [256, 256], max_length=64)
    activation: Literal["relu", "tanh"] = "relu"
    learning_rate: float = Field(1e-3, gt=0.0)
    buffer_size: int = Field(100_000, ge=1, le=100_000_000)
    learning_starts: int = Field(1000, ge=0)  # steps of uniformly random acting
    batch_size: int = Field(64, ge=1)
    gamma: float = Field(0.99, ge=0.0, le=1.0)
    train_freq: int = Field(4, ge=1)
    gradient_steps: int = Field(1, ge=-1)  # -1: train_freq
    target_update_interval: int = Field(1000, ge=1)
    tau: float = Field(1.0, gt=0.0, le=1.0)  # 1.0: hard copy; < 1: Polyak step
    double_dqn: bool = True
    max_grad_norm: float = Field(10.0, gt=0.0)
    exploration_fraction: float = Field(0.1, gt=0.0, le=1.0)
    exploration_initial_eps: float = Field(1.0, ge=0.0, le=1.0)
    exploration_final_eps: float = Field(0.05, ge=0.0, le=1.0)
    device: Literal["cpu", "cuda", "auto"] = "cpu"  # auto: cuda when available
    total_steps: int | None = Field(None, ge=1)  # the epsilon schedule's; None: set by train()
    margin: float = Field(0.8, ge=0.0, le=1e6)  # DQfD's l(a_E, a) (Hester et al. use 0.8)
    margin_weight: float = Field(1.0, ge=0.0, le=1e6)  # DQfD's lambda_2; 0: no margin term
    n_step: int = Field(1, ge=1, le=100)  # DQfD's J_n over advised segments (they use 10)


def dqn_targets(
    rewards: torch.Tensor,
    terminated: torch.Tensor,
    gamma: float | torch.Tensor,
    next_q_target: torch.Tensor,
    next_q_online: torch.Tensor | None = None,
    next_masks: torch.Tensor | None = None,
) -> torch.Tensor:
    """TD targets ``r + gamma * (1 - terminated) * V(s')`` with V Double DQN's (when
    ``next_q_online`` is given) or the max of ``Q_target`` over the legal actions
    (``next_masks``, None = all); ``gamma`` may be per transition (n-step)."""
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


def large_margin_loss(
    q: torch.Tensor, actions: torch.Tensor, marked: torch.Tensor, margin: float
) -> torch.Tensor:
    """DQfD's supervised large-margin term (Hester et al. 2018), on transitions learnt as
    demonstrations: mean over the batch of ``marked * (max_a [Q(s,a) + l(a_E,a)] -
    Q(s,a_E))``, ``l = margin`` for ``a != a_E`` else 0; ``q`` (B, n), ``actions`` (B, 1)
    int64, ``marked`` (B,) of 0/1."""
    margins = torch.full_like(q, margin).scatter_(1, actions, 0.0)
    j_e = (q + margins).max(dim=1).values - q.gather(1, actions).squeeze(1)
    return (marked * j_e).mean()


def q_network(
    obs_dim: int, n_actions: int, hidden_sizes: list[int], activation: str
) -> nn.Sequential:
    """The MLP ``obs -> Q(obs, .)``: ``nn.Linear`` layers (default initialisation, as SB3)."""
    act = {"relu": nn.ReLU, "tanh": nn.Tanh}[activation]
    sizes = [obs_dim, *hidden_sizes]
    layers: list[nn.Module] = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:], strict=True):
        layers += [nn.Linear(n_in, n_out), act()]
    layers.append(nn.Linear(sizes[-1], n_actions))
    return nn.Sequential(*layers)


class DQNAgent(Agent):
    """DQN on flat (or flattened) Box observations and a Discrete action space."""

    kind = "dqn"
    optional_tensors = (r"optimizer\.\d+\.(step|exp_avg|exp_avg_sq)",)
    config_model = DQNConfig
    learns_from_demonstrations = True
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
        self.device = _device(cfg.device)
        self.obs_dim = int(np.prod(self.obs_shape))
        with torch.random.fork_rng(devices=[]):  # seeded init; the caller's RNG untouched
            torch.manual_seed(self.seed)
            self.q_net = q_network(self.obs_dim, self.n_actions, cfg.hidden_sizes, cfg.activation)
            self.target_net = copy.deepcopy(self.q_net)
        self.q_net.to(self.device)
        self.target_net.to(self.device)
        self.target_net.requires_grad_(False)
        self._parameters = list(self.q_net.parameters())  # one list for Adam and clipping
        self.optimizer = _adam(self._parameters, cfg.learning_rate)
        self.buffer = ReplayBuffer(cfg.buffer_size, self.obs_dim, self.n_actions, cfg.n_step,
                                   cfg.gamma)
        self.gradient_steps = cfg.train_freq if cfg.gradient_steps == -1 else cfg.gradient_steps
        if self.gradient_steps < 1:
            raise ValueError(f"gradient_steps is {cfg.gradient_steps}, expected >= 1 or -1")
        self.num_timesteps = 0
        self.episodes = 0
        self.n_updates = 0
        self.epsilon = cfg.exploration_initial_eps
        self.horizon_steps: int | None = cfg.total_steps
        self.horizon_episodes: int | None = None
        self.last_loss: float | None = None
        # (weight, bias) numpy views of the online layers: acting on the CPU without torch
        self._views = None if self.device.type != "cpu" else [
            (m.weight.detach().numpy(), m.bias.detach().numpy())
            for m in self.q_net if isinstance(m, nn.Linear)]

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
        return self._q(self.check_obs(obs).reshape(-1)).copy()

    def _q(self, x: np.ndarray) -> np.ndarray:
        views = self._views
        if views is None:
            with torch.no_grad():
                return self.q_net(torch.from_numpy(x).to(self.device)).cpu().numpy()
        relu = self.config.activation == "relu"
        last = len(views) - 1
        for i, (w, b) in enumerate(views):
            x = w @ x
            x += b
            if i < last:
                if relu:
                    np.maximum(x, 0.0, out=x)
                else:
                    np.tanh(x, out=x)
        return x

    def _act(self, obs: Any, legal_moves: Sequence[int] | None, explore: bool) -> int:
        """Epsilon-greedy (``explore``) or greedy action among the legal moves."""
        mask = None if legal_moves is None else self.mask(legal_moves)
        if explore and (
            self.num_timesteps < self.config.learning_starts or self.rng.random() < self.epsilon
        ):
            if mask is None:
                return int(self.rng.integers(self.n_actions))
            legal = np.flatnonzero(mask)
            return int(legal[self.rng.integers(legal.size)])
        q = self._q(np.asarray(obs, dtype=np.float32).reshape(-1))
        if mask is not None:
            q = np.where(mask, q, -np.inf)
        return int(q.argmax())

    def confident(self, obs: Any, legal_moves: Sequence[int] | None = None) -> bool:
        """True when the greedy action leads every other legal action by at least
        ``margin`` (so the large-margin term of a demonstration of it would be 0)."""
        q = self._q(self.check_obs(obs).reshape(-1))
        if legal_moves is not None:
            q = q[self.legal_mask(legal_moves, "legal_moves")]
        if q.size < 2:
            return True
        second, first = np.partition(q, -2)[-2:]
        return bool(first - second >= self.config.margin)

    def _learn(self, obs: Any, action: int, reward: float, next_obs: Any, terminated: bool,
               truncated: bool, next_legal_moves: Sequence[int] | None = None,
               demonstration: bool = False) -> None:
        """Store the transition (``demonstration``: an advised action to learn with the
        large-margin term too), advance the schedules and train / update the target on time."""
        cfg = self.config
        # a terminal state's value is never used: its mask is all legal
        next_mask = self.mask(None if terminated else next_legal_moves)
        self.buffer.add(np.reshape(obs, -1), action, reward, np.reshape(next_obs, -1), terminated,
                        next_mask, bool(demonstration), truncated)
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
        if tau == 1.0:
            self.target_net.load_state_dict(self.q_net.state_dict())
            return
        with torch.no_grad():
            for target, online in zip(
                self.target_net.parameters(), self.q_net.parameters(), strict=True
            ):
                target.lerp_(online, tau)

    def train_steps(self, gradient_steps: int) -> None:
        """``gradient_steps`` gradient steps on uniform batches drawn in one index draw (the target
        network evaluated once for the round); ``last_loss`` is the last batch's loss."""
        cfg = self.config
        batch = self.buffer.sample(self.rng, gradient_steps, cfg.batch_size, self.device)
        masks = batch.next_masks
        with torch.no_grad():
            next_q_target = self.target_net(batch.next_obs)
            n_step_q_target = None if batch.n_step is None else self.target_net(
                batch.n_step.next_obs)
        for g in range(gradient_steps):
            with torch.no_grad():
                targets = dqn_targets(
                    batch.rewards[g], batch.terminated[g], cfg.gamma, next_q_target[g],
                    self.q_net(batch.next_obs[g]) if cfg.double_dqn else None,
                    None if masks is None else masks[g])
            q = self.q_net(batch.obs[g])
            q_taken = q.gather(1, batch.actions[g]).squeeze(1)
            loss = F.smooth_l1_loss(q_taken, targets)
            if batch.demonstrations is not None:
                loss = loss + self._demonstration_loss(batch, g, q, q_taken, n_step_q_target)
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self._parameters, cfg.max_grad_norm, foreach=True)
            self.optimizer.step()
        self.n_updates += gradient_steps
        self.last_loss = loss.item()

    def _demonstration_loss(self, batch: ReplayBatch, g: int, q: torch.Tensor,
                            q_taken: torch.Tensor, n_step_q_target: torch.Tensor | None
                            ) -> torch.Tensor:
        """DQfD's terms on the marked transitions of batch ``g``: ``margin_weight * J_E``,
        plus the Huber loss toward their n-step returns (``n_step > 1``)."""
        cfg, marked = self.config, batch.demonstrations[g]
        loss = cfg.margin_weight * large_margin_loss(q, batch.actions[g], marked, cfg.margin)
        n = batch.n_step
        if n is not None:
            with torch.no_grad():
                targets = dqn_targets(
                    n.returns[g], n.terminated[g], n.discounts[g], n_step_q_target[g],
                    self.q_net(n.next_obs[g]) if cfg.double_dqn else None,
                    None if n.next_masks is None else n.next_masks[g])
            huber = F.smooth_l1_loss(q_taken, targets, reduction="none")
            loss = loss + (marked * huber).mean()
        return loss

    # ------------------------------------------------------------ snapshots / files
    def snapshot(self) -> dict[str, torch.Tensor]:
        """A copy of the online and target weights."""
        return {
            **{f"q_net.{k}": v.clone() for k, v in self.q_net.state_dict().items()},
            **{f"target_net.{k}": v.clone() for k, v in self.target_net.state_dict().items()},
        }

    def restore(self, snapshot: dict[str, torch.Tensor]) -> None:
        """Copy weights from :meth:`snapshot` (in place: the acting views stay valid);
        every tensor is checked before any is copied."""
        checked = {
            name: {k: take(snapshot, f"{name}.{k}", v.shape) for k, v in net.state_dict().items()}
            for name, net in (("q_net", self.q_net), ("target_net", self.target_net))
        }
        self.q_net.load_state_dict(checked["q_net"])
        self.target_net.load_state_dict(checked["target_net"])

    def header(self) -> dict[str, Any]:
        return super().header() | {
            "hidden_sizes": list(self.config.hidden_sizes),
            "activation": self.config.activation,
        }

    def save_replay_buffer(self, path: str | Path) -> None:
        """Write the replay buffer, demonstration marks included (SB3's name; :meth:`save`
        keeps the agent without it)."""
        self.buffer.save(path)

    def load_replay_buffer(self, path: str | Path) -> None:
        """Replace the replay buffer's contents by the file :meth:`save_replay_buffer` wrote
        (ValueError naming the file when it does not fit)."""
        self.buffer.load(path)

    def get_state(self) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
        """Networks, Adam moments, counters and RNG state. The replay buffer is not saved
        (:meth:`save_replay_buffer` does): a loaded agent acts identically and can continue
        training, refilling its buffer."""
        state, _ = super().get_state()
        tensors = {k: v.cpu() for k, v in self.snapshot().items()}
        for index, moments in self.optimizer.state_dict()["state"].items():
            tensors |= {f"optimizer.{index}.{k}": v.cpu() for k, v in moments.items()}
        state |= {
            "num_timesteps": self.num_timesteps,
            "episodes": self.episodes,
            "n_updates": self.n_updates,
            "epsilon": self.epsilon,
            "horizon_steps": self.horizon_steps,
            "horizon_episodes": self.horizon_episodes,
        }
        return state, tensors

    def set_state(self, state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
        optimizer = self.optimizer.state_dict()
        optimizer["state"] = {
            i: {
                "step": take(tensors, f"optimizer.{i}.step", ()).to(self.device),
                "exp_avg": take(tensors, f"optimizer.{i}.exp_avg", p.shape).to(self.device),
                "exp_avg_sq": take(tensors, f"optimizer.{i}.exp_avg_sq", p.shape).to(self.device),
            }
            for i, p in enumerate(self.q_net.parameters())
            if f"optimizer.{i}.step" in tensors
        }
        self.restore({k: v.to(self.device) for k, v in tensors.items()})
        self.optimizer.load_state_dict(optimizer)
        super().set_state(state, tensors)
        self.num_timesteps = int(state["num_timesteps"])
        self.episodes = int(state["episodes"])
        self.n_updates = int(state["n_updates"])
        self.epsilon = float(state["epsilon"])
        if self.config.total_steps is None:
            self.horizon_steps = state["horizon_steps"]
            self.horizon_episodes = state["horizon_episodes"]


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            'device is "cuda" but this torch build sees no CUDA device; use "cpu" or "auto"'
        )
    return torch.device(name)


def _adam(params: Any, lr: float) -> torch.optim.Optimizer:
    """Adam (torch defaults: betas (0.9, 0.999), eps 1e-8, as SB3) with the fused kernel where
    this torch build has it."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.Adam(params, lr=lr, foreach=True)
