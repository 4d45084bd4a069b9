"""The executor's task-affine queue: workers split the tasks among them instead of each starting
every task's Judge, no job starves, and every job is run exactly once."""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from typing import Any

from warpforge.executor import EvalPool, Job, TaskQueue, WorkerLost


def _put(q: TaskQueue, tasks: str) -> None:
    for i, task in enumerate(tasks):
        q.put((Job(i, task, f"cand{i}.py"), 0, Future()))


def _take(q: TaskQueue, worker: str) -> str:
    item = q.get(worker)
    assert item is not None
    return item[0].task


def test_a_second_worker_takes_a_task_nobody_has_started_then_each_keeps_its_own() -> None:
    q = TaskQueue()
    _put(q, "aaabbb")
    assert [_take(q, "w1"), _take(q, "w2"), _take(q, "w1"), _take(q, "w2"), _take(q, "w2"), _take(q, "w1")] == list("abab" "ba")


def test_a_worker_prefers_a_task_it_has_warm_over_older_jobs() -> None:
    q = TaskQueue()
    _put(q, "a")
    assert _take(q, "w1") == "a"
    _put(q, "bba")
    assert _take(q, "w1") == "a"  # its Judge for a is up; b is older
    assert _take(q, "w1") == "b"  # nothing of a left: the oldest


def test_when_every_task_is_warm_elsewhere_an_idle_worker_joins_the_oldest() -> None:
    q = TaskQueue()
    _put(q, "ab")
    assert (_take(q, "w1"), _take(q, "w2")) == ("a", "b")
    _put(q, "ba")
    assert _take(q, "w3") == "b"


def test_a_job_passed_over_patience_times_is_taken_next() -> None:
    q = TaskQueue(patience=2)
    _put(q, "a")
    assert _take(q, "w1") == "a"
    _put(q, "baaa")
    assert [_take(q, "w1") for _ in range(4)] == ["a", "a", "b", "a"]


def test_a_restarted_worker_has_nothing_warm() -> None:
    q = TaskQueue()
    _put(q, "a")
    _take(q, "w1")
    q.forget("w1")
    _put(q, "ba")
    assert _take(q, "w1") == "b"


def test_closing_ends_getters_only_after_the_jobs_are_taken() -> None:
    q = TaskQueue()
    _put(q, "ab")
    q.close(2)
    assert [_take(q, "w1"), _take(q, "w1")] == ["a", "b"]
    assert q.get("w1") is None and q.get("w2") is None


def test_a_getter_waits_for_a_job() -> None:
    q = TaskQueue()
    got: list[str] = []
    t = threading.Thread(target=lambda: got.append(_take(q, "w1")))
    t.start()
    time.sleep(0.05)
    assert not got
    _put(q, "c")
    t.join(timeout=5)
    assert got == ["c"]


def test_a_batch_put_while_held_is_whole_when_the_workers_take_from_it() -> None:
    q = TaskQueue()
    _put(q, "a")
    _take(q, "w1")  # w1 has task a warm
    got: dict[str, str] = {}
    waiting = [threading.Thread(target=lambda w=w: got.__setitem__(w, _take(q, w))) for w in ("w1", "w2")]
    for t in waiting:
        t.start()
    time.sleep(0.05)
    with q.held():  # as EvalPool.map submits a batch; one job at a time, w2 would start task a too
        for i, task in enumerate("aab"):
            q.put((Job(i, task, f"c{i}.py"), 0, Future()))
            time.sleep(0.02)
    for t in waiting:
        t.join(timeout=5)
    assert got == {"w1": "a", "w2": "b"}


class _Slot:
    """A worker that takes a while to start a task (as a Judge does) and records what it ran."""

    def __init__(self, name: str) -> None:
        self.name, self.restarts, self.busy = name, 0, threading.Event()
        self.ran: list[str] = []

    def run(self, job: Job) -> dict[str, Any]:
        time.sleep(0.02 if job.task in self.ran else 0.05)
        self.ran.append(job.task)
        return {"status": "correct", "task": job.task, "candidate": job.candidate, "worker": self.name}

    def restart(self) -> None:
        self.restarts += 1

    def close(self) -> None:
        pass


def test_two_workers_split_the_tasks_and_run_every_job_once() -> None:
    slots = [_Slot("w1"), _Slot("w2")]
    jobs = [Job(i, task, f"c{i}.py") for i, task in enumerate("a" * 8 + "b" * 8 + "c" * 8 + "d" * 8)]
    pool = EvalPool.from_slots(list(slots))  # type: ignore[arg-type]
    try:
        results = pool.map(jobs)
    finally:
        pool.stop()
    assert [r["candidate"] for r in results] == [j.candidate for j in jobs]
    assert sorted(t for s in slots for t in s.ran) == sorted(j.task for j in jobs)
    # first-come-first-served would start all four tasks on both workers (8 starts)
    starts = sum(len(set(s.ran)) for s in slots)
    assert starts <= 5, [s.ran for s in slots]
    assert slots[0].ran[0] != slots[1].ran[0]  # the batch was whole when the workers began


class _DeadSlot(_Slot):
    """A worker that dies on every job and cannot be started again (e.g. a Ray node gone)."""

    def run(self, job: Job) -> dict[str, Any]:
        raise WorkerLost("killed")

    def restart(self) -> None:
        raise RuntimeError("no node to start it on")


def test_a_worker_that_cannot_be_restarted_leaves_a_crashed_result_not_a_hang() -> None:
    pool = EvalPool.from_slots([_DeadSlot("w1")])  # type: ignore[list-item]
    try:
        results = pool.map([Job(0, "a", "c0.py"), Job(1, "b", "c1.py")])
    finally:
        pool.stop()
    assert [r["status"] for r in results] == ["crashed", "crashed"]
    assert "could not be restarted" in results[0]["reason"] and "no node" in results[0]["reason"]
