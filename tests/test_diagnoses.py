"""Diagnoses that blame the right party (issue 39): a misshapen output is named as such before
the harness indexes it, a failing constructor is named as the constructor, and no warpforge
frame is shown as the candidate's error; the harness's own failure is reported as the harness's.

The end-to-end cases run the real evaluator on the CPU against the fixture diag_matmul task
(N = 64, M = 48), sharing one Judge (one reference process) among the candidates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from warpforge import Candidate, EvalConfig, load_task
from warpforge.candidate import EvalResult
from warpforge.evaluate import Judge

TASK = Path(__file__).parent / "fixtures" / "tasks" / "diag_matmul.py"
FAST = {"device": "cpu", "trials": 3, "warmup_ms": 5.0, "rep_ms": 20.0, "min_reps": 5, "timeout_s": 60.0,
        "paired_rounds": 0}

HEADER = "import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
FORWARD = "    def forward(self, A, B):\n        y = A[:, None] * B\n        return {returned}\n"
CONSTRUCTOR = "    def __init__(self{args}):\n        super().__init__()\n{body}"


def forward_returning(returned: str) -> str:
    return HEADER + FORWARD.format(returned=returned)


def constructed(args: str = "", body: str = "") -> str:
    return HEADER + CONSTRUCTOR.format(args=args, body=body) + "\n" + FORWARD.format(returned="y")


@pytest.fixture(scope="module")
def judge() -> Iterator[Judge]:
    with Judge(load_task(TASK), EvalConfig.of(**{**FAST, "bench": False})) as j:  # type: ignore[arg-type]
        yield j


def describe(result: EvalResult) -> str:
    return f"{result.status} [{result.stage}]: {result.reason}\n{result.compile_log}"


def assert_no_harness_frame(result: EvalResult) -> None:
    for text in (result.reason, result.compile_log):
        assert "warpforge/" not in text and "worker.py" not in text, describe(result)


@pytest.mark.parametrize("returned, fragment", [
    ("y[:-1]", "the output has shape (63, 48); the reference's is (64, 48)"),
    ("(y, y.clone())", "forward() returned 2 outputs; the reference returns 1 output"),
    ("None", "the output is a NoneType, not a tensor"),
    ("y.double()", "the output has dtype torch.float64; the reference's is torch.float32"),
    ("y.reshape(-1)", "the output has shape (3072,); the reference's is (64, 48)"),
], ids=["fewer_rows", "two_outputs", "none", "float64", "flattened"])
def test_a_misshapen_output_is_incorrect_with_its_shape_named(judge: Judge, returned: str, fragment: str) -> None:
    """y[:-1] was "forward() raised ... IndexError" with a traceback in evaluate/inputs.py: the
    harness indexed the short output at the reference's fingerprint positions."""
    result = judge.evaluate(Candidate(forward_returning(returned)))
    assert (result.status, result.stage) == ("incorrect", "verify"), describe(result)
    assert fragment in result.reason and "raised" not in result.reason, describe(result)
    assert_no_harness_frame(result)


@pytest.mark.parametrize("args, body, error", [
    (", scale", "        self.scale = scale\n", "TypeError: ModelNew.__init__() missing 1 required positional"),
    ("", "        raise ValueError('no weights for this size')\n", "ValueError: no weights for this size"),
], ids=["wrong_signature", "raises"])
def test_a_failing_constructor_is_named_as_the_constructor(judge: Judge, args: str, body: str, error: str) -> None:
    """Was "forward() raised during the compile stage" with the worker's frames as the traceback."""
    result = judge.evaluate(Candidate(constructed(args, body)))
    assert (result.status, result.stage) == ("runtime_error", "compile"), describe(result)
    assert result.reason.startswith("ModelNew(*init_inputs) raised") and error in result.reason, describe(result)
    assert "forward()" not in result.reason, describe(result)
    if "raise" in body:  # the traceback shown starts at the candidate's own frame
        assert "candidate.py" in result.compile_log and "in __init__" in result.compile_log, describe(result)
    assert_no_harness_frame(result)


def test_a_timed_call_with_a_misshapen_output_is_incorrect_in_the_bench_stage() -> None:
    """Correct while verified, one row short once timed: named by the structure check, not an
    IndexError in the fingerprint of the timed call."""
    source = HEADER + """    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, A, B):
        self.calls += 1
        y = A[:, None] * B
        return y if self.calls <= 3 else y[:-1]
"""
    with Judge(load_task(TASK), EvalConfig.of(**{**FAST, "bench": True})) as judge:  # type: ignore[arg-type]
        result = judge.evaluate(Candidate(source))
    assert (result.status, result.stage) == ("incorrect", "bench"), describe(result)
    assert "in a timed call" in result.reason and "has shape (63, 48)" in result.reason, describe(result)
    assert_no_harness_frame(result)


# --- the stage boundary's blame, unit by unit --------------------------------------------------
def _ending(step: object) -> object:
    from warpforge.evaluate import worker

    class Channel:
        def post(self, message: object) -> None:
            pass

    return worker._stage(Channel(), None, step).ending("/work/candidate.py")  # type: ignore[arg-type]


def test_the_harness_failing_on_an_output_is_the_harness_error_not_the_candidates() -> None:
    """An exception with no candidate call on its traceback, raised in warpforge's own code."""
    from warpforge.evaluate import inputs, protocol

    ending = _ending(lambda: inputs.fingerprint(torch.zeros(3), torch.tensor([7])))
    assert isinstance(ending, protocol.HarnessFailed), ending
    assert ending.message.startswith("IndexError") and "warpforge/evaluate/inputs.py:" in ending.message, ending


def test_a_device_error_seen_by_harness_code_is_the_candidates_device_work() -> None:
    """A CUDA kernel's fault surfaces at the harness's next synchronisation: the candidate's, without
    the harness's frames."""
    from warpforge.evaluate import protocol

    def synchronise() -> None:
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    ending = _ending(synchronise)
    assert isinstance(ending, protocol.Crashed) and ending.call == "device", ending
    assert "warpforge/" not in ending.trace, ending


def test_a_verdict_names_what_raised_and_never_blames_the_candidate_for_the_harness() -> None:
    from warpforge.config import EvalConfig as Config
    from warpforge.evaluate.protocol import Loaded, ParentView
    from warpforge.evaluate.sandbox import ChildOutcome
    from warpforge.evaluate.verdict import Reference, decide

    reference = Reference(numels=[4], sets=2, dtypes=[], tolerances=[], loaded=Loaded(None, None, {}), baselines={},
                          baseline_notes=[], seconds=0.1, verify_sets=2)

    def verdict(message: dict[str, object]) -> EvalResult:
        outcome = ChildOutcome(messages=[{"type": "stage", "name": "verify", "_received": 1.0},
                                         {**message, "_received": 2.0}], returncode=0)
        return decide(outcome, ParentView(), reference, Config(device="cpu"), EvalResult("crashed", "", "static"))

    harness = verdict({"type": "harness_error", "message": "IndexError: i (in warpforge/evaluate/inputs.py:69 in "
                       "fingerprint)", "trace": 'File "/src/warpforge/evaluate/inputs.py", line 69'})
    assert harness.status == "crashed" and "harness itself failed" in harness.reason and not harness.compile_log
    device = verdict({"type": "runtime_error", "message": "RuntimeError: CUDA error: x", "trace": "", "call": "device"})
    assert device.status == "runtime_error" and device.reason.startswith("the candidate's device work failed")
    wrong = verdict({"type": "wrong_outputs", "message": "the output has shape (3,); the reference's is (4,)"})
    assert (wrong.status, wrong.stage, wrong.reason) == ("incorrect", "verify", wrong.reason)
    assert wrong.reason.startswith("the output has shape")


def test_weights_the_candidate_made_uncopyable_are_its_fault_not_the_harness() -> None:
    """Found on an H200 (2026-12-07, CUDA-L1's level3/24 kernel at its own size): parameters made
    under torch.inference_mode refuse the reference's weights, and the harness reported the
    failing copy as its own crash ("please report it")."""
    source = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        with torch.inference_mode():
            self.linear = nn.Linear(in_features, out_features)

    def forward(self, x):
        return torch.relu(self.linear(x))
"""
    task = load_task(Path(__file__).parent / "fixtures" / "tasks" / "linear_relu.py")
    with Judge(task, EvalConfig.of(**{**FAST, "bench": False})) as judge:  # type: ignore[arg-type]
        result = judge.evaluate(Candidate(source))
    assert (result.status, result.stage) == ("runtime_error", "compile"), describe(result)
    assert "copying the reference's weights into ModelNew" in result.reason, describe(result)
    assert "harness itself failed" not in result.reason, describe(result)
