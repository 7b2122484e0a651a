"""The TRL side of :mod:`.finetune_trl_bench`: TRL's ``GRPOTrainer`` on the maze, with the
environment's return as its reward function, and what both sides share (parsing a reply,
the worst return, the progress line and the CPU budget)."""

from __future__ import annotations

import dataclasses
import json
import re
import resource
import tempfile
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ..environments import MazeEnv
from ..finetune import GRPOSettings, GRPOTrainer, LoRAPolicy, MazeTask

#: Tokens TRL may generate per completion (``{"action": N}`` and end of turn need ~8).
MAX_COMPLETION_TOKENS = 12
#: ``"action": N`` anywhere in a reply (N an integer, quoted or not): the first one counts.
ACTION_FIELD = re.compile(r'"action"\s*:\s*"?\s*(\d{1,6})\b')


def parse_action(text: str, legal: Sequence[int]) -> int | None:
    """The action of the first ``"action": N`` in a generated reply if N is legal, else None.

    Lenient on the rest of the reply: SmolLM2's greedy replies to the decision prompt start
    like ``{"action": "1", "legalActions`` (N quoted, more fields) and run past
    ``max_completion_length``, so a parser demanding the exact JSON (`exact_reply`) would
    leave TRL next to no legal sample, no reward spread and no gradient. (Sampled at
    temperature 1 even this one finds few: none of the 24 completions of a first step on
    umaze.)"""
    found = ACTION_FIELD.search(text)
    if found is None:
        return None
    action = int(found.group(1))
    return action if action in {int(m) for m in legal} else None


def exact_reply(text: str, action: int) -> bool:
    """Whether ``text`` is exactly the reply ``llm_policy`` scores for ``action``."""
    return text.strip() == json.dumps({"action": int(action)})


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def worst_return(env: MazeEnv, settings: GRPOSettings) -> float:
    """The lowest return any rollout of at most ``settings.horizon`` steps can get: reaching
    the goal after k steps, or never within the horizon."""
    g, step, goal = settings.gamma, env.step_reward, env.goal_reward
    lows, total = [], 0.0
    for k in range(settings.horizon):
        lows.append(total + g ** k * goal)  # the goal at step k
        total += g ** k * step
    return float(min(*lows, total))


class EnvironmentReward:
    """TRL reward function: parse ``{"action": N}`` from each completion and return the
    environment return of the rollout from its cell (`GRPOTrainer.returns` of a langadapt
    trainer over ``policy``, so the continuation samples the current weights); a completion
    that names no legal action (`parse_action`) gets `worst_return` and is counted."""

    __name__ = "maze_return"

    def __init__(self, policy: LoRAPolicy, task: MazeTask, settings: GRPOSettings,
                 seed: int = 0) -> None:
        self.policy = policy
        self.task = task
        # langadapt's own reward code (its optimiser is never stepped: no state is made)
        self.rewarder = GRPOTrainer(policy, task, settings, out=None, seed=seed)
        self.worst = worst_return(task.env, settings)
        self.samples = 0
        self.illegal = 0
        self.exact = 0

    def action(self, cell: tuple[int, int], text: str) -> int | None:
        """The legal action the reply names, else None."""
        return parse_action(text, self.task.legal(cell))

    def rewards(self, cells: Sequence[tuple[int, int]], texts: Sequence[str],
                cache: dict[Any, np.ndarray] | None = None) -> list[float]:
        """The reward of each reply ``texts[i]`` in ``cells[i]``, the rollouts of the legal
        ones in lockstep (``cache``: the policy's distributions by `MazeTask.key`, already
        computed with the current weights; filled as needed)."""
        actions = [self.action(c, t) for c, t in zip(cells, texts, strict=True)]
        out = [self.worst] * len(actions)
        legal = [i for i, a in enumerate(actions) if a is not None]
        if legal:
            values, _ = self.rewarder.returns([cells[i] for i in legal],
                                              [actions[i] for i in legal], cache)
            for i, value in zip(legal, values, strict=True):
                out[i] = float(value)
        self.samples += len(actions)
        self.illegal += len(actions) - len(legal)
        self.exact += sum(exact_reply(texts[i], actions[i]) for i in legal)
        return out

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any],
                 cell: Sequence[Sequence[int]], **kwargs: Any) -> list[float]:
        texts = [str(c[-1]["content"] if isinstance(c, list) else c) for c in completions]
        return self.rewards([(int(w[0]), int(w[1])) for w in cell], texts)


def progress_line(side: str, done: int, steps: int, wall: float, cpu: float) -> None:
    print(f"  [{side}] step {done}/{steps}: {wall:.2f} s wall, {cpu:.2f} s CPU", flush=True)


def over_budget(cpu_used: float, cpu_budget: float | None) -> bool:
    return cpu_budget is not None and cpu_used >= cpu_budget


def train_trl(trainer: GRPOTrainer, steps: int, cpu_budget: float | None,
               seed: int) -> tuple[list[tuple[float, float]], list[float], float, float]:
    from datasets import Dataset
    from transformers import PrinterCallback, TrainerCallback
    from trl import GRPOConfig
    from trl import GRPOTrainer as TRLGRPOTrainer

    class StepClock(TrainerCallback):
        """Wall and CPU seconds of each optimiser step (generation, rewards, loss, update);
        stops training once the CPU budget is spent."""

        def __init__(self) -> None:
            self.times: list[tuple[float, float]] = []
            self.started = (0.0, 0.0)

        def on_step_begin(self, args, state, control, **kwargs):
            self.started = (time.perf_counter(), cpu_seconds())

        def on_step_end(self, args, state, control, **kwargs):
            wall0, cpu0 = self.started
            self.times.append((time.perf_counter() - wall0, cpu_seconds() - cpu0))
            progress_line("trl", len(self.times), steps, *self.times[-1])
            if over_budget(sum(c for _, c in self.times), cpu_budget):
                control.should_training_stop = True
            return control

    policy, task, settings = trainer.policy, trainer.task, trainer.settings
    reward = EnvironmentReward(policy, task, settings, seed=seed)
    cells = task.cells
    g = settings.group_size
    # States per micro-batch (forward + backward): dividing the cells evenly (one generation
    # of every cell, then one optimiser step over the accumulated micro-batches), and TRL's
    # sequences per pass (G per state, each with its whole prompt) no more than the prompts
    # our side encodes per pass (min(cells, batch_size)): on umaze one state (4 sequences)
    # per pass. All 24 in one pass peaked at 11.6 GB RSS on SmolLM2.
    per_batch = max(d for d in range(1, len(cells) + 1) if len(cells) % d == 0
                    and (d == 1 or d * g <= min(len(cells), settings.batch_size)))
    rows = [{"prompt": policy.messages(*task.observe(c)), "cell": [int(c[0]), int(c[1])]}
            for c in cells]
    # in order, unshuffled: each generation batch is the cells once, as on our side
    dataset = Dataset.from_list(rows * min(steps, 64))
    policy.tokenizer.padding_side = "left"
    # no activation (gradient) checkpointing; transformers 5 renamed the option
    names = {f.name for f in dataclasses.fields(GRPOConfig)}
    checkpointing = {"gradient_checkpointing": False,
                     **({"activation_checkpointing": False}
                        if "activation_checkpointing" in names else {})}
    with tempfile.TemporaryDirectory(prefix="langadapt-trl-") as folder:
        config = GRPOConfig(
            output_dir=folder, use_cpu=True, bf16=False, fp16=False, seed=seed,
            num_generations=g, max_completion_length=MAX_COMPLETION_TOKENS,
            per_device_train_batch_size=g * per_batch,
            gradient_accumulation_steps=len(cells) // per_batch,
            **checkpointing, learning_rate=settings.learning_rate,
            lr_scheduler_type="constant", weight_decay=settings.weight_decay,
            max_grad_norm=settings.max_grad_norm or 0.0, beta=0.0, num_iterations=1,
            temperature=policy.temperature, top_p=1.0, top_k=0,
            max_steps=steps, shuffle_dataset=False, report_to=[], logging_steps=1,
            save_strategy="no", disable_tqdm=True, dataloader_num_workers=0)
        clock = StepClock()
        theirs = TRLGRPOTrainer(model=policy.lm, reward_funcs=reward, args=config,
                                train_dataset=dataset, processing_class=policy.tokenizer,
                                callbacks=[clock])
        theirs.remove_callback(PrinterCallback)  # its log dicts; ours is one line a step
        if theirs.model is not policy.lm:  # the continuation must score the trained weights
            raise RuntimeError("TRL wrapped the policy's model; the rollouts would not follow "
                               "the trained weights")
        theirs.train()
    policy.lm.eval()  # TRL leaves it in training mode
    per_step = [entry["reward"] for entry in theirs.state.log_history if "reward" in entry]
    n = reward.samples or float("nan")
    return clock.times, per_step, reward.illegal / n, reward.exact / n
