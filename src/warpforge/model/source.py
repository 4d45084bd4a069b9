"""Reading and cutting Python source for inline.py: a class's or function's text, the global
names and attributes it uses, the methods its forward reaches, and line-level surgery (dropping
decorators and methods, putting a written __init__ in place) that keeps the original's comments.
Nothing here imports or runs the code it reads.
"""

from __future__ import annotations

import ast
import inspect
import symtable
import textwrap
from typing import Any


def with_init(text: str, init: str) -> str:
    """A copied class's text with its __init__ replaced by `init` (or `init` added after the docstring)."""
    node = ast.parse(text).body[0]
    assert isinstance(node, ast.ClassDef)
    lines = text.splitlines()
    old = next((f for f in node.body if isinstance(f, ast.FunctionDef) and f.name == "__init__"), None)
    first = node.body[0]
    indent = " " * first.col_offset
    new = [indent + line if line else line for line in init.splitlines()]
    if old is not None:
        end = old.end_lineno or old.lineno
        lines[first_line(old) - 1:end] = new + ([""] if end < len(lines) and lines[end].strip() else [])
    else:
        has_doc = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        at = (first.end_lineno or first.lineno) if has_doc else first_line(first) - 1
        while not has_doc and at > node.lineno and not lines[at - 1].strip():
            at -= 1  # right under the class line, not after the blank line the dropped __init__ left
        lines[at:at] = ([""] if has_doc else []) + new + ([""] if at < len(lines) and lines[at].strip() else [])
    return "\n".join(lines).rstrip() + "\n"


class _Unannotate(ast.NodeTransformer):
    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef  # type: ignore[assignment]

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST:
        target = node.target
        return ast.Assign(targets=[target], value=node.value or ast.Constant(None), lineno=node.lineno)


class Rename(ast.NodeTransformer):
    def __init__(self, names: dict[str, str]) -> None:
        self.names = names

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self.names.get(node.id, node.id)
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        node.name = self.names.get(node.name, node.name)
        self.generic_visit(node)
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.FunctionDef:
        node.name = self.names.get(node.name, node.name) if node.col_offset == 0 else node.name
        self.generic_visit(node)
        return node


def source_of(obj: Any) -> str | None:
    """The dedented source of a class or function; None when inspect cannot find it."""
    try:
        return textwrap.dedent(inspect.getsource(obj))
    except (OSError, TypeError):
        return None


def free_names(text: str) -> set[str]:
    """Global names the code reads (symtable: referenced and global in its scope). Annotations are
    left out: the written file starts with `from __future__ import annotations`, so they are never
    evaluated (a transformers forward annotates with Cache and Unpack[TransformersKwargs])."""
    tree = _Unannotate().visit(ast.parse(text))
    text = ast.unparse(tree)
    found: set[str] = set()

    def visit(table: symtable.SymbolTable) -> None:
        for sym in table.get_symbols():
            if sym.is_referenced() and sym.is_global() and not sym.is_assigned():
                found.add(sym.get_name())
        for child in table.get_children():
            visit(child)

    visit(symtable.symtable(text, "<unit>", "exec"))
    return found


def attribute_names(text: str) -> set[str]:
    """Every attribute the code reads, `x.name` or getattr/hasattr(x, "name")."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Attribute):
            found.add(node.attr)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("getattr", "hasattr") \
                and len(node.args) > 1 and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str):
            found.add(node.args[1].value)
    return found


def reached(node: ast.ClassDef) -> set[str]:
    """The methods forward reaches through self.<name> (and every dunder but __init__)."""
    methods = {f.name: f for f in node.body if isinstance(f, ast.FunctionDef | ast.AsyncFunctionDef)}
    kept = {n for n in methods if n.startswith("__") and n != "__init__"}
    todo = ["forward"] if "forward" in methods else []
    while todo:
        name = todo.pop()
        if name in kept and name != "forward" or name not in methods:
            continue
        kept.add(name)
        todo += [a.attr for a in ast.walk(methods[name]) if isinstance(a, ast.Attribute) and a.attr in methods]
    return kept


def first_line(node: Any) -> int:
    return min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])


def drop_lines(text: str, ranges: list[tuple[int, int]]) -> str:
    lines = text.splitlines()
    for start, end in sorted(ranges, reverse=True):
        del lines[start - 1:end]
    return "\n".join(lines) + "\n"
