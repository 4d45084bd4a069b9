"""A toy kernel language for tests/test_languages.py: everything a language is, in one module.

A toy program writes each kernel as one line in a string, `toy-kernel NAME: OP ARG` (OP a torch
function of the tensor and a number), and compiles it at import into a Python function named
NAME. Its toolchain keeps what it builds in TOY_CACHE_DIR, and on the CPU its kernels run in
"interpreted" mode (TOY_MODE): a toy program refuses to build without either, so a correct verdict
shows that both reached its process. Its constants are exact fractions, so it may import
`fractions`, which no other language does, and it refuses rounding them. Registering it is one
call (`languages.register(LANGUAGE)`); the evaluator, the prompts, the features and the archive
then take it like any other language.
"""

from __future__ import annotations

import re

from warpforge.languages import BaseLanguage, Prompt, Rules, SourceView, Toolchain
from warpforge.target import Target

KERNEL = re.compile(r"toy-kernel (\w+):")
TOOLCHAIN = Toolchain("TOY_CACHE_DIR", "toy", (".toyc",), depth=2)


class Toy(BaseLanguage):
    name = "toy"
    title = "toy expression kernels"
    devices = ("cpu",)
    rules = Rules(imports=frozenset({"fractions"}),
                  attrs={"fractions.Fraction.limit_denominator": "rounding a constant (toy kernels compute exactly)"})
    toolchains = (TOOLCHAIN,)
    prompt = Prompt(offer={"cpu": "toy expression kernels (`toy-kernel NAME: OP ARG`)"},
                    note={"cpu": "Toy kernels run interpreted on the CPU."}, build={"cpu": "`toy-kernel`"})
    example = "tests/fixtures/candidates/relu_toy.py"

    def detect(self, source: str) -> bool:
        return KERNEL.search(source) is not None

    def kernel_names(self, view: SourceView) -> set[str]:
        return {name for text in view.strings for name in KERNEL.findall(text)}

    def count_kernels(self, source: str) -> int:
        return len(KERNEL.findall(source))

    def fingerprint(self) -> str:
        return "toyc 0.1"

    def env(self, target: Target) -> dict[str, str]:
        return {"TOY_MODE": "interpreted"} if target.kind == "cpu" else {}

    def instructions(self, device: str) -> str:
        return "toy expression kernels: one `toy-kernel NAME: OP ARG` string per kernel, compiled at import."


LANGUAGE = Toy()
