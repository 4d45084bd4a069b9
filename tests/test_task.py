"""task.py: KernelBench files and trees load unchanged; malformed tasks get one-sentence errors."""

import json
import subprocess
import sys
import textwrap

import pytest

from warpforge.errors import TaskError, UsageError
from warpforge.task import load_task, suite_paths

KB_TASK = textwrap.dedent("""
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()

        def forward(self, A, B):
            return torch.matmul(A, B)

    N = 2048 * 2

    def get_inputs():
        A = torch.rand(N, N)
        B = torch.rand(N, N)
        return [A, B]

    def get_init_inputs():
        return []
""")


def make_tree(root):
    for level, names in {"level1": ["1_Square_matrix_multiplication_.py", "23_Softmax.py"],
                         "level2": ["40_Matmul_Scaling_ResidualAdd.py"], "level3": ["1_MLP.py"],
                         "level4": ["1_gpt2_bs1.py"]}.items():
        (root / level).mkdir(parents=True)
        for name in names:
            (root / level / name).write_text(KB_TASK)
    return root


def test_kernelbench_tree_loads_unchanged(tmp_path):
    root = make_tree(tmp_path / "KernelBench")
    paths = suite_paths(root)
    assert len(paths) == 5
    tasks = [load_task(p) for p in paths]
    assert {t.level for t in tasks} == {1, 2, 3, 4}
    assert tasks[0].metadata == {} and tasks[0].sizes("gpu") == {}


def test_tasks_command_lists_a_tree(tmp_path):
    root = make_tree(tmp_path / "KernelBench")
    out = subprocess.run([sys.executable, "-m", "warpforge.cli", "tasks", "--root", str(root), "--json"],
                         capture_output=True, text=True, check=True)
    assert len(json.loads(out.stdout)) == 5


def test_suite_names_resolve():
    assert load_task("level1/softmax").name == "level1/softmax"
    assert load_task("softmax").path == load_task("level1/softmax").path
    with pytest.raises(UsageError, match="unknown task"):
        load_task("no_such_task")


@pytest.mark.parametrize("source, message", [
    ("import torch\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n", "does not define Model"),
    ("class Model: pass\ndef get_init_inputs(): return []\n", "get_inputs"),
    ("def broken(:\n", "syntax error"),
    (KB_TASK + "WARPFORGE = {'sizes': make()}\n", "literal dict"),
    (KB_TASK + "WARPFORGE = {'tolerance': 1}\n", "unknown WARPFORGE keys"),
])
def test_malformed_tasks_are_task_errors(tmp_path, source, message):
    path = tmp_path / "task.py"
    path.write_text(source)
    with pytest.raises(TaskError, match=message):
        load_task(path)
