"""The package's shape, checked on every run (issue 20): no module over the line budget, and no
import cycle among modules at import time (module-level imports; one inside a function runs
later and is the way to break a cycle).

The budget is 650 lines a module (tinygrad keeps a line budget too): the largest module,
archive.py, has about 600. A module that needs more is two concerns; split it rather than raise
the number. The task suite (`tasks/`) is data, not code, and is not counted."""

from __future__ import annotations

import ast
import os
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
LINE_BUDGET = 650


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted((SRC / "warpforge").rglob("*.py")):
        if "tasks" in path.relative_to(SRC / "warpforge").parts:
            continue
        parts = path.relative_to(SRC).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the warpforge modules it imports at module level. `from pkg import name` points
    at pkg.name when that is a module, else at pkg (its __init__)."""
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.parse(path.read_text()).body:
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(up + ([node.module] if node.module else []))
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_is_over_the_line_budget() -> None:
    over = {name: n for name, path in _modules().items() if (n := len(path.read_text().splitlines())) > LINE_BUDGET}
    assert not over, f"modules over {LINE_BUDGET} lines (split them by concern): {over}"


def test_no_import_cycle_at_module_level() -> None:
    assert cycles(import_graph(_modules())) == []


def test_the_cycle_check_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_reads_the_real_imports() -> None:
    graph = import_graph(_modules())
    assert {"warpforge.metrics", "warpforge.evaluate.paired", "warpforge.config"} <= graph["warpforge.evaluate.verdict"]
    assert "warpforge.pysource" in graph["warpforge.task"]  # `from warpforge import pysource`: the module


def test_help_and_the_error_types_do_not_import_torch() -> None:
    """`warpforge --help` and `import warpforge.errors` stay light (issue 20: --help under 1 s;
    torch alone takes about 0.9 s to import): the package names load their modules on first use."""
    import subprocess
    import sys

    probe = ("import sys\nimport warpforge.errors\nfrom warpforge.cli import main\n"
             "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
             "print('torch' in sys.modules, file=sys.stderr)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.stderr.strip().splitlines()[-1] == "False", done.stderr[-2000:]
    assert "usage: warpforge" in done.stdout


def test_the_gemm_dispatcher_does_not_depend_on_the_tuner() -> None:
    """A model that serves `warpforge.gemm.matmul` loads the dispatcher and its tables, never the
    tuner (which times, writes tables and imports the benchmark machinery)."""
    graph = import_graph(_modules())
    seen, todo = set(), ["warpforge.gemm.dispatch"]
    while todo:
        for nxt in graph[todo.pop()] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert "warpforge.gemm.tune" not in seen, sorted(seen)


def test_every_exception_warpforge_raises_is_in_the_one_tree() -> None:
    """errors.py holds the tree: an exception class of warpforge's own derives from WarpforgeError
    (the one allowed exception: transport.TransientError, one failed try that never leaves LLMClient)."""
    import inspect

    from warpforge import errors

    loose = []
    for name, path in _modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(getattr(b, "id", "") in ("Exception", "BaseException")
                                                      for b in node.bases):
                loose.append(f"{name}.{node.name}")
    assert loose == ["warpforge.errors.WarpforgeError", "warpforge.propose.transport.TransientError"]
    tree = {n: c for n, c in vars(errors).items() if inspect.isclass(c) and issubclass(c, Exception)}
    assert {"WorkerLost", "LLMError", "Rejected", "ConfigError", "TaskError", "HarnessError"} <= tree.keys()
    assert issubclass(errors.ConfigError, errors.UsageError) and issubclass(errors.WorkerLost, errors.HarnessError)
    for name in tree:  # the docstring's drawing names every class
        assert name in (errors.__doc__ or ""), name


def test_the_tests_run_on_their_own_cache() -> None:
    """conftest.py gives each test run a fresh warpforge cache (not ~/.cache/warpforge), which
    every Judge and child process of the run inherits through WARPFORGE_CACHE."""
    from warpforge import EvalConfig

    cache = os.environ.get("WARPFORGE_CACHE", "")
    assert cache and not cache.startswith(os.path.expanduser("~/.cache"))
    assert EvalConfig(device="cpu").resolved().cache_dir == cache
