"""Package attributes that import their module on first use (PEP 562), so that importing a
package for one small module, or running `warpforge --help`, does not import torch."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any


def attributes(package: str, where: dict[str, str]) -> Callable[[str], Any]:
    """A module `__getattr__` for `package`: each name in `where` comes from the module named there."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
