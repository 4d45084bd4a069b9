"""The KernelBench campaign's closing table: each sample task's best campaign kernel, timed in one run on one GPU
against eager and torch.compile (the Judge's baselines) beside CUDA-L1's released kernel for the
same task, all through warpforge's evaluator; then the table, pass@k, speedup@k, the
custom-kernel share, tokens and cost.

    # here: the best verified kernel of each task, and CUDA-L1's, into one eval-batch manifest
    python benchmarks/kernelbench_final.py prepare --archive .campaign/kb22/kb.db --out .campaign/kb22/final \\
        [--set-aside ID=REASON ...]
    python benchmarks/kernelbench_final.py pending --final .campaign/kb22/final
    # the GPU machine (one worker per GPU; carry .sandbox .kb .campaign/kb22/final):
    bash benchmarks/kernelbench_final.sh OUT .campaign/kb22/final 540
    # here again, after each call (then `pending` again until none is left):
    cp OUT/final.jsonl .campaign/kb22/final/results/call-N.jsonl
    python benchmarks/kernelbench_final.py table --archive .campaign/kb22/kb.db --final .campaign/kb22/final \\
        --results .campaign/kb22/final/results/*.jsonl --out benchmarks/results/kernelbench_campaign_DATE

A manifest too long for one device call runs in parts: `pending --final DIR [--match RE]
[--exclude RE]` writes DIR/pending.txt, the pairs without a result in DIR/results/*.jsonl yet, and
benchmarks/kernelbench_final.sh runs it on the GPU machine within a time limit, packing what
arrives; `table --results DIR/results/*.jsonl` takes every part. `adopt --outbox BOX --results ...`
gives a campaign job still pending the final run's result of the same candidate (timed ahead). Our kernel's file name carries
its candidate id, so a best that changed after a partial run is a new pair, and the table takes
only results of the current bests.

Both kernels of a task run against the same task file, the KernelBench checkout's (CUDA-L1
evaluated its kernels against its own copy of the tasks; where the sizes changed since, a
kernel that cannot take the new sizes fails here, and the table says so). The headline numbers
follow the issue: a task without a verified kernel faster than eager counts as 1.00x, for both
sides (coverage); beside them, like for like, the geomeans over the tasks where both kernels
verified in the final run, on the same GPU and task file. "custom" is a best whose kernels are
the candidate's own (profile: custom_kernel). A constant output (kernelbench_summary.py's
`constant_output`) is credited 1.00x.

CUDA-L1's kernels at the sizes they were written for: its release's `ref_code` is KernelBench
at c6c4ab6 (2025-01-10), byte for byte for all 250 tasks. `prepare-old --old-kernelbench` takes
a checkout at that revision and writes a manifest of CUDA-L1's kernels against those task files
(found by level and id: names changed since), run as above; `compare` prints both figures and,
with --old-sizes, CUDA-L1 at its own sizes:

    python benchmarks/kernelbench_final.py prepare-old --old-kernelbench .kb/KernelBench-c6c4ab6/KernelBench \
        --out .campaign/kb22/final_old
    python benchmarks/kernelbench_final.py compare \
        --table benchmarks/results/kernelbench_campaign_2026-11-26/final/final_table.json \
        [--old-sizes .campaign/kb22/final_old/results/*.jsonl]
"""

from __future__ import annotations

import argparse
import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernelbench_summary import constant_output  # noqa: E402  (the classification's one definition)
from warpforge import metrics  # noqa: E402
from warpforge.archive import Archive, best_attempt  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "benchmarks" / "results" / "kernelbench_campaign_sample.json"
KS = (1, 4, 8)


def sample_tasks(path: Path) -> list[dict[str, Any]]:
    return list(json.loads(path.read_text())["tasks"])


def slug(task: str) -> str:
    return task.replace("/", "__")


def cudal1_kernels(order: Path) -> dict[str, str]:
    """Task (level/name) -> CUDA-L1's kernel file, from kernelbench_prep.py's TASK:KERNEL list."""
    out = {}
    for line in order.read_text().splitlines():
        task, _, kernel = line.strip().rpartition(":")
        if task:
            out[f"{Path(task).parent.name}/{Path(task).stem}"] = kernel
    return out


def set_aside(items: list[str] | None) -> dict[int, str]:
    """--set-aside ID=REASON items: candidates a review found breaking the task's rules in a way
    the evaluator's behaviour checks cannot see (e.g. fp16 arithmetic in an fp32 task that stays
    inside the tolerance on the drawn inputs)."""
    out = {}
    for item in items or []:
        cid, sep, reason = item.partition("=")
        if not sep or not cid.strip().isdigit() or not reason.strip():
            raise SystemExit(f"--set-aside takes CANDIDATE_ID=REASON, not {item!r}")
        out[int(cid)] = reason.strip()
    return out


def prepare(args: argparse.Namespace) -> None:
    """Each task's best verified kernel into the manifest beside CUDA-L1's. A best the review set
    aside is replaced by the task's best other kernel, and still timed (flagged/) so that the
    table can show what it measured."""
    out = Path(args.out)
    for side in ("ours", "cudal1", "flagged"):
        (out / side).mkdir(parents=True, exist_ok=True)
    l1 = cudal1_kernels(Path(args.cudal1))
    aside = set_aside(getattr(args, "set_aside", None))
    ahead = set(getattr(args, "ahead", None) or [])
    lines, meta = [], []
    with Archive(args.archive, read_only=True) as archive:
        for t in sample_tasks(Path(args.sample)):
            name, task_file = t["task"], f"{args.kernelbench}/{t['path']}"
            top = archive.best(name)
            best = best_attempt(a for a in archive.attempts(task=name, correct=True) if a.id not in aside)
            row: dict[str, Any] = {"task": name, "ours": None, "cudal1": None, "flagged": None}
            for side, pick in (("ours", best), ("flagged", top if top is not None and top.id in aside else None)):
                if pick is None or not pick.source:
                    continue
                # the candidate's id in the name: a best that changes after a partial run is a new pair
                path = out / side / f"{slug(name)}__c{pick.id}.py"
                path.write_text(pick.source)
                lines.append(f"{task_file}:{side}/{path.name}")
                row[side] = {"file": path.name, "candidate_id": pick.id, "step": pick.step, "language": pick.language,
                             "campaign_speedup": pick.speedup, "kernels_kind": pick.kernels_kind}
                if side == "flagged":
                    row[side]["reason"] = aside[pick.id]
            # candidates still waiting for their campaign result, timed now in case one becomes the best
            # (the table takes only the result of the best's own file)
            for a in archive.attempts(task=name):
                if a.id in ahead and a.source and (best is None or a.id != best.id):
                    path = out / "ours" / f"{slug(name)}__c{a.id}.py"
                    path.write_text(a.source)
                    lines.append(f"{task_file}:ours/{path.name}")
                    row.setdefault("ahead", []).append(a.id)
            if name in l1 and Path(l1[name]).is_file():
                path = out / "cudal1" / f"{slug(name)}.py"
                shutil.copyfile(l1[name], path)
                lines.append(f"{task_file}:cudal1/{path.name}")
                row["cudal1"] = {"file": path.name, "source": l1[name]}
            meta.append(row)
    (out / "manifest.txt").write_text("# task : kernel (ours/ the campaign's best, cudal1/ CUDA-L1's released one, "
                                      "flagged/ a best the review set aside)\n"
                                      + "\n".join(lines) + "\n")
    (out / "final_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{sum(1 for m in meta if m['ours'])} of {len(meta)} tasks have a verified kernel, "
          f"{sum(1 for m in meta if m['cudal1'])} a CUDA-L1 one: {len(lines)} pairs in {out / 'manifest.txt'}")


def prepare_old(args: argparse.Namespace) -> None:
    """CUDA-L1's kernel of each sample task against the task at the KernelBench revision CUDA-L1
    used (--old-kernelbench: a checkout at c6c4ab6), into OUT/manifest.txt for `pending` and
    kernelbench_final.sh. The old file is found by level and id (names changed since: LTSM became
    LSTM). Where kernelbench_prep.py's copy of the release's `ref_code` is at hand (the order
    file's task), the old file must equal it: else the checkout is not the revision CUDA-L1 used."""
    out, old = Path(args.out), Path(args.old_kernelbench)
    (out / "cudal1").mkdir(parents=True, exist_ok=True)
    made_for = {}
    for line in Path(args.cudal1).read_text().splitlines():
        task, _, kernel = line.strip().rpartition(":")
        if task:
            made_for[f"{Path(task).parent.name}/{Path(task).stem}"] = (Path(task), Path(kernel))
    lines, meta, differ = [], [], []
    for t in sample_tasks(Path(args.sample)):
        name = t["task"]
        if name not in made_for or not made_for[name][1].is_file():
            continue
        level, task_id = name.split("/")[0], name.split("/")[1].split("_")[0]
        found = sorted((old / level).glob(f"{task_id}_*.py"))
        if len(found) != 1:
            raise SystemExit(f"{len(found)} files for {level} id {task_id} in {old}: give the checkout's KernelBench/ folder")
        ref, kernel = made_for[name]
        if ref.is_file() and ref.read_bytes() != found[0].read_bytes():
            differ.append(name)
        path = out / "cudal1" / f"{slug(name)}.py"
        shutil.copyfile(kernel, path)
        lines.append(f"{found[0]}:cudal1/{path.name}")
        meta.append({"task": name, "old_task": str(found[0]), "cudal1": {"file": path.name, "source": str(kernel)}})
    if differ:
        raise SystemExit(f"{len(differ)} task files differ from CUDA-L1's ref_code ({', '.join(differ[:3])}, ...): "
                         f"{old} is not the KernelBench revision CUDA-L1 used (c6c4ab6)")
    (out / "manifest.txt").write_text("# old task : CUDA-L1's kernel, at the sizes it was written for\n"
                                      + "\n".join(lines) + "\n")
    (out / "old_meta.json").write_text(json.dumps(meta, indent=1) + "\n")
    print(f"{len(lines)} CUDA-L1 kernels against {old}'s task files -> {out / 'manifest.txt'}")


def _pair_key(task: str, kernel: str) -> tuple[str, str, str]:
    """(level/name, side, kernel file name) of a manifest line or a result row, whatever the paths' prefixes."""
    t, k = Path(task), Path(kernel)
    return f"{t.parent.name}/{t.stem}", k.parent.name, k.name


def read_results(paths: list[str]) -> list[dict[str, Any]]:
    """The eval-batch --json rows of every file, in order (lines that are not JSON objects are skipped)."""
    rows = []
    for p in paths:
        for line in Path(p).read_text().splitlines():
            if line.strip().startswith("{"):
                rows.append(json.loads(line))
    return rows


def pending(args: argparse.Namespace) -> None:
    """The manifest's lines without a result in FINAL/results/*.jsonl (a device call cut by its limit
    leaves some), optionally only those matching --match; written as FINAL/pending.txt so that its
    relative paths resolve as the manifest's do."""
    final = Path(args.final)
    done = {_pair_key(str(r["task"]), str(r.get("candidate", ""))) for r in
            read_results([str(p) for p in sorted((final / "results").glob("*.jsonl"))])}
    lines = [line for line in (final / "manifest.txt").read_text().splitlines()
             if line.strip() and not line.startswith("#")]
    keep = [line for line in lines if _pair_key(*line.rsplit(":", 1)) not in done
            and (not args.match or re.search(args.match, line))
            and not (args.exclude and re.search(args.exclude, line))]
    (final / "pending.txt").write_text("".join(f"{line}\n" for line in keep))
    print(f"{len(keep)} of {len(lines)} pairs pending -> {final / 'pending.txt'}")


def adopt(args: argparse.Namespace) -> int:
    """Campaign jobs still pending whose candidate the final run already evaluated (`prepare --ahead`)
    get that result as theirs: the same source (its hash), the same task file (the job's task hash
    is the file's now) and the same evaluator configuration as the campaign's own results of that
    task. A `task_error` (the machine's failure, not the candidate's) is not adopted. Returns how many."""
    from warpforge.candidate import Candidate
    from warpforge.executor.outbox import pending_jobs
    from warpforge.task import load_task, resolve_task_path

    box = Path(args.outbox)
    final = [r for r in read_results(args.results) if r.get("status") != "task_error"]
    done = [json.loads(p.read_text()) for p in sorted((box / "results").glob("*.json"))]
    adopted = 0
    for job in pending_jobs(box):
        name = _pair_key(job["task"], "x")[0]
        source_id = Candidate(job["source"]).id
        if load_task(resolve_task_path(job["task"])).source_hash != job["task_hash"]:
            print(f"{job['key']}: {name}'s task file changed since the job was written; not adopted")
            continue
        configs = {json.dumps(r.get("config"), sort_keys=True) for r in done if _pair_key(str(r.get("task")), "x")[0] == name}
        rows = [r for r in final if _pair_key(str(r["task"]), "x")[0] == name and r.get("candidate_id") == source_id]
        if not rows:
            continue
        row = rows[-1]  # a later call's result of the pair wins, as in `table`
        if len(configs) != 1 or json.dumps(row.get("config"), sort_keys=True) not in configs:
            print(f"{job['key']}: {name}'s final run used another evaluator configuration than its campaign; not adopted")
            continue
        out = box / "results" / f"{job['key']}.json"
        tmp = out.with_suffix(".tmp")
        tmp.write_text(json.dumps({**row, "adopted_from": Path(str(row["candidate"])).name}))
        tmp.replace(out)
        adopted += 1
        print(f"{job['key']}: {name} {job['label']} <- the final run's result ({row['status']})")
    print(f"{adopted} pending jobs given the final run's result")
    return adopted


def _side(results: dict[tuple[str, str], dict[str, Any]], task: str, side: str) -> dict[str, Any] | None:
    return results.get((task, side))


def _credited(r: dict[str, Any] | None) -> float:
    """The issue's rule: a task without a verified kernel faster than eager counts as 1.00x. Faster
    means beyond the paired timing's noise: a speedup whose interval reaches 1.00 is not credited (a
    review found level3/24's 1.09x, interval 0.95-1.21, to be the task's own program timed twice).
    A constant output (no GPU work but fills: right only on a task whose output ignores its inputs)
    is not credited either."""
    s = r.get("speedup") if r and r.get("correct") and not constant_output(r) else None
    interval = (r.get("speedup_interval") or _unpaired_range(r)) if r else None
    if not interval or not float(interval[0]) > 1.0:  # no interval and no timing to judge the noise by: not credited
        return 1.0
    return float(s) if isinstance(s, (int, float)) and s > 1.0 else 1.0


def _unpaired_range(r: dict[str, Any]) -> tuple[float, float] | None:
    """A speedup timed without pairs (the task's sets too big for both processes to hold them at
    once: level1 at KernelBench's sizes) has no interval; its range from the two runs' interquartile
    ranges stands in: (reference - IQR/2) / (candidate + IQR/2) to (reference + IQR/2) / (candidate - IQR/2)."""
    timing = r.get("timing") or {}
    try:
        c_ms, c_iqr = float(timing["candidate"]["median_ms"]), float(timing["candidate"]["iqr_ms"])
        r_ms, r_iqr = float(timing["reference"]["median_ms"]), float(timing["reference"]["iqr_ms"])
    except (KeyError, TypeError, ValueError):
        return None
    if not c_ms + c_iqr / 2 > 0:
        return None
    low = (r_ms - r_iqr / 2) / (c_ms + c_iqr / 2)
    return low, (r_ms + r_iqr / 2) / (c_ms - c_iqr / 2) if c_ms - c_iqr / 2 > 0 else math.inf


def _x(v: Any) -> str:
    return f"{float(v):.2f}x" if isinstance(v, (int, float)) else "-"


def table(args: argparse.Namespace) -> dict[str, Any]:
    final = Path(args.final)
    meta = {m["task"]: m for m in json.loads((final / "final_meta.json").read_text())}
    results: dict[tuple[str, str], dict[str, Any]] = {}
    # several files when the manifest ran in parts (device calls); a later file's result of a pair wins
    paths = [args.results] if isinstance(args.results, str) else list(args.results)
    for r in read_results(paths):
        task, side, file = _pair_key(str(r["task"]), str(r.get("candidate", "")))  # side: ours or cudal1
        wanted = (meta.get(task) or {}).get(side)
        if wanted and file == wanted["file"]:  # the current best's own file: not a stale best's, not one timed ahead
            results[(task, side)] = r
    rows = []
    with Archive(args.archive, read_only=True) as archive:
        for name in meta:
            every = archive.attempts(task=name)
            attempts = [a for a in every if a.status is not None]
            n, c = len(attempts), sum(1 for a in attempts if a.correct)
            speedups = [a.speedup if a.correct else None for a in attempts]
            ours, l1, flagged = _side(results, name, "ours"), _side(results, name, "cudal1"), _side(results, name, "flagged")
            rows.append({
                "task": name, "candidates": n, "correct": c,
                "pass_at_k": {k: metrics.pass_at_k(n, c, k) for k in KS if k <= n},
                "speedup_at_k": {k: metrics.speedup_at_k(speedups, k, floor=1.0) for k in KS if k <= n},
                "tokens": sum(a.prompt_tokens + a.completion_tokens for a in every),
                "cost_usd": sum(a.cost_usd for a in every),
                "ours": _summary(ours), "cudal1": _summary(l1), "flagged": _summary(flagged),
                "flagged_reason": (meta[name].get("flagged") or {}).get("reason"),
                "ours_language": (meta[name].get("ours") or {}).get("language"),
                "has_kernel": {"ours": bool(meta[name].get("ours")), "cudal1": bool(meta[name].get("cudal1"))},
                "ours_credited": _credited(ours), "cudal1_credited": _credited(l1),
                "like_for_like": _same_setting(ours, l1),
                "custom": bool(ours and ours.get("correct") and (ours.get("kernels") or {}).get("kind") == "custom_kernel"),
            })
    n_tasks = len(rows)
    faster = [r for r in rows if r["ours_credited"] > 1.0]
    summary = {
        "tasks": n_tasks,
        "faster_than_eager": len(faster), "faster_share": len(faster) / n_tasks if n_tasks else 0.0,
        "geomean_ours": metrics.geometric_mean([r["ours_credited"] for r in rows]) if rows else None,
        # what the headline would read had the review's set-aside kernels counted (shown, not claimed)
        "geomean_ours_counting_set_aside": metrics.geometric_mean(
            [max(r["ours_credited"], _credited(r["flagged"])) for r in rows]) if rows else None,
        "geomean_cudal1": metrics.geometric_mean([r["cudal1_credited"] for r in rows]) if rows else None,
        "like_for_like": like_for_like(rows),
        "custom_share_of_bests": (sum(r["custom"] for r in faster) / len(faster)) if faster else 0.0,
        "pass_at_k": {k: _mean([r["pass_at_k"][k] for r in rows if k in r["pass_at_k"]]) for k in KS},
        "speedup_at_k_geomean": {k: _geomean([r["speedup_at_k"][k] for r in rows if k in r["speedup_at_k"]]) for k in KS},
        "tokens": sum(r["tokens"] for r in rows), "cost_usd": sum(r["cost_usd"] for r in rows),
        "gpu": next((r.get("hardware", {}).get("gpu") for r in results.values() if r.get("hardware")), None),
    }
    summary["targets"] = {"faster_share >= 0.80": summary["faster_share"] >= 0.80,
                          "geomean_ours > geomean_cudal1": (summary["geomean_ours"] or 0) > (summary["geomean_cudal1"] or 0),
                          "custom_share >= 0.75": summary["custom_share_of_bests"] >= 0.75}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "final_table.json").write_text(json.dumps({"summary": summary, "rows": rows}, indent=1) + "\n")
    (out / "final_table.md").write_text(markdown(rows, summary))
    chart = speedup_chart(rows)
    if chart:
        (out / "final_speedups.html").write_text(chart)
    print(markdown(rows, summary))
    return summary


def _same_setting(ours: dict[str, Any] | None, l1: dict[str, Any] | None) -> bool:
    """Both kernels verified, on the same kind of GPU and against the same task file."""
    if not (ours and l1 and ours.get("correct") and l1.get("correct")):
        return False
    gpu = [(r.get("hardware") or {}).get("gpu") for r in (ours, l1)]
    return gpu[0] == gpu[1] and str(ours.get("task")) == str(l1.get("task"))


def like_for_like(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Geomeans over the tasks where both sides verified in the same setting (`_same_setting`),
    credited as the headline is (1.00x within noise) and as measured. A table written before this
    field existed has no `like_for_like` per row: there both verified in the final run, which times
    both kernels of a task against one task file on one kind of GPU (`prepare`, `table`'s gpu)."""
    both = [r for r in rows if r.get("like_for_like", bool((r["ours"] or {}).get("correct")
                                                          and (r["cudal1"] or {}).get("correct")))]
    if not both:
        return {"tasks": 0}
    return {"tasks": len(both), "names": [r["task"] for r in both],
            "geomean_ours": metrics.geometric_mean([r["ours_credited"] for r in both]),
            "geomean_cudal1": metrics.geometric_mean([r["cudal1_credited"] for r in both]),
            "geomean_ours_measured": metrics.geometric_mean([float(r["ours"]["speedup"]) for r in both]),
            "geomean_cudal1_measured": metrics.geometric_mean([float(r["cudal1"]["speedup"]) for r in both])}


def speedup_chart(rows: list[dict[str, Any]]) -> str | None:
    """One page with the table's speedups over eager as dots against the task's eager time (both
    log scales): our best, CUDA-L1's released kernel and torch.compile, one colour each, a task's
    name and numbers on hover. Only correct results are drawn; None when there are none."""
    from importlib.resources import files

    from markupsafe import escape

    from warpforge.report.plots import Point, dot_plot

    series: list[tuple[str, list[Point]]] = [("ours (best verified)", []), ("CUDA-L1 (released)", []),
                                             ("torch.compile", [])]
    for r in rows:
        ours, l1 = r["ours"], r["cudal1"]
        eager_ms = next((float(x["reference_ms"]) for x in (ours, l1) if x and x.get("reference_ms")), None)
        if not eager_ms:
            continue
        for (name, points), res in zip(series[:2], (ours, l1)):
            if res and res.get("correct") and res.get("speedup"):
                points.append(Point(eager_ms, float(res["speedup"]), f"{r['task']}: {name} {float(res['speedup']):.2f}x "
                                    f"over eager ({eager_ms:.3g} ms)"))
        compile_ms = next((float(x["compile_ms"]) for x in (ours, l1) if x and x.get("compile_ms")), None)
        if compile_ms:
            series[2][1].append(Point(eager_ms, eager_ms / compile_ms, f"{r['task']}: torch.compile "
                                      f"{eager_ms / compile_ms:.2f}x over eager"))
    if not any(points for _, points in series):
        return None
    svg = dot_plot(series, x_label="the task's eager time (ms), log scale; speedup over eager on the y axis",
                   width=760, height=380)
    css = files("warpforge.report").joinpath("templates/style.css").read_text()
    title = "KernelBench campaign: speedup over eager per task"
    return (f"<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>{escape(title)}</title>"
            f"<style>{css}</style></head><body><main><h1>{escape(title)}</h1>"
            "<p>Each dot is one task's correct result from the final run (hover for the task). Speedups are "
            "measured values; the table's credited ones count a result whose interval reaches 1.00 as 1.00x.</p>"
            f"{svg}</main></body></html>\n")


def _summary(r: dict[str, Any] | None) -> dict[str, Any] | None:
    if r is None:
        return None
    return {**{k: r.get(k) for k in ("status", "correct", "speedup", "speedup_interval", "speedup_vs_compile",
                                     "candidate_ms", "reference_ms", "compile_ms", "reason")},
            "unpaired_range": None if r.get("speedup_interval") else _unpaired_range(r)}


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _geomean(values: list[float]) -> float | None:
    return math.exp(sum(math.log(v) for v in values) / len(values)) if values and all(v > 0 for v in values) else None


def markdown(rows: list[dict[str, Any]], s: dict[str, Any]) -> str:
    def cell(r: dict[str, Any] | None, has_kernel: bool = False) -> str:
        if r is None:
            return "not timed yet" if has_kernel else "no kernel"
        if not r.get("correct"):
            return f"{r.get('status')}"
        lo_hi, unpaired = r.get("speedup_interval"), r.get("unpaired_range")
        if lo_hi:
            return _x(r["speedup"]) + f" ({float(lo_hi[0]):.2f}–{float(lo_hi[1]):.2f})"
        return _x(r["speedup"]) + (f" (unpaired {unpaired[0]:.2f}–{unpaired[1]:.2f})" if unpaired else "")

    lines = ["| task | candidates (correct) | ours vs eager | ours vs torch.compile | CUDA-L1 vs eager | ours kind "
             "| set aside by review |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        ours = r["ours"]
        aside = f"{cell(r['flagged'])}: {r['flagged_reason']}" if r.get("flagged_reason") else ""
        has = r.get("has_kernel") or {}
        lines.append(f"| {r['task']} | {r['candidates']} ({r['correct']}) | {cell(ours, has.get('ours', False))} | "
                     f"{_x(ours.get('speedup_vs_compile')) if ours and ours.get('correct') else '-'} | "
                     f"{cell(r['cudal1'], has.get('cudal1', False))} | "
                     f"{'custom' if r['custom'] else (r['ours_language'] or '-')} | {aside} |")
    pk = ", ".join(f"pass@{k} {v:.2f}" for k, v in s["pass_at_k"].items() if v is not None)
    sk = ", ".join(f"speedup@{k} {v:.2f}x" for k, v in s["speedup_at_k_geomean"].items() if v is not None)
    lines += ["", "(in brackets: the paired timing's interval, or where the sets were too big to time in pairs, "
              "\"unpaired\": the range from the two runs' interquartile ranges; a speedup whose interval or range "
              "reaches 1.00 is credited as 1.00x)",
              f"- faster than eager: {s['faster_than_eager']} of {s['tasks']} tasks ({s['faster_share']:.0%}; target 80 %)",
              f"- geomean over all tasks (1.00x where no verified faster kernel): ours {_x(s['geomean_ours'])}, "
              f"CUDA-L1 {_x(s['geomean_cudal1'])}",
              like_line(s["like_for_like"]),
              f"- with the kernels the review set aside counted instead: ours {_x(s['geomean_ours_counting_set_aside'])} "
              "(not claimed)",
              f"- custom kernels among our faster bests: {s['custom_share_of_bests']:.0%} (target 75 %)",
              f"- {pk}; {sk} (geomean over tasks; an incorrect candidate counts as the eager program, 1.00x)",
              f"- tokens {s['tokens']:,} (estimated where the provider reports none), cost ${s['cost_usd']:.2f}",
              f"- GPU: {s['gpu']}", ""]
    missed = [m for r in rows for m in misses(r)]
    if missed:
        lines += ["What is not credited, per task, with the reason:", "", *missed, ""]
    return "\n".join(lines)


def like_line(lf: dict[str, Any]) -> str:
    if not lf.get("tasks"):
        return "- like for like: no task where both kernels verified"
    return (f"- like for like, the {lf['tasks']} tasks where both verified on the same GPU and task file: ours "
            f"{_x(lf['geomean_ours'])}, CUDA-L1 {_x(lf['geomean_cudal1'])} (as measured, no 1.00x floor: "
            f"{_x(lf['geomean_ours_measured'])} and {_x(lf['geomean_cudal1_measured'])})")


def misses(row: dict[str, Any]) -> list[str]:
    """A line for each side of a task that is not credited a speedup over eager, saying why: no
    kernel, no result yet, the evaluator's reason for refusing it, or a speedup within noise."""
    out = []
    for side, label, credited in (("ours", "ours", row["ours_credited"]), ("cudal1", "CUDA-L1", row["cudal1_credited"])):
        r = row[side]
        if credited > 1.0:
            continue
        speedup = r.get("speedup") if r else None
        if r is None:
            has = (row.get("has_kernel") or {}).get(side, True)
            why = "not timed yet" if has else ("no verified kernel in the campaign" if side == "ours"
                                                else "CUDA-L1 released no kernel for this task")
        elif not r.get("correct"):
            why = f"{r.get('status')}: {' '.join(str(r.get('reason') or '').split())[:240]}"
        elif not isinstance(speedup, (int, float)):
            why = "correct, but no speedup was measured (timing unstable or not timed)"
        elif speedup < 0.995:  # reads below 1.00x
            why = f"slower than eager ({_x(speedup)})"
        else:
            why = f"{_x(speedup)} over eager, within the timing's noise (its interval or range reaches 1.00, or none was measured)"
        out.append(f"- {row['task']}, {label}: {why}")
    return out


def _level_id(task: str) -> tuple[str, str]:
    """(levelN, id) of a task path or name: the same task at any KernelBench revision."""
    t = Path(task)
    return t.parent.name, t.name.split("_")[0]


def compare(args: argparse.Namespace) -> dict[str, Any]:
    """Both figures of a written table (final_table.json): coverage (every task, 1.00x where a side
    has no verified faster kernel) and like for like (`like_for_like`); with --old-sizes, CUDA-L1's
    results at the sizes its kernels were written for (`prepare-old`'s run, or any eval rows of
    CUDA-L1's kernels against the old task files; matched by level and id, a later row winning)."""
    table_json = json.loads(Path(args.table).read_text())
    rows = table_json["rows"]
    cover = {"tasks": len(rows), "geomean_ours": metrics.geometric_mean([r["ours_credited"] for r in rows]),
             "geomean_cudal1": metrics.geometric_mean([r["cudal1_credited"] for r in rows])}
    out: dict[str, Any] = {"coverage": cover, "like_for_like": like_for_like(rows), "gpu": table_json["summary"].get("gpu")}
    print(f"coverage, all {cover['tasks']} tasks (1.00x where a side has no verified faster kernel): "
          f"ours {_x(cover['geomean_ours'])}, CUDA-L1 {_x(cover['geomean_cudal1'])} ({out['gpu']})")
    print(like_line(out["like_for_like"])[2:])
    if args.old_sizes:
        old = {_level_id(str(r["task"])): r for r in read_results(args.old_sizes)
               if Path(str(r.get("candidate", ""))).parent.name == "cudal1"}
        with_kernel = [r for r in rows if (r.get("has_kernel") or {}).get("cudal1", r["cudal1"] is not None)]
        timed = {r["task"]: old[_level_id(r["task"])] for r in with_kernel if _level_id(r["task"]) in old}
        verified = [r for r in timed.values() if r.get("correct")]
        credited = {t: _credited(r) for t, r in timed.items()}
        out["old_sizes"] = {
            "kernels": len(with_kernel), "timed": len(timed), "verified": len(verified),
            "geomean_over_all_tasks": metrics.geometric_mean([credited.get(r["task"], 1.0) for r in rows]),
            "geomean_verified": metrics.geometric_mean([credited[t] for t, r in timed.items() if r.get("correct")])
            if verified else None,
            "per_task": {t: {"status": r.get("status"), "speedup": r.get("speedup"), "credited": credited[t]}
                         for t, r in timed.items()}}
        o = out["old_sizes"]
        print(f"CUDA-L1 at the sizes it was written for: {o['timed']} of its {o['kernels']} kernels timed, "
              f"{o['verified']} verified; geomean over all {len(rows)} tasks {_x(o['geomean_over_all_tasks'])}, "
              f"over the verified {_x(o['geomean_verified'])}")
        for t, v in o["per_task"].items():
            print(f"  {t}: {v['status']} {_x(v['speedup'])} (credited {_x(v['credited'])})")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="each task's best kernel and CUDA-L1's into one eval-batch manifest")
    p.add_argument("--archive", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--sample", default=str(SAMPLE))
    p.add_argument("--kernelbench", default=".kb/KernelBench", help="the KernelBench checkout's KernelBench/ folder")
    p.add_argument("--cudal1", default=".kb/cudal1_order.txt", help="kernelbench_prep.py's TASK:KERNEL list")
    p.add_argument("--set-aside", action="append", metavar="ID=REASON",
                   help="a candidate the review found breaking the rules: not the task's best, timed beside it (repeatable)")
    p.add_argument("--ahead", type=int, nargs="+", metavar="ID",
                   help="candidates still waiting for their campaign result: timed too, so that a device call "
                        "is not needed again if one becomes its task's best")
    t = sub.add_parser("table", help="the table from the final run's eval-batch --json results")
    t.add_argument("--archive", required=True)
    t.add_argument("--final", required=True, help="the folder `prepare` wrote")
    t.add_argument("--results", required=True, nargs="+",
                   help="eval-batch --json output of the manifest (several files if it ran in parts, "
                        "one per device call; a later file's result of a pair wins)")
    t.add_argument("--out", required=True)
    q = sub.add_parser("pending", help="the manifest's pairs without a result yet, into FINAL/pending.txt")
    q.add_argument("--final", required=True, help="the folder `prepare` wrote; results of earlier calls in its results/")
    q.add_argument("--match", help="only lines matching this regular expression (e.g. 'level1/')")
    q.add_argument("--exclude", help="leave out lines matching this regular expression (tasks still in the campaign)")
    a = sub.add_parser("adopt", help="campaign jobs still pending whose candidate the final run evaluated: "
                                     "that result becomes theirs (same source, task file and configuration)")
    a.add_argument("--outbox", required=True, help="the campaign's outbox (jobs/ and results/)")
    a.add_argument("--results", required=True, nargs="+", help="the final run's eval-batch --json output")
    o = sub.add_parser("prepare-old", help="CUDA-L1's kernels against the KernelBench revision they were written for")
    o.add_argument("--old-kernelbench", required=True,
                   help="the KernelBench/ folder of a checkout at c6c4ab6 (CUDA-L1's ref_code)")
    o.add_argument("--out", required=True)
    o.add_argument("--sample", default=str(SAMPLE))
    o.add_argument("--cudal1", default=".kb/cudal1_order.txt", help="kernelbench_prep.py's TASK:KERNEL list")
    c = sub.add_parser("compare", help="a written table's coverage and like-for-like figures, and CUDA-L1 at its own sizes")
    c.add_argument("--table", required=True, help="final_table.json")
    c.add_argument("--old-sizes", nargs="+", help="eval-batch --json rows of CUDA-L1's kernels at the old task files")
    args = ap.parse_args()
    {"prepare": prepare, "table": table, "pending": pending, "adopt": adopt, "prepare-old": prepare_old,
     "compare": compare}[args.cmd](args)


if __name__ == "__main__":
    main()
