"""C++ for the CPU built at import by torch.utils.cpp_extension.load_inline: `cpp`."""

from __future__ import annotations

from warpforge.languages import native
from warpforge.languages.base import BaseLanguage, Prompt, Rules, SourceView


class Cpp(BaseLanguage):
    name = "cpp"
    title = "C++ on the CPU"
    devices = ("cpu", "cuda")
    rules = Rules(native=native.RULES)
    toolchains = (native.TORCH_EXTENSIONS,)
    needs_build = True
    prompt = Prompt(offer={"cpu": "C++ through `load_inline` (parallelise with `at::parallel_for`)"},
                    build={"cpu": "`load_inline`"})
    example = "examples/relu_cpp.py"

    def detect(self, source: str) -> bool:
        return native.builds_extension(source) and not native.has_cuda_sources(source)

    def kernel_names(self, view: SourceView) -> set[str]:
        return native.kernel_names(view)

    def count_kernels(self, source: str) -> int:
        return native.count_kernels(source)

    def instructions(self, device: str) -> str:
        return ("C++ for the CPU built at import with `torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., "
                "functions=[...], extra_cflags=[\"-O3\", \"-march=native\"])`; parallelise with `at::parallel_for` "
                "(`#include <ATen/Parallel.h>`) and write loops the compiler can vectorise.")


LANGUAGE = Cpp()
