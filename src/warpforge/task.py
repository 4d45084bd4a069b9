"""Load a reference program (KernelBench format) into a `Task`, without running it.

A task is a Python file with `class Model(nn.Module)`, `get_inputs()` and
`get_init_inputs()`, and optionally a `WARPFORGE = {...}` dict of metadata, read from the AST:
literal values, except that "flops" and "bytes" may be expressions over the task's globals
(`2 * M * N * K`, or the string "2*M*N*K"), kept as text. This module only *parses* the file:
task code runs in the reference child process (evaluate/reference.py), which is where import
errors, non-tensor inputs and the work counts' values are found.
Names of built-in suite tasks ("softmax", "level1/softmax") resolve to files in tasks/.
"""

from __future__ import annotations

import ast
import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from warpforge.errors import TaskError, UsageError
from warpforge import pysource

SUITE_DIR = Path(__file__).parent / "tasks"

# The metadata keys a task may declare, and what they mean (docs/tasks.md has the long form).
METADATA_KEYS = {
    "atol": "absolute tolerance, as a fraction of the reference output's largest magnitude",
    "rtol": "relative L2 error tolerance (||out - ref|| / ||ref||)",
    "flops": "floating-point operations of one forward call: a number or an expression over the task's globals",
    "bytes": "fewest bytes one forward call must move: a number or an expression over the task's globals",
    "sizes": "size presets: {'cpu': {GLOBAL: value}, 'gpu': {...}} applied to module globals before get_inputs()",
    "input_dists": "input distributions to cycle through across trials (see evaluate/reference.py)",
    "allow_tf32": "True if TF32 results are acceptable for this fp32 task",
    "description": "one line saying what the task computes",
}


@dataclass(frozen=True)
class Task:
    name: str
    path: Path
    source: str
    metadata: dict[str, Any] = field(default_factory=dict)
    untrusted: bool = False
    """The file did not come from the operator (it arrived in a jobs folder): its program runs only
    inside the sandbox (EvalConfig.sandbox_reference)."""

    @property
    def key(self) -> tuple[str, str, bool]:
        """What tells two tasks' Judges apart: the name, the program and whether it is trusted."""
        return (self.name, self.source_hash, self.untrusted)

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def level(self) -> int | None:
        for part in reversed(self.path.parts):
            if part.startswith("level") and part[5:].isdigit():
                return int(part[5:])
        return None

    def sizes(self, preset: str) -> dict[str, Any]:
        """Global overrides for a size preset; {} when the task has no such preset."""
        presets = self.metadata.get("sizes") or {}
        return dict(presets.get(preset) or {})


def resolve_task_path(name_or_path: str) -> Path:
    """A path to an existing .py file, or the name of a built-in suite task."""
    path = Path(name_or_path)
    if path.is_file():
        return path
    if path.suffix == ".py" or "/" in name_or_path and not name_or_path.startswith("level"):
        raise UsageError(f"task file {name_or_path} does not exist: give a path to a .py file or a suite task name")
    found = suite_task(name_or_path)
    if found is None:
        raise UsageError(f"unknown task {name_or_path!r}: give a path to a task file, or one of `warpforge tasks`")
    return found


def suite_task(name: str) -> Path | None:
    """The suite file named `name` (level1/softmax, or softmax when unambiguous), None if none; it
    looks at no other path, so it is safe on a name from an untrusted request."""
    matches = [p for p in suite_paths() if _suite_name(p) == name or p.stem == name]
    if len(matches) > 1:
        names = ", ".join(_suite_name(p) for p in matches)
        raise UsageError(f"task name {name!r} is ambiguous ({names}): use the level/name form")
    return matches[0] if matches else None


def suite_paths(root: Path = SUITE_DIR) -> list[Path]:
    """Every task file under `root`: levelN/*.py when those exist (KernelBench layout), else any *.py."""
    found = sorted(root.glob("level*/*.py")) or sorted(root.rglob("*.py"))
    return [p for p in found if not p.name.startswith("_")]


def tasks_named(name: str) -> list[Task]:
    """A task file or suite name (level1/softmax): that task; a folder of task files (a KernelBench
    level) or a suite level (level1): every task in it."""
    path = Path(name)
    if path.is_dir() or (SUITE_DIR / name).is_dir():
        found = suite_paths(path if path.is_dir() else SUITE_DIR / name)
        if not found:
            raise UsageError(f"no task files in {name}: give a folder of KernelBench-format .py files")
        return [load_task(p) for p in found]
    return [load_task(name)]


def _suite_name(path: Path) -> str:
    return f"{path.parent.name}/{path.stem}"


def load_task(name_or_path: str | Path) -> Task:
    """Parse a task file; raise TaskError (one sentence) when it cannot be a task."""
    path = resolve_task_path(str(name_or_path))
    try:
        source = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(f"cannot read task {path}: {exc}") from None
    try:
        tree = pysource.parse(source, filename=str(path))
    except SyntaxError as exc:
        raise TaskError(f"task {path} has a syntax error at line {exc.lineno}: {exc.msg}") from None
    defined = _top_level_names(tree)
    missing = [name for name in ("Model", "get_inputs", "get_init_inputs") if name not in defined]
    if missing:
        raise TaskError(f"task {path} does not define {', '.join(missing)}: a task needs class Model, "
                        "get_inputs() and get_init_inputs() (KernelBench format)")
    metadata = _metadata(tree, path)
    # a KernelBench checkout's level1/1_Square_matrix_multiplication_.py is named as the suite's are
    in_level = path.resolve().is_relative_to(SUITE_DIR.resolve()) or path.parent.name.startswith("level")
    name = _suite_name(path) if in_level else path.stem
    return Task(name=name, path=path.resolve(), source=source, metadata=metadata)


def _top_level_names(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def _metadata(tree: ast.Module, path: Path) -> dict[str, Any]:
    """The WARPFORGE dict, read from the AST (no task code runs here)."""
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "WARPFORGE" for t in node.targets):
            if not isinstance(node.value, ast.Dict):
                raise TaskError(f"task {path}: WARPFORGE must be a literal dict (numbers, strings, dicts)")
            value = dict(_metadata_item(k, v, path) for k, v in zip(node.value.keys, node.value.values, strict=True))
            unknown = sorted(set(value) - set(METADATA_KEYS))
            if unknown:
                raise TaskError(f"task {path}: unknown WARPFORGE keys {unknown}; known keys are {sorted(METADATA_KEYS)}")
            return value
    return {}


# Keys whose value may be an expression over the task's globals, evaluated with the task's
# module (after size overrides) by `eval_metadata_expr`; every other value is a literal.
EXPRESSION_KEYS = ("flops", "bytes")
_EXPRESSION_NODES = (ast.Expression, ast.Constant, ast.Name, ast.Load, ast.BinOp, ast.UnaryOp, ast.operator,
                     ast.unaryop, ast.Call, ast.keyword, ast.Attribute, ast.Subscript, ast.Tuple, ast.List, ast.Slice)


def _metadata_item(key_node: ast.expr | None, value_node: ast.expr, path: Path) -> tuple[str, Any]:
    try:
        key = ast.literal_eval(key_node) if key_node is not None else None
    except ValueError:
        key = None
    if not isinstance(key, str):
        raise TaskError(f"task {path}: WARPFORGE must be a literal dict with string keys (no ** unpacking)")
    try:
        value = ast.literal_eval(value_node)
    except (ValueError, TypeError):
        if key not in EXPRESSION_KEYS:
            raise TaskError(f"task {path}: WARPFORGE must be a literal dict (numbers, strings, dicts); "
                            f"only {' and '.join(EXPRESSION_KEYS)} may be expressions") from None
        # `2 * M * N * K` as written: kept as its source text, evaluated later like the string "2*M*N*K"
        value = ast.unparse(value_node)
    if key in EXPRESSION_KEYS and isinstance(value, str):
        _check_expression(value, key, path)
    return key, value


def _check_expression(text: str, key: str, path: Path) -> None:
    """Arithmetic over names, attributes, subscripts and calls (math.prod(SHAPE)); nothing else."""
    hint = "write a number or arithmetic over the task's globals, e.g. 2 * M * N * K"
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError:
        raise TaskError(f"task {path}: WARPFORGE[{key!r}] = {text!r} is not a Python expression: {hint}") from None
    bad = next((n for n in ast.walk(tree) if not isinstance(n, _EXPRESSION_NODES)), None)
    if bad is not None:
        raise TaskError(f"task {path}: WARPFORGE[{key!r}] = {text!r} uses {type(bad).__name__}, which a work "
                        f"count may not: {hint}")


def import_task_module(task: Task, sizes: dict[str, Any] | None = None) -> Any:
    """Execute the task file as a fresh module and apply size overrides to its globals.

    Runs task code: call it only in a child process (the reference sandbox) or in tools that
    vet our own suite. Unknown size names raise TaskError so a typo cannot go unnoticed.
    """
    import importlib.util
    import sys

    module_name = f"warpforge_task_{task.source_hash}"
    spec = importlib.util.spec_from_file_location(module_name, task.path)
    if spec is None or spec.loader is None:
        raise TaskError(f"cannot import task {task.path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # task code may raise anything; it becomes one sentence
        raise TaskError(f"task {task.path} failed to import: {type(exc).__name__}: {exc}") from None
    for name, value in (sizes or {}).items():
        if not hasattr(module, name):
            raise TaskError(f"task {task.path}: size preset sets {name}, which the task does not define")
        setattr(module, name, value)
    return module


def eval_metadata_expr(task: Task, module: Any, key: str) -> float | None:
    """Evaluate WARPFORGE[key] ("flops", "bytes"): a number, or an expression over module globals
    (written as a string, or plainly and kept as its source text by `load_task`)."""
    expr = task.metadata.get(key)
    if expr is None:
        return None
    if isinstance(expr, (int, float)):
        return float(expr)
    try:
        return float(eval(str(expr), {"__builtins__": {}, "math": __import__("math")}, vars(module)))
    except Exception as exc:
        raise TaskError(f"task {task.path}: WARPFORGE[{key!r}] = {expr!r} cannot be evaluated: {exc}") from None
