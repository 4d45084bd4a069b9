"""Parsing Python source from several threads.

CPython 3.11's AST constructor keeps its recursion depth in state that threads share, so two
threads parsing at once can fail with a spurious `SystemError: AST constructor recursion depth
mismatch` (python/cpython#106905; it failed a CI run of `optimize`, whose replies are parsed as
they arrive). warpforge parses replies, candidates and tasks through this one lock.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>") -> ast.Module:
    """`ast.parse`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, filename=filename)
