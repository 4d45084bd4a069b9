"""`warpforge model optimize` on the tiny Llama of test_model_extract, with a recorded-reply `cmd:`
model: for the RMSNorm task it answers with the norm's own math written as one expression, for the
MLP task with a kernel that returns zeros. The archive then holds a verified kernel for the norm and
none for the MLP; the proof applies the norm's, serves every call with it and passes; the summary
says so per seam; a second run asks the model nothing and evaluates nothing (counted: the command
logs every prompt, the archive every evaluation); a bad spec is one sentence, exit 2."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from warpforge.cli import main

pytest.importorskip("transformers")

from test_model_extract import SPEC  # noqa: E402  (the tiny Llama spec)

NORM = '''import torch
from torch import nn


class _Norm(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(64))
        self.variance_epsilon = 1e-6


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.seam = _Norm()

    def forward(self, x):
        return self.seam.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.seam.variance_epsilon))
'''
ZEROS = "import torch\nfrom torch import nn\n\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" \
        "        return torch.zeros_like(x)\n"
SEAMS = ("LlamaRMSNorm", "LlamaMLP")
FAST_EVAL = ["--device", "cpu", "--rep-ms", "10", "--warmup-ms", "5", "--paired-rounds", "3"]


def recorded_model(root: Path) -> tuple[str, Path]:
    """A `cmd:` model that keeps each prompt as calls/N.txt and answers by the task in the prompt."""
    calls = root / "calls"
    calls.mkdir()
    (root / "norm.md").write_text(f"```python\n{NORM}```\n")
    (root / "zeros.md").write_text(f"```python\n{ZEROS}```\n")
    script = root / "model.py"
    script.write_text("import sys, uuid\nprompt = sys.stdin.read()\n"
                      f"open({str(calls)!r} + '/' + uuid.uuid4().hex + '.txt', 'w').write(prompt)\n"
                      f"reply = {str(root / 'zeros.md')!r} if 'self.seam = LlamaMLP()' in prompt "
                      f"else {str(root / 'norm.md')!r}\n"
                      "print(open(reply).read())\n")
    return f"cmd:{shlex.quote(sys.executable)} {shlex.quote(str(script))}", calls


def command(spec_file: Path, llm: str, out: Path, db: Path, *extra: str) -> list[str]:
    return ["model", "optimize", str(spec_file), "--llm", llm, "--out", str(out), "--archive", str(db),
            *[a for s in SEAMS for a in ("--seam", s)], "--iters", "1", "--no-export", "--max-candidates", "1",
            "--generation-size", "1", "--rounds", "1", "--no-live", "--json", *FAST_EVAL, *extra]


def evaluations(db: Path) -> int:
    from warpforge.archive import Archive

    with Archive(db, read_only=True) as archive:
        return sum(a.evaluation_id is not None for a in archive.attempts())


@pytest.mark.slow  # about a minute on 2 cores: profile, extract, two evaluations, the proof (compile, export)
def test_model_optimize_end_to_end_survives_a_crash_and_resumes_without_asking(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    spec_file = tmp_path / "tiny_llama.toml"
    spec_file.write_text(SPEC)
    llm, calls = recorded_model(tmp_path)
    out, db = tmp_path / "out", tmp_path / "runs.db"

    def crash(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # as a Ctrl-C (or a kill) in the last stage

    with monkeypatch.context() as patch:
        patch.setattr("warpforge.model.proof.prove", crash)
        assert main(command(spec_file, llm, out, db)) == 130
    crashed = capsys.readouterr()
    assert len(list(calls.iterdir())) == 2 and evaluations(db) == 2  # one reply and one evaluation per task
    assert all(f"{n}/4 {s}" in crashed.err for n, s in enumerate(("profile", "extract", "optimize", "prove"), 1))
    assert set(json.loads((out / "stages.json").read_text())) == {"profile", "extract"}

    # the same command again: what was written stands, only the proof runs
    assert main(command(spec_file, llm, out, db)) == 0
    first = capsys.readouterr()
    data = json.loads(first.out)
    assert len(list(calls.iterdir())) == 2 and evaluations(db) == 2
    assert data["stages"] == {"profile": "done already", "extract": "done already", "optimize": "done already",
                              "prove": "ran"}
    rows = {r["seam"]: r for r in data["seams"]}
    norm, mlp = rows["LlamaRMSNorm"], rows["LlamaMLP"]
    # the archive holds a verified, timed kernel for the norm, and it was applied and served every call
    assert norm["kernel"] is not None and norm["speedup"] is not None and norm["applied"]
    assert norm["served"] == 5 and norm["fallbacks"] == 0
    # the zeros kernel was rejected: nothing verified, nothing applied
    assert mlp["kernel"] is None and not mlp["applied"] and mlp["attempts"] == 1
    proof = json.loads((out / "proof.json").read_text())
    checks = {c["name"]: c for c in proof["checks"]}
    assert proof["passed"] and data["passed"] and checks["correctness"]["numbers"]["cpu"]["outputs"][0]["ok"]
    assert any("llama_rms_norm" in op for op in checks["engagement"]["numbers"]["profiled_ops"])
    assert (out / "model_optimize.html").read_text().count("LlamaRMSNorm") >= 1
    assert json.loads((out / "model_optimize.json").read_text()) == data
    assert "end to end: passed" in first.err and "Traceback" not in first.err

    # the patched model's outputs, apart from the proof: within the evaluator's bar of the original's
    import warpforge
    from warpforge.model import build as builder
    from warpforge.model.spec import Regime, load_spec

    built = builder.build(load_spec(spec_file))
    _, kwargs = builder.inputs(built, Regime("t", {"B": 1, "S": 8}), "cpu", seed=11)
    with torch.no_grad():
        want = built.model(**kwargs).logits
        patched, report = warpforge.apply(built.model, db, out / "seams.json")
        got = patched(**kwargs).logits
    torch.testing.assert_close(got, want, rtol=3e-5, atol=1e-5)
    by = {s.seam: s for s in report.seams}
    assert by["LlamaRMSNorm"].served == 5 and by["LlamaRMSNorm"].fallbacks == 0
    _, unverified = builder.inputs(built, Regime("t", {"B": 1, "S": 5}), "cpu", seed=11)  # S = 5: no preset
    with torch.no_grad():
        patched(**unverified)
    assert by["LlamaRMSNorm"].served == 5 and by["LlamaRMSNorm"].fallbacks == 5  # taken and counted
    assert checks["compile"]["passed"] and any("llama_rms_norm" in op for op in checks["compile"]["numbers"]["ops_in_graph"])

    # and again: every stage is done, the model is asked nothing, nothing is evaluated
    assert main(command(spec_file, llm, out, db)) == 0
    again = capsys.readouterr()
    resumed = json.loads(again.out)
    assert len(list(calls.iterdir())) == 2 and evaluations(db) == 2
    assert resumed["stages"] == {s: "done already" for s in ("profile", "extract", "optimize", "prove")}
    assert resumed["seams"] == data["seams"] and resumed["passed"]
    assert "already finished" in again.err


def test_a_bad_spec_or_option_is_one_sentence_before_any_stage(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    llm, calls = recorded_model(tmp_path)
    out, db = tmp_path / "out", tmp_path / "runs.db"
    assert main(command(tmp_path / "nope.toml", llm, out, db)) == 2
    err = capsys.readouterr().err
    assert "model spec" in err and "does not exist" in err and "Traceback" not in err
    spec_file = tmp_path / "tiny_llama.toml"
    spec_file.write_text(SPEC.replace("[model]", "[model]\nsed = 1"))
    assert main(command(spec_file, llm, out, db)) == 2
    assert "unknown key 'sed' in [model]" in capsys.readouterr().err
    spec_file.write_text(SPEC)
    monkeypatch.delenv("WARPFORGE_LLM", raising=False)
    no_llm = command(spec_file, llm, out, db)
    del no_llm[3:5]
    assert main(no_llm) == 2 and "no LLM configured" in capsys.readouterr().err
    assert main(command(spec_file, llm, out, db, "--top", "0")) == 2 and "--top" in capsys.readouterr().err
    assert main(command(spec_file, llm, out, db, "--strategy", "greedy")) == 2
    assert "unknown strategy 'greedy'" in capsys.readouterr().err
    assert main(command(spec_file, "cmd:no-such-program-warpforge", out, db)) == 2
    assert "not a program on PATH" in capsys.readouterr().err
    assert main(command(spec_file, llm, out, tmp_path / "no" / "such" / "runs.db")) == 2
    assert "folder does not exist" in capsys.readouterr().err
    # nothing ran: no stage, no prompt
    assert not (out / "profile.json").exists() and not list(calls.iterdir())


def test_an_archive_holding_another_program_under_a_task_name_is_refused(tmp_path: Path) -> None:
    """The loop would record the new program over the old and resume its run, and apply would then
    take kernels verified against the old one."""
    from warpforge import load_task
    from warpforge.archive import Archive
    from warpforge.errors import UsageError
    from warpforge.model.optimize import check_archive

    task_file = tmp_path / "llama_rms_norm.py"
    task_file.write_text(load_task("level1/relu").source)
    with Archive(tmp_path / "runs.db") as archive:
        archive.add_task(load_task(task_file))
    check_archive(tmp_path / "runs.db", [task_file])  # the same program: fine
    task_file.write_text(task_file.read_text() + "\n# re-extracted from a changed spec\n")
    with pytest.raises(UsageError, match="another program under the task name 'llama_rms_norm'"):
        check_archive(tmp_path / "runs.db", [task_file])


def test_stage_records_survive_only_whole(tmp_path: Path) -> None:
    from warpforge.model.optimize import Stages

    stages = Stages(tmp_path)
    stages.record("profile", {"spec": "abc", "device": "cpu"})
    assert Stages(tmp_path).done("profile", {"spec": "abc", "device": "cpu"})
    assert not Stages(tmp_path).done("profile", {"spec": "abd", "device": "cpu"})  # the spec changed: run again
    (tmp_path / "stages.json").write_text("{ half a fil")  # unreadable: every stage runs again
    assert not Stages(tmp_path).done("profile", {"spec": "abc", "device": "cpu"})
