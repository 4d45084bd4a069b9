"""task.py: KernelBench files and trees load unchanged; malformed tasks get one-sentence errors."""

import json
import subprocess
import sys
import textwrap

import pytest

from warpforge.errors import TaskError, UsageError
from warpforge.task import eval_metadata_expr, import_task_module, load_task, suite_paths

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
    for flag in ("--root", "--kernelbench"):
        out = subprocess.run([sys.executable, "-m", "warpforge.cli", "tasks", flag, str(root), "--json"],
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
    (KB_TASK + "WARPFORGE = {'atol': 1e-3 * N}\n", "only flops and bytes may be expressions"),
    (KB_TASK + "WARPFORGE = dict(flops=2 * N)\n", "literal dict"),
    (KB_TASK + "WARPFORGE = {**BASE}\n", "string keys"),
    (KB_TASK + "WARPFORGE = {'flops': lambda: 2 * N}\n", r"WARPFORGE\['flops'\] = 'lambda: 2 \* N' uses Lambda"),
    (KB_TASK + "WARPFORGE = {'bytes': [x for x in range(N)]}\n", "uses ListComp"),
    (KB_TASK + "WARPFORGE = {'flops': '2 * * N'}\n", "is not a Python expression"),
])
def test_malformed_tasks_are_task_errors(tmp_path, source, message):
    path = tmp_path / "task.py"
    path.write_text(source)
    with pytest.raises(TaskError, match=message):
        load_task(path)


def test_flops_and_bytes_may_be_plain_expressions_over_the_globals(tmp_path):
    """`WARPFORGE = {"flops": 2 * N ** 3}` as people write it: kept as text, evaluated with the
    task's module (after size overrides) exactly like the string form, never run while loading."""
    plain, string = tmp_path / "plain.py", tmp_path / "string.py"
    plain.write_text(KB_TASK + "import math\nWARPFORGE = {'flops': 2 * N ** 3, 'bytes': math.prod((3, N, N)) * 4, "
                               "'sizes': {'cpu': {'N': 8}}, 'description': 'matmul'}\n")
    string.write_text(KB_TASK + "WARPFORGE = {'flops': '2 * N ** 3', 'bytes': 'math.prod((3, N, N)) * 4', "
                                "'sizes': {'cpu': {'N': 8}}, 'description': 'matmul'}\n")
    a, b = load_task(plain), load_task(string)
    assert a.metadata == b.metadata and a.metadata["flops"] == "2 * N ** 3"
    for task in (a, b):
        module = import_task_module(task, task.sizes("cpu"))
        assert eval_metadata_expr(task, module, "flops") == 2 * 8 ** 3
        assert eval_metadata_expr(task, module, "bytes") == 3 * 8 * 8 * 4


def test_a_plain_expression_is_not_run_while_loading(tmp_path):
    path = tmp_path / "task.py"
    marker = tmp_path / "ran"
    path.write_text(KB_TASK + f"WARPFORGE = {{'flops': open({str(marker)!r}, 'w').write('x')}}\n")
    task = load_task(path)  # a call is a legal expression; it is evaluated only in the reference child
    assert not marker.exists() and task.metadata["flops"].startswith("open(")


def test_an_expression_over_an_unknown_name_fails_with_one_sentence(tmp_path):
    path = tmp_path / "task.py"
    path.write_text(KB_TASK + "WARPFORGE = {'flops': '2 * M * N'}\n")  # as a string: the file still imports
    task = load_task(path)
    with pytest.raises(TaskError, match=r"WARPFORGE\['flops'\] = '2 \* M \* N' cannot be evaluated: name 'M'"):
        eval_metadata_expr(task, import_task_module(task), "flops")
    path.write_text(KB_TASK + "WARPFORGE = {'flops': 2 * M * N}\n")  # written plainly, Python itself stops it
    with pytest.raises(TaskError, match="failed to import: NameError: name 'M' is not defined"):
        import_task_module(load_task(path))


def test_the_evaluator_counts_the_work_of_a_plain_expression_at_the_preset_sizes(tmp_path):
    from warpforge import Candidate, EvalConfig, evaluate

    task_source = textwrap.dedent("""
        import torch

        M, N, K = 64, 32, 48
        WARPFORGE = {"flops": 2 * M * N * K, "sizes": {"cpu": {"M": 16}}}

        class Model(torch.nn.Module):
            def forward(self, A, B):
                return A @ B

        def get_inputs():
            return [torch.rand(M, K), torch.rand(K, N)]

        def get_init_inputs():
            return []
    """)
    (tmp_path / "task.py").write_text(task_source)
    config = EvalConfig.of(device="cpu", warmup_ms=5.0, rep_ms=20.0, min_reps=5, timeout_s=120.0)
    result = evaluate(load_task(tmp_path / "task.py"), Candidate(task_source.replace("class Model", "class ModelNew")),
                      config)
    assert result.correct, result.reason
    assert result.roofline["flops"] == 2 * 16 * 32 * 48  # evaluated in the child, with the cpu preset's M
