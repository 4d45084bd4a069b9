"""A Judge evaluates many candidates for one task with one reference process.

It must give the same verdicts as one-shot `evaluate`, draw fresh inputs for every candidate
(an earlier candidate must not be able to leave answers for a later one), survive its
reference process dying between candidates, and leave no process behind when closed.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from warpforge import Candidate, EvalConfig, Judge, load_task
from warpforge.errors import ConfigError, TaskError
from warpforge.evaluate import sandbox

FIXTURES = Path(__file__).parent / "fixtures"
FAST = {"device": "cpu", "trials": 5, "warmup_ms": 5.0, "rep_ms": 20.0, "min_reps": 5, "timeout_s": 60.0}


def candidate(name: str) -> Candidate:
    return Candidate.from_file(FIXTURES / "candidates" / f"{name}.py")


STASH = Path("/tmp/wf-fixture-xcache.pt")  # where cross_candidate_cache.py keeps its answers


@pytest.fixture
def no_stash() -> Iterator[None]:
    STASH.unlink(missing_ok=True)
    yield
    STASH.unlink(missing_ok=True)


def test_every_candidate_gets_fresh_inputs_and_the_reference_process_is_reused(no_stash: None) -> None:
    # unsandboxed, so the stash reaches the host's /tmp: fresh inputs alone must defeat it
    cfg = EvalConfig.of(**FAST, bench=False, static_checks=False, sandbox=False)  # type: ignore[arg-type]
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:
        record = judge.evaluate(candidate("cross_candidate_cache"))
        assert record.correct, record.reason  # honest the first time: it only stores its answers
        assert STASH.exists()
        assert any(w.startswith("unsandboxed") for w in record.warnings)
        assert judge.reference.child is not None
        server = judge.reference.child.proc.pid
        replay = judge.evaluate(candidate("cross_candidate_cache"))
        assert replay.status == "incorrect", replay.reason
        assert "CACHE-HIT" not in replay.output_tail  # no input of the first evaluation came back
        assert judge.reference.child.proc.pid == server
        assert judge.evaluate(candidate("low_precision_bf16")).status == "incorrect"
        os.kill(server, signal.SIGKILL)  # a reference process that dies between candidates is replaced
        honest = judge.evaluate(candidate("honest_matmul"))
        assert honest.correct, honest.reason
        assert judge.reference.child.proc.pid != server


def test_a_sandboxed_candidate_leaves_nothing_for_a_later_one(no_stash: None) -> None:
    cfg = EvalConfig.of(**FAST, bench=False, static_checks=False)  # type: ignore[arg-type]
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:
        for _ in range(2):  # each records into its private /tmp, which is gone with it: no replay
            record = judge.evaluate(candidate("cross_candidate_cache"))
            assert record.correct and "CACHE-HIT" not in record.output_tail, record.reason
            assert not record.warnings or not any(w.startswith("unsandboxed") for w in record.warnings)
    assert not STASH.exists()


def test_baselines_are_timed_once_and_nothing_outlives_close() -> None:
    cfg = EvalConfig.of(**FAST, bench=True, spare_workers=2)  # type: ignore[arg-type]
    judge = Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg)
    try:
        first = judge.evaluate(candidate("honest_matmul"))
        baselines = judge.reference.baselines
        assert len(judge._workers) == 2 and all(w.proc.poll() is None for w, _ in judge._workers)  # spares ready
        judge._workers[-1][0].kill()  # a spare that dies while waiting is replaced, not used
        second = judge.evaluate(candidate("honest_matmul"))
        assert first.correct and first.reference is not None, first.reason
        assert second.correct, second.reason
        assert judge.reference.baselines is baselines and baselines is not None  # timed once, in the clean reference process
        assert first.paired["rounds"] >= 5 and second.paired["rounds"] >= 5  # the speedups: paired, in-window
        assert len(judge._workers) == 2 and all(w.proc.poll() is None for w, _ in judge._workers)
        assert all(sandbox._state(w.proc.pid) != "T" for w, _ in judge._workers)  # resumed after the timing
        children = set(sandbox._LIVE_CHILDREN)
        assert len(children) == 3  # the reference process and the two spare candidate processes
    finally:
        judge.close()
    assert not sandbox._LIVE_CHILDREN & children
    for pid in children:
        with pytest.raises(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)


def test_a_broken_task_raises_a_task_error_and_leaves_nothing() -> None:
    cfg = EvalConfig.of(**FAST, bench=False)  # type: ignore[arg-type]
    with Judge(load_task(FIXTURES / "tasks" / "bad_inputs_string.py"), cfg) as judge:
        with pytest.raises(TaskError, match="get_inputs"):
            judge.evaluate(candidate("honest_matmul"))
        assert not judge._workers
    assert not sandbox._LIVE_CHILDREN


def test_sets_that_do_not_fit_the_memory_budget_are_fewer_and_the_result_says_so() -> None:
    # the fixture's float64 output, and its fp32 inputs and output in both timing processes
    per_set = 64 * 48 * 8 + 2 * ((64 * 96 + 96 * 48) * 4 + 64 * 48 * 4)
    cfg = EvalConfig.of(**{**FAST, "trials": 5}, bench=True, unseen_bench_sets=3,  # type: ignore[arg-type]
                     sets_memory_gb=3.5 * per_set / 2**30)
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:
        honest = judge.evaluate(candidate("honest_matmul"))
        assert honest.correct and honest.candidate is not None, honest.reason
        assert honest.trials == 2  # 3 sets fit: 2 checked, 1 timed
        # the parent's parts of the stages: comparing the outputs, and paired timing's reference rounds
        assert 0 < honest.stage_seconds["compare"] <= honest.stage_seconds["verify"], honest.stage_seconds
        assert 0 < honest.stage_seconds["reference_rounds"] <= honest.stage_seconds["bench"], honest.stage_seconds
        # and the reference process's parts of its draw
        parts = [honest.stage_seconds[k] for k in ("reference_draw", "reference_outputs", "reference_hand_over")]
        assert all(p > 0 for p in parts) and sum(parts) <= honest.stage_seconds["reference"], honest.stage_seconds
        assert any("input sets reduced to 2 checked + 1 timed" in w for w in honest.warnings), honest.warnings
        wrong = judge.evaluate(candidate("low_precision_bf16"))
        assert wrong.status == "incorrect", wrong.reason  # fewer sets still catch a wrong answer
    roomy = EvalConfig.of(**FAST, bench=False, sets_memory_gb=1.0)  # type: ignore[arg-type]
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), roomy) as judge:
        record = judge.evaluate(candidate("honest_matmul"))
        assert record.trials == 5 and not any("reduced" in w for w in record.warnings)


def test_fit_sets_keeps_two_checked_and_one_timed_set_at_least() -> None:
    from warpforge.evaluate.reference import fit_sets

    assert fit_sets(8, 5, 10, 80) == (8, 5)  # all fit
    assert fit_sets(8, 5, 10, 60) == (6, 4)  # 6 fit: the timed share kept near 3/8
    assert fit_sets(8, 5, 10, 30) == (3, 2)
    assert fit_sets(8, 5, 10, 1) == (3, 2)  # never below 2 checked + 1 timed
    assert fit_sets(4, 1, 10, 20) == (2, 1)  # one trial asked: one checked
    assert fit_sets(5, 5, 10, 30) == (3, 3)  # no timing sets (bench off): only checked ones
    with pytest.raises(ConfigError, match="sets_memory_gb must be positive"):
        EvalConfig.of(sets_memory_gb=0)


def test_the_timing_budget_comes_from_the_command_line_and_a_useless_one_is_refused() -> None:
    import argparse

    from warpforge.cli.common import add_eval_options, config_from_args

    parser = argparse.ArgumentParser()
    add_eval_options(parser)
    config = config_from_args(parser.parse_args(["--device", "cpu", "--rep-ms", "25", "--warmup-ms", "5"]))
    assert (config.timing.rep_ms, config.timing.warmup_ms) == (25.0, 5.0)
    assert config_from_args(parser.parse_args(["--device", "cpu"])).timing.rep_ms == EvalConfig().timing.rep_ms
    with pytest.raises(ConfigError, match="rep_ms must be positive"):
        config_from_args(parser.parse_args(["--device", "cpu", "--rep-ms", "0"]))


def test_the_candidate_may_hold_its_input_file_twice_on_top_of_the_memory_limit(tmp_path: Path) -> None:
    from warpforge.evaluate.children import candidate_memory_mb

    cfg = EvalConfig.of(mem_limit_gb=2.0)
    assert candidate_memory_mb(cfg, tmp_path) == 2048  # no inputs yet
    (tmp_path / "inputs.pt").write_bytes(b"\0" * (3 * 2**20))
    assert candidate_memory_mb(cfg, tmp_path) == 2048 + 6


def test_an_outputs_file_far_bigger_than_the_outputs_is_refused_before_it_is_read(tmp_path) -> None:
    """The reference process reads the candidate's outputs files; one far bigger than the task's
    outputs is refused unread (so a reference process that then runs out of memory reading files
    of the right size is the harness's failure, a harness_error, not the candidate's)."""
    import torch

    from warpforge.evaluate.children import reference_memory_mb
    from warpforge.evaluate.reference_client import oversized_outputs
    from warpforge.evaluate.protocol import Loaded
    from warpforge.evaluate.verdict import Reference

    ref = Reference(numels=[1000], sets=2, dtypes=[torch.float32], tolerances=[], loaded=Loaded(None, None, {}), baselines={},
                    baseline_notes=[], seconds=0.0, verify_sets=1)
    right = tmp_path / "out_0.pt"
    torch.save([torch.zeros(1000)], right)
    assert oversized_outputs([str(right)], ref) is None
    bomb = tmp_path / "out_1.pt"
    bomb.write_bytes(b"\0" * (3 << 20))
    why = oversized_outputs([str(right), str(bomb)], ref)
    assert why is not None and why.startswith("trial 2: the outputs file holds 3.0 MiB")
    assert reference_memory_mb(EvalConfig(device="cpu")) >= 4 * 16 * 1024


def test_a_content_cache_suspicion_is_confirmed_on_a_second_draw_or_dropped(monkeypatch) -> None:
    """Judge.evaluate: a content-cache rejection (which one slow call can cause when memory
    leaves one unseen timing set) stands only if a second evaluation, on a fresh draw, is
    rejected by the probe too; otherwise the second verdict stands, with a warning."""
    from warpforge.candidate import EvalResult
    from warpforge.evaluate.verdict import CONTENT_CACHE_REASON, content_cache_rejected

    cached = EvalResult("rejected", f"rejected: calls ... 0.33 ms at best): {CONTENT_CACHE_REASON}", "bench")
    honest = EvalResult("correct", "within tolerance", "done")
    assert content_cache_rejected(cached) and not content_cache_rejected(honest)
    assert not content_cache_rejected(EvalResult("rejected", f"static: {CONTENT_CACHE_REASON}", "static"))
    cfg = EvalConfig.of(**FAST, bench=True)  # type: ignore[arg-type]
    for second, status, confirmed in ((honest, "correct", False), (cached, "rejected", True)):
        with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:
            results = iter([cached, second])
            monkeypatch.setattr(judge, "_evaluate", lambda c: next(results))
            result = judge.evaluate(candidate("honest_matmul"))
            assert next(results, None) is None  # evaluated twice
        assert result.status == status
        assert ("on two independent draws" in result.reason) is confirmed
        assert any("content-cache probe fired on a first draw" in w for w in result.warnings) is not confirmed
    monkeypatch.undo()
    with Judge(load_task(FIXTURES / "tasks" / "matmul.py"), cfg) as judge:
        results = iter([honest, cached])
        monkeypatch.setattr(judge, "_evaluate", lambda c: next(results))
        assert judge.evaluate(candidate("honest_matmul")).status == "correct"
        assert next(results, None) is cached  # no suspicion: evaluated once
