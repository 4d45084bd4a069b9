"""`warpforge archive ls | show ID | best TASK | export KIND | import FILE | verify [TASK...]`.

Thin: each verb is one or two Archive / datasets / archive_trust calls and a table or one JSON
object. Exit codes as everywhere: 0 success, 1 a negative result (`best` with no verified
candidate, `verify` leaving imports unverified), 2 a usage error (raised as UsageError;
warpforge.cli's main prints it). Only `import` and `verify` write to the archive.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import re
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

from warpforge.archive import Archive, Attempt, improves_on_eager
from warpforge.errors import UsageError
from warpforge.target import Target

DEFAULT_ARCHIVE = "warpforge-archive.db"


def add_archive_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    from warpforge.cli.common import add_eval_options

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--archive", default=DEFAULT_ARCHIVE, help=f"archive file (default: ./{DEFAULT_ARCHIVE})")
    common.add_argument("--json", action="store_true", help="print exactly one JSON object on stdout")
    p = sub.add_parser("archive", help="inspect an archive: runs, attempts, best kernels, dataset exports",
                       description="Read the SQLite archive that `warpforge optimize` writes.")
    verbs = p.add_subparsers(dest="archive_command", required=True)
    verbs.add_parser("ls", parents=[common], help="runs and a per-task summary")
    show = verbs.add_parser("show", parents=[common], help="one attempt: fields, parents, evaluation, reason")
    show.add_argument("id", type=int, help="candidate id (see `warpforge archive ls`)")
    show.add_argument("--source", action="store_true", help="also print the candidate's source")
    best = verbs.add_parser("best", parents=[common], help="the fastest verified candidate of a task")
    best.add_argument("task", help="task name as recorded, e.g. level1/softmax")
    best.add_argument("--out", help="folder the source is written to (default: ARCHIVE.best/ next to the archive)")
    best.add_argument("--hardware-key", help="only timings from this machine (see `archive show`)")
    export = verbs.add_parser("export", parents=[common], help="write a dataset: sft, preference, contrastive, attempts")
    export.add_argument("kind", choices=["sft", "preference", "contrastive", "attempts"])
    export.add_argument("--format", choices=["jsonl", "parquet"], default="jsonl", help="default: jsonl")
    export.add_argument("--out", required=True, help="output file")
    imp = verbs.add_parser("import", parents=[common], help="add the kernels of an attempts export, unverified",
                           description="Add the rows of an `archive export attempts` file (JSONL or Parquet) to the "
                                       "archive as one run, e.g. the committed agent campaign "
                                       "(benchmarks/results/campaign_*/attempts.jsonl). The file's verdicts are kept "
                                       "as claims: nothing imported is a best, a dataset row or a stepping stone until "
                                       "`warpforge archive verify` has evaluated it here. Creates the archive if "
                                       "needed; importing twice adds nothing.")
    imp.add_argument("file", help="an attempts export (.jsonl or .parquet)")
    ver = verbs.add_parser("verify", parents=[common], help="evaluate imported attempts here, so they count",
                           description="Evaluate the imported attempts that have no evaluation from this machine, "
                                       "with the real evaluator, and record each verdict (the latest evaluation is an "
                                       "attempt's). Suite tasks are run as they are; any other task runs only when "
                                       "its file is named here.")
    ver.add_argument("tasks", nargs="*", metavar="TASK",
                     help="only these tasks (suite names, task files or folders: yours, so their programs may run)")
    add_eval_options(ver)


def cmd_archive(args: argparse.Namespace) -> int:
    path = Path(args.archive)
    if args.archive_command == "import":
        return _import(path, args)
    if not path.is_file():
        raise UsageError(f"no archive at {path}: run `warpforge optimize ... --archive {path}` first")
    with Archive(path) as archive:
        verb = {"ls": _ls, "show": _show, "best": _best, "export": _export, "verify": _verify}[args.archive_command]
        return verb(archive, args)


def _import(path: Path, args: argparse.Namespace) -> int:
    from warpforge.report.datasets import import_attempts

    with Archive(path) as archive:
        counts = import_attempts(archive, args.file)
    if args.json:
        print(json.dumps(counts))
    else:
        print(f"imported {counts['imported']} attempts into {path} ({counts['already_there']} already there, "
              f"{counts['unknown_task']} of unknown tasks, {counts['no_source']} without a program); their verdicts "
              f"are the file's claims: run `warpforge archive verify --archive {path}` to evaluate them here, "
              "until then none is a best, a dataset row or a stepping stone")
    return 0


def _verify(archive: Archive, args: argparse.Namespace) -> int:
    from warpforge.archive_trust import Verified, unverified, verify
    from warpforge.cli.common import config_from_args, tasks_of
    from warpforge.evaluator import LocalEvaluator

    tasks = tasks_of(args.tasks) if args.tasks else []
    todo = unverified(archive, {t.name for t in tasks} or None)
    print(f"{len(todo)} imported attempts to verify in {archive.path}", file=sys.stderr)

    def said(v: Verified) -> None:
        claim = v.attempt.features.get("imported") or {"status": v.attempt.status, "speedup": v.attempt.speedup}
        print(f"#{v.attempt.id} {v.attempt.task}: claimed {claim.get('status')} {_x(claim.get('speedup'), '')}, "
              f"found {v.result.status} {v.result.claim.words() if v.result.correct else ''}".rstrip(), file=sys.stderr)

    done: list[Verified] = []
    skipped: dict[str, str] = {}
    if todo:
        with LocalEvaluator(config_from_args(args)) as evaluator:
            done, skipped = verify(archive, evaluator, tasks, on_result=said)
    for task, why in skipped.items():
        print(f"{task}: not verified: {why}", file=sys.stderr)
    if args.json:
        print(json.dumps({"verified": len(done), "correct": sum(v.result.correct for v in done),
                          "results": [{"candidate_id": v.attempt.id, "task": v.attempt.task, "status": v.result.status,
                                       "claim": v.result.claim.to_dict()} for v in done],
                          "not_verified": skipped}))
    return 1 if skipped else 0


def _ls(archive: Archive, args: argparse.Namespace) -> int:
    runs, summaries = archive.runs(), archive.task_summaries()
    if args.json:
        print(json.dumps({"runs": [dataclasses.asdict(r) | {"config": json.loads(r.config or "{}")} for r in runs],
                          "tasks": [dataclasses.asdict(s) for s in summaries]}))
        return 0
    from rich.console import Console
    from rich.table import Table

    run_table = Table("run", "status", "started", "finished", "seed", title=f"runs in {archive.path}")
    for r in runs:
        run_table.add_row(r.id, r.status, _when(r.started), _when(r.finished), str(r.seed))
    task_table = Table("task", "attempts", "evaluated", "correct", "best: speed vs eager", "improved", "best id",
                       "tokens", "cost", title="tasks")
    for s in summaries:
        task_table.add_row(s.task, str(s.attempts), str(s.evaluated), str(s.correct), s.best_claim,
                           "yes" if s.improved else "no", "none" if s.best_candidate_id is None else f"#{s.best_candidate_id}",
                           str(s.tokens), f"${s.cost_usd:.2f}")
    # piped output is not cut to 80 columns: task names and run ids stay whole for grep
    console = Console() if sys.stdout.isatty() else Console(width=200)
    console.print(run_table)
    console.print(task_table)
    return 0


def _show(archive: Archive, args: argparse.Namespace) -> int:
    a = archive.attempt(args.id)
    if args.json:
        print(json.dumps(dataclasses.asdict(a)))
        return 0
    lines = [f"candidate #{a.id}  task {a.task}  run {a.run_id}  step {a.step}",
             f"strategy {a.strategy or 'none'}  model {a.model or 'none'}  language {a.language}  "
             f"island {'none' if a.island is None else a.island}",
             f"parents {', '.join(f'#{p}' for p in a.parents) or 'none'}",
             f"tokens {a.prompt_tokens} + {a.completion_tokens}  cost ${a.cost_usd:.4f}  llm {a.llm_seconds:.1f} s"]
    if a.source is None:
        lines.append(f"no program: {a.failure}")
    elif a.evaluation_id is None and isinstance(a.features.get("imported"), dict):
        claim = a.features["imported"]
        lines.append(f"imported from {claim.get('from')}, not verified here (it claimed {claim.get('status')} "
                     f"{_x(claim.get('speedup'), '')}): run `warpforge archive verify`")
    elif a.evaluation_id is None:
        lines.append("not evaluated yet")
    else:
        lines += [f"evaluation #{a.evaluation_id}: {a.status} at stage {a.stage}",
                  f"speed vs eager: {a.claim.words()}; vs torch.compile: {_x(a.speedup_vs_compile, 'not measured')}",
                  f"time: {_ms(a.candidate_ms)} (IQR {_ms(a.candidate_iqr_ms)}) vs {_ms(a.reference_ms)} eager",
                  f"kernels {a.kernels_kind or 'not recorded'}  hardware {a.hardware_key or 'not recorded'}  "
                  f"target {Target.from_hardware(a.hardware or {}) or 'not recorded'}",
                  f"reason: {a.reason}"]
        if a.review:
            lines.append(f"review: {a.review.get('verdict', '?')}: {a.review.get('finding', '')}")
    if args.source and a.source is not None:
        lines += ["", a.source]
    print("\n".join(lines))
    return 0


def _best(archive: Archive, args: argparse.Namespace) -> int:
    if args.task not in archive.tasks():
        known = ", ".join(archive.tasks()) or "none"
        raise UsageError(f"task {args.task!r} has no attempts in {archive.path}: known tasks are {known}")
    best = archive.best(args.task, hardware_key=args.hardware_key)
    if best is None:
        if args.json:
            print(json.dumps({"task": args.task, "candidate_id": None, "speedup": None, "improved": False,
                              "speedup_vs_compile": None, "candidate_ms": None, "status": None, "source_path": None,
                              "source": None, "reason": "no verified, timed candidate"}))
        else:
            print(f"{args.task}: no verified, timed candidate in {archive.path}")
        return 1
    source_path = _write_source(best, Path(args.out) if args.out else archive.path.with_name(archive.path.name + ".best"))
    if args.json:
        print(json.dumps(_best_json(best, source_path)))
    else:
        print(f"{best.task}: candidate #{best.id}, {best.claim.words()} than eager PyTorch"
              f"{'' if improves_on_eager(best) else ' (not a proven win)'}, "
              f"{_x(best.speedup_vs_compile, 'not measured')} vs torch.compile ({_ms(best.candidate_ms)}), "
              f"{best.language} by {best.strategy or 'no strategy'} "
              f"[{best.model or 'no model'}]\nsource: {source_path}")
    return 0


def _best_json(a: Attempt, source_path: Path) -> dict[str, Any]:
    return {"task": a.task, "candidate_id": a.id, "speedup": a.speedup, "improved": improves_on_eager(a),
            "claim": a.claim.to_dict(), "speedup_vs_compile": a.speedup_vs_compile,
            "candidate_ms": a.candidate_ms, "candidate_iqr_ms": a.candidate_iqr_ms, "reference_ms": a.reference_ms,
            "status": a.status, "language": a.language, "strategy": a.strategy, "model": a.model,
            "run_id": a.run_id, "hardware_key": a.hardware_key, "kernels_kind": a.kernels_kind,
            "source_path": str(source_path), "source": a.source}


def _write_source(a: Attempt, out_dir: Path) -> Path:
    """OUT/level1/softmax.py for task level1/softmax (each name part made filename-safe)."""
    parts = [re.sub(r"[^\w.-]", "_", part) for part in a.task.split("/") if part not in ("", ".", "..")]
    path = out_dir.joinpath(*parts[:-1], f"{parts[-1] if parts else 'task'}.py").resolve()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(a.source or "")
    return path


def _export(archive: Archive, args: argparse.Namespace) -> int:
    from warpforge.report.datasets import export

    rows = export(archive, args.kind, args.out, args.format)
    if args.json:
        print(json.dumps({"kind": args.kind, "format": args.format, "out": str(Path(args.out).resolve()), "rows": rows}))
    else:
        print(f"wrote {rows} {args.kind} rows to {args.out}")
    return 0


def _when(t: float | None) -> str:
    return "not yet" if t is None else datetime.fromtimestamp(t).strftime("%Y-%m-%d %H:%M:%S")


def _x(v: float | None, why: str) -> str:
    return why if v is None else f"{v:.2f}x"


def _ms(v: float | None) -> str:
    return "not timed" if v is None else f"{v:.4g} ms"
