"""Executors on the CPU: local worker processes and a real local Ray cluster give the same
verdicts; a worker killed mid-batch still leaves exactly one result per pair."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from warpforge.cli import main
from warpforge.config import EvalConfig
from warpforge.errors import UsageError
from warpforge.executor import Job, evaluate_batch, local_slots, ray_slots, run_jobs
from warpforge.batch_cli import parse_pairs

FIX = Path(__file__).parent / "fixtures"
PAIRS = [
    (str(FIX / "tasks/matmul.py"), str(FIX / "candidates/honest_matmul.py")),
    (str(FIX / "tasks/matmul.py"), str(FIX / "candidates/zeros_output.py")),
    (str(FIX / "tasks/matmul.py"), str(FIX / "candidates/patch_timer.py")),
    (str(FIX / "tasks/sum_rows.py"), str(FIX / "candidates/wrong_shape.py")),
]
EXPECTED = ["correct", "runtime_error", "rejected", "runtime_error"]
CONFIG = EvalConfig(device="cpu", bench=False, trials=2, spare_workers=0)

pytestmark = pytest.mark.slow


def _statuses(results: list[dict[str, Any]]) -> list[str]:
    return [r["status"] for r in results]


@pytest.fixture(scope="module")
def local_results() -> list[dict[str, Any]]:
    return evaluate_batch(PAIRS, CONFIG, "local", workers=2)


def test_local_executor_gives_the_evaluators_verdicts_in_order(local_results: list[dict[str, Any]]) -> None:
    from warpforge import Candidate, evaluate, load_task

    assert [(r["task"], r["candidate"]) for r in local_results] == PAIRS
    one_shot = evaluate(load_task(PAIRS[1][0]), Candidate.from_file(PAIRS[1][1]), CONFIG).status
    assert _statuses(local_results)[1] == one_shot
    assert _statuses(local_results) == EXPECTED
    assert {r["worker"] for r in local_results} <= {"cpu0", "cpu1"}


def _kill_first_busy(slots: list[Any], kill: Any) -> threading.Thread:
    def watch() -> None:
        deadline = time.time() + 60
        while time.time() < deadline:
            for s in slots:
                if s.busy.is_set():
                    time.sleep(0.5)  # mid-job: the worker has started evaluating
                    kill(s)
                    return
            time.sleep(0.05)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    return t


def _exactly_once(slots: list[Any], kill: Any) -> list[dict[str, Any]]:
    jobs = [Job(i, t, c) for i, (t, c) in enumerate(PAIRS)]
    seen: list[int] = []
    watcher = _kill_first_busy(slots, kill)
    try:
        results = run_jobs(jobs, slots, on_result=lambda job, r: seen.append(job.index))
    finally:
        watcher.join(timeout=5)
        for s in slots:
            s.close()
    assert sorted(seen) == list(range(len(PAIRS)))  # every pair reported, none twice
    assert sum(s.restarts for s in slots) >= 1  # the kill happened and the job was retried elsewhere
    return results


def test_a_killed_local_worker_leaves_exactly_one_result_per_pair(local_results: list[dict[str, Any]]) -> None:
    slots = local_slots(CONFIG, workers=2)
    results = _exactly_once(slots, lambda s: os.kill(s.proc.pid, signal.SIGKILL))
    assert _statuses(results) == _statuses(local_results)


@pytest.fixture(scope="module")
def ray_cluster() -> Any:
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_ray_executor_matches_local_and_survives_a_killed_actor(ray_cluster: Any, local_results: list[dict[str, Any]]) -> None:
    results = evaluate_batch(PAIRS, CONFIG, "ray", workers=2)
    assert _statuses(results) == _statuses(local_results)
    assert {r["worker"] for r in results} <= {"ray0", "ray1"}
    slots = ray_slots(CONFIG, workers=2)
    killed = _exactly_once(slots, lambda s: ray_cluster.kill(s.actor))
    assert _statuses(killed) == _statuses(local_results)


def test_pairs_and_manifests(tmp_path: Path) -> None:
    cand = tmp_path / "c.py"
    cand.write_text("x = 1\n")
    manifest = tmp_path / "m.txt"
    manifest.write_text("# one pair per line\nlevel1/relu:c.py\n\n")
    assert parse_pairs([], str(manifest)) == [("level1/relu", str(cand))]
    with pytest.raises(UsageError, match="is not TASK:CANDIDATE"):
        parse_pairs(["level1/relu"], None)
    with pytest.raises(UsageError, match="does not exist"):
        parse_pairs([f"level1/relu:{tmp_path / 'nope.py'}"], None)
    with pytest.raises(UsageError, match="no pairs given"):
        parse_pairs([], None)
    assert main(["eval-batch", "--device", "cpu"]) == 2
    assert main(["eval-batch", f"level1/nope:{cand}", "--device", "cpu"]) == 2


def test_eval_results_cross_process_boundaries_intact() -> None:
    from warpforge import Candidate, evaluate, load_task
    from warpforge.candidate import EvalResult

    result = evaluate(load_task(PAIRS[0][0]), Candidate.from_file(PAIRS[0][1]), EvalConfig(device="cpu", trials=2))
    again = EvalResult.from_dict(result.to_dict(samples=True))
    assert again == result and again.speedup == result.speedup and again.correct
