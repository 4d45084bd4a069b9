"""Datasets exported from an archive, as JSONL or Parquet: `export(archive, kind, out_path, fmt)`.

Kinds: `sft` (task → its best verified kernel), `preference` (faster vs slower correct kernels of
one task on one machine, only where the gap exceeds both timings' spread), `contrastive` (the
prompts, replies and analyses of contrastive-strategy attempts with their outcome), and
`attempts` (one row per attempt, in the spirit of the AI CUDA Engineer archive). Columns and
types are fixed per kind (docs/archive.md); a file is written whole or not at all (temp file +
rename). Only reads the archive; choosing what to train on beyond these rules is the user's call.
Imported attempts not verified here (archive_trust.py) are in no export; `import_attempts` adds
them as claims, never as verdicts.
"""

from __future__ import annotations

import itertools
import json
import math
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from warpforge.metrics import faster_beyond_noise
from warpforge import languages
from warpforge.archive import Archive, Attempt, best_attempt
from warpforge.archive_trust import IMPORTED, claim_of_row, suite_task, trusted
from warpforge.errors import UsageError

FORMATS = ("jsonl", "parquet")

# Column name → type ("str", "int", "float", "bool", "ints"), in output order: the contract.
COLUMNS: dict[str, tuple[tuple[str, str], ...]] = {
    "sft": (("task", "str"), ("prompt", "str"), ("completion", "str"), ("candidate_id", "int"),
            ("language", "str"), ("speedup", "float"), ("speedup_vs_compile", "float"), ("candidate_ms", "float"),
            ("hardware_key", "str")),
    "preference": (("task", "str"), ("prompt", "str"), ("chosen", "str"), ("rejected", "str"),
                   ("chosen_id", "int"), ("rejected_id", "int"), ("chosen_ms", "float"), ("rejected_ms", "float"),
                   ("chosen_iqr_ms", "float"), ("rejected_iqr_ms", "float"), ("chosen_speedup", "float"),
                   ("rejected_speedup", "float"), ("hardware_key", "str")),
    "contrastive": (("task", "str"), ("candidate_id", "int"), ("model", "str"), ("prompt", "str"), ("reply", "str"),
                    ("analysis", "str"), ("parents", "ints"), ("status", "str"), ("correct", "bool"),
                    ("failure", "str"), ("speedup", "float"), ("speedup_vs_compile", "float")),
    "attempts": (("task", "str"), ("candidate_id", "int"), ("run_id", "str"), ("step", "int"), ("strategy", "str"),
                 ("model", "str"), ("language", "str"), ("status", "str"), ("correct", "bool"), ("stage", "str"),
                 ("reason", "str"), ("failure", "str"), ("speedup", "float"), ("speedup_vs_compile", "float"),
                 ("candidate_ms", "float"), ("reference_ms", "float"), ("kernels_kind", "str"),
                 ("max_abs_err", "float"), ("rel_l2_err", "float"), ("prompt_tokens", "int"),
                 ("completion_tokens", "int"), ("cost_usd", "float"), ("parents", "ints"), ("hardware_key", "str"),
                 ("source", "str"), ("analysis", "str"), ("result", "str")),
}
KINDS = tuple(COLUMNS)


def export(archive: Archive, kind: str, out_path: str | Path, fmt: str = "jsonl") -> int:
    """Write the `kind` dataset of `archive` to `out_path` in `fmt`; return the number of rows."""
    if kind not in COLUMNS:
        raise UsageError(f"unknown export kind {kind!r}: choose one of {', '.join(KINDS)}")
    if fmt not in FORMATS:
        raise UsageError(f"unknown export format {fmt!r}: choose jsonl or parquet")
    rows = [_clean(row) for row in ROWS[kind](archive)]
    columns = COLUMNS[kind]
    rows = [{name: row.get(name) for name, _ in columns} for row in rows]
    out = Path(out_path)
    if fmt == "jsonl":
        _atomic_write(out, lambda tmp: _write_jsonl(rows, tmp))
    else:
        _atomic_write(out, lambda tmp: _write_parquet(rows, columns, tmp))
    return len(rows)


# -- rows of each kind ---------------------------------------------------------------------------

def sft_rows(archive: Archive) -> Iterator[dict[str, Any]]:
    """One row per task with a recorded source and a verified, timed candidate."""
    attempts = trusted(archive)
    for task in archive.tasks():
        best, prompt = best_attempt(a for a in attempts if a.task == task), archive.task_source(task)
        if best is None or prompt is None:
            continue
        yield {"task": task, "prompt": prompt, "completion": best.source, "candidate_id": best.id,
               "language": best.language, "speedup": best.speedup, "speedup_vs_compile": best.speedup_vs_compile,
               "candidate_ms": best.candidate_ms, "hardware_key": best.hardware_key}


def preference_rows(archive: Archive) -> Iterator[dict[str, Any]]:
    """Pairs of correct candidates of one task timed on one machine, chosen = the faster, kept only
    when the faster one wins beyond the noise (metrics.faster_beyond_noise: the interquartile
    ranges do not overlap): a gap inside the noise is no preference."""
    groups: dict[tuple[str, str | None], dict[str, Attempt]] = {}
    for a in trusted(archive):
        if not a.timed or a.source_hash is None:
            continue
        same_source = groups.setdefault((a.task, a.hardware_key), {})
        kept = same_source.get(a.source_hash)  # one timing per program: the latest
        if kept is None or a.id > kept.id:
            same_source[a.source_hash] = a
    for (task, key), by_source in sorted(groups.items(), key=lambda g: (g[0][0], g[0][1] or "")):
        prompt = archive.task_source(task) or ""
        ranked = sorted(by_source.values(), key=lambda a: (a.candidate_ms or 0.0, a.id))
        for fast, slow in itertools.combinations(ranked, 2):
            assert fast.candidate_ms is not None and slow.candidate_ms is not None
            if not faster_beyond_noise(fast.candidate_ms, fast.candidate_iqr_ms or 0.0, slow.candidate_ms,
                                       slow.candidate_iqr_ms or 0.0):
                continue
            yield {"task": task, "prompt": prompt, "chosen": fast.source, "rejected": slow.source,
                   "chosen_id": fast.id, "rejected_id": slow.id, "chosen_ms": fast.candidate_ms,
                   "rejected_ms": slow.candidate_ms, "chosen_iqr_ms": fast.candidate_iqr_ms,
                   "rejected_iqr_ms": slow.candidate_iqr_ms, "chosen_speedup": fast.speedup,
                   "rejected_speedup": slow.speedup, "hardware_key": key}


def contrastive_rows(archive: Archive) -> Iterator[dict[str, Any]]:
    """Every contrastive-strategy attempt, failed ones included (speedup null)."""
    for a in trusted(archive):
        if a.strategy == "contrastive":
            yield {"task": a.task, "candidate_id": a.id, "model": a.model, "prompt": a.prompt, "reply": a.reply,
                   "analysis": a.analysis, "parents": list(a.parents), "status": a.status, "correct": a.correct,
                   "failure": a.failure, "speedup": a.speedup, "speedup_vs_compile": a.speedup_vs_compile}


def attempt_rows(archive: Archive) -> Iterator[dict[str, Any]]:
    for a in trusted(archive):
        result = a.result or {}
        yield {"task": a.task, "candidate_id": a.id, "run_id": a.run_id, "step": a.step, "strategy": a.strategy,
               "model": a.model, "language": a.language, "status": a.status, "correct": a.correct, "stage": a.stage,
               "reason": a.reason, "failure": a.failure, "speedup": a.speedup,
               "speedup_vs_compile": a.speedup_vs_compile, "candidate_ms": a.candidate_ms,
               "reference_ms": a.reference_ms, "kernels_kind": a.kernels_kind,
               "max_abs_err": result.get("max_abs_err"), "rel_l2_err": result.get("rel_l2_err"),
               "prompt_tokens": a.prompt_tokens, "completion_tokens": a.completion_tokens, "cost_usd": a.cost_usd,
               "parents": list(a.parents), "hardware_key": a.hardware_key, "source": a.source,
               "analysis": a.analysis, "result": json.dumps(_finite(a.result), allow_nan=False, default=str) if a.result else None}


def _finite(value: Any) -> Any:
    """Non-finite floats anywhere in a verdict become null (strict JSON inside the column too)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def import_attempts(archive: Archive, path: str | Path) -> dict[str, int]:
    """Add the rows of an `attempts` export (JSONL or Parquet) to `archive` as one new run (config
    mode "import"): how kernels from elsewhere (the committed agent campaign, a teammate's archive)
    reach this archive. The file is not trusted (ARCHITECTURE.md, "The trust boundary"): each row's
    verdict is kept as a claim (`features["imported"]`, archive_trust.py), not as an evaluation,
    so nothing imported is a best, a dataset row or a stepping stone until `warpforge archive
    verify` has evaluated it here. A row's task must be a built-in suite task or one this archive
    already records (a task path from the file is never recorded, so never run); other rows are
    skipped and counted. Sources already recorded for the same task on the same machine (or
    claimed so by an earlier import) are skipped, so importing twice adds nothing."""
    from warpforge.candidate import Candidate
    from warpforge.propose import Proposal
    from warpforge.task import Task

    rows = _read_rows(Path(path))
    seen = {(a.task, a.source_hash, a.hardware_key) for a in archive.attempts() if a.evaluation_id is not None}
    seen |= {(a.task, a.source_hash, (a.features.get(IMPORTED) or {}).get("hardware_key"))
             for a in archive.attempts() if isinstance(a.features.get(IMPORTED), dict)}
    known = set(archive.tasks())
    suite: dict[str, Task | None] = {}
    counts = {"imported": 0, "already_there": 0, "unknown_task": 0, "no_source": 0}
    run_id: str | None = None
    steps: dict[str, int] = {}
    for row in rows:
        if not isinstance(row.get("source"), str) or not row["source"]:
            counts["no_source"] += 1
            continue
        name = str(row.get("task"))
        task = suite[name] if name in suite else suite.setdefault(name, suite_task(name))
        if task is None and name not in known:
            counts["unknown_task"] += 1
            continue
        candidate = Candidate(row["source"], strategy=str(row.get("strategy") or "imported"), model=str(row.get("model") or ""))
        claim = claim_of_row(row, str(path))
        if (name, candidate.id, claim["hardware_key"]) in seen:
            counts["already_there"] += 1
            continue
        if run_id is None:
            run_id = archive.start_run({"mode": "import", "from": str(path)}, seed=0)
        if task is not None:
            archive.add_task(task)
        step = steps.get(name, 0)
        steps[name] = step + 1
        proposal = Proposal(task=name, strategy=candidate.strategy, model=candidate.model, candidate=candidate,
                            analysis=str(row.get("analysis") or ""))
        language = str(row.get("language") or "unknown")
        archive.add_candidate(run_id, proposal, step, features={IMPORTED: claim},
                              language=language if language in languages.names() else "unknown")
        seen.add((name, candidate.id, claim["hardware_key"]))
        counts["imported"] += 1
    if run_id is not None:
        archive.finish_run(run_id, "done")
    return counts


def _read_rows(path: Path) -> list[dict[str, Any]]:
    if not path.is_file():
        raise UsageError(f"no file at {path}: give an attempts export (`warpforge archive export attempts --out FILE`)")
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise UsageError("pyarrow is not installed: install warpforge[data] to read Parquet") from None
        rows: list[dict[str, Any]] = pq.read_table(path).to_pylist()
    else:
        from warpforge import jsonl

        rows = jsonl.read(path)
    if rows and "source" not in rows[0]:
        raise UsageError(f"{path} is not an attempts export (it has no source column)")
    return rows


ROWS: dict[str, Callable[[Archive], Iterator[dict[str, Any]]]] = {
    "sft": sft_rows, "preference": preference_rows, "contrastive": contrastive_rows, "attempts": attempt_rows}


# -- writing -------------------------------------------------------------------------------------

def _clean(row: dict[str, Any]) -> dict[str, Any]:
    """Non-finite floats (a max_abs_err of inf) become null: strict JSON, and Parquet readers agree."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def _write_jsonl(rows: list[dict[str, Any]], path: Path) -> None:
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, allow_nan=False) + "\n")


def _write_parquet(rows: list[dict[str, Any]], columns: tuple[tuple[str, str], ...], path: Path) -> None:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UsageError("pyarrow is not installed: install warpforge[data] for Parquet exports") from None
    types = {"str": pa.string(), "int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(),
             "ints": pa.list_(pa.int64())}
    schema = pa.schema([(name, types[kind]) for name, kind in columns])
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path)


def _atomic_write(out: Path, write: Callable[[Path], None]) -> None:
    """Write to a temp file beside `out`, then rename it over `out`: readers never see half a file."""
    if out.is_dir():
        raise UsageError(f"export path {out} is a directory: give a file path such as {out}/attempts.jsonl")
    out.parent.mkdir(parents=True, exist_ok=True)
    # not mkstemp: its 0600 mode would survive the rename; a random name keeps writers apart
    tmp = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        write(tmp)
        with tmp.open("rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
