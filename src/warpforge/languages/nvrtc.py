"""Raw CUDA C++ compiled at run time by NVRTC, through CuPy (RawKernel, RawModule) or cuda.core: `nvrtc`."""

from __future__ import annotations

import re

from warpforge.languages import native
from warpforge.languages.base import BaseLanguage, Prompt, Rules, SourceView, Toolchain

DETECT = re.compile(r"\b(RawKernel|RawModule|cuda\.core|nvrtc)\b")
# CuPy's kernel cache (CUPY_CACHE_DIR/<file>)
CUPY = Toolchain("CUPY_CACHE_DIR", "cupy", (".cubin", ".ptx", ".hsaco"), depth=2)

RULES = Rules(
    imports=frozenset({"cupy", "cupyx", "cuda"}),  # cuda: NVIDIA's cuda-python (cuda.core)
    attrs={
        # side streams: see torch.cuda.Stream in static.FORBIDDEN_ATTRS (CuPy's ExternalStream over
        # torch's current stream is allowed there: static._current_stream_wrappers)
        "cuda.Stream": "side streams hide work from the timer",
        "cuda.ExternalStream": "side streams hide work from the timer",
        # files: the sandbox contains them; refused early, with a reason a model can act on
        "cupy.load": "reading files", "cupy.save": "writing files", "cupy.savez": "writing files",
        "cupy.savez_compressed": "writing files", "cupy.fromfile": "reading files",
    },
    native=native.RULES)


class Nvrtc(BaseLanguage):
    name = "nvrtc"
    title = "raw CUDA through NVRTC (CuPy RawKernel)"
    devices = ("cuda",)
    precedence = 2  # a RawModule beside a helper extension is an NVRTC program
    rules = RULES
    toolchains = (CUPY,)
    prompt = Prompt(offer={"cuda": "raw CUDA through NVRTC (CuPy `RawModule`)"}, build={"cuda": "`cupy.RawModule`"})
    example = "examples/gpu/relu__nvrtc.py"

    def detect(self, source: str) -> bool:
        return DETECT.search(source) is not None

    def kernel_names(self, view: SourceView) -> set[str]:
        return native.kernel_names(view)

    def count_kernels(self, source: str) -> int:
        return native.count_kernels(source)

    def instructions(self, device: str) -> str:
        return ("raw CUDA C++ compiled at import by NVRTC through CuPy: `cupy.RawModule(code=..., "
                "options=(\"--std=c++17\",))` or `cupy.RawKernel`, kernels declared `extern \"C\" __global__`, launched "
                "as `kernel(grid, block, (x.data_ptr(), ..., numpy.int64(n)))` on CuPy's default stream (ordered with "
                "PyTorch's); scalar arguments must be numpy scalars of the kernel's parameter types.")


LANGUAGE = Nvrtc()
