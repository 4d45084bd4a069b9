"""A/A: a task's own reference program, as its candidate, must be accepted (calibrate.py), also
for stateful tasks and for fp16 outputs that overflow; the rules behind it (state.py, verify.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from warpforge import EvalConfig, load_task
from warpforge.calibrate import as_candidate, calibrate, summarise
from warpforge.errors import TaskError
from warpforge.evaluate import state
from warpforge.evaluate.verify import Tolerance, compare, compare_fingerprint, summarize_reference

TASKS = Path(__file__).parent / "fixtures" / "tasks"
FAST = {"device": "cpu", "trials": 5, "bench": False, "spare_workers": 0, "timeout_s": 120.0}


def test_the_candidate_is_the_task_renamed() -> None:
    source = as_candidate(load_task(TASKS / "rnn_hidden.py")).source
    assert "class ModelNew(nn.Module)" in source and "super(ModelNew, self)" in source and "class Model(" not in source


def test_stateful_and_overflowing_references_pass_against_themselves() -> None:
    tasks = [load_task(TASKS / f"{name}.py") for name in ("rnn_hidden", "overflow_fp16", "matmul")]
    rows = calibrate(tasks, EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert [r["status"] for r in rows] == ["correct"] * 3, [(r["task"], r["reason"]) for r in rows]
    summary = summarise(rows)
    assert summary["accepted"] == 3 and summary["rejected"] == []


def test_an_output_that_is_a_view_of_a_larger_buffer_is_not_an_oversized_outputs_file() -> None:
    """torch 2.13's F.mse_loss on the CPU returns a 0-dim view of its BATCH x DIM temporary, and
    torch.save writes a view's whole storage: the suite's own mse_loss was refused against itself
    ("the outputs file holds 2.0 MiB, the task's outputs take 0.0 MiB"). A candidate returning
    such a view on purpose shows it whatever the torch version."""
    from warpforge import evaluate
    from warpforge.candidate import Candidate

    source = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, predictions, targets):
        squares = ((predictions - targets) ** 2).flatten()
        squares[0] = squares.mean()
        return squares[0]
"""
    task = load_task("level1/mse_loss")
    for candidate in (as_candidate(task), Candidate(source)):
        result = evaluate(task, candidate, EvalConfig.of(**FAST))  # type: ignore[arg-type]
        assert result.status == "correct", result.reason


def test_a_stateful_reference_passes_timed_and_twice_in_one_judge() -> None:
    """Timed calls and a second candidate of the same Judge call the module many more times than the
    reference did: without the state put back, both read wrong (rel L2 0.93 measured before)."""
    from warpforge import Judge

    task = load_task(TASKS / "rnn_hidden.py")
    cfg = EvalConfig.of(**{**FAST, "bench": True, "warmup_ms": 5.0, "rep_ms": 20.0, "min_reps": 5})  # type: ignore[arg-type]
    with Judge(task, cfg) as judge:
        for _ in range(2):
            result = judge.evaluate(as_candidate(task))
            assert result.correct, result.reason


def test_state_is_put_back_before_each_call() -> None:
    module = load_task(TASKS / "rnn_hidden.py")
    from warpforge.task import import_task_module

    mod = import_task_module(module)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs())
    x = torch.randn(mod.batch_size, mod.input_size)
    saved = state.snapshot(model)
    first = model(x)
    assert not torch.equal(model(x), first)  # the task really is stateful
    state.restore(saved)
    assert torch.equal(model(x), first)
    state.restore(saved)
    assert torch.equal(model(x), first)  # the snapshot itself was not changed by the calls


def test_a_program_that_overflows_keeps_a_finite_tolerance_and_passes_against_itself() -> None:
    """The native error of an output that overflows exactly where float64 exceeds the dtype is the
    program's rounding, not infinity: the bars stay finite (before, fp32 cumprod's max-error bar was
    infinite on KernelBench level1/90), and the A/A still holds. A candidate off by 1e-3 at the
    largest finite elements is then refused, as everywhere else."""
    from warpforge import evaluate
    from warpforge.candidate import Candidate

    task = load_task(TASKS / "overflow_cumprod.py")
    honest = evaluate(task, as_candidate(task), EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert honest.status == "correct", honest.reason
    assert honest.tolerance["max_rel"] == 3e-4 and honest.tolerance["rel_l2"] == 3e-5
    assert not any("not finite" in w for w in honest.warnings)
    skewed = Candidate("""import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        y = torch.cumprod(x, dim=1)
        big = torch.isfinite(y) & (y > 1e37)
        return torch.where(big, y * 1.001, y)
""")
    result = evaluate(task, skewed, EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert result.status == "incorrect", result.reason


def test_an_overflow_to_inf_is_right_only_where_the_exact_value_is_beyond_the_dtype() -> None:
    ref = torch.tensor([1.0, 70000.0, -80000.0, 3.0], dtype=torch.float64)
    tol = Tolerance(5e-3, 2e-2)
    good = torch.tensor([1.0, float("inf"), float("-inf"), 3.0], dtype=torch.float16)
    assert compare(good, ref, torch.float16, tol).ok
    wrong_sign = torch.tensor([1.0, float("-inf"), float("-inf"), 3.0], dtype=torch.float16)
    assert not compare(wrong_sign, ref, torch.float16, tol).ok
    spurious = torch.tensor([float("inf"), float("inf"), float("-inf"), 3.0], dtype=torch.float16)
    assert not compare(spurious, ref, torch.float16, tol).ok
    as_fp32 = torch.tensor([1.0, float("inf"), float("-inf"), 3.0], dtype=torch.float32)  # fp32 holds 70000
    assert not compare(as_fp32, ref, torch.float32, tol).ok
    positions = torch.tensor([0, 1, 2, 3])
    fp = {"norm": float("inf"), "values": [1.0, float("inf"), float("-inf"), 3.0]}
    summary = summarize_reference(ref, positions)
    assert compare_fingerprint(fp, summary, tol, torch.finfo(torch.float16).max) is None
    assert compare_fingerprint(fp, summary, tol) is not None  # without the dtype's limit: NaN/Inf mismatch


def test_calibrate_command_prints_rows_and_exits_by_the_verdicts(tmp_path: Path) -> None:
    out = tmp_path / "aa.jsonl"
    done = subprocess.run([sys.executable, "-m", "warpforge.cli", "calibrate", str(TASKS / "matmul.py"),
                           str(TASKS / "bad_inputs_string.py"), "--device", "cpu", "--no-bench", "--json",
                           "--out", str(out)], capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r.get("status") for r in lines[:-1]] == ["correct", "task_error"], done.stderr
    assert lines[-1]["summary"]["rejected"] == [load_task(TASKS / "bad_inputs_string.py").name]
    assert done.returncode == 1 and len(out.read_text().splitlines()) == 2


def test_calibrate_resumes_from_its_out_file_and_stops_at_the_limit(tmp_path: Path) -> None:
    out = tmp_path / "aa.jsonl"
    cmd = [sys.executable, "-m", "warpforge.cli", "calibrate", str(TASKS / "matmul.py"),
           str(TASKS / "bad_inputs_string.py"), "--device", "cpu", "--no-bench", "--json", "--out", str(out)]
    first = subprocess.run(cmd + ["--limit", "1"], capture_output=True, text=True, timeout=300)
    assert [json.loads(line).get("status") for line in first.stdout.splitlines()[:-1]] == ["correct"], first.stderr
    assert "not evaluated yet" in first.stderr and first.returncode == 0
    second = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    lines = [json.loads(line) for line in second.stdout.splitlines()]
    assert [r.get("status") for r in lines[:-1]] == ["task_error"], second.stderr  # only the task not yet done
    assert lines[-1]["summary"]["tasks"] == 2 and second.returncode == 1
    assert "1 already in" in second.stderr and len(out.read_text().splitlines()) == 2


def test_a_task_in_a_level_folder_is_named_with_its_level(tmp_path: Path) -> None:
    level = tmp_path / "level3"
    level.mkdir()
    (level / "7_Matmul.py").write_text((TASKS / "matmul.py").read_text())
    assert load_task(level / "7_Matmul.py").name == "level3/7_Matmul"
    assert load_task(TASKS / "matmul.py").name == "matmul"


def test_a_task_the_harness_cannot_run_is_a_row_and_the_run_goes_on(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    from warpforge.errors import HarnessError

    evaluate_mod = importlib.import_module("warpforge.evaluate")  # the package, not the function

    class Dying:
        def __init__(self, task, config) -> None:  # type: ignore[no-untyped-def]
            self.task = task

        def __enter__(self):  # type: ignore[no-untyped-def]
            if self.task.name == "matmul":
                raise HarnessError("the reference process for matmul exited with 1: CUDA out of memory")
            return self

        def __exit__(self, *exc) -> None:  # type: ignore[no-untyped-def]
            return None

        def evaluate(self, candidate):  # type: ignore[no-untyped-def]
            raise TaskError("not reached in this test's second task")

    monkeypatch.setattr(evaluate_mod, "Judge", Dying)
    tasks = [load_task(TASKS / "matmul.py"), load_task(TASKS / "bad_inputs_string.py")]
    rows = calibrate(tasks, EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert [r["status"] for r in rows] == ["harness_error", "task_error"]
    assert "out of memory" in rows[0]["reason"] and summarise(rows)["rejected"] == [t.name for t in tasks]


def test_a_degenerate_task_passes_against_itself_with_a_warning_and_still_refuses_garbage(tmp_path: Path) -> None:
    from warpforge import Candidate
    from warpforge.evaluate import Judge

    task = load_task(TASKS / "degenerate_mean.py")
    rows = calibrate([task], EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert rows[0]["status"] == "correct", rows[0]["reason"]
    assert any("degenerate task" in w for w in rows[0]["warnings"]), rows[0]["warnings"]
    body = task.source.split("class Model")[0] + """
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.full_like(x[:, 0], {value})
"""
    with Judge(task, EvalConfig.of(**FAST)) as judge:  # type: ignore[arg-type]
        zeros = judge.evaluate(Candidate(body.format(value=0.0)))
        ones = judge.evaluate(Candidate(body.format(value=1.0)))
    assert zeros.correct  # within the program's own rounding noise of the exact answer, 0
    assert ones.status == "incorrect", ones.reason


def test_an_input_insensitive_task_is_named_and_a_sensitive_one_is_not() -> None:
    """A task whose output hardly moves across input sets (under the tolerance) is one an input-free
    program passes: the verdict says so (KernelBench level3/24's review found it by hand). The
    constant program passes too, which is why the warning exists; a real task gets no warning."""
    from warpforge import Candidate, evaluate

    task = load_task(TASKS / "insensitive_output.py")
    own = evaluate(task, as_candidate(task), EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert own.status == "correct", own.reason
    assert any("input-insensitive task" in w for w in own.warnings), own.warnings
    constant = task.source.split("class Model")[0] + """
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, COLS))

    def forward(self, x):
        return (self.bias * (1 + 1e-6 + 1e-12)).expand(x.shape[0], -1).clone()
"""
    assert evaluate(task, Candidate(constant), EvalConfig.of(**FAST)).correct  # type: ignore[arg-type]
    sensitive = load_task(TASKS / "matmul.py")
    honest = evaluate(sensitive, as_candidate(sensitive), EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert honest.correct and not any("input-insensitive" in w for w in honest.warnings), honest.warnings


def test_a_candidate_passing_close_to_the_bar_is_told_so_and_an_honest_one_is_not() -> None:
    """A correct candidate whose relative L2 error is over half the tolerance gets a warning (a
    lower-precision scheme passes like that: KernelBench level2/95's best sat at 98.5 % of it)."""
    from warpforge import evaluate
    from warpforge.candidate import Candidate
    from warpforge.evaluate.verify import thin_margin_note

    task = load_task(TASKS / "matmul.py")
    honest = evaluate(task, as_candidate(task), EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert honest.status == "correct" and not any("thin margin" in w for w in honest.warnings)
    bar = honest.tolerance["rel_l2"]
    close = Candidate(f"""import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, a, b):
        return torch.matmul(a, b) * (1.0 + {0.8 * bar!r})
""")
    result = evaluate(task, close, EvalConfig.of(**FAST))  # type: ignore[arg-type]
    assert result.status == "correct", result.reason
    shares = [int(m.group(1)) for w in result.warnings if (m := re.search(r"thin margin: .* is (\d+)% of", w))]
    assert len(shares) == 1 and 75 <= shares[0] <= 90, result.warnings  # 80 % of the bar, plus its rounding
    assert thin_margin_note(1e-5, [Tolerance(3e-5, 3e-4)]) is None
    assert thin_margin_note(2e-5, [Tolerance(3e-5, 3e-4), Tolerance(3e-5, 3e-4)]) is None  # one output only
