"""`warpforge eval-batch`: evaluate many (task, candidate) pairs on every GPU here, or on a Ray cluster."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from warpforge.errors import UsageError


def add_batch_parser(sub: Any) -> None:
    from warpforge.cli.common import add_eval_options

    p = sub.add_parser("eval-batch", help="evaluate many TASK:CANDIDATE pairs in parallel (local GPUs or Ray)",
                       description="Evaluate TASK.py:CANDIDATE.py pairs with one worker per GPU (or a few CPU workers), "
                                   "or on a Ray cluster; every pair gets exactly one result, even when a worker dies.")
    p.add_argument("pairs", nargs="*", metavar="TASK:CANDIDATE", help="a task (file or suite name) and a candidate file")
    p.add_argument("--manifest", help="a file with one TASK:CANDIDATE pair per line (# comments allowed)")
    p.add_argument("--jobs", metavar="DIR",
                   help="evaluate the jobs `optimize --outbox DIR` wrote that have no result yet, writing each result "
                        "into DIR/results as it arrives (or into --results)")
    p.add_argument("--results", metavar="DIR", help="with --jobs: where the results go (default: DIR/results)")
    p.add_argument("--trust-tasks", action="store_true",
                   help="with --jobs: run the programs of task files that came inside the jobs folder unsandboxed, "
                        "as your own (default: they run inside the sandbox, like candidates, with no baseline cache)")
    p.add_argument("--executor", choices=["local", "ray"], default="local")
    p.add_argument("--ray-address", help="address of an existing Ray cluster (auto, ray://host:10001); default: start a local one")
    p.add_argument("--workers", type=int, help="worker count (default: one per GPU; on the CPU one, or half the cores up to 4 with --no-bench)")
    p.add_argument("--compile-workers", type=int,
                   help="CPU processes that build load_inline extensions ahead of the GPU workers (CUDA only; "
                        "default: half the cores the GPU workers leave; 0: off)")
    p.add_argument("--json", action="store_true", help="one JSON object per pair on stdout, as results arrive")
    add_eval_options(p)


def parse_pairs(items: list[str], manifest: str | None) -> list[tuple[str, str]]:
    lines = list(items)
    if manifest:
        path = Path(manifest)
        if not path.is_file():
            raise UsageError(f"manifest {manifest} does not exist")
        base = path.parent
        for raw in path.read_text().splitlines():
            line = raw.split("#", 1)[0].strip()
            if line:
                task, _, cand = line.rpartition(":")
                # relative paths in a manifest are relative to the manifest
                fix = (lambda p: str(base / p) if p and not Path(p).is_absolute() and (base / p).exists() else p)
                lines.append(f"{fix(task)}:{fix(cand)}")
    pairs = []
    for item in lines:
        task, sep, cand = item.rpartition(":")
        if not sep or not task or not cand:
            raise UsageError(f"{item!r} is not TASK:CANDIDATE (e.g. level1/softmax:my_softmax.py)")
        if not Path(cand).is_file():
            raise UsageError(f"candidate {cand} (in {item!r}) does not exist")
        pairs.append((task, cand))
    if not pairs:
        raise UsageError("no pairs given: pass TASK:CANDIDATE arguments or --manifest FILE")
    return pairs


def cmd_eval_batch(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from warpforge.cli.common import config_from_args
    from warpforge.executor import Job, evaluate_batch
    from warpforge.task import resolve_task_path

    config = config_from_args(args)
    err = Console(stderr=True)
    if args.jobs:
        return _eval_jobs(args, config, err)
    pairs = [(str(resolve_task_path(t)), c) for t, c in parse_pairs(args.pairs, args.manifest)]
    if config.resolved().device == "cpu" and config.bench and (args.workers or 1) > 1:
        err.print("warning: several CPU workers time on shared cores; use --no-bench for correctness-only batches, "
                  "or one worker for timings you will report")
    with Progress(TextColumn("eval-batch"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=err) as bar:
        tid = bar.add_task("", total=len(pairs), last="")

        def done(job: Job, result: dict[str, Any]) -> None:
            if args.json:
                print(json.dumps(result), flush=True)
            bar.update(tid, advance=1, last=f"{Path(job.candidate).name}: {result.get('status')}")

        results = evaluate_batch(pairs, config, args.executor, args.workers, args.ray_address, done,
                                 compile_workers=args.compile_workers)
    err.print(results_table(results))
    n_ok = sum(1 for r in results if r.get("correct"))
    err.print(f"{n_ok} of {len(results)} correct")
    return 0 if n_ok == len(results) else 1


def results_table(results: list[dict[str, Any]]) -> Any:
    """eval-batch's closing table (a rich Table): one row per pair, the claim in words (claim.py)."""
    from rich.table import Table

    from warpforge.claim import claim_of

    table = Table("task", "candidate", "status", "speed vs eager", "worker")
    for r in results:
        table.add_row(Path(str(r.get("task"))).stem, Path(str(r.get("candidate"))).name, str(r.get("status")),
                      claim_of(r).words(), str(r.get("worker", "")))
    return table


def _eval_jobs(args: argparse.Namespace, config: Any, err: Any) -> int:
    """`eval-batch --jobs DIR`: every job without a result, each result written as it arrives
    (a stopped batch run again evaluates only what is left)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from warpforge.candidate import EvalResult
    from warpforge.executor import EvalPool, Job
    from warpforge.executor.outbox import came_with_jobs, check_task, pending_jobs, write_result
    from warpforge.task import resolve_task_path

    if args.pairs or args.manifest:
        raise UsageError("--jobs evaluates a folder's jobs: pass no TASK:CANDIDATE pairs or --manifest with it")
    out = Path(args.results) if args.results else Path(args.jobs) / "results"
    if not args.results and out.is_symlink():  # the folder came from elsewhere: its results/ must be its own
        raise UsageError(f"{out} is a link: results are written only into the jobs folder's own results/ "
                         "folder; remove the link, or pass --results DIR")
    jobs = pending_jobs(args.jobs)
    todo: list[Job] = []
    keys: dict[int, str] = {}
    for job in jobs:
        why = check_task(job)
        untrusted = not args.trust_tasks and came_with_jobs(job, args.jobs)
        if untrusted and not why and not config.safety.sandbox:
            why = (f"the task {job['task']} came inside the jobs folder, so its program runs only inside the sandbox, "
                   "which --no-sandbox turned off: evaluate with the sandbox on, or pass --trust-tasks")
        if why:  # reported, never evaluated against another program
            err.print(f"refused job {job['key']}: {why}", markup=False, highlight=False)
            write_result(out, job["key"], EvalResult("task_error", why, "load", task=str(job.get("task")),
                                                     candidate_id=str(job.get("label", ""))))
            continue
        keys[len(todo)] = str(job["key"])
        todo.append(Job(len(todo), str(resolve_task_path(str(job["task"]))), str(job.get("label", job["key"])),
                        source=str(job["source"]), untrusted_task=untrusted))
    err.print(f"{len(jobs)} jobs without a result in {args.jobs}: {len(todo)} to evaluate")
    ok = 0
    with Progress(TextColumn("eval-batch --jobs"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.fields[last]}"), console=err) as bar:
        tid = bar.add_task("", total=len(todo), last="")

        def done(job: Job, result: dict[str, Any]) -> None:
            nonlocal ok
            write_result(out, keys[job.index], result)
            ok += bool(result.get("correct"))
            bar.update(tid, advance=1, last=f"{Path(job.task).stem}: {result.get('status')}")

        if todo:
            with EvalPool(config, args.executor, args.workers, args.ray_address,
                          compile_workers=args.compile_workers) as pool:
                pool.map(todo, done)
    err.print(f"{ok} of {len(todo)} correct; results in {out}")
    return 0
