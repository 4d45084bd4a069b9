"""GEMM shape sets: CUDA-L2's 1,000-shape grid, LLM projection shapes, and user lists (CSV / JSON).

A shape is C[M, N] = A[M, K] @ B[K, N] in one dtype. The `llm` set takes the projection layers
of open models (x @ W.T with W of shape (N, K)) at decode and prefill batch sizes; its dims
include ones that are not multiples of 8 (GPT-2's vocabulary, 50257), where cuBLAS falls back
to slower kernels. Nothing here touches a GPU.
"""

from __future__ import annotations

import csv
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from warpforge.errors import UsageError

DTYPES = ("float16", "bfloat16")

# CUDA-L2's grid: M, N and K each in these ten values (1,000 shapes)
CUDAL2_DIMS = (64, 128, 256, 512, 1024, 2048, 4096, 8192, 12288, 16384)

# decode (1-128) and prefill (512-8192) token counts
LLM_M = (1, 8, 16, 32, 64, 128, 512, 2048, 8192)

# (hidden, intermediate, query heads, kv heads, head dim, vocabulary) from each model's
# config.json on the Hugging Face Hub; GPT-2 fuses q, k and v into one projection like the rest.
LLM_MODELS: dict[str, tuple[int, int, int, int, int, int]] = {
    "gpt2": (768, 3072, 12, 12, 64, 50257),
    "phi-3-mini": (3072, 8192, 32, 32, 96, 32064),
    "mistral-7b": (4096, 14336, 32, 8, 128, 32000),
    "llama-3.1-8b": (4096, 14336, 32, 8, 128, 128256),
    "qwen2.5-7b": (3584, 18944, 28, 4, 128, 152064),
    "gemma-2-9b": (3584, 14336, 16, 8, 256, 256000),
    "llama-3.1-70b": (8192, 28672, 64, 8, 128, 128256),
    "qwen2.5-72b": (8192, 29568, 64, 8, 128, 152064),
}


@dataclass(frozen=True, order=True)
class GemmShape:
    M: int
    N: int
    K: int
    dtype: str = "float16"
    source: str = ""
    """Where the shape comes from ("cudal2", "llama-3.1-8b:down_proj", a file name)."""

    def __post_init__(self) -> None:
        if min(self.M, self.N, self.K) < 1:
            raise UsageError(f"GEMM dims must be positive, got M={self.M} N={self.N} K={self.K}")
        if self.dtype not in DTYPES:
            raise UsageError(f"GEMM dtype {self.dtype!r} is not supported: use one of {', '.join(DTYPES)}")

    @property
    def flops(self) -> int:
        return 2 * self.M * self.N * self.K

    @property
    def aligned(self) -> bool:
        """K and N multiples of 8: 16-byte rows of A, B and C in fp16/bf16 (either layout), what
        cuBLAS's fast kernels and TMA need. M is free: it is never the contiguous dimension."""
        return self.N % 8 == 0 and self.K % 8 == 0

    @property
    def key(self) -> tuple[int, int, int, str]:
        return (self.M, self.N, self.K, self.dtype)


def cudal2(dtype: str = "float16") -> list[GemmShape]:
    return [GemmShape(m, n, k, dtype, "cudal2") for m, n, k in itertools.product(CUDAL2_DIMS, repeat=3)]


def llm_projections(model: str) -> dict[str, tuple[int, int]]:
    """(N, K) of each projection of one model: fused q/k/v, attention output, fused gate+up, down, lm_head."""
    hidden, inter, heads, kv_heads, head_dim, vocab = LLM_MODELS[model]
    gated = model != "gpt2"  # every model here but GPT-2 has a gated MLP (gate and up fused: 2 x intermediate)
    return {
        "qkv_proj": ((heads + 2 * kv_heads) * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_up_proj": ((2 if gated else 1) * inter, hidden),
        "down_proj": (hidden, inter),
        "lm_head": (vocab, hidden),
    }


def llm(dtype: str = "float16") -> list[GemmShape]:
    shapes: dict[tuple[int, int, int, str], GemmShape] = {}
    for model in LLM_MODELS:
        for name, (n, k) in llm_projections(model).items():
            for m in LLM_M:
                shape = GemmShape(m, n, k, dtype, f"{model}:{name}")
                shapes.setdefault(shape.key, shape)  # models that share a shape keep the first name
    return sorted(shapes.values())


def shape_set(name: str, dtype: str = "float16") -> list[GemmShape]:
    """A named set (cudal2, llm) or a CSV / JSON file of shapes."""
    if name == "cudal2":
        return cudal2(dtype)
    if name == "llm":
        return llm(dtype)
    return load_shapes(name, dtype)


def load_shapes(path: str | Path, dtype: str = "float16") -> list[GemmShape]:
    """Shapes from a CSV with a header naming M, N, K (and optionally dtype), or a JSON list of
    {"M":, "N":, "K":[, "dtype":]} objects or [M, N, K] triples."""
    p = Path(path)
    if not p.is_file():
        raise UsageError(f"no shape set or file named {path}: use cudal2, llm, or a .csv / .json file of M, N, K")
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read shapes from {p}: {exc}") from None
    rows: list[dict[str, object]]
    if p.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise UsageError(f"{p} is not valid JSON (line {exc.lineno}): expected a list of shapes") from None
        if not isinstance(data, list):
            raise UsageError(f"{p} must hold a JSON list of shapes, e.g. [[4096, 4096, 4096]]")
        rows = [dict(zip("MNK", item)) if isinstance(item, list) else item for item in data]
    else:
        rows = [{k.strip(): v for k, v in row.items() if k} for row in csv.DictReader(text.splitlines())]
    shapes = []
    for i, row in enumerate(rows, 1):
        try:
            shapes.append(GemmShape(int(row["M"]), int(row["N"]), int(row["K"]),  # type: ignore[call-overload]
                                    str(row.get("dtype") or dtype).strip(), p.name))
        except (KeyError, TypeError, ValueError):
            raise UsageError(f"shape {i} in {p} needs integer M, N and K, got {row!r}") from None
    if not shapes:
        raise UsageError(f"{p} holds no shapes")
    return shapes


def gpu_slug(name: str) -> str:
    """"NVIDIA H100 80GB HBM3" -> "h100-80gb-hbm3": the key of tables and caches (the tuner
    writes them, the dispatcher reads them; both take the name from here)."""
    words = [w for w in name.lower().replace("nvidia", " ").replace("_", " ").split() if w]
    return "-".join("".join(c for c in w if c.isalnum()) for w in words) or "unknown"
