"""BALROG's leaderboard on BabyAI (balrog-ai/experiments, ``submissions/*/summary.json`` and
``babyai/babyai_summary.json``, read 2026-11): zero-shot progression in % (on BabyAI, the
success rate) over the ``MixedTrainLocal`` level's five goal types, ``num_dists`` 0.

Each row: the model (the submission folder's name without the date and the agent prefix),
the submission date, the BabyAI average and its standard error as published, the episodes
per task (10 for the detailed submissions; 25 for the 2024 baselines that report 125 BabyAI
episodes), and per task (goto, pickup, open, putnext, pick_up_seq_go_to) the success in %
where the submission publishes it (None otherwise). The LLM track, and the top entry of the
VLM track (images and text).
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = ["BALROG_BABYAI", "Balrog"]


class Balrog(NamedTuple):
    model: str
    date: str
    average: float
    se: float
    episodes_per_task: int
    tasks: tuple[float, float, float, float, float] | None


#: Sorted by average, best first.
BALROG_BABYAI: tuple[Balrog, ...] = (
    Balrog("Claude-3.5-Sonnet (VLM track)", "2024-11-03", 82.0, 5.4, 10,
            (100.0, 100.0, 100.0, 10.0, 100.0)),
    Balrog("Gemini-2.5-Pro-Exp-03-25", "2025-04-25", 80.0, 5.7, 10,
            (100.0, 100.0, 100.0, 0.0, 100.0)),
    Balrog("GPT-4o", "2024-09-24", 77.6, 3.7, 25, None),
    Balrog("Reka-Flash-3", "2025-03-13", 76.0, 6.0, 10, (100.0, 100.0, 100.0, 10.0, 70.0)),
    Balrog("grok-4", "2025-07-13", 76.0, 6.0, 10, (100.0, 60.0, 100.0, 30.0, 90.0)),
    Balrog("DeepSeek-R1", "2024-04-10", 74.0, 6.2, 10, (100.0, 80.0, 100.0, 0.0, 90.0)),
    Balrog("Llama-3.1-70B-Instruct", "2024-09-30", 73.2, 4.0, 25, None),
    Balrog("Llama-3.2-90B-Instruct", "2024-09-30", 72.0, 6.3, 10, None),
    Balrog("Claude-3.5-Sonnet", "2024-11-03", 68.0, 6.6, 10, (80.0, 80.0, 100.0, 0.0, 80.0)),
    Balrog("gemini-2.5-flash", "2025-07-19", 68.0, 6.6, 10, (100.0, 80.0, 100.0, 0.0, 60.0)),
    Balrog("Llama-3.3-70B-Instruct", "2024-12-09", 66.0, 6.7, 10, (90.0, 100.0, 50.0, 0.0, 90.0)),
    Balrog("grok-3", "2025-04-25", 62.0, 6.9, 10, (50.0, 90.0, 100.0, 0.0, 70.0)),
    Balrog("claude-3-5-haiku", "2024-12-09", 52.0, 7.1, 10, (100.0, 50.0, 60.0, 0.0, 50.0)),
    Balrog("GPT-4o-mini", "2024-09-24", 50.4, 4.5, 25, None),
    Balrog("mistral-nemo-instruct", "2024-12-09", 50.0, 7.1, 10, (80.0, 90.0, 40.0, 20.0, 20.0)),
    Balrog("deepseek_R1_distill_qwen32B", "2025-01-26", 48.0, 7.1, 10,
            (90.0, 40.0, 40.0, 0.0, 70.0)),
    Balrog("Llama-3.1-8B-Instruct", "2024-11-01", 36.0, 6.8, 10, (60.0, 70.0, 10.0, 0.0, 40.0)),
    Balrog("microsoft_phi-4", "2025-01-13", 32.0, 6.6, 10, (60.0, 70.0, 20.0, 0.0, 10.0)),
    Balrog("Llama-3.2-3B-Instruct", "2024-10-30", 20.0, 5.7, 10, (70.0, 20.0, 0.0, 0.0, 10.0)),
    Balrog("Qwen2.5-7B-it", "2024-11-15", 14.0, 4.9, 10, (40.0, 20.0, 0.0, 0.0, 10.0)),
    Balrog("Llama-3.2-1B-Instruct", "2024-10-30", 8.0, 3.8, 10, (40.0, 0.0, 0.0, 0.0, 0.0)),
)
