"""Precision is decided by behaviour, not flags (issue 40, docs/evaluation.md "Precision").

A candidate that sets a precision flag is evaluated like any other: the flag changes only its own
process (the reference runs in another), and its error against float64 decides. `--strict-fp32`
starts both processes with TF32 off and is recorded in the result's config. On the CPU the flags
exist but change no arithmetic, so the fixture task `precision_seen.py` adds its process's flags to
its output: a candidate's result then shows which flags each process ran under. The effect on
accuracy is GPU-only (benchmarks/strict_fp32_aa.sh).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from warpforge import Candidate, EvalConfig, load_task
from warpforge.candidate import EvalResult
from warpforge.errors import ConfigError
from warpforge.evaluate import Judge

TASKS = Path(__file__).parent / "fixtures" / "tasks"
FAST = {"device": "cpu", "trials": 3, "bench": False, "timeout_s": 60.0}

MATMUL = """import torch
import torch.nn as nn
{flag}


class ModelNew(nn.Module):
    def forward(self, a, b):
        return a @ b
"""
# the candidate's own process's flags, in the code the task fixture adds (precision_seen.py)
FLAGS_SEEN = """import torch
import torch.nn as nn
{flag}


class ModelNew(nn.Module):
    def forward(self, x):
        return x + (1.0 * torch.backends.cuda.matmul.allow_tf32 + 2.0 * torch.backends.cudnn.allow_tf32
                    + 4.0 * (torch.get_float32_matmul_precision() != "highest"))
"""
ASSUMES_STRICT = """import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return x + 0.0
"""


def describe(result: EvalResult) -> str:
    return f"{result.status} [{result.stage}]: {result.reason}"


def test_a_candidate_that_only_sets_a_precision_flag_is_accepted() -> None:
    """Each was refused before running until issue 40, though on this task it changes nothing."""
    flags = ["torch.backends.cudnn.allow_tf32 = True", "torch.backends.cuda.matmul.allow_tf32 = True",
             'torch.set_float32_matmul_precision("high")']
    with Judge(load_task(TASKS / "matmul.py"), EvalConfig.of(**FAST)) as judge:  # type: ignore[arg-type]
        for flag in flags:
            result = judge.evaluate(Candidate(MATMUL.format(flag=flag)))
            assert result.correct, f"{flag}: {describe(result)}"


def test_strict_fp32_sets_the_flags_in_both_processes_and_is_recorded() -> None:
    task = load_task(TASKS / "precision_seen.py")
    with Judge(task, EvalConfig.of(**FAST, strict_fp32=True)) as judge:  # type: ignore[arg-type]
        own_flags = judge.evaluate(Candidate(FLAGS_SEEN.format(flag="")))
        assumes_strict = judge.evaluate(Candidate(ASSUMES_STRICT))
        tf32_back_on = judge.evaluate(Candidate(FLAGS_SEEN.format(flag="torch.backends.cudnn.allow_tf32 = True")))
    assert assumes_strict.correct, describe(assumes_strict)  # the reference's process: all flags off
    assert own_flags.correct, describe(own_flags)  # ... and the candidate's, before its code ran
    assert own_flags.config["safety"]["strict_fp32"] is True and assumes_strict.config["safety"]["strict_fp32"] is True
    # turning TF32 back on is allowed, and shows in the output (on a GPU: in a convolution's error)
    assert tf32_back_on.status == "incorrect" and "tolerance" in tf32_back_on.reason, describe(tf32_back_on)
    with Judge(task, EvalConfig.of(**FAST)) as judge:  # type: ignore[arg-type]
        default = judge.evaluate(Candidate(ASSUMES_STRICT))
    assert default.status == "incorrect", describe(default)  # PyTorch's defaults: cuDNN TF32 on
    assert default.config["safety"]["strict_fp32"] is False


def test_strict_fp32_is_a_shared_eval_option() -> None:
    from warpforge.cli.common import add_eval_options, config_from_args

    parser = argparse.ArgumentParser()
    add_eval_options(parser)
    assert config_from_args(parser.parse_args(["--strict-fp32", "--no-sandbox"])).safety.strict_fp32 is True
    assert config_from_args(parser.parse_args(["--no-sandbox"])).safety.strict_fp32 is False
    with pytest.raises(ConfigError, match="choose one"):
        config_from_args(parser.parse_args(["--strict-fp32", "--allow-tf32", "--no-sandbox"]))
