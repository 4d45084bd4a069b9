"""Executors on the CPU: local worker processes and a real local Ray cluster give the same
verdicts; a worker killed mid-batch still leaves exactly one result per pair."""

from __future__ import annotations

import dataclasses
import json
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
from warpforge.cli.batch import parse_pairs
from warpforge.target import Target

FIX = Path(__file__).parent / "fixtures"
PAIRS = [
    (str(FIX / "tasks/matmul.py"), str(FIX / "candidates/honest_matmul.py")),
    (str(FIX / "tasks/matmul.py"), str(FIX / "candidates/zeros_output.py")),
    (str(FIX / "tasks/matmul.py"), str(FIX / "candidates/patch_timer.py")),
    (str(FIX / "tasks/sum_rows.py"), str(FIX / "candidates/wrong_shape.py")),
]
EXPECTED = ["correct", "runtime_error", "rejected", "runtime_error"]
CONFIG = EvalConfig(device="cpu", bench=False, trials=2, spare_workers=0)


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


@pytest.mark.slow
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


# -- the compile pool ------------------------------------------------------------------------

RELU_TASK = Path(__file__).parents[1] / "src/warpforge/tasks/level1/relu.py"
BUILDS = (Path(__file__).parents[1] / "examples/relu_cpp.py").read_text()


def test_needs_build_picks_the_extension_builders_only() -> None:
    from warpforge.evaluate import needs_build

    assert needs_build(BUILDS)
    assert not needs_build((Path(__file__).parents[1] / "examples/softmax_triton.py").read_text())
    assert not needs_build((FIX / "candidates/honest_matmul.py").read_text())


@pytest.fixture(scope="module")
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One compile cache for these tests, so relu_cpp is built once (about a minute on 2 cores)."""
    return tmp_path_factory.mktemp("compile-cache")


def _built(cache: Path) -> list[Path]:
    """Extension builds in the shared compile cache (sandboxed: published under the source's key)."""
    return sorted([*cache.glob("compile/torch_extensions/*/*/*.so"),
                   *cache.glob("compile/sandboxed/*/torch_extensions/*/*.so")])


@pytest.mark.slow
def test_precompile_fills_the_cache_that_the_evaluation_then_uses(build_cache: Path) -> None:
    from warpforge import Candidate, evaluate, load_task
    from warpforge.evaluate import precompile

    config = EvalConfig.of(device="cpu", bench=False, trials=2, spare_workers=0, cache_dir=str(build_cache), timeout_s=300)
    out = precompile(BUILDS, config, Target("cuda"))
    assert out["status"] == "compiled", out
    [so] = _built(build_cache)
    built_at = so.stat().st_mtime_ns
    result = evaluate(load_task(RELU_TASK), Candidate(BUILDS), config)
    assert result.status == "correct", result.reason
    assert _built(build_cache) == [so] and so.stat().st_mtime_ns == built_at  # found warm, not rebuilt


@pytest.mark.slow
def test_precompile_reports_failures_and_never_gives_a_verdict(build_cache: Path) -> None:
    from warpforge.evaluate import precompile

    config = EvalConfig.of(device="cpu", bench=False, spare_workers=0, cache_dir=str(build_cache), timeout_s=300)
    broken = BUILDS.replace("return out;", "return out  // missing semicolon")
    assert precompile(broken, config, Target("cuda"))["status"] == "compile_error"
    assert precompile("import subprocess\n", config, Target("cuda"))["status"] == "skipped"  # the static policy refuses it
    hang = BUILDS + "\nwhile True:\n    pass\n"  # builds, then never finishes its import
    assert precompile(hang, config.replace(timeout_s=3), Target("cuda"))["status"] == "timeout"
    from typing import get_args

    from warpforge.candidate import PrecompileStatus, Status

    # its words are the typed ones; those it shares with a verdict mean the same there
    assert set(get_args(PrecompileStatus)) - set(get_args(Status)) == {"compiled", "skipped"}


@pytest.mark.slow
def test_pool_with_a_compile_pool_builds_first_and_keeps_the_verdicts(build_cache: Path, tmp_path: Path) -> None:
    from warpforge.executor import Compiler, EvalPool

    config = EvalConfig.of(device="cpu", bench=False, trials=2, spare_workers=0, cache_dir=str(build_cache), timeout_s=300)
    broken = tmp_path / "broken.py"
    broken.write_text(BUILDS.replace("return out;", "return out  // missing semicolon"))
    jobs = [Job(0, str(RELU_TASK), str(Path(__file__).parents[1] / "examples/relu_cpp.py")),
            Job(1, str(RELU_TASK), str(broken)),
            Job(2, PAIRS[0][0], PAIRS[0][1])]
    pool = EvalPool.from_slots(local_slots(config, 1), compiler=Compiler(config, Target("cuda"), workers=2))
    try:
        results = pool.map(jobs)
    finally:
        pool.close()
    assert [r["status"] for r in results] == ["correct", "compile_error", "correct"]
    assert results[0]["precompile"]["status"] == "compiled" and results[1]["precompile"]["status"] == "compile_error"
    assert "precompile" not in results[2]  # nothing to build: straight to the worker
    assert len(_built(build_cache)) == 1


def test_worker_keeps_a_judge_per_recent_task_so_interleaved_jobs_reuse_them() -> None:
    from warpforge import load_task
    from warpforge.executor import EvalWorker

    def warm(worker: EvalWorker) -> list[str]:  # the tasks whose Judges its evaluator keeps, least recent first
        return [name for name, _, _ in worker.evaluator._judges]

    a, b = load_task(PAIRS[0][0]), load_task(PAIRS[3][0])
    worker = EvalWorker(CONFIG.to_dict(), judges=2)
    try:
        first = worker.run(*PAIRS[0])
        kept = worker.evaluator.judge(a)
        second = worker.run(*PAIRS[3])
        third = worker.run(*PAIRS[0])  # back to the first task: the same Judge, not a new one
        assert [first["status"], second["status"], third["status"]] == ["correct", "runtime_error", "correct"]
        assert worker.evaluator.judge(a) is kept and warm(worker) == [b.name, a.name]
    finally:
        worker.close()
    single = EvalWorker(CONFIG.to_dict(), judges=1)
    try:
        single.run(*PAIRS[0])
        assert single.run(*PAIRS[3])["status"] == "runtime_error" and warm(single) == [b.name]
    finally:
        single.close()


def test_the_throughput_corpus_is_100_distinct_candidates_the_policy_accepts(tmp_path: Path, bench_script: Any) -> None:
    from warpforge.evaluate import needs_build
    from warpforge.evaluate.static import check_source

    throughput = bench_script("throughput")
    items = throughput.corpus(tmp_path)
    sources = [Path(i["candidate"]).read_text() for i in items]
    assert len(set(sources)) == 100
    assert {f: sum(i["family"] == f for i in items) for f in ("cuda", "triton", "pytorch")} == {"cuda": 36, "triton": 52, "pytorch": 12}
    for item, source in zip(items, sources):
        report = check_source(source)
        assert report.rejected is None and report.syntax_error is None, item
        assert needs_build(source) == (item["family"] == "cuda")
    sample = throughput.stratified(items, 20)
    assert {i["family"] for i in sample} == {"cuda", "triton", "pytorch"} and 15 <= len(sample) <= 22


@pytest.mark.slow
def test_cpu_workers_share_the_cores_unless_the_user_set_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 8)
    started: list[Any] = []

    def slots(workers: int) -> list[Any]:
        started.extend(local_slots(CONFIG, workers=workers))
        return started[-workers:]

    try:
        assert [s.env.get("OMP_NUM_THREADS") for s in slots(2)] == ["4", "4"]
        assert slots(16)[0].env["MKL_NUM_THREADS"] == "1"
        monkeypatch.setenv("OMP_NUM_THREADS", "3")
        assert "OMP_NUM_THREADS" not in slots(2)[0].env
    finally:
        for s in started:  # each has a worker process and a temporary root
            s.close()


def test_the_throughput_summary_reads_gaps_stages_and_serial_rates_from_saved_runs(tmp_path: Path, bench_script: Any) -> None:
    throughput = bench_script("throughput")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "pool.log").write_text(
        "100.0 pool 1/9 036_relu_triton.py correct 1.0\n108.0 pool 2/9 037_relu_triton.py correct 1.0\n"
        "118.0 pool 3/9 038_relu_triton.py correct 1.0\nnoise\n140.0 pool 4/9 056_softmax_triton.py correct 0.7\n"
        "149.0 pool 5/9 057_softmax_triton.py runtime_error None\n")
    (tmp_path / "a" / "pool_results.jsonl").write_text("\n".join(json.dumps(r) for r in [
        {"at_s": 40.0, "stage_seconds": {"reference": 30.0, "verify": 9.0}},
        {"at_s": 48.0, "stage_seconds": {"reference": 4.0, "verify": 3.0}},
        {"at_s": 56.0, "stage_seconds": {"reference": 2.0, "verify": 5.0}}]) + "\n")
    rows = [{"family": "cuda", "seconds": 20.0}, {"family": "cuda", "seconds": 22.0}, {"family": "triton", "seconds": 3.0}]
    (tmp_path / "throughput_x.json").write_text(json.dumps({"kernelbench_serial": {
        "rows": rows, "corpus_estimate_s": 900.0, "corpus_rate_per_gpu_minute": 6.67}}))
    summary = throughput.summarise(tmp_path)
    log = summary["pool_logs"]["a/pool.log"]
    assert log["done"] == 5 and log["families"]["triton"] == 5 and log["first_to_last_s"] == 49.0
    assert log["same_task_gap_s"] == 9.0 and log["task_change_gap_s"] == 22.0  # median of 8, 10, 9; the one change
    stages = summary["stages"]["a/pool_results.jsonl"]
    assert stages["first_result_s"] == 40.0 and stages["median_s"] == {"reference": 3.0, "verify": 4.0}  # the first left out
    assert summary["serial"]["throughput_x.json"]["mean_s"] == {"cuda": 21.0, "triton": 3.0}
    estimate = summary["estimate"]  # 40 + 99 x 9 + 7 x 22 over the 100-candidate corpus in 8 task runs
    assert (estimate["candidates"], estimate["task_runs"], estimate["warpforge_corpus_s"]) == (100, 8, 40 + 99 * 9 + 7 * 22)
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


def test_a_throughput_run_stopped_by_a_time_limit_is_continued_not_repeated(tmp_path: Path, bench_script: Any) -> None:
    throughput = bench_script("throughput")
    stream = tmp_path / "pool_results.jsonl"
    rows = [{"at_s": 40.0, "candidate": "/x/000_relu_cuda.py", "status": "correct", "candidate_ms": 1.0},
            {"at_s": 48.0, "candidate": "/x/001_relu_cuda.py", "status": "correct", "candidate_ms": 1.0},
            {"at_s": 30.0, "candidate": "/y/002_relu_cuda.py", "status": "incorrect"}]  # a second run: at_s restarts
    stream.write_text("".join(json.dumps(r) + "\n" for r in rows))
    earlier = throughput.earlier_runs(stream)
    assert [len(run) for run in earlier] == [2, 1]
    new = {"executor": "local", "wall_s": 20.0, "results": [{"candidate": "/z/003_relu_cuda.py", "status": "correct",
                                                               "candidate_ms": 1.0}]}
    merged = throughput.merge_pool(earlier, new, gpus=1)
    assert [r["wall_s"] for r in merged["runs"]] == [48.0, 30.0, 20.0] and merged["wall_s"] == 98.0
    assert merged["statuses"] == {"correct": 3, "incorrect": 1} and merged["timed"] == 3
    assert merged["candidates_per_gpu_minute"] == round(4 / (98.0 / 60), 2)
    nothing_new = throughput.merge_pool(earlier, {"executor": "local", "results": []}, gpus=1)
    assert nothing_new["wall_s"] == 78.0 and len(nothing_new["results"]) == 3
    assert throughput.earlier_runs(tmp_path / "missing.jsonl") == []


@pytest.mark.slow
def test_ray_compile_jobs_fill_the_same_cache(ray_cluster: Any, build_cache: Path, tmp_path: Path) -> None:
    from warpforge.executor import Compiler

    config = EvalConfig.of(device="cpu", bench=False, spare_workers=0, cache_dir=str(build_cache), timeout_s=300)
    compiler = Compiler(config, Target("cuda"), workers=1, executor="ray")
    try:
        done = compiler.submit(BUILDS).result(timeout=600)
        broken = compiler.submit(BUILDS.replace("return out;", "return out  // missing semicolon")).result(timeout=600)
    finally:
        compiler.close()
    assert done["status"] == "compiled" and broken["status"] == "compile_error"
    assert len(_built(build_cache)) == 1  # the build the local compile jobs made, found by the Ray task


DAEMON_CANDIDATE = """
import subprocess, sys, time
import torch.nn as nn

# a daemon in a session of its own (outside its process group), then hang: the worker is killed meanwhile
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "MARKER"], start_new_session=True,
                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
time.sleep(120)


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
"""


def _proc_stat(pid: int) -> list[str] | None:
    """Fields of /proc/PID/stat after the command name (state first); None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _marked(marker: str) -> list[int]:
    """Live (not zombie) processes whose command line carries `marker`."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                stat = _proc_stat(int(entry))
                if stat and stat[0] not in "ZX":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _descendants(pid: int) -> dict[int, str]:
    """pid -> start time of every live descendant of `pid`."""
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        for path in Path(f"/proc/{todo.pop()}/task").glob("*/children"):
            try:
                children = [int(c) for c in path.read_text().split()]
            except OSError:
                continue
            for child in children:
                stat = _proc_stat(child)
                if stat and child not in found:
                    found[child] = stat[19]
                    todo.append(child)
    return found


def _still_running(pid: int, started: str) -> bool:
    stat = _proc_stat(pid)
    return stat is not None and stat[19] == started and stat[0] not in "ZX"


# --no-sandbox: only the driver (a subreaper) can catch the daemon; sandboxed, it dies with its namespace
UNSANDBOXED = {"sandbox": False}


@pytest.mark.parametrize("sandboxed", [False, True])
def test_a_killed_workers_temp_root_and_leftover_processes_are_removed(tmp_path: Path, sandboxed: bool) -> None:
    marker = f"warpforge-test-daemon-{os.getpid()}-{time.time_ns()}"
    candidate = tmp_path / "daemon.py"
    candidate.write_text(DAEMON_CANDIDATE.replace("MARKER", marker))
    config = CONFIG.replace(static_checks=False, timeout_s=120.0, **({} if sandboxed else UNSANDBOXED))
    [slot] = local_slots(config, workers=1)
    first_root = slot.tmp_root  # type: ignore[attr-defined]
    assert first_root.is_dir() and first_root.name.startswith(f"warpforge-pool-{os.getpid()}-cpu0-")
    (first_root / "warpforge-judge" / "candidate-1").mkdir(parents=True)  # what the worker's Judge keeps there
    (first_root / "warpforge-judge" / "candidate-1" / "inputs.pt").write_bytes(b"\0" * 1024)
    started: dict[int, str] = {}

    def kill_once_the_daemon_runs(s: Any) -> None:
        deadline = time.monotonic() + 90
        while not _marked(marker) and time.monotonic() < deadline:
            time.sleep(0.1)
        started.update(_descendants(s.proc.pid))  # the Judge's processes, the candidate and its daemon
        os.kill(s.proc.pid, signal.SIGKILL)

    watcher = threading.Thread(target=kill_once_the_daemon_runs, args=(slot,), daemon=True)
    watcher.start()
    try:
        results = run_jobs([Job(0, PAIRS[0][0], str(candidate))], [slot], retries=0)
        watcher.join(timeout=5)
        assert results[0]["status"] == "crashed" and "died" in results[0]["reason"]
        assert not first_root.exists()  # removed when the worker died, before the pool closed
        second_root = slot.tmp_root  # type: ignore[attr-defined]
        assert second_root != first_root and second_root.is_dir()  # the restarted worker's own
    finally:
        slot.close()
    assert not second_root.exists()
    assert len(started) >= 3  # the reference process, the candidate and its daemon at least
    assert not _marked(marker)  # the daemon did not outlive the batch
    assert not [p for p, t in started.items() if _still_running(p, t)]  # nor anything else the worker started


def _worker_result(task: str) -> dict[str, Any]:
    """One worker named "t" evaluates the honest matmul against fixture `task`."""
    from warpforge.executor.workers import EvalWorker

    worker = EvalWorker(dataclasses.asdict(CONFIG), name="t")
    try:
        return worker.run(str(FIX / task), str(FIX / "candidates/honest_matmul.py"))
    finally:
        worker.close()


def test_a_task_that_cannot_be_loaded_is_a_typed_task_error_result() -> None:
    """A worker reports a broken task as a result whose status and stage are in the types
    (candidate.Status / Stage), not as ad-hoc words callers must special-case."""
    from typing import get_args

    from warpforge.candidate import Stage, Status

    result = _worker_result("tasks/bad_inputs_string.py")
    assert (result["status"], result["stage"]) == ("task_error", "load"), result
    assert result["status"] in get_args(Status) and result["stage"] in get_args(Stage)
    assert "get_inputs" in result["reason"] and result["worker"] == "t"


def test_a_harness_failure_on_a_worker_is_a_crashed_result_at_the_reference_stage() -> None:
    """When the harness's own reference process dies, a worker's result says so (crashed, stage
    reference): not task_error, which would blame the task file."""
    result = _worker_result("tasks/reference_dies.py")
    assert (result["status"], result["stage"]) == ("crashed", "reference"), result
    assert "reference process" in result["reason"] and "exited with 3" in result["reason"]


def test_a_worker_ships_the_whole_record_so_the_archive_holds_the_same_fields_whatever_the_executor() -> None:
    from warpforge import Candidate, evaluate, load_task
    from warpforge.executor.workers import EvalWorker

    timed = CONFIG.replace(bench=True, warmup_ms=2, rep_ms=5, paired_rounds=2)
    worker = EvalWorker(dataclasses.asdict(timed), name="t")
    try:
        shipped = worker.run(*PAIRS[0])
    finally:
        worker.close()
    local = evaluate(load_task(PAIRS[0][0]), Candidate.from_file(PAIRS[0][1]), timed).to_dict()
    assert shipped["status"] == local["status"] == "correct", shipped["reason"]
    assert set(local) <= set(shipped)
    assert shipped["timing"]["candidate"]["samples_ms"] and local["timing"]["candidate"]["samples_ms"]


def test_one_evaluator_seam_in_process_or_on_a_pool() -> None:
    """evaluator.py: the same `submit(task, candidate) -> Future[EvalResult]` in this process (the
    future is done when submit returns) and on a pool's workers (the future completes later),
    with the same verdicts; closing a PoolEvaluator that owns its pool stops the workers."""
    from concurrent.futures import Future

    from warpforge import Candidate, load_task
    from warpforge.candidate import EvalResult
    from warpforge.evaluator import LocalEvaluator
    from warpforge.executor.evaluators import PoolEvaluator
    from warpforge.executor import EvalPool

    pairs = [(load_task(t), Candidate.from_file(c)) for t, c in (PAIRS[0], PAIRS[3])]
    with LocalEvaluator(CONFIG) as local:
        futures = [local.submit(t, c) for t, c in pairs]
        assert all(isinstance(f, Future) and f.done() for f in futures)
        here = [f.result() for f in futures]
    pool = EvalPool.from_slots(local_slots(CONFIG, 1))
    with PoolEvaluator(pool, owns_pool=True) as pooled:
        there = [f.result(timeout=300) for f in [pooled.submit(t, c) for t, c in pairs]]
    assert all(isinstance(r, EvalResult) for r in here + there)
    assert [r.status for r in here] == [r.status for r in there] == ["correct", "runtime_error"]
    assert all(not s.proc.is_alive() for s in pool.slots)


def test_a_judge_is_recycled_after_its_evaluations_and_the_count_starts_again_with_a_new_one() -> None:
    """LocalEvaluator(recycle_after=2): the second evaluation closes the task's Judge, the third
    starts a fresh one, which is then kept for one more (the count belongs to the Judge)."""
    from warpforge import Candidate, load_task
    from warpforge.evaluator import LocalEvaluator

    task, candidate = load_task(PAIRS[0][0]), Candidate.from_file(PAIRS[0][1])
    with LocalEvaluator(CONFIG, recycle_after=2) as local:
        first = local.judge(task)
        assert local.evaluate(task, candidate).correct and local.judge(task) is first
        assert local.evaluate(task, candidate).correct and not local._judges  # recycled after two
        assert local.evaluate(task, candidate).correct
        second = local.judge(task)
        assert second is not first and local._uses == {task.key: 1}


def test_a_task_out_of_gpu_memory_beside_other_warm_judges_is_evaluated_again_without_them(monkeypatch) -> None:
    """Warm Judges of other tasks hold their input sets on the GPU; a task that runs out of
    memory beside them is evaluated once more with them closed (its first task_error says
    nothing about the task), and the result says so. Alone, an out-of-memory task_error stands."""
    import importlib

    from warpforge import Candidate, load_task
    from warpforge.candidate import EvalResult
    from warpforge.evaluator import LocalEvaluator

    closed: list[str] = []

    class FakeJudge:
        warm: set[str] = set()

        def __init__(self, task, config) -> None:
            self.name = task.name
            FakeJudge.warm.add(task.name)

        def evaluate(self, candidate):
            if self.name.endswith("softmax") and len(FakeJudge.warm) > 1:
                return EvalResult("task_error", "the task's get_inputs() failed: OutOfMemoryError: CUDA out of memory.",
                                  "load", task=self.name)
            return EvalResult("correct", "ok", "bench", task=self.name)

        def close(self) -> None:
            closed.append(self.name)
            FakeJudge.warm.discard(self.name)

    monkeypatch.setattr(importlib.import_module("warpforge.evaluate"), "Judge", FakeJudge)
    relu, softmax = load_task("level1/relu"), load_task("level1/softmax")
    candidate = Candidate.from_file(PAIRS[0][1])
    with LocalEvaluator(CONFIG) as local:
        assert local.evaluate(relu, candidate).status == "correct"
        again = local.evaluate(softmax, candidate)
        assert again.status == "correct" and "ran out of GPU memory" in again.warnings[-1]
        assert closed == [relu.name, softmax.name] and list(local._judges) == [softmax.key]
        FakeJudge.warm.add("other")  # memory held by something no Judge of ours owns: the error stands
        assert local.evaluate(softmax, candidate).status == "task_error"
