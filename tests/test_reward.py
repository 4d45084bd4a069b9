"""The reward API: defined values for every outcome, cheating never pays, TRL's calling convention."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from warpforge import EvalConfig, Judge, load_task
from warpforge.candidate import EvalResult, Timing
from warpforge.errors import ConfigError
from warpforge.reward import KernelReward, RewardConfig, RollingNormalizer, reward, score

FIXTURES = Path(__file__).parent / "fixtures"
FAST = EvalConfig.of(device="cpu", warmup_ms=5.0, rep_ms=20.0, min_reps=5, timeout_s=60.0)


def timing(ms: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.01, min_ms=ms, mean_ms=ms, n=10, host_median_ms=ms)


def result(status: str, cand_ms: float | None = None, ref_ms: float = 2.0, compile_ms: float | None = None) -> EvalResult:
    return EvalResult(status, "why", "done", candidate=timing(cand_ms) if cand_ms else None, reference=timing(ref_ms),  # type: ignore[arg-type]
                      compiled_reference=timing(compile_ms) if compile_ms else None)


def test_every_outcome_has_a_defined_reward_and_cheating_is_the_lowest() -> None:
    assert score(result("correct", 1.0)).value == pytest.approx(2.0)
    assert score(result("correct", 0.1)).value == 10.0  # clipped: one outlier must not dominate a group
    assert score(result("correct", 1.0), RewardConfig(transform="log")).value == pytest.approx(math.log(2.0))
    assert score(result("correct", 1.0, compile_ms=0.5), RewardConfig(baseline="compile")).value == pytest.approx(0.5)
    assert score(result("correct")).value == 1.0  # verified, not timed
    values = {s: score(result(s)).value for s in ("incorrect", "compile_error", "runtime_error", "timeout", "crashed")}
    assert all(v == 0.0 for v in values.values())
    assert score(result("rejected")).value == -1.0 < min(values.values())
    with pytest.raises(ConfigError):
        RewardConfig(rejected=0.5)  # a cheat may never earn more than an honest failure


def test_rolling_normalisation_is_clipped() -> None:
    norm = RollingNormalizer(window=5, k=1.5)
    assert norm(1.0) == 0.0
    values = [norm(v) for v in (1.0, 1.0, 1.0, 100.0)]
    assert values[-1] == 1.5 and all(-1.5 <= v <= 1.5 for v in values)


def test_reward_evaluates_completions_for_real() -> None:
    task = load_task(FIXTURES / "tasks" / "matmul.py")
    honest = (FIXTURES / "candidates" / "honest_matmul.py").read_text()
    with Judge(task, FAST) as judge:
        fenced = reward(task, f"Here is my kernel.\n\n```python\n{honest}\n```\n", judge=judge)
        assert fenced.status == "correct"
        if fenced.speedup is None:  # paired timing too noisy on this machine: no speedup claimed, no speed reward
            assert fenced.result is not None and fenced.result.timing_unstable and fenced.value == RewardConfig().untimed
        else:
            assert fenced.value == pytest.approx(min(max(fenced.speedup, 0.0), 10.0))
        wrong = reward(task, (FIXTURES / "candidates" / "low_precision_bf16.py").read_text(), judge=judge)
        assert wrong.status == "incorrect" and wrong.value == 0.0
        cheat = reward(task, (FIXTURES / "candidates" / "patch_timer.py").read_text(), judge=judge)
        assert cheat.status == "rejected" and cheat.value == -1.0
    empty = reward(task, "I could not write this kernel.")
    assert empty.status == "no_program" and empty.value == 0.0 and empty.reason


def test_kernel_reward_follows_trls_reward_function_convention() -> None:
    honest = (FIXTURES / "candidates" / "honest_matmul.py").read_text()
    task = str(FIXTURES / "tasks" / "matmul.py")
    fn = KernelReward(FAST)
    try:
        conversational = [{"role": "assistant", "content": f"```python\n{honest}\n```"}]
        values = fn(["p1", "p2"], [conversational, "no code here"], task=[task, task])
        assert len(values) == 2 and values[0] > 0.0 and values[1] == 0.0
        assert [r.status for r in fn.last] == ["correct", "no_program"]
        assert fn.__name__ == "warpforge_kernel_reward"
        with pytest.raises(ConfigError, match="column named `task`"):
            fn(["p"], ["x"])
    finally:
        fn.close()
