"""The optimisation loop end to end on the CPU: recorded replies in, verified kernels and an archive out.

The replies (examples/replay/cpu_suite.jsonl) are realistic and mixed: faithful ports, algebraic
rewrites that are much faster, a reply with no code, a truncated one, a result cache keyed on
input addresses, a program that fails to import, a wrong one. They are served by a real
OpenAI-compatible HTTP server on loopback and reach the loop through the official SDK; the
candidates are evaluated for real by the CPU evaluator.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from warpforge import EvalConfig, load_task
from warpforge.archive import Archive
from warpforge.propose.llm import LLMClient, parse_model_specs
from warpforge.propose.replay import ReplayServer
from warpforge.search import Budget, OptimizeConfig, Optimizer

ROOT = Path(__file__).resolve().parents[1]
REPLIES = ROOT / "examples" / "replay" / "cpu_suite.jsonl"
# these tests are about the loop, not timing precision: short timing budgets
FAST_EVAL = EvalConfig.of(device="cpu", warmup_ms=5.0, rep_ms=20.0, min_reps=5, timeout_s=120.0)
STATUSES = {"correct", "incorrect", "compile_error", "runtime_error", "timeout", "crashed", "rejected"}


def optimize_command(archive: Path, base_url: str, *tasks: str) -> list[str]:
    return [sys.executable, "-m", "warpforge.cli", "optimize", *tasks, "--llm", "openai:replay", "--base-url", base_url,
            "--device", "cpu", "--archive", str(archive), "--max-candidates", "4", "--generation-size", "2",
            "--no-live", "--json"]


def evaluations(path: Path) -> list[tuple[int, int, str]]:
    """The evaluations table; empty while the archive file exists but its schema is not written yet."""
    try:
        with sqlite3.connect(path) as db:
            return db.execute("SELECT id, candidate_id, status FROM evaluations ORDER BY id").fetchall()
    except sqlite3.OperationalError as exc:
        if "no such table" in str(exc):
            return []
        raise


@pytest.mark.slow
def test_a_run_killed_with_sigkill_resumes_without_losing_or_repeating_an_evaluation(tmp_path: Path) -> None:
    archive = tmp_path / "archive.db"
    env = {**os.environ, "OPENAI_API_KEY": "not-needed-for-a-local-server", "PYTHONPATH": str(ROOT / "src")}
    with ReplayServer(REPLIES) as server:
        command = optimize_command(archive, server.base_url, "level1/diag_matmul", "level2/rank1_matmul")
        first = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 start_new_session=True)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and first.poll() is None:
            if archive.exists() and len(evaluations(archive)) >= 2:
                break
            time.sleep(0.2)
        assert first.poll() is None, first.communicate()[1].decode()[-2000:]  # killed mid-run, not after it
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
        before = evaluations(archive)
        assert len(before) >= 2

        second = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
        assert second.returncode in (0, 1), second.stderr[-2000:]
        summary = json.loads(second.stdout)

    after = evaluations(archive)
    assert after[: len(before)] == before  # nothing committed was lost or rewritten
    candidates = [c for _, c, _ in after]
    assert len(candidates) == len(set(candidates))  # no candidate evaluated twice
    with Archive(archive) as db:
        runs = db.runs()
        assert len(runs) == 1 and runs[0].status == "done" and summary["run_id"] == runs[0].id  # resumed, not restarted
        for task in ("level1/diag_matmul", "level2/rank1_matmul"):
            steps = db.steps(runs[0].id, task)
            assert sorted(steps) == [0, 1, 2, 3]  # every slot proposed exactly once
            for attempt in steps.values():
                assert attempt.status in STATUSES or (attempt.source is None and attempt.failure)
        assert not db.unevaluated(runs[0].id, "level1/diag_matmul")


def test_the_loop_records_every_kind_of_reply_and_reviews_a_suspicious_speedup(tmp_path: Path) -> None:
    llm = LLMClient(parse_model_specs([f"replay:{REPLIES}"]))
    config = OptimizeConfig(strategy="evolve", eval=FAST_EVAL, generation_size=2, review_above=2.0,
                            budget=Budget(candidates=4))
    seen: list[str] = []
    with Archive(tmp_path / "a.db") as archive:
        summary = Optimizer(archive, llm, config, on_progress=lambda p: seen.append(p.state)).run(
            [load_task("level1/diag_matmul")])
        attempts = {a.step: a for a in archive.attempts(task="level1/diag_matmul")}
        failures = " | ".join(a.failure for a in attempts.values() if a.failure)
        statuses = sorted(a.status for a in attempts.values() if a.status)
        best = archive.best("level1/diag_matmul")
        reviews = [a.review for a in attempts.values() if a.review]
    assert sorted(attempts) == [0, 1, 2, 3]
    assert "no code block" in failures  # the reply without code is a recorded failure, not a crash
    assert statuses.count("correct") == 2 and "compile_error" in statuses  # the import of a missing module
    assert best is not None and "unsqueeze(1) * B" in (best.source or "")
    # the loop reports the same best attempt as the archive (archive.best_attempt, one definition)
    outcome = summary.outcomes[0]
    assert outcome.best is not None and outcome.best.id == best.id and outcome.best.speedup == best.speedup
    # the broadcast rewrite is far faster than the dense reference: the reviewer was asked about it
    assert reviews and reviews[0]["verdict"] == "plausible"
    assert "done" in seen and "evaluating" in seen


def test_without_an_llm_optimize_says_what_to_set(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "WARPFORGE_LLM"}
    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "optimize", "level1/relu", "--archive",
                           str(tmp_path / "a.db")], capture_output=True, text=True, env=env, timeout=120)
    assert done.returncode == 2 and "--llm PROVIDER:MODEL" in done.stderr and "Traceback" not in done.stderr
    closed = subprocess.run([sys.executable, "-m", "warpforge.cli", "optimize", "level1/relu", "--llm", "openai:m",
                             "--base-url", "http://127.0.0.1:9/v1", "--archive", str(tmp_path / "a.db")],
                            capture_output=True, text=True, env=env, timeout=120)
    assert closed.returncode == 2 and "cannot reach" in closed.stderr and "Traceback" not in closed.stderr


def test_an_unknown_task_or_strategy_is_a_usage_error(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "optimize", "level9/nothing", "--llm",
                           f"replay:{REPLIES}", "--archive", str(tmp_path / "a.db")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "unknown task" in done.stderr
    bad = subprocess.run([sys.executable, "-m", "warpforge.cli", "optimize", "level1/relu", "--llm",
                          f"replay:{REPLIES}", "--strategy", "annealing", "--archive", str(tmp_path / "a.db")],
                         capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "unknown strategy" in bad.stderr


@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_same_command_resumes(tmp_path: Path) -> None:
    archive = tmp_path / "archive.db"
    # one candidate a generation and every reply 3 s: after the first evaluation lands, three more
    # generations are still to be proposed (9 s or more), so the Ctrl-C below reaches a run in
    # progress however long the poll below takes to see that evaluation on a busy machine
    slow = tmp_path / "slow_replies.jsonl"
    slow.write_text("".join(json.dumps({**json.loads(line), "delay_s": 3}) + "\n"
                            for line in REPLIES.read_text().splitlines() if line.strip()))
    command = [sys.executable, "-m", "warpforge.cli", "optimize", "level1/diag_matmul", "--llm", f"replay:{slow}",
               "--device", "cpu", "--archive", str(archive), "--max-candidates", "4", "--generation-size", "1",
               "--no-live"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    # SIGINT's default disposition in the child, as at a terminal: a test run started in the
    # background by a non-interactive shell (`cmd &`) has it ignored, and children inherit that
    run = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and run.poll() is None and not (archive.exists() and evaluations(archive)):
        time.sleep(0.2)
    assert run.poll() is None, run.communicate()[1][-2000:]
    run.send_signal(signal.SIGINT)
    _, err = run.communicate(timeout=120)
    assert run.returncode == 130 and "resume" in err and "Traceback" not in err, err[-2000:]
    with Archive(archive) as db:
        assert [r.status for r in db.runs()] == ["stopped"]
    again = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert again.returncode in (0, 1), again.stderr[-2000:]
    with Archive(archive) as db:
        assert [r.status for r in db.runs()] == ["done"]
        assert sorted(db.steps(db.runs()[0].id, "level1/diag_matmul")) == [0, 1, 2, 3]
    candidates = [c for _, c, _ in evaluations(archive)]
    assert len(candidates) == len(set(candidates))


def test_a_generation_evaluated_on_a_worker_pool_gives_the_same_verdicts(tmp_path: Path) -> None:
    """`--executor local`: each generation's candidates go to worker processes as the replies
    arrive; the archive (written only here) gets the same statuses as the in-process Judge."""
    from warpforge.executor import EvalPool

    checks = FAST_EVAL.replace(bench=False)  # two CPU workers share the cores: verdicts, not timings
    verdicts = []
    for pooled in (False, True):
        llm = LLMClient(parse_model_specs([f"replay:{REPLIES}"]))
        config = OptimizeConfig(strategy="best-of-n", eval=checks, generation_size=4, budget=Budget(candidates=4))
        pool = EvalPool(checks, "local", workers=2) if pooled else None
        try:
            with Archive(tmp_path / f"{pooled}.db") as archive:
                Optimizer(archive, llm, config, pool=pool).run([load_task("level1/diag_matmul")])
                attempts = archive.attempts(task="level1/diag_matmul")
            if pool is not None:  # every program was evaluated by a worker, none in this process
                assert sum(s.jobs for s in pool.slots) == sum(1 for a in attempts if a.source) > 0
        finally:
            if pool is not None:
                pool.close()
        assert sorted(a.step for a in attempts) == [0, 1, 2, 3]
        verdicts.append(sorted((a.source_hash or "", a.status or a.failure) for a in attempts))
    assert verdicts[0] == verdicts[1]


def test_a_resumed_run_sends_a_killed_runs_request_again_as_it_was(tmp_path: Path, monkeypatch) -> None:
    """The request of a step whose reply never arrived (the run was killed) is kept in the archive
    and sent again unchanged when the run resumes, though the prompt rendered now would differ
    (retrieval sees what other tasks found since): an inbox reply answers only the request it
    was asked. A step whose plan changed gets a fresh request; a recorded step's request is gone.
    An archive from before the requests table gets it when opened."""
    from warpforge.propose.llm import Completion
    from warpforge.search import loop
    from warpforge.search.plan import Plan

    class Model:
        def __init__(self) -> None:
            self.seen: list[str] = []

        def complete(self, messages, max_tokens):  # the LLMClient interface the loop uses
            self.seen.append(messages[-1]["content"])
            return Completion("no code here", "fake:model", 1, 1, 0.0, 0.0, "stop")

    model = Model()
    prompt = {"text": "as rendered before the kill"}
    monkeypatch.setattr(loop, "render", lambda strategy, ctx: [{"role": "user", "content": prompt["text"]}])
    db = tmp_path / "a.db"
    with Archive(db) as archive:
        run_id = archive.start_run({}, 0)
    with sqlite3.connect(db) as conn:  # an archive written before the table existed
        conn.execute("DROP TABLE requests")
    with Archive(db) as archive:
        optimizer = Optimizer(archive, model, OptimizeConfig(eval=FAST_EVAL, budget=Budget(candidates=2)))  # type: ignore[arg-type]
        task = load_task("level1/relu")
        optimizer._ask(run_id, task, 0, Plan("translate"))  # the model is asked; the run dies before a reply is recorded
        prompt["text"] = "as rendered after the resume"
        optimizer._ask(run_id, task, 0, Plan("translate"))
        optimizer._ask(run_id, task, 1, Plan("translate"))  # another step: its own request
        optimizer._ask(run_id, task, 0, Plan("retrieval"))  # the step's plan changed: a new request
        archive.drop_request(run_id, task.name, 1)  # step 1's candidate was recorded
        assert archive.request(run_id, task.name, 1) is None
        assert archive.request(run_id, task.name, 0) == ("retrieval", [], [
            {"role": "user", "content": "as rendered after the resume"}])
    assert model.seen == ["as rendered before the kill", "as rendered before the kill",
                          "as rendered after the resume", "as rendered after the resume"]
