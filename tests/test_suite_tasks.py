"""The built-in task suite: every task loads and has a non-degenerate output at the cpu preset."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from warpforge.task import load_task, suite_paths
from warpforge.task_checks import check_degeneracy

SUITE = suite_paths()


def test_suite_spans_three_levels() -> None:
    levels = Counter(load_task(path).level for path in SUITE)
    assert len(SUITE) >= 24, f"only {len(SUITE)} suite tasks"
    assert levels[1] >= 1 and levels[2] >= 4 and levels[3] >= 3, dict(levels)
    assert set(levels) == {1, 2, 3}, f"tasks outside level1-3: {dict(levels)}"


@pytest.mark.parametrize("path", SUITE, ids=[f"{p.parent.name}/{p.stem}" for p in SUITE])
def test_suite_task_is_not_degenerate(path: Path) -> None:
    task = load_task(path)
    assert task.metadata.get("description"), "task has no one-line description"
    assert check_degeneracy(task, "cpu") == []


TASK_TEMPLATE = '''
import torch
import torch.nn as nn

BATCH = 8
DIM = 32


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(BATCH, DIM))

    def forward(self, x):
        return {body}


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


WARPFORGE = {{
    "description": "a deliberately broken task",
    "sizes": {{"cpu": {{"BATCH": 8, "DIM": 32}}, "gpu": {{"BATCH": 1024, "DIM": 4096}}}},
    "flops": "BATCH*DIM",
    "bytes": "8*BATCH*DIM",
}}
'''


def _problems(tmp_path: Path, body: str) -> list[str]:
    path = tmp_path / "broken.py"
    path.write_text(TASK_TEMPLATE.format(body=body))
    return check_degeneracy(load_task(path))


def test_a_good_template_task_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, "torch.relu(x) + self.weight") == []


def test_constant_output_is_reported(tmp_path: Path) -> None:
    # every row of a softmax sums to 1, whatever the inputs
    problems = _problems(tmp_path, "torch.softmax(x, -1).sum(-1)")
    assert any("near-constant" in p for p in problems), problems
    assert any("does not depend" in p for p in problems), problems


def test_output_independent_of_inputs_is_reported(tmp_path: Path) -> None:
    problems = _problems(tmp_path, "self.weight * 2")
    assert any("does not depend" in p for p in problems), problems


def test_zero_and_non_finite_outputs_are_reported(tmp_path: Path) -> None:
    assert any("all ~zero" in p for p in _problems(tmp_path, "x * 1e-9"))
    assert any("NaN" in p for p in _problems(tmp_path, "torch.log(x)"))
    assert any("tuple of tensors" in p for p in _problems(tmp_path, "x.sum().item()"))


def test_bad_metadata_is_reported(tmp_path: Path) -> None:
    path = tmp_path / "bad_meta.py"
    source = (TASK_TEMPLATE.format(body="torch.relu(x)")
              .replace('"BATCH*DIM"', '"BATCH*UNDEFINED"')
              .replace('"gpu": {"BATCH": 1024, "DIM": 4096}', '"gpu": {"BATCHES": 1024}'))
    path.write_text(source)
    problems = check_degeneracy(load_task(path))
    assert any("flops" in p for p in problems), problems
    assert any("BATCHES" in p for p in problems), problems
