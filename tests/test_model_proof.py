"""`warpforge model prove` on the tiny Llama of test_model_apply (A/A kernels evaluated by the real
evaluator): the proof passes for honest kernels; a kernel made noisy behind the archive's back
fails the correctness check; a model whose calls all fall back fails the engagement check."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
import torch

from warpforge.cli import main

pytest.importorskip("transformers")

from test_model_apply import setup  # noqa: E402,F401  (the module's fixture: tiny Llama, A/A kernels)

from warpforge.model import apply as applier  # noqa: E402
from warpforge.model.proof import prove  # noqa: E402
from warpforge.model.spec import Regime  # noqa: E402

# The slow lane (`bash scripts/test.sh -m slow`, run before every landing): with its own copy of
# the tiny Llama's set-up these tests take about a minute on 2 cores, which would push the default
# lane past ten minutes; tests/test_model_apply.py keeps apply itself in the default lane.
pytestmark = pytest.mark.slow


def test_the_proof_passes_for_honest_kernels(setup: dict[str, Any]) -> None:  # noqa: F811
    report = prove(setup["spec"], setup["db"], setup["seams"], rounds=2, iters=1)
    checks = {c.name: c for c in report.checks}
    assert report.passed, [(c.name, c.detail) for c in report.checks]
    assert report.regimes == ["cpu"]
    row = checks["correctness"].numbers["cpu"]
    assert row["outputs"][0]["ok"] and row["top1_patched_vs_original"] == 1.0
    served = checks["engagement"].numbers["regimes"]["cpu"]
    assert served["LlamaRMSNorm"] == {"served": 5, "fallbacks": 0} and served["LlamaAttention"]["served"] == 2
    assert any("rms_norm" in op for op in checks["engagement"].numbers["profiled_ops"])
    assert any("rms_norm" in op for op in checks["compile"].numbers["ops_in_graph"])
    assert any("rms_norm" in op for op in checks["export"].numbers["ops_in_graph"])
    speed = checks["speed"]
    assert not speed.required and speed.numbers["aa"]["words"] and len(speed.numbers["patched_vs_eager"]["interval"]) == 2
    json.loads(report.to_json())


def test_a_noisy_kernel_fails_the_correctness_check(setup: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:  # noqa: F811
    load = applier._load_kernel

    def noisy(attempt: Any) -> type[torch.nn.Module]:
        kernel = load(attempt)
        if attempt.task != "llama_rms_norm":
            return kernel

        class Noisy(kernel):  # type: ignore[valid-type,misc]
            def forward(self, *args: Any) -> Any:
                out = super().forward(*args)
                return out + 1e-2 * out.abs().mean() * torch.randn_like(out)

        return Noisy

    monkeypatch.setattr(applier, "_load_kernel", noisy)
    report = prove(setup["spec"], setup["db"], setup["seams"], rounds=1, iters=1)
    assert not report.passed and not report.check("correctness").passed
    assert "over the bar" in report.check("correctness").detail
    assert report.check("engagement").passed  # it ran: the kernels served, only wrongly


def test_a_seam_that_serves_nothing_fails_the_engagement_check(setup: dict[str, Any]) -> None:  # noqa: F811
    spec = dataclasses.replace(setup["spec"], cpu_regime=Regime("cpu", {"B": 1, "S": 5}))  # S=5: no verified preset
    report = prove(spec, setup["db"], setup["seams"], rounds=1, iters=1)
    engagement = report.check("engagement")
    assert not report.passed and not engagement.passed and report.check("correctness").passed
    assert engagement.numbers["regimes"]["cpu"]["LlamaRMSNorm"] == {"served": 0, "fallbacks": 5}
    assert "LlamaRMSNorm served 0 calls" in engagement.detail


def test_model_prove_command(setup: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # noqa: F811
    assert main(["model", "prove", str(setup["spec_file"]), "--archive", str(setup["db"]), "--seams",
                 str(setup["seams"]), "--device", "cpu", "--rounds", "1", "--out", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["passed"] and json.loads((tmp_path / "proof.json").read_text())["passed"]
    assert main(["model", "prove", str(setup["spec_file"]), "--archive", str(tmp_path / "nope.db"), "--seams",
                 str(setup["seams"]), "--device", "cpu"]) == 2
