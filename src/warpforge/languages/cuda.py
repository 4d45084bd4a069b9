"""CUDA C++ built at import by torch.utils.cpp_extension.load_inline (nvcc): `cuda`."""

from __future__ import annotations

from warpforge.languages import native
from warpforge.languages.base import BaseLanguage, Prompt, Rules, SourceView


class CudaCpp(BaseLanguage):
    name = "cuda"
    title = "CUDA C++ through torch.utils.cpp_extension.load_inline"
    devices = ("cuda",)
    rules = Rules(native=native.RULES)
    toolchains = (native.TORCH_EXTENSIONS,)
    needs_build = True
    prompt = Prompt(offer={"cuda": "CUDA C++ through `load_inline`"},
                    note={"cuda": "With `load_inline`, launch on `at::cuda::getCurrentCUDAStream()`.",
                          "cpu": "CUDA is not available."},
                    build={"cuda": "`load_inline`"})
    example = "examples/gpu/relu__cuda.py"

    def detect(self, source: str) -> bool:
        return native.builds_extension(source) and native.has_cuda_sources(source)

    def kernel_names(self, view: SourceView) -> set[str]:
        return native.kernel_names(view)

    def count_kernels(self, source: str) -> int:
        return native.count_kernels(source)

    def fingerprint(self) -> str:
        return native.nvcc_version()

    def instructions(self, device: str) -> str:
        return ("CUDA C++ built at import with `torch.utils.cpp_extension.load_inline(name=..., cpp_sources=..., "
                "cuda_sources=..., functions=[...], extra_cuda_cflags=[\"-O3\", ...])`: declare the host functions in "
                "`cpp_sources`, define them and the kernels in `cuda_sources`, and launch on "
                "`at::cuda::getCurrentCUDAStream()`.")


LANGUAGE = CudaCpp()
