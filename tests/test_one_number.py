"""One number, one rule: for the same attempt, the live table, optimize's summary and exit code,
`archive ls` / `archive best`, the HTML report and the sft export show the same speedup, and
"improved" is the one claim rule (claim.py, through archive.improves_on_eager): the speedup's
interval lies above 1 — here, unpaired timings, the interval that the two IQRs allow.

The loop runs for real on recorded replies; only the evaluator is replaced by a pool that returns
fixed timings, so each case is exact on any machine (CPU, no evaluation run).
"""

from __future__ import annotations

import json
import re
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest

from warpforge.archive import Archive, Attempt, improves_on_eager
from warpforge.candidate import EvalResult, Timing
from warpforge.cli import main
from warpforge.report.datasets import export
from warpforge.report.html import write_report

CPU = {"device": "cpu", "cpu": "test cpu", "torch": "2.9.0"}

# marker in the candidate's source -> (status, candidate ms, candidate IQR, reference ms, reference IQR)
TIMINGS: dict[str, tuple[str, float, float, float, float]] = {
    # diag_matmul: the first correct attempt is slower than eager (0.42x); the second is 2.61x only
    # because its reference ran slower. The search's incumbent (candidate ms, noise-aware, step
    # order) keeps the first, which the old live table and summary showed: one run, two answers.
    "x0": ("correct", 2.4, 0.2, 1.0, 0.05),
    "x1": ("correct", 2.3, 0.2, 6.0, 0.1),
    # gemm_rowsum: 0.3 ms faster with IQRs of 0.2 ms: beyond the documented margin (0.2 + 0.2) / 2,
    # inside the twice-as-wide one the old `improves_on_eager` used (0.2 + 0.2)
    "y0": ("correct", 1.7, 0.2, 2.0, 0.2),
    "y1": ("incorrect", 0.5, 0.01, 2.0, 0.2),
    # rank1_matmul: the best is 1.05x but within the noise; the other is slower than eager
    "z0": ("correct", 1.9, 0.4, 2.0, 0.4),
    "z1": ("correct", 2.5, 0.1, 2.0, 0.1),
}
TASKS = {"level1/diag_matmul": ("x0", "x1"), "level2/gemm_rowsum": ("y0", "y1"), "level2/rank1_matmul": ("z0", "z1")}
BEST = {"level1/diag_matmul": ("x1", 6.0 / 2.3, True), "level2/gemm_rowsum": ("y0", 2.0 / 1.7, True),
        "level2/rank1_matmul": ("z0", 2.0 / 1.9, False)}


def timing(ms: float, iqr: float) -> Timing:
    return Timing(median_ms=ms, iqr_ms=iqr, min_ms=ms - iqr, mean_ms=ms, n=5, host_median_ms=ms)


def verdict(marker: str) -> dict[str, Any]:
    status, ms, iqr, ref_ms, ref_iqr = TIMINGS[marker]
    return EvalResult(status=status, reason=status, stage="done", candidate=timing(ms, iqr),  # type: ignore[arg-type]
                      reference=timing(ref_ms, ref_iqr), hardware=CPU).to_dict()


class FixedPool:
    """Stands in for executor.EvalPool: each candidate's verdict comes from its marker comment."""

    def __init__(self, *args: object) -> None:
        pass

    def submit(self, job: Any) -> Future[dict[str, Any]]:
        marker = re.search(r"# case (\w+)", job.source).group(1)  # type: ignore[union-attr]
        future: Future[dict[str, Any]] = Future()
        future.set_result(verdict(marker))
        return future

    def close(self) -> None:
        pass


def replies(path: Path) -> Path:
    lines = []
    for task, markers in TASKS.items():
        for marker in markers:
            source = f"import torch\n\n\nclass ModelNew(torch.nn.Module):  # case {marker}\n    pass\n"
            lines.append({"match": re.escape(f"Task `{task}`"),
                          "reply": f"## Analysis\nA rewrite.\n\n## Plan\nTry it.\n\n```python\n{source}```\n"})
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def last_rows(stderr: str) -> dict[str, list[str]]:
    """The live view's last plain line per task, split into its cells."""
    rows = {}
    for line in stderr.splitlines():
        cells = line.split("  ")
        if cells[0] in TASKS:
            rows[cells[0]] = cells
    return rows


def report_speedups(out: Path) -> tuple[dict[str, str], str]:
    html = (out / "index.html").read_text()
    rows = dict(re.findall(r'data-task="([^"]+)">.*?<td class="num best[^"]*">([^<]+)</td>', html, re.S))
    improved = re.search(r'id="improved">([^<]+)', html)
    assert improved is not None
    return rows, " ".join(improved.group(1).split())


def test_every_view_shows_the_same_best_speedup_and_the_one_improved_rule(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("warpforge.executor.EvalPool", FixedPool)
    db = tmp_path / "a.db"
    code = main(["optimize", *TASKS, "--llm", f"replay:{replies(tmp_path / 'r.jsonl')}", "--device", "cpu",
                 "--archive", str(db), "--max-candidates", "2", "--generation-size", "1", "--executor", "local",
                 "--no-live", "--json"])
    out = capsys.readouterr()
    summary = {t["task"]: t for t in json.loads(out.out)["tasks"]}
    rows = last_rows(out.err)
    assert "2 of 3 tasks proven faster than eager PyTorch" in out.err and code == 0

    with Archive(db) as archive:
        ids = {(a.task, m): a.id for a in archive.attempts() for m in TIMINGS if f"# case {m}" in (a.source or "")}
        listed = {s.task: s for s in archive.task_summaries()}
        export(archive, "sft", tmp_path / "sft.jsonl")
    sft = {r["task"]: r for r in map(json.loads, (tmp_path / "sft.jsonl").read_text().splitlines())}
    write_report(db, tmp_path / "report")
    report, headline = report_speedups(tmp_path / "report")
    assert headline.startswith("2 of 3 tasks proven faster than eager PyTorch")

    for task, (marker, speedup, improved) in BEST.items():
        best_id = ids[(task, marker)]
        assert main(["archive", "best", task, "--archive", str(db), "--json", "--out", str(tmp_path / "best")]) == 0
        best = json.loads(capsys.readouterr().out)
        assert (best["candidate_id"], best["improved"]) == (best_id, improved)
        assert best["speedup"] == pytest.approx(speedup)
        assert (summary[task]["best_candidate_id"], summary[task]["improved"]) == (best_id, improved)
        assert summary[task]["speedup"] == pytest.approx(speedup)
        assert (listed[task].best_candidate_id, listed[task].improved) == (best_id, improved)
        assert listed[task].best_speedup == pytest.approx(speedup)
        assert (sft[task]["candidate_id"], sft[task]["speedup"]) == (best_id, pytest.approx(speedup))
        words = best["claim"]["words"]  # the same words in every view a person reads
        assert words.startswith(f"{speedup:.3g}x") and ("x faster [" in words) == improved
        assert summary[task]["claim"]["words"] == words
        assert rows[task][5:7] == [words, "yes" if improved else "no"]  # the live table
        assert report[task] == words
        assert listed[task].best_claim == words


def attempt(ms: float, iqr: float, ref_ms: float, ref_iqr: float) -> Attempt:
    result = {"timing": {"reference": {"median_ms": ref_ms, "iqr_ms": ref_iqr}}}
    return Attempt(id=1, run_id="r", task="t", step=0, correct=True, status="correct", speedup=ref_ms / ms,
                   candidate_ms=ms, candidate_iqr_ms=iqr, reference_ms=ref_ms, result=result)


def test_improved_is_the_documented_margin_not_twice_it():
    # margin = (0.2 + 0.2) / 2 = 0.2 ms; the old rule asked for 0.4 ms
    assert improves_on_eager(attempt(1.7, 0.2, 2.0, 0.2))  # 0.3 ms faster: between 1x and 2x the margin
    assert not improves_on_eager(attempt(1.85, 0.2, 2.0, 0.2))  # 0.15 ms: inside the noise
    assert improves_on_eager(attempt(1.0, 0.0, 2.0, 0.0))  # no spread recorded: any gain counts
    assert not improves_on_eager(attempt(2.5, 0.0, 2.0, 0.0))  # slower than eager
    wrong = Attempt(id=2, run_id="r", task="t", step=0, correct=False, status="incorrect", speedup=4.0,
                    candidate_ms=0.5, reference_ms=2.0)
    assert not improves_on_eager(wrong)  # a wrong program never improves anything
