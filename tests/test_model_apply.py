"""`warpforge.apply` and `warpforge model apply` on the tiny Llama of test_model_extract: seams
are extracted, A/A kernels (each task's own reference as ModelNew) are evaluated by the real
evaluator and recorded as the loop records attempts, and the patched model must give the
original's outputs, run the kernels through their custom ops, count a call at an unverified shape
as a fallback, compile with fullgraph=True, and never take an imported (unverified) attempt."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import warpforge
from warpforge import Candidate, EvalConfig, load_task
from warpforge.archive import Archive
from warpforge.archive_trust import IMPORTED
from warpforge.cli import main
from warpforge.propose import Proposal

pytest.importorskip("transformers")

from test_model_extract import SPEC  # noqa: E402  (the tiny Llama spec)

from warpforge.model import build as builder  # noqa: E402
from warpforge.model.spec import Regime, load_spec  # noqa: E402

# the whole-model chain (each module builds a tiny Llama and evaluates its seams, 20-90 s): the slow
# lane, which CI runs after the default lane (.ci/run); `bash scripts/test.sh -m slow tests/test_model_*.py`
pytestmark = pytest.mark.slow

VERIFIED = ("LlamaRMSNorm", "LlamaAttention")
IMPORTED_ONLY = "LlamaMLP"


def _record(archive: Archive, run_id: str, task: Any, source: str, step: int) -> int:
    """As the loop records an attempt: the task, the candidate, then its evaluation."""
    archive.add_task(task)
    return archive.add_candidate(run_id, Proposal(task=task.name, strategy="aa", candidate=Candidate(source)), step)


@pytest.fixture(scope="module")
def setup(session_setups: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The tiny Llama's seams and an archive of A/A kernels; made once a run (~20 s) and shared with
    test_model_export, which imports this fixture: the tests only read it (apply and export open the
    archive read-only)."""
    made: dict[str, Any] = session_setups.get("tiny_llama_aa", lambda: _make_setup(tmp_path_factory.mktemp("apply")))
    return made


def _make_setup(root: Path) -> dict[str, Any]:
    spec_file = root / "tiny_llama.toml"
    spec_file.write_text(SPEC)
    out = root / "out"
    assert main(["model", "extract", str(spec_file), "--out", str(out), "--device", "cpu", "--iters", "1",
                 "--no-export", *[a for s in (*VERIFIED, IMPORTED_ONLY) for a in ("--seam", s)]]) == 0
    seams = json.loads((out / "seams.json").read_text())
    rows = {r["seam"]: r for r in seams["tasks"]}
    db = root / "archive.db"
    with Archive(db) as archive:
        run_id = archive.start_run({"mode": "test"}, seed=0)
        for step, seam in enumerate(VERIFIED):
            task = load_task(out / rows[seam]["task"])
            source = re.sub(r"\bModel\b", "ModelNew", task.source)  # A/A: the reference as the kernel
            cid = _record(archive, run_id, task, source, step)
            # correct, not timed; 2 trials and no profiled call: these tests are about apply, not the verdict
            result = warpforge.evaluate(task, Candidate(source), EvalConfig(device="cpu", bench=False, trials=2,
                                                                            profile=False, spare_workers=0))
            assert result.correct, result.reason
            archive.add_evaluation(cid, result)
        archive.finish_run(run_id, "done")
        # an imported attempt of the MLP task: a claim of 9x for a kernel that returns zeros, never run
        task = load_task(out / rows[IMPORTED_ONLY]["task"])
        broken = "import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def forward(self, *args):\n        return torch.zeros(1)\n"
        imports = archive.start_run({"mode": "import", "from": "elsewhere.jsonl"}, seed=0)
        archive.add_task(task)
        archive.add_candidate(imports, Proposal(task=task.name, strategy="import", candidate=Candidate(broken)), 0,
                              features={IMPORTED: {"from": "elsewhere.jsonl", "status": "correct", "speedup": 9.0}})
        archive.finish_run(imports, "done")
    spec = load_spec(spec_file)
    return {"spec": spec, "spec_file": spec_file, "seams": out / "seams.json", "db": db, "rows": rows}


def _model_and_inputs(spec: Any, axes: dict[str, int]) -> tuple[torch.nn.Module, dict[str, Any]]:
    built = builder.build(spec)
    _, kwargs = builder.inputs(built, Regime("t", axes), "cpu", seed=7)  # fresh inputs, not the tasks'
    return built.model, kwargs


def _logits(model: Any, kwargs: dict[str, Any]) -> torch.Tensor:
    with torch.no_grad():
        return model(**kwargs).logits  # type: ignore[no-any-return]


def test_apply_serves_the_verified_kernels_and_keeps_the_output(setup: dict[str, Any]) -> None:
    model, kwargs = _model_and_inputs(setup["spec"], {"B": 1, "S": 8})
    want = _logits(model, kwargs)
    patched, report = warpforge.apply(model, setup["db"], setup["seams"])
    assert patched is model
    by = {s.seam: s for s in report.seams}
    for seam in VERIFIED:
        s = by[seam]
        assert s.skipped is None and s.attempt_id is not None and s.device == "cpu"
        assert s.op is not None and s.op.startswith("warpforge_model::") and s.paths == setup["rows"][seam]["paths"]
        assert s.speedup is None  # evaluated with bench=False: correct, not timed
    # the imported attempt (a zeros kernel claiming 9x) is never applied
    assert by[IMPORTED_ONLY].skipped is not None and "no verified kernel" in by[IMPORTED_ONLY].skipped
    assert not hasattr(model.get_submodule(setup["rows"][IMPORTED_ONLY]["paths"][0]), "_warpforge_original_forward")
    got = _logits(patched, kwargs)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert by["LlamaRMSNorm"].served == 5 and by["LlamaAttention"].served == 2
    assert by["LlamaRMSNorm"].fallbacks == 0 and by["LlamaAttention"].fallbacks == 0
    # a served regime's shape (prefill: B=2, S=32) is verified too
    _, prefill = _model_and_inputs(setup["spec"], {"B": 2, "S": 32})
    fresh, _ = _model_and_inputs(setup["spec"], {"B": 2, "S": 32})
    torch.testing.assert_close(_logits(patched, prefill), _logits(fresh, prefill), rtol=1e-5, atol=1e-5)
    assert by["LlamaRMSNorm"].served == 10 and by["LlamaRMSNorm"].fallbacks == 0
    json.loads(report.to_json())  # JSON-serialisable
    # no class was rebound: a fresh model of the same classes runs its own forward
    assert "forward" not in vars(fresh.get_submodule(setup["rows"]["LlamaRMSNorm"]["paths"][0]))


def test_a_call_at_an_unverified_shape_falls_back_and_is_counted(setup: dict[str, Any]) -> None:
    model, kwargs = _model_and_inputs(setup["spec"], {"B": 1, "S": 5})  # S = 5 is no preset of the tasks
    want = _logits(model, kwargs)
    _, report = warpforge.apply(model, setup["db"], setup["seams"])
    torch.testing.assert_close(_logits(model, kwargs), want, rtol=1e-6, atol=1e-6)
    by = {s.seam: s for s in report.seams}
    assert by["LlamaRMSNorm"].served == 0 and by["LlamaRMSNorm"].fallbacks == 5
    assert by["LlamaRMSNorm"].first_fallback == "its input shapes or dtypes are no verified preset"
    assert by["LlamaAttention"].fallbacks == 2
    model.train()  # a call that wants gradients is not the kernel's either
    model(**kwargs).logits.sum().backward()
    assert by["LlamaRMSNorm"].served == 0 and by["LlamaRMSNorm"].fallbacks == 10


def test_the_patched_model_compiles_fullgraph(setup: dict[str, Any]) -> None:
    model, kwargs = _model_and_inputs(setup["spec"], {"B": 1, "S": 8})
    want = _logits(model, kwargs)
    _, report = warpforge.apply(model, setup["db"], setup["seams"])
    seen: list[str] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: list[torch.Tensor]) -> Any:
        seen.extend(str(n.target) for n in gm.graph.nodes if n.op == "call_function")
        return torch._dynamo.lookup_backend("aot_eager")(gm, example_inputs)  # the fake impls, no codegen

    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend=backend)  # a graph break raises
    torch.testing.assert_close(_logits(compiled, kwargs), want, rtol=1e-5, atol=1e-5)
    by = {s.seam: s for s in report.seams}
    norm, attention = by["LlamaRMSNorm"], by["LlamaAttention"]
    # the ops are in the one graph, and the guarded forwards count at run time
    assert sum(str(norm.op).split("::")[1] in t for t in seen) == 5 and norm.served == 5 and norm.fallbacks == 0
    # transformers calls the attention differently while compiling than in eager (the call A/A verified):
    # those calls run the original forward, and are counted
    assert attention.served + attention.fallbacks == 2
    assert attention.fallbacks == 0 or "structure" in str(attention.first_fallback)
    _logits(compiled, kwargs)
    assert by["LlamaRMSNorm"].served == 10


@pytest.mark.slow
def test_the_patched_model_compiles_with_inductor(setup: dict[str, Any]) -> None:
    model, kwargs = _model_and_inputs(setup["spec"], {"B": 1, "S": 8})
    want = _logits(model, kwargs)
    _, report = warpforge.apply(model, setup["db"], setup["seams"])
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    torch.testing.assert_close(_logits(compiled, kwargs), want, rtol=1e-5, atol=1e-5)
    assert {s.seam: s.served for s in report.seams}["LlamaRMSNorm"] == 5


def test_model_apply_command(setup: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["model", "apply", str(setup["spec_file"]), "--archive", str(setup["db"]),
                 "--seams", str(setup["seams"]), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    by = {s["seam"]: s for s in data["seams"]}
    assert by["LlamaRMSNorm"]["served"] == 5 and by["LlamaRMSNorm"]["fallbacks"] == 0
    assert by[IMPORTED_ONLY]["skipped"]
    assert main(["model", "apply", str(setup["spec_file"]), "--archive", str(setup["db"].with_name("nope.db")),
                 "--seams", str(setup["seams"])]) == 2
