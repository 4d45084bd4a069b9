"""Parsing from several threads goes one at a time (CPython 3.11's AST constructor is not
thread-safe: python/cpython#106905 failed a CI run of `optimize`)."""

from __future__ import annotations

import ast
import threading
import time
from typing import Any

import pytest

from warpforge import pysource
from warpforge.evaluate.static import check_source


def test_parses_from_many_threads_never_overlap(monkeypatch: pytest.MonkeyPatch) -> None:
    inside, most = [0], [0]
    real = ast.parse

    def slow_parse(source: str, *args: Any, **kwargs: Any) -> ast.Module:
        inside[0] += 1
        most[0] = max(most[0], inside[0])
        time.sleep(0.01)  # room for another thread to come in, were it let
        inside[0] -= 1
        return real(source, *args, **kwargs)

    monkeypatch.setattr(ast, "parse", slow_parse)
    source = "class ModelNew:\n    pass\n"
    threads = [threading.Thread(target=check_source, args=(source,)) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1
    assert isinstance(pysource.parse(source), ast.Module)
