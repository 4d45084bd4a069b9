"""What one kernel language owns (`Language`), and the small records it fills in.

A language is one module under languages/ with one object that satisfies `Language`; most start
from `BaseLanguage`, which has nothing of its own. Everything here reads source text or names
settings: nothing imports torch, and nothing runs a candidate (the sandboxed child does).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Protocol

from warpforge.target import Target

# a string is C or C++ source (kernels for load_inline or NVRTC) if it has one of these (";": a
# body kept apart from its #include)
NATIVE_MARKERS = ("__global__", "__device__", "#include", "PYBIND11", "torch::", "std::", 'extern "C"', ";")


@dataclass(frozen=True)
class SourceView:
    """A candidate's source as the static check sees it: the text, its syntax tree, and the C and
    C++ code in its string constants (docstrings left out: prose that names a C function is not a
    call of it)."""

    source: str
    tree: ast.Module

    @cached_property
    def strings(self) -> tuple[str, ...]:
        docs = {id(n.body[0].value) for n in ast.walk(self.tree)
                if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body
                and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
        return tuple(n.value for n in ast.walk(self.tree)
                     if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs)

    @cached_property
    def native(self) -> str:
        return "\n".join(s for s in self.strings if any(m in s for m in NATIVE_MARKERS))


@dataclass(frozen=True)
class Rules:
    """A language's static pre-filter rules (evaluate/static.py), each pattern with its why. They
    apply to every candidate, whatever it is detected as: detection is a guess a source can steer."""

    imports: frozenset[str] = frozenset()
    """Top-level modules its candidates import: added to the import allow-list."""
    attrs: Mapping[str, str] = field(default_factory=dict)
    """Attribute chains refused (matched as whole segments of the resolved chain) -> why."""
    native: Mapping[str, str] = field(default_factory=dict)
    """Regular expressions refused in the C and C++ code of the source's strings -> why."""


@dataclass(frozen=True)
class Toolchain:
    """Where one toolchain keeps what it builds, so that evaluate/compile.py can send it to a
    cache keyed by source, toolchain versions and target, and keep only its build products."""

    env_var: str
    """The variable that points the toolchain at its cache folder (TRITON_CACHE_DIR)."""
    folder: str
    """Its folder under a cache root."""
    suffixes: tuple[str, ...]
    """The files a build writes there that are kept (an allow-list: nothing else is published)."""
    depth: int
    """Parts of a product's path, the toolchain's folder included."""
    per_source: bool = False
    """In the shared (unsandboxed) cache, one folder per source: its builds' names may clash."""
    modules: bool = False
    """Each folder in it is a Python extension module: the CPU profile counts calls into them."""


@dataclass(frozen=True)
class Prompt:
    """How the prompts' system message (propose/prompts/system.j2) speaks of a language, by device."""

    offer: Mapping[str, str] = field(default_factory=dict)
    """How the "any language" line names it; a device it is not offered on is absent."""
    note: Mapping[str, str] = field(default_factory=dict)
    """A sentence after the "any language" line's list."""
    build: Mapping[str, str] = field(default_factory=dict)
    """How its kernels are built when the module is imported (`load_inline`)."""


class Language(Protocol):
    """One kernel language: how it is recognised, refused, built, profiled and asked for. (Its
    attributes are read-only: a class attribute satisfies each.)"""

    @property
    def name(self) -> str:
        """Recorded in the archive and asked for with --language: cuda, nvrtc, triton, cpp, pytorch."""

    @property
    def title(self) -> str:
        """How people and agents read it: "Triton", "raw CUDA through NVRTC (CuPy RawKernel)"."""

    @property
    def devices(self) -> tuple[str, ...]:
        """The devices a prompt may ask for it on; the first is named when it is asked for elsewhere."""

    @property
    def precedence(self) -> int:
        """A source that several languages detect is the one's with the highest precedence; 0 only
        for plain PyTorch, which every source is."""

    @property
    def rules(self) -> Rules: ...

    @property
    def toolchains(self) -> tuple[Toolchain, ...]: ...

    @property
    def needs_build(self) -> bool:
        """Importing a candidate builds an extension: the slow compile a CPU pool can do ahead of
        the GPU. (Triton and NVRTC kernels compile at their first launch, on the GPU worker.)"""

    @property
    def profile_pattern(self) -> str:
        """A regular expression for kernels its runtime launches without the source naming them
        (PyTorch's own): a profile counts them as the framework's, not the candidate's."""

    @property
    def prompt(self) -> Prompt: ...

    @property
    def example(self) -> str:
        """One example candidate, a path from the repository's root."""

    def detect(self, source: str) -> bool:
        """Whether the source is written in this language (cheap: its text only)."""

    def kernel_names(self, view: SourceView) -> set[str]:
        """The names its kernels in this source will have in a profile."""

    def count_kernels(self, source: str) -> int:
        """How many kernels the text defines (search/features.py: one for several ops is a fusion)."""

    def fingerprint(self) -> str:
        """Its toolchain's version, part of every compile cache key; "" when it has none of its own."""

    def env(self, target: Target) -> dict[str, str]:
        """Variables the evaluator's children need to run its kernels on `target`."""

    def warm_up(self) -> None:
        """Pay its one-time import in a candidate process before any candidate code (worker.py)."""

    def instructions(self, device: str) -> str:
        """The prompt's language line when a model is asked to write this language."""


class BaseLanguage:
    """A language with nothing of its own: no rules, toolchains, runtime kernels or settings."""

    name = ""
    title = ""
    devices: tuple[str, ...] = ("cuda", "cpu")
    precedence = 1
    rules = Rules()
    toolchains: tuple[Toolchain, ...] = ()
    needs_build = False
    profile_pattern = ""
    prompt = Prompt()
    example = ""

    def detect(self, source: str) -> bool:
        return False

    def kernel_names(self, view: SourceView) -> set[str]:
        return set()

    def count_kernels(self, source: str) -> int:
        return 0

    def fingerprint(self) -> str:
        return ""

    def env(self, target: Target) -> dict[str, str]:
        return {}

    def warm_up(self) -> None:
        return None

    def instructions(self, device: str) -> str:
        return self.title

    def __repr__(self) -> str:
        return f"<language {self.name}>"
