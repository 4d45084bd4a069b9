"""The committed agent campaign (docs/campaign.md) is consistent: the kernels in the repo are the
ones whose GPU verdicts are committed, the table is what table.py makes of those verdicts, and the
export imports into an archive that retrieval can use."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from warpforge.archive import Archive
from warpforge.evaluate.static import check_source
from warpforge.report.datasets import import_attempts

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "examples" / "campaign"
RESULTS = ROOT / "benchmarks" / "results" / "campaign_h100_2026-11-23"


def _rows() -> list[dict]:
    return [json.loads(line) for line in (RESULTS / "attempts.jsonl").read_text().splitlines()]


def test_every_measured_source_is_the_committed_kernel() -> None:
    rows = _rows()
    assert len(rows) == 14 and {r["model"] for r in rows} == {"claude-code"}
    for r in rows:
        kernel = KERNELS / f"{r['task'].replace('/', '_')}.py"
        assert kernel.read_text() == r["source"], kernel
        verdict = json.loads((RESULTS / "evals" / f"{kernel.stem}.json").read_text())
        assert verdict["status"] == r["status"] and verdict.get("speedup") == r["speedup"]
        assert json.loads(r["result"])["hardware"]["gpu"] == "NVIDIA H100 80GB HBM3"


def test_the_kernels_pass_the_static_policy() -> None:
    for kernel in sorted(KERNELS.glob("*.py")):
        report = check_source(kernel.read_text())
        assert report.syntax_error is None and report.rejected is None, (kernel.name, report.rejected)


def test_the_committed_table_is_what_table_py_makes_of_the_verdicts(tmp_path: Path) -> None:
    out = tmp_path / "table.md"
    subprocess.run([sys.executable, str(ROOT / "benchmarks/campaign/table.py"), str(RESULTS / "evals"), "--out", str(out)],
                   check=True, capture_output=True)
    assert out.read_text() == (RESULTS / "table.md").read_text()
    assert "13 of 14 kernels verified and timed" in out.read_text()


def test_the_export_seeds_an_archive_for_retrieval_once_verified(tmp_path: Path) -> None:
    """Imported, the campaign's verdicts are claims (no best, no stepping stone); verified (here by
    an evaluator that gives the committed GPU verdicts, as `archive verify --device cuda` would on
    the H100), they count."""
    from concurrent.futures import Future

    from warpforge.agent.tools import AgentTools
    from warpforge.archive_trust import verify
    from warpforge.candidate import EvalResult

    class CommittedVerdicts:
        def submit(self, task, candidate):  # type: ignore[no-untyped-def]
            future: Future[EvalResult] = Future()
            evals = RESULTS / "evals" / f"{task.name.replace('/', '_')}.json"
            future.set_result(EvalResult.from_dict(json.loads(evals.read_text())))
            return future

    with Archive(tmp_path / "seeded.db") as archive:
        assert import_attempts(archive, RESULTS / "attempts.jsonl")["imported"] == 14
        assert archive.best("level2/gemm_rowsum") is None
        verified, skipped = verify(archive, CommittedVerdicts())
        assert len(verified) == 14 and skipped == {}
        best = archive.best("level2/gemm_rowsum")
        assert best is not None and best.speedup > 10 and best.kernels_kind == "custom_kernel"
    with AgentTools(tmp_path / "seeded.db", device="cpu") as tools:
        stones = tools.search_archive("level2/gemm_bias_relu", k=3)["stepping_stones"]
        assert stones and stones[0]["task"] == "level2/gemm_bias_gelu" and stones[0]["correct"]
