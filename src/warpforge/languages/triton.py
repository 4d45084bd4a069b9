"""Triton: `@triton.jit` kernels, compiled at their first launch (on the CPU, run by Triton's
interpreter): `triton`."""

from __future__ import annotations

import ast
import re

from warpforge.languages.base import BaseLanguage, Prompt, Rules, SourceView, Toolchain
from warpforge.target import Target

# Triton's cache (TRITON_CACHE_DIR/<hash>/: each stage's IR, the binary, its metadata, the launcher)
TRITON = Toolchain("TRITON_CACHE_DIR", "triton",
                   (".json", ".ttir", ".ttgir", ".llir", ".ptx", ".cubin", ".so", ".source", ".hsaco", ".amdgcn", ".spv"),
                   depth=3)


class Triton(BaseLanguage):
    name = "triton"
    title = "Triton"
    precedence = 3  # a Triton kernel beside a helper extension or a RawKernel is a Triton program
    rules = Rules(imports=frozenset({"triton"}))
    toolchains = (TRITON,)
    prompt = Prompt(offer={"cuda": "Triton"}, note={"cpu": "Triton would run in its slow CPU interpreter."},
                    build={"cuda": "`@triton.jit`"})
    example = "examples/gpu/relu__triton.py"

    def detect(self, source: str) -> bool:
        return "triton.jit" in source or "@jit" in source and "triton" in source

    def kernel_names(self, view: SourceView) -> set[str]:
        """Functions decorated with a `jit` or `autotune` (whatever it was imported as)."""
        names = set()
        for node in ast.walk(view.tree):
            if isinstance(node, ast.FunctionDef):
                for decorator in node.decorator_list:
                    target = _dotted(decorator.func if isinstance(decorator, ast.Call) else decorator)
                    if target.endswith("jit") or target.endswith("autotune"):
                        names.add(node.name)
        return names

    def count_kernels(self, source: str) -> int:
        return len(re.findall(r"@triton\.jit", source))

    def fingerprint(self) -> str:
        try:
            from importlib.metadata import version

            return f"triton {version('triton')}"
        except Exception:  # not installed (or its metadata unreadable): no Triton kernel builds here
            return ""

    def env(self, target: Target) -> dict[str, str]:
        return {"TRITON_INTERPRET": "1"} if target.kind == "cpu" else {}  # kernels run in its interpreter

    def warm_up(self) -> None:
        try:
            import triton  # noqa: F401  (most candidates that need it import it; harmless otherwise)
        except ImportError:
            pass

    def instructions(self, device: str) -> str:
        slow = " (on the CPU they run in Triton's interpreter: correct but slow)" if device == "cpu" else ""
        return (f"Triton: `@triton.jit` kernels launched from `forward`{slow}. Make block sizes `tl.constexpr`, mask "
                "the edges, and accumulate in float32.")


def _dotted(node: ast.AST) -> str:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
    return ".".join(reversed(parts))


LANGUAGE = Triton()
