"""Rewards for RL on kernels, from the same evaluator that decides every verdict.

`reward(task, completion)` parses an LLM completion, evaluates the program and returns a
structured `Reward`; `KernelReward` is the same as a TRL `GRPOTrainer` reward function
(`reward_funcs=[KernelReward()]`, with a dataset column `task`). The value is CUDA-L1's:
the speedup t_ref / t_candidate over eager PyTorch (or `torch.compile`), optionally as a log,
clipped, and optionally normalised with rolling statistics and clipped to ±k (CUDA-L1 used
k = 1.5). Failures get defined values, and a program the evaluator *rejected* (a detected
exploit: caching, side streams, patched timers...) gets the lowest one, so cheating never
pays more than failing honestly.
"""

from __future__ import annotations

import math
import statistics
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from warpforge.candidate import Candidate, EvalResult
from warpforge.config import EvalConfig
from warpforge.errors import ConfigError
from warpforge.evaluate import Judge
from warpforge.evaluator import Evaluator
from warpforge.executor.evaluators import make_evaluator
from warpforge.propose.parse import parse_reply
from warpforge.task import Task, load_task


@dataclass(frozen=True)
class RewardConfig:
    baseline: Literal["eager", "compile"] = "eager"
    """What the speedup is measured against."""
    transform: Literal["speedup", "log"] = "speedup"
    """speedup: t_ref / t (1.0 = as fast as the baseline); log: its natural log (0.0 = as fast)."""
    clip: tuple[float, float] | None = (0.0, 10.0)
    """Bounds on the transformed value; a 100x outlier must not dominate a GRPO group."""
    no_program: float = 0.0
    """The completion held no usable program (no code block, no ModelNew, truncated)."""
    failed: float = 0.0
    """Compile error, runtime error, time-out or crash."""
    incorrect: float = 0.0
    """It ran, but its outputs are wrong."""
    rejected: float = -1.0
    """The evaluator caught a forbidden behaviour: must be the lowest value."""
    untimed: float = 1.0
    """Correct but not timed (bench off): counts as correct only."""

    def __post_init__(self) -> None:
        if self.rejected > min(self.no_program, self.failed, self.incorrect):
            raise ConfigError("the reward for a rejected (cheating) program must not exceed any other failure's")


@dataclass(frozen=True)
class Reward:
    value: float
    status: str
    """The evaluator's status, or "no_program" when the completion could not be parsed."""
    reason: str
    speedup: float | None = None
    result: EvalResult | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"value": self.value, "status": self.status, "reason": self.reason, "speedup": self.speedup}


def score(result: EvalResult, config: RewardConfig = RewardConfig()) -> Reward:
    """The reward of one evaluation."""
    if result.status == "rejected":
        return Reward(config.rejected, result.status, result.reason, None, result)
    if result.status == "incorrect":
        return Reward(config.incorrect, result.status, result.reason, None, result)
    if not result.correct:
        return Reward(config.failed, result.status, result.reason, None, result)
    speedup = result.speedup_vs_compile if config.baseline == "compile" else result.speedup
    if speedup is None:
        return Reward(config.untimed, result.status, result.reason, None, result)
    value = math.log(speedup) if config.transform == "log" else speedup
    if config.clip is not None:
        value = min(max(value, config.clip[0]), config.clip[1])
    return Reward(value, result.status, result.reason, speedup, result)


def reward(task: Task | str, completion: str, *, config: EvalConfig | None = None,
           reward_config: RewardConfig = RewardConfig(), judge: Judge | None = None) -> Reward:
    """Parse `completion` (an LLM reply or a whole candidate file), evaluate it, score it."""
    parsed = parse_reply(completion)
    if parsed.source is None:
        return Reward(reward_config.no_program, "no_program", parsed.failure)
    candidate = Candidate(parsed.source, strategy="rl")
    if judge is not None:
        return score(judge.evaluate(candidate), reward_config)
    with Judge(task if isinstance(task, Task) else load_task(task), config or EvalConfig()) as one:
        return score(one.evaluate(candidate), reward_config)


@dataclass
class RollingNormalizer:
    """CUDA-L1's smoothing: (r - mean) / std over the last `window` rewards, clipped to ±k."""

    window: int = 100
    k: float = 1.5
    _seen: deque[float] = field(default_factory=deque)

    def __call__(self, value: float) -> float:
        self._seen.append(value)
        while len(self._seen) > self.window:
            self._seen.popleft()
        if len(self._seen) < 2:
            return 0.0
        spread = statistics.pstdev(self._seen) or 1.0
        return max(-self.k, min(self.k, (value - statistics.fmean(self._seen)) / spread))


class KernelReward:
    """A TRL reward function: `KernelReward()(prompts, completions, task=[...]) -> list[float]`.

    It evaluates through one `Evaluator` (evaluator.py): by default a `LocalEvaluator`, which
    keeps one warm Judge per task (up to `max_judges`), so a GRPO group of completions for one
    task pays the reference's start-up once; `pool=` (an `executor.EvalPool`) evaluates a
    batch's completions in parallel on its workers instead. `last` holds the structured
    `Reward`s of the latest call, for logging.
    """

    __name__ = "warpforge_kernel_reward"  # TRL logs each reward function under its __name__

    def __init__(self, config: EvalConfig | None = None, reward_config: RewardConfig = RewardConfig(),
                 normalizer: RollingNormalizer | None = None, max_judges: int = 4, pool: Any = None,
                 evaluator: Evaluator | None = None) -> None:
        self.config = config or EvalConfig()
        self.reward_config = reward_config
        self.normalizer = normalizer
        self.evaluator: Evaluator = evaluator or make_evaluator(self.config, pool=pool, label="completion",
                                                                max_judges=max_judges)
        self.last: list[Reward] = []

    def __call__(self, prompts: Sequence[Any], completions: Sequence[Any], task: Sequence[str] | None = None,
                 **_: Any) -> list[float]:
        if task is None:
            raise ConfigError("KernelReward needs the task of every example: add a dataset column named `task` "
                              "(a suite name such as level1/softmax, or a task file path)")
        parsed = [parse_reply(_text(c)) for c in completions]
        loaded = {name: load_task(name) for name, p in zip(task, parsed) if p.source is not None}
        futures = {i: self.evaluator.submit(loaded[name], Candidate(p.source, strategy="rl"))
                   for i, (name, p) in enumerate(zip(task, parsed)) if p.source is not None}
        self.last = [score(futures[i].result(), self.reward_config) if i in futures
                     else Reward(self.reward_config.no_program, "no_program", p.failure) for i, p in enumerate(parsed)]
        values = [r.value for r in self.last]
        return [self.normalizer(v) for v in values] if self.normalizer else values

    def close(self) -> None:
        self.evaluator.close()


def _text(completion: Any) -> str:
    """TRL passes plain strings, or (conversational datasets) a list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)
