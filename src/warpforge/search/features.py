"""Kernel features read off a candidate's source text: the cell key of the evolutionary archive.

Cheap and static (regular expressions over the text; nothing is imported or run): which
language the kernels are written in, whether they use tensor cores or shared memory, how many
kernels there are (one kernel for several PyTorch ops = fusion) and the tile sizes they name.
A feature can be wrong for an obfuscated source; it only decides which cell a candidate
competes in, never its verdict.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from warpforge import languages


@dataclass(frozen=True)
class Features:
    language: str
    tensor_cores: bool
    shared_memory: bool
    kernels: int
    tile: str
    """The tile sizes the source names (BLOCK_M=128 ... or a TILE constant), "" when none."""

    @property
    def cell(self) -> tuple[str, bool, bool, bool]:
        """The MAP-elites cell: candidates compete with others of the same kind."""
        return (self.language, self.tensor_cores, self.shared_memory, self.kernels == 1)

    def to_dict(self) -> dict[str, object]:
        return {"language": self.language, "tensor_cores": self.tensor_cores, "shared_memory": self.shared_memory,
                "kernels": self.kernels, "tile": self.tile}


_TENSOR_CORES = re.compile(r"\b(wmma::|mma\.sync|wgmma|ldmatrix|tl\.dot|__hmma|mma_sync|cute::|cutlass::)")
_SHARED = re.compile(r"(__shared__|extern\s+__shared__|tl\.make_block_ptr|cp\.async|tma_|cuda::memcpy_async)")
_TILE = re.compile(r"\b(BLOCK(?:_SIZE)?(?:_[MNK])?|TILE(?:_[MNK])?|BM|BN|BK)\s*[=:]\s*(?:tl\.constexpr\s*=\s*)?(\d+)")


def language_of(source: str) -> str:
    """The name of the source's kernel language (languages.detect): cuda (load_inline with CUDA
    sources), nvrtc (CuPy / cuda.core), triton, cpp (load_inline, C++ only), or pytorch (no kernel
    of its own)."""
    return languages.detect(source).name


def features_of(source: str) -> Features:
    language = languages.detect(source)
    tiles = sorted({f"{name}={value}" for name, value in _TILE.findall(source)})
    return Features(language=language.name, tensor_cores=bool(_TENSOR_CORES.search(source)),
                    shared_memory=bool(_SHARED.search(source)), kernels=language.count_kernels(source),
                    tile=",".join(tiles[:6]))
