"""Stepping stones: the best verified kernels of *other* tasks that look most like this one.

Similarity is the Jaccard index of the identifiers in the two reference programs (the torch
ops and attribute names they use: `matmul`, `softmax`, `layer_norm` ...). Crude, cheap, and
explainable; the AI CUDA Engineer's innovation archive used embedding similarity instead.
"""

from __future__ import annotations

import re

from warpforge.archive import Archive, Attempt

_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}")
_COMMON = frozenset({"self", "def", "return", "torch", "class", "import", "from", "Model", "forward", "init", "super",
                     "get_inputs", "get_init_inputs", "Module", "float", "int", "None", "WARPFORGE", "dim", "randn"})


def identifiers(source: str) -> frozenset[str]:
    return frozenset(_WORD.findall(source)) - _COMMON


def similarity(a: str, b: str) -> float:
    x, y = identifiers(a), identifiers(b)
    return len(x & y) / len(x | y) if x | y else 0.0


def stepping_stones(archive: Archive, task: str, task_source: str, k: int = 2) -> list[Attempt]:
    """The best attempt of each of the k most similar other tasks that have a verified one."""
    scored = []
    for other in archive.tasks():
        if other == task:
            continue
        best = archive.best(other)
        source = archive.task_source(other)
        if best is not None and source:
            scored.append((similarity(task_source, source), other, best))
    scored.sort(key=lambda s: (-s[0], s[1]))
    return [best for _, _, best in scored[:k]]
