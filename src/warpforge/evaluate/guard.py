"""Tamper detection inside the candidate's process.

`Guard` records, before any candidate code is imported, the identity of every function the
harness relies on to time and to check (timers, synchronisation, events, the tensor methods
used for fingerprints, builtins such as `type`, the channel writer, and the harness's own
modules). `check()` after import and after every call names the first one that was replaced.
It cannot see tampering below Python (ctypes, patched native code); the static stage
refuses the modules that make that easy.
"""

from __future__ import annotations

import builtins
import json
import os
import sys
import threading
import time
from typing import Any

import torch

_GUARDED: list[tuple[Any, str]] = [
    (time, "perf_counter"), (time, "perf_counter_ns"), (time, "monotonic"), (time, "sleep"),
    (torch.cuda, "synchronize"), (torch.cuda, "Event"), (torch.cuda.Event, "record"),
    (torch.cuda.Event, "elapsed_time"), (torch.cuda.Event, "synchronize"), (torch.cuda, "current_stream"),
    (torch, "save"), (torch, "load"), (torch, "equal"), (torch, "isfinite"), (torch, "isnan"), (torch, "empty"),
    (torch, "cat"), (torch, "tensor"), (torch, "randint"), (torch.linalg, "vector_norm"), (torch, "no_grad"),
    (torch.Tensor, "clone"), (torch.Tensor, "to"), (torch.Tensor, "cpu"), (torch.Tensor, "reshape"),
    (torch.Tensor, "view"), (torch.Tensor, "contiguous"), (torch.Tensor, "__getitem__"), (torch.Tensor, "item"),
    (torch.Tensor, "detach"), (torch.Tensor, "fill_"), (torch.Tensor, "sum"), (torch.Tensor, "__eq__"),
    (torch.Tensor, "numel"), (torch.Tensor, "data_ptr"), (torch.Tensor, "untyped_storage"),
    (builtins, "type"), (builtins, "isinstance"), (builtins, "float"), (builtins, "len"), (builtins, "print"),
    (builtins, "getattr"),
    (json, "dumps"), (json, "loads"), (os, "write"), (os, "_exit"), (threading, "enumerate"),
    (sys, "exit"), (torch.nn.Module, "__call__"),
]


class Guard:
    def __init__(self, harness_modules: list[Any]) -> None:
        self._originals = [(owner, name, getattr(owner, name)) for owner, name in _GUARDED if hasattr(owner, name)]
        # the guard guards itself too: its module and class, as well as the harness modules
        watched = [*harness_modules, sys.modules[__name__], Guard]
        self._modules = [(m, dict(vars(m)), _codes(m)) for m in watched]
        self._getattr = builtins.getattr

    def check(self) -> str | None:
        """None if nothing was replaced, else one sentence naming what was."""
        for owner, name, original in self._originals:
            if self._getattr(owner, name, None) is not original:
                label = getattr(owner, "__name__", type(owner).__name__)
                return f"the candidate replaced {label}.{name}, which the harness uses to time or check results"
        for module, snapshot, codes in self._modules:
            current = vars(module)
            for name, value in snapshot.items():
                if current.get(name) is not value:
                    return f"the candidate modified the harness module {module.__name__} ({name})"
            for name, code in codes.items():
                if self._getattr(current.get(name), "__code__", None) is not code:
                    return f"the candidate rewrote the code of the harness function {module.__name__}.{name}"
        return None


def _codes(namespace: Any) -> dict[str, Any]:
    """The code objects of the functions in a module or class (swapping __code__ keeps identity)."""
    return {name: value.__code__ for name, value in vars(namespace).items() if hasattr(value, "__code__")}
