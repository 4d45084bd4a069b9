"""The kernel languages a candidate may be written in, one module each, and the registry of them.

`ALL` lists them in the order people read them (prompts, help, docs); `detect(source)` names a
source's language (the highest precedence among those that recognise it), `get(name)` finds one.
The rest gathers what every language contributes, for the stages that use it: the static check's
rules, the compile caches' toolchains and fingerprint, the children's settings and warm-up, the
profile's patterns. Adding a language is one module (see base.py's `Language`) and one entry in
`_BUILT_IN`, or `register(...)` at run time. Nothing here imports torch.
"""

from __future__ import annotations

import functools
import re

from warpforge.errors import ConfigError
from warpforge.languages import cpp, cuda, nvrtc, pytorch, triton
from warpforge.languages.base import BaseLanguage, Language, Prompt, Rules, SourceView, Toolchain
from warpforge.target import Target

__all__ = ["ALL", "BaseLanguage", "Language", "Prompt", "Rules", "SourceView", "Toolchain", "detect", "detect_all",
           "get", "names", "needs_build", "register"]

_BUILT_IN: tuple[Language, ...] = (cuda.LANGUAGE, nvrtc.LANGUAGE, triton.LANGUAGE, cpp.LANGUAGE, pytorch.LANGUAGE)
ALL: tuple[Language, ...] = _BUILT_IN
"""Every registered language; read it as `languages.ALL` (register() replaces the tuple)."""


def register(language: Language) -> None:
    """Add a language (before plain PyTorch, the last resort); ConfigError if its name is taken."""
    global ALL
    if not re.fullmatch(r"[a-z][a-z0-9_]*", language.name) or language.name in ("any", "unknown"):
        raise ConfigError(f"a language's name must be a lowercase identifier other than any and unknown, "
                          f"not {language.name!r}")
    if language.name in names():
        raise ConfigError(f"a language named {language.name!r} is registered already: choose another name")
    ALL = (*ALL[:-1], language, ALL[-1]) if ALL and ALL[-1].precedence == 0 else (*ALL, language)


def unregister(name: str) -> None:
    """Remove a language registered at run time (tests); the built-in ones stay."""
    global ALL
    ALL = tuple(lang for lang in ALL if lang.name != name or lang in _BUILT_IN)


def names() -> tuple[str, ...]:
    return tuple(lang.name for lang in ALL)


def get(name: str) -> Language:
    for lang in ALL:
        if lang.name == name:
            return lang
    raise ConfigError(f"unknown kernel language {name!r}: choose one of {', '.join(names())}")


def detect_all(source: str) -> tuple[Language, ...]:
    """Every language that recognises the source, in ALL's order; plain PyTorch only when no other does."""
    found = [lang for lang in ALL if lang.detect(source)]
    return tuple([lang for lang in found if lang.precedence > 0] or found)


def detect(source: str) -> Language:
    """The source's language: of those that recognise it, the one with the highest precedence."""
    found = detect_all(source)
    if not found:
        raise ConfigError("no kernel language recognises the source, not even plain PyTorch: register one that does")
    return max(found, key=lambda lang: lang.precedence)  # (the first of equals: max keeps it)


def needs_build(source: str) -> bool:
    """Whether importing the source builds an extension (load_inline and the like): the slow
    compile a CPU pool can do ahead of the GPU."""
    return any(lang.needs_build for lang in detect_all(source))


def rules() -> Rules:
    """Every language's pre-filter rules together (they apply to every candidate: Rules)."""
    return _merged_rules(ALL)


@functools.lru_cache(maxsize=4)
def _merged_rules(langs: tuple[Language, ...]) -> Rules:
    imports: set[str] = set()
    attrs: dict[str, str] = {}
    native: dict[str, str] = {}
    for lang in langs:
        imports |= lang.rules.imports
        attrs.update(lang.rules.attrs)
        native.update(lang.rules.native)
    return Rules(frozenset(imports), attrs, native)


def toolchains() -> tuple[Toolchain, ...]:
    """The toolchains of every language, each once, in ALL's order."""
    return tuple(dict.fromkeys(tc for lang in ALL for tc in lang.toolchains))


def fingerprint() -> str:
    """The toolchains' versions, part of every compile cache key; sorted, so the key does not
    depend on the registry's order ("Build cuda_12.4...; torch 2.5.1; triton 3.1.0")."""
    return _fingerprint(ALL)


@functools.lru_cache(maxsize=4)
def _fingerprint(langs: tuple[Language, ...]) -> str:
    return "; ".join(sorted({part for lang in langs if (part := lang.fingerprint())}))


def env(target: Target) -> dict[str, str]:
    """The variables every language needs in the evaluator's children on `target`."""
    found: dict[str, str] = {}
    for lang in ALL:
        found.update(lang.env(target))
    return found


def warm_up() -> None:
    """Each language's one-time import, in a candidate process before any candidate code."""
    for lang in ALL:
        lang.warm_up()


def kernel_names(view: SourceView) -> set[str]:
    """The names every language reads off the source as its kernels': a kernel any of them names
    is the candidate's own in a profile (whatever language the source is detected as)."""
    return set().union(*(lang.kernel_names(view) for lang in ALL))


def profile_pattern() -> str:
    """One regular expression for the kernels the languages' runtimes launch themselves."""
    return "|".join(f"(?:{lang.profile_pattern})" for lang in ALL if lang.profile_pattern)
