"""The outbox (executor/outbox.py): the loop on one machine writes jobs, `eval-batch --jobs` on
another evaluates them, results come back as files. Here both ends run on this CPU: the "GPU
machine" is the real `warpforge eval-batch --jobs` command, run in batches while the loop waits."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from warpforge import EvalConfig, load_task
from warpforge.archive import Archive
from warpforge.candidate import EvalResult
from warpforge.errors import ConfigError
from warpforge.executor.outbox import OutboxPool, check_task, job_key, pending_jobs, task_ref, write_result
from warpforge.executor.workers import Job
from warpforge.propose.llm import LLMClient, parse_model_specs
from warpforge.search import Budget, OptimizeConfig, Optimizer

ROOT = Path(__file__).resolve().parents[1]
REPLIES = ROOT / "examples" / "replay" / "cpu_suite.jsonl"
SOURCE = "import torch\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"


def test_a_job_waits_for_its_result_file_and_a_result_already_there_completes_at_once(tmp_path: Path) -> None:
    pool = OutboxPool(tmp_path / "box", poll_s=0.05)
    try:
        future = pool.submit(Job(0, "level1/relu", "first", source=SOURCE))
        [job] = pending_jobs(tmp_path / "box")
        assert job["task"] == "level1/relu" and job["source"] == SOURCE and not future.done()
        assert job["key"] == job_key("level1/relu", load_task("level1/relu").source_hash, SOURCE)
        write_result(tmp_path / "box" / "results", job["key"], EvalResult("correct", "ok", "done", task="level1/relu"))
        assert future.result(timeout=10)["status"] == "correct"
        assert pending_jobs(tmp_path / "box") == []
        again = pool.submit(Job(1, "level1/relu", "again", source=SOURCE))  # the same job: its result is there
        assert again.done() and again.result()["status"] == "correct"
        assert len(list((tmp_path / "box" / "jobs").glob("*.json"))) == 1
    finally:
        pool.close()


def test_a_task_that_differs_on_the_other_machine_is_reported_not_evaluated(tmp_path: Path, monkeypatch) -> None:
    task = tmp_path / "mine.py"
    task.write_text((ROOT / "tests" / "fixtures" / "tasks" / "matmul.py").read_text())
    monkeypatch.chdir(tmp_path)
    assert task_ref(load_task(task)) == "mine.py"  # relative to where the loop runs: the same layout there
    job = {"key": "k", "task": "mine.py", "task_hash": load_task(task).source_hash}
    assert check_task(job) is None
    task.write_text(task.read_text() + "\n# changed\n")
    assert "not the program the loop sent" in (check_task(job) or "")
    assert "cannot be loaded" in (check_task({**job, "task": "missing.py"}) or "")


def _gpu_machine(box: Path, stop: threading.Event, batches: list[set[str]], failures: list[str],
                 pool: OutboxPool) -> None:
    """What the other machine does: whenever jobs are waiting, one `eval-batch --jobs` over them."""
    while not stop.is_set():
        waiting = len(pending_jobs(box))
        if waiting:
            stop.wait(1.0)  # the loop's other task may still be writing its jobs: take them in one batch
            batches.append({str(job["task"]) for job in pending_jobs(box)})
            done = subprocess.run([sys.executable, "-m", "warpforge.cli", "eval-batch", "--jobs", str(box), "--device",
                                   "cpu", "--trials", "2", "--no-profile"], capture_output=True, text=True, timeout=600,
                                  cwd=ROOT)
            if done.returncode != 0:
                failures.append(done.stderr[-3000:])
                pool.close()  # the loop's waiting futures are cancelled: the test fails instead of hanging
                return
        stop.wait(0.3)


def test_the_loop_optimises_tasks_in_parallel_through_an_outbox_and_a_rerun_finds_every_result(tmp_path: Path) -> None:
    box = tmp_path / "box"
    tasks = [load_task("level1/diag_matmul"), load_task("level2/rank1_matmul")]
    config = OptimizeConfig(strategy="evolve", eval=EvalConfig.of(device="cpu", timing_bound=100.0), generation_size=2,
                            budget=Budget(candidates=2))
    stop, batches, failures = threading.Event(), [], []  # type: ignore[var-annotated]
    machine = None
    try:
        with Archive(tmp_path / "a.db") as archive:
            pool = OutboxPool(box, poll_s=0.1)
            machine = threading.Thread(target=_gpu_machine, args=(box, stop, batches, failures, pool), daemon=True)
            machine.start()
            try:
                Optimizer(archive, LLMClient(parse_model_specs([f"replay:{REPLIES}"])), config, pool=pool).run(tasks, 2)
            finally:
                pool.close()
            attempts = [a for t in tasks for a in archive.attempts(task=t.name)]
    finally:
        stop.set()
        if machine is not None:
            machine.join(timeout=60)
    assert not failures, failures[0]
    evaluated = [a for a in attempts if a.status]
    assert {a.task for a in evaluated} == {t.name for t in tasks}
    assert all(a.status in {"correct", "incorrect", "compile_error", "runtime_error", "rejected"} for a in evaluated)
    assert {t.name for t in tasks} in batches, batches  # the two tasks' jobs waited together: one batch held both
    results = {p.stem: json.loads(p.read_text()) for p in (box / "results").glob("*.json")}
    assert len(results) == len(list((box / "jobs").glob("*.json"))) == len(evaluated)
    # a second run (the first is done: a new one) proposes the same replies and finds every result
    # in the outbox: nothing is left for the other machine, and it is not asked
    with Archive(tmp_path / "a.db") as archive:
        pool = OutboxPool(box, poll_s=0.1)
        try:
            Optimizer(archive, LLMClient(parse_model_specs([f"replay:{REPLIES}"])), config, pool=pool).run(tasks, 2)
        finally:
            pool.close()
    assert pending_jobs(box) == []  # (a job left waiting would have hung the loop: pytest's time-out fails it)


def test_several_tasks_at_once_need_a_pool(tmp_path: Path) -> None:
    config = OptimizeConfig(eval=EvalConfig(device="cpu"), budget=Budget(candidates=1))
    with Archive(tmp_path / "a.db") as archive:
        with pytest.raises(ConfigError, match="--executor or --outbox"):
            Optimizer(archive, LLMClient(parse_model_specs([f"replay:{REPLIES}"])), config).run(
                [load_task("level1/relu"), load_task("level1/gelu")], 2)


def test_the_command_line_refuses_an_outbox_with_an_executor(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "optimize", "level1/relu", "--llm", f"replay:{REPLIES}",
                           "--outbox", str(tmp_path / "box"), "--executor", "local", "--archive", str(tmp_path / "a.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "pass one" in done.stderr and "Traceback" not in done.stderr
