"""The `warpforge` command: a thin layer over library calls.

Exit codes everywhere: 0 success, 1 a negative result (candidate rejected or wrong), 2 a
usage or configuration error — always with one readable sentence on stderr, never a
traceback (set WARPFORGE_DEBUG=1 to see one). With --json, stdout holds only JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from collections.abc import Callable, Sequence

from warpforge.cli.common import add_eval_options, config_from_args, tasks_of
from warpforge.errors import UsageError, WarpforgeError


def _eval_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("eval", help="evaluate one candidate against a task",
                       description="Compile, verify and time CANDIDATE.py (class ModelNew) against TASK "
                                   "(a KernelBench-format file or a suite task name).")
    p.add_argument("task", help="task file, or a suite task name such as level1/softmax")
    p.add_argument("candidate", help="candidate file defining class ModelNew")
    add_eval_options(p)
    p.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p.add_argument("--samples", action="store_true", help="include raw timing samples in --json output")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="warpforge", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version="warpforge 0.1.0")
    sub = parser.add_subparsers(dest="command", required=True)
    _eval_parser(sub)
    d = sub.add_parser("demo", help="evaluate and benchmark the bundled example kernels (the main job)")
    d.add_argument("--json", action="store_true", help="print one JSON object per example on stdout")
    add_eval_options(d)
    c = sub.add_parser("calibrate", help="A/A: evaluate each task's own reference as its candidate (must pass at 1.00x)",
                       description="Evaluate each task's reference program against itself (Model renamed ModelNew): "
                                   "it must be accepted and read 1.00x. Prints a row per task and a summary; exit 1 "
                                   "when any reference is rejected.")
    c.add_argument("tasks", nargs="+", metavar="TASK_OR_DIR", help="task files, folders of them (a KernelBench "
                   "level folder), suite names (level1/softmax) or levels (level1)")
    c.add_argument("--json", action="store_true", help="one JSON object per task on stdout, then the summary")
    c.add_argument("--out", help="append each task's row to this JSON-lines file as it arrives; a task already "
                   "in it is not evaluated again (run the same command to finish an interrupted calibration)")
    c.add_argument("--limit", type=int, help="evaluate at most this many tasks not yet in --out, then stop")
    add_eval_options(c)
    t = sub.add_parser("tasks", help="list the built-in task suite, or the tasks of a KernelBench-style tree")
    t.add_argument("--root", "--kernelbench", dest="root", metavar="DIR",
                   help="a directory of level1/, level2/... folders, e.g. a KernelBench checkout's KernelBench/")
    t.add_argument("--json", action="store_true")
    from warpforge.cli.agent import add_agent_parsers
    from warpforge.cli.archive import add_archive_parser
    from warpforge.cli.batch import add_batch_parser
    from warpforge.cli.gemm import add_gemm_parser
    from warpforge.cli.model import add_model_parser
    from warpforge.cli.train import add_train_parser
    from warpforge.report.html import add_report_parser
    from warpforge.cli.optimize import add_optimize_parser

    add_optimize_parser(sub)
    add_archive_parser(sub)
    add_report_parser(sub)
    add_agent_parsers(sub)
    add_gemm_parser(sub)
    add_batch_parser(sub)
    add_train_parser(sub)
    add_model_parser(sub)
    return parser


def cmd_eval(args: argparse.Namespace) -> int:
    from warpforge import Candidate, evaluate, load_task

    task = load_task(args.task)
    candidate = Candidate.from_file(args.candidate)
    config = config_from_args(args)
    if not args.json:
        print(f"evaluating {candidate.path} against {task.name} ...", file=sys.stderr)
    result = evaluate(task, candidate, config)
    if args.json:
        print(json.dumps(result.to_dict(samples=args.samples)))
    else:
        print(format_result(result.to_dict(samples=False)))
    return 0 if result.correct else 1


def cmd_calibrate(args: argparse.Namespace) -> int:
    from warpforge.calibrate import calibrate, summarise
    from warpforge import jsonl

    tasks = tasks_of(args.tasks)
    if args.compile_baseline is None:  # A/A compares the program with itself: no torch.compile baseline
        args.compile_baseline = False
    config = config_from_args(args)
    names = {t.name for t in tasks}
    earlier = [r for r in jsonl.read(args.out) if r.get("task") in names] if args.out else []
    done = {r["task"] for r in earlier}
    todo = [t for t in tasks if t.name not in done][:args.limit]

    def show(row: dict) -> None:  # type: ignore[type-arg]
        if args.out:
            jsonl.append(args.out, [row])
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            print(calibrate_line(row), file=sys.stderr, flush=True)

    print(f"calibrate: {len(todo)} tasks, each reference evaluated as its own candidate"
          + (f" ({len(done)} already in {args.out})" if done else ""), file=sys.stderr)
    summary = summarise(earlier + calibrate(todo, config, show))
    left = len(tasks) - len(done) - len(todo)
    if left:
        print(f"{left} tasks not evaluated yet (--limit): run the same command again to go on", file=sys.stderr)
    if args.json:
        print(json.dumps({"summary": summary}))
    else:
        geo = summary["geomean_speedup"]
        print(f"accepted {summary['accepted']} of {summary['tasks']}; speedup geomean "
              f"{geo:.3f}x" if geo else f"accepted {summary['accepted']} of {summary['tasks']}", file=sys.stderr)
        if summary["rejected"]:
            print(f"rejected against themselves: {', '.join(summary['rejected'])}", file=sys.stderr)
        if summary["interval_excludes_1"]:
            print(f"speedup interval excludes 1.00x: {', '.join(summary['interval_excludes_1'])}", file=sys.stderr)
        if summary["timing_unstable"]:
            print(f"timing unstable (within noise, interval still wide after re-measuring): "
                  f"{', '.join(summary['timing_unstable'])}", file=sys.stderr)
        if summary["outside_3pct"]:
            print(f"outside 1.00x +- 3% (tasks of 50 us or more): {', '.join(summary['outside_3pct'])}", file=sys.stderr)
    return 0 if not summary["rejected"] else 1


def format_result(r: dict) -> str:  # type: ignore[type-arg]
    """A result (`EvalResult.to_dict`, or an older or partial row) for a person: every line reads
    whatever keys are there, and the speed line says the claim in words (claim.py)."""
    from warpforge.claim import claim_of

    tolerance = r.get("tolerance") or {}
    lines = [f"{str(r.get('status') or 'unknown').upper()}: {r.get('reason') or ''}  [stage: {r.get('stage') or '?'}]"]
    if r.get("rel_l2_err") is not None:
        lines.append(f"  error: relative L2 {_g(r.get('rel_l2_err'))} (bar {_g(tolerance.get('rel_l2'))}), "
                     f"max abs {_g(r.get('max_abs_err'))} (bar {_g(tolerance.get('max_rel'))} x the outputs' scale)")
    claim = claim_of(r)
    speed = f"  speed vs eager PyTorch: {claim.words()}"
    if claim.timed:
        how = "paired rounds" if claim.paired else "interval from the two timings' IQRs"
        speed += f" (candidate {_g(r.get('candidate_ms'), '.4f')} ms, eager {_g(r.get('reference_ms'), '.4f')} ms; {how})"
    if r.get("compile_ms"):
        speed += f" | torch.compile {_g(r.get('compile_ms'), '.4f')} ms ({_g(r.get('speedup_vs_compile'), '.2f')}x)"
    if claim.timed or r.get("status") == "correct":
        lines.append(speed)
    kernels = r.get("kernels") or {}
    if kernels.get("kind"):
        lines.append(f"  kernels: {kernels['kind']} (custom: {', '.join((kernels.get('custom') or [])[:4]) or 'none'})")
    fraction = (r.get("roofline") or {}).get("fraction")
    if isinstance(fraction, int | float):
        lines.append(f"  roofline: {100 * fraction:.1f}% of this GPU's speed of light")
    if r.get("compile_log"):
        status = r.get("status")
        heading = "compiler says" if status == "compile_error" else "traceback" if status == "runtime_error" else "log"
        lines.append(f"  {heading}:\n    " + str(r["compile_log"]).replace("\n", "\n    "))
    hw = r.get("hardware") or {}
    lines.append(f"  on {hw.get('gpu') or hw.get('cpu') or '?'} | torch {hw.get('torch') or '?'} | "
                 f"triton {hw.get('triton') or '-'}")
    for w in r.get("warnings") or ():
        lines.append(f"  warning: {w}")
    return "\n".join(lines)


def demo_table(rows: list[dict], summary: dict) -> str:  # type: ignore[type-arg]
    """The demo's closing table: one line per example with its claim in words, then the totals."""
    from warpforge.claim import claim_of

    lines = [f"{'task':22s} {'candidate':26s} {'status':14s} {'kernels':16s} speed vs eager"]
    for r in rows:
        kind = (r.get("kernels") or {}).get("kind") or "not recorded"
        lines.append(f"{str(r.get('task')):22s} {str(r.get('candidate')):26s} {str(r.get('status')):14s} {kind:16s} "
                     f"{claim_of(r).words()}")
    geo = summary.get("geomean_speedup")
    faster = sum(claim_of(r).faster for r in rows)
    lines.append(f"correct {summary.get('n_correct')}/{summary.get('n')}; proven faster than eager {faster}/{len(rows)}; "
                 + (f"geometric-mean speedup {geo:.2f}x" if geo else "no timed results"))
    return "\n".join(lines)


def calibrate_line(row: dict) -> str:  # type: ignore[type-arg]
    """One A/A row for a person: task, status, the claim in words, the reason."""
    from warpforge.claim import claim_of

    return f"{str(row.get('task')):<40} {str(row.get('status')):<14} {claim_of(row).words():<36}  {str(row.get('reason') or '')[:90]}"


def _g(value: object, spec: str = ".3g") -> str:
    """A number for a person; `?` for a missing or non-numeric one (an older row, a partial result)."""
    return format(value, spec) if isinstance(value, int | float) and not isinstance(value, bool) else "?"


# (suite task, example file, devices it runs on)
DEMO_EXAMPLES = [
    ("level1/diag_matmul", "diag_matmul_broadcast.py", ("cpu", "cuda")),
    ("level1/relu", "relu_cpp.py", ("cpu",)),
    ("level1/relu", "relu_cuda.py", ("cuda",)),
    ("level1/softmax", "softmax_triton.py", ("cpu", "cuda")),
]


# the source checkout's examples/ (this file is src/warpforge/cli/__init__.py; when the CLI was one
# module, cli.py, the same walk took one step less, and the demo looked in src/examples)
EXAMPLES_DIR = Path(__file__).resolve().parents[3] / "examples"


def cmd_demo(args: argparse.Namespace) -> int:
    """Evaluate each bundled example against its suite task; a table on stderr, JSON lines on request."""
    from warpforge import Candidate, evaluate, load_task
    from warpforge import metrics

    config = config_from_args(args).resolved()
    examples_dir = EXAMPLES_DIR
    if not examples_dir.is_dir():
        raise UsageError(f"the examples folder {examples_dir} is missing: run the demo from a source checkout")
    pairs = [(t, examples_dir / f) for t, f, devices in DEMO_EXAMPLES if config.device in devices]
    print(f"warpforge demo: {len(pairs)} example kernels on {config.device} ({config.size} sizes); "
          "a first run compiles the C++/CUDA examples (about a minute); on the CPU, Triton runs in its slow interpreter", file=sys.stderr)
    rows = []
    for i, (task_name, path) in enumerate(pairs, 1):
        print(f"[{i}/{len(pairs)}] {task_name} <- {path.name} ...", file=sys.stderr, flush=True)
        result = evaluate(load_task(task_name), Candidate.from_file(path), config).to_dict(samples=False)
        result["candidate"] = path.name
        rows.append(result)
        if args.json:
            print(json.dumps(result), flush=True)
        print("    " + format_result(result).replace("\n", "\n    "), file=sys.stderr, flush=True)
    summary = metrics.summarize(rows)
    print("\n" + demo_table(rows, summary), file=sys.stderr)
    return 0 if summary["n_correct"] == summary["n"] else 1


def cmd_tasks(args: argparse.Namespace) -> int:
    from pathlib import Path

    from warpforge.task import load_task, suite_paths

    if args.root and not Path(args.root).is_dir():
        raise UsageError(f"--root {args.root} is not a directory")
    tasks = [load_task(p) for p in (suite_paths(Path(args.root)) if args.root else suite_paths())]
    if args.json:
        print(json.dumps([{"name": t.name, "description": t.metadata.get("description", "")} for t in tasks]))
    else:
        for t in tasks:
            print(f"{t.name:32s} {t.metadata.get('description', '')}")
    return 0


def _commands() -> dict[str, Callable[[argparse.Namespace], int]]:
    from warpforge.cli.agent import cmd_agent, cmd_mcp
    from warpforge.cli.archive import cmd_archive
    from warpforge.cli.batch import cmd_eval_batch
    from warpforge.cli.gemm import cmd_gemm
    from warpforge.cli.model import cmd_model
    from warpforge.cli.train import cmd_train
    from warpforge.report.html import cmd_report
    from warpforge.cli.optimize import cmd_optimize

    return {"eval": cmd_eval, "calibrate": cmd_calibrate, "demo": cmd_demo, "tasks": cmd_tasks, "optimize": cmd_optimize,
            "archive": cmd_archive, "report": cmd_report, "mcp": cmd_mcp, "agent": cmd_agent, "gemm": cmd_gemm, "eval-batch": cmd_eval_batch,
            "train": cmd_train, "model": cmd_model}


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from warpforge.evaluate.debug import dump_stacks_if_asked

    dump_stacks_if_asked()
    try:
        return _commands()[args.command](args)
    except WarpforgeError as exc:
        if os.environ.get("WARPFORGE_DEBUG"):
            raise
        print(f"warpforge: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("warpforge: interrupted", file=sys.stderr)
        return 130

