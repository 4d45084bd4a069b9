"""The CUTLASS sm90 family's configurations: `CutlassConfig` (tile, cluster, schedule) and its
name, the search space (`configs`), the shapes each can run (`why_not`), the ones worth timing for
a shape (`candidate_configs`) and the tile scheduler's run-time variants (`parse_choice`,
`variant_names`). Pure Python, no GPU: cutlass_build.py turns a configuration into CUDA source and
a library, cutlass_sm90.py loads and launches it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from warpforge.errors import UsageError
from warpforge.gemm.layout import LAYOUTS

if TYPE_CHECKING:
    from warpforge.gemm.shapes import GemmShape

ELEMENTS = {"float16": "cutlass::half_t", "bfloat16": "cutlass::bfloat16_t"}

# schedule -> (kernel schedule, epilogue schedule, tile scheduler), names in cutlass::gemm / ::epilogue
SCHEDULES = {
    # two consumer warp groups split each tile's rows: needs tile M of 128 or more
    "coop": ("KernelTmaWarpSpecializedCooperative", "TmaWarpSpecializedCooperative", "PersistentScheduler"),
    # two consumer warp groups take alternate tiles, one's epilogue hiding under the other's MMAs
    "pingpong": ("KernelTmaWarpSpecializedPingpong", "TmaWarpSpecialized", "PersistentScheduler"),
    # cooperative, with the tiles x K-iterations shared evenly over the persistent grid (partial
    # tiles reduced through the workspace): for few tiles or a ragged last wave
    "streamk": ("KernelTmaWarpSpecializedCooperative", "TmaWarpSpecializedCooperative", "StreamKScheduler"),
}

# Accumulator registers one consumer thread holds: (rows it owns) x tile N / 128 threads. The
# consumer warp groups raise their budget to 232 registers (setmaxnreg; MmaRegisterRequirement in
# CUTLASS's sm90_gemm_tma_warpspecialized_*.hpp), so 256 cannot fit; CUTLASS's largest profiler tiles
# (128x256 cooperative) hold 128. ptxas -v (nvcc 13.0, CUTLASS 4.2, 2026-11-26): the 128-accumulator
# configs compiled (128x256 and 256x128 cooperative, 64x256 and 128x128 ping-pong) spill nothing;
# 256x128 ping-pong (256 accumulators) spills 2,856 bytes.
MAX_ACCUMULATORS = 128


@dataclass(frozen=True, order=True)
class CutlassConfig:
    tile_m: int
    tile_n: int
    tile_k: int
    cluster_m: int
    cluster_n: int
    schedule: str

    @property
    def name(self) -> str:
        return (f"cutlass_{self.tile_m}x{self.tile_n}x{self.tile_k}_c{self.cluster_m}x{self.cluster_n}"
                f"_{self.schedule}")

    @property
    def accumulators(self) -> int:
        """fp32 accumulator registers per consumer thread (see MAX_ACCUMULATORS)."""
        rows = self.tile_m // 2 if self.schedule in ("coop", "streamk") else self.tile_m
        return rows * self.tile_n // 128

    @property
    def problem(self) -> str | None:
        """Why CUTLASS cannot build this config (its builders' static_asserts), or None."""
        if self.schedule not in SCHEDULES:
            return f"schedule must be one of {', '.join(SCHEDULES)}, not {self.schedule!r}"
        if self.tile_m % 64 or not 64 <= self.tile_m <= 256:
            return f"tile M must be 64, 128, 192 or 256 (wgmma is 64 rows), not {self.tile_m}"
        if self.schedule != "pingpong" and self.tile_m % 128:
            return f"the cooperative schedules split a tile between two warp groups: tile M {self.tile_m} < 128"
        if self.tile_n % 16 or not 16 <= self.tile_n <= 256:
            return f"tile N must be a multiple of 16 up to 256, not {self.tile_n}"
        if self.tile_k not in (32, 64, 128):
            return f"tile K must be 32, 64 or 128 (16-bit wgmma is k16, TMA rows 64-256 bytes), not {self.tile_k}"
        if self.cluster_m not in (1, 2) or self.cluster_n not in (1, 2):
            return f"cluster dims must be 1 or 2, not {self.cluster_m}x{self.cluster_n}"
        if self.accumulators > MAX_ACCUMULATORS:
            return f"{self.accumulators} accumulator registers per thread exceed {MAX_ACCUMULATORS} (they would spill)"
        return None

    @classmethod
    def from_name(cls, name: str) -> CutlassConfig:
        """The inverse of `name`: "cutlass_128x256x64_c2x1_coop" -> CutlassConfig(128, 256, 64, 2, 1, "coop")."""
        match = _NAME.fullmatch(name)
        if not match:
            raise UsageError(f"{name!r} is not a CUTLASS config name like cutlass_128x256x64_c2x1_coop")
        tm, tn, tk, cm, cn, schedule = match.groups()
        cfg = cls(int(tm), int(tn), int(tk), int(cm), int(cn), schedule)
        if cfg.problem:
            raise UsageError(f"CUTLASS config {name} is invalid: {cfg.problem}")
        return cfg


_NAME = re.compile(r"cutlass_(\d+)x(\d+)x(\d+)_c(\d+)x(\d+)_([a-z]+)")

# The tile scheduler's run-time settings, the same library for each: the order in which the
# persistent CTAs walk the output tiles (h: CUTLASS's heuristic, m: along M, n: along N) and the
# swizzle, how many tiles of the other dimension it walks as a band (more tiles sharing the same
# rows of A or columns of B in L2 at once). A choice `cutlass_<config>/<raster><swizzle>` (e.g.
# `/n4`) sets them; without the suffix it is `/h1`, CUTLASS's defaults.
RASTERS = {"h": 0, "m": 1, "n": 2}
SWIZZLES = (1, 2, 4, 8)
# The stream-K scheduler's third run-time setting: `/k<splits>` forces a split-K decomposition into
# that many K slices (their partial tiles summed through the workspace) where its own heuristic
# would pick data-parallel, stream-K or split-K by itself. For shapes with too few output tiles to
# fill the GPU and a long K (the class where cuBLAS's split-K kernels beat every family so far).
SPLITS = (2, 4, 8, 16)
MIN_K_PER_SPLIT = 256  # each slice keeps at least this much of K (as for cuBLASLt's split-K variants)


class Variant(NamedTuple):
    cfg: CutlassConfig
    raster: str = "h"
    swizzle: int = 1
    splits: int = 1


def parse_choice(name: str) -> Variant:
    """`cutlass_<config>[/<h|m|n><1|2|4|8>|/k<2|4|8|16>]` -> (config, raster, swizzle, splits)."""
    base, sep, variant = name.partition("/")
    cfg = CutlassConfig.from_name(base)
    if not sep:
        return Variant(cfg)
    if variant[:1] == "k" and variant[1:].isdigit() and int(variant[1:]) in SPLITS:
        if cfg.schedule != "streamk":
            raise UsageError(f"{name!r}: split-K (/k<splits>) needs a stream-K configuration, not {cfg.schedule}")
        return Variant(cfg, splits=int(variant[1:]))
    if len(variant) < 2 or variant[0] not in RASTERS or not variant[1:].isdigit() or int(variant[1:]) not in SWIZZLES:
        raise UsageError(f"{name!r}: a CUTLASS variant is /<raster><swizzle>, raster one of {', '.join(RASTERS)} "
                         f"and swizzle one of {', '.join(map(str, SWIZZLES))} (e.g. {base}/n4), or /k<splits> "
                         f"with splits one of {', '.join(map(str, SPLITS))} on a stream-K configuration")
    return Variant(cfg, variant[0], int(variant[1:]))


def variant_names(cfg: CutlassConfig, shape: GemmShape, num_sms: int = 132) -> list[str]:
    """The run-time settings worth timing for `cfg` on `shape` beyond the defaults: where the tiles
    fill at least one wave of the GPU, each raster along M and along N with every swizzle (with
    fewer, every tile is in flight at once and the order does not change what L2 holds); where they
    do not, a stream-K configuration's split-K factors that keep MIN_K_PER_SPLIT of K a slice."""
    tiles = -(-shape.M // cfg.tile_m) * -(-shape.N // cfg.tile_n)
    if tiles < num_sms:
        if cfg.schedule != "streamk":
            return []
        return [f"{cfg.name}/k{s}" for s in SPLITS if shape.K // s >= MIN_K_PER_SPLIT]
    return [f"{cfg.name}/{r}{w}" for r in ("m", "n") for w in SWIZZLES]

CLUSTERS = ((1, 1), (2, 1), (1, 2))


def configs() -> list[CutlassConfig]:
    """The search space (20 configs), shaped like what CUTLASS's profiler emits for 16-bit sm90 GEMMs.

    The profiler's default level (131) takes the 64x128x16 and 64x256x16 wgmma shapes, multiplies
    them by (2,1,4), (1,1,4), (4,1,4), (2,2,4) into CTA tiles with K = 64 (64 halves = one 128-byte
    swizzle row), tries clusters 1x2 and 2x1, and stamps out the cooperative schedule where tile
    M >= 128 and ping-pong everywhere, plus stream-K on the cooperative ones (cutlass_library's
    sm90_utils.py and sm90_shapes.py). Kept from that, for one fp32-accumulating 16-bit type:
    - cooperative: 128x128, 128x256, 256x128 (the large tiles: fewest bytes loaded per FLOP);
    - ping-pong: 64x128 and 64x256 (its natural tile: each warp group owns a whole tile), and
      128x128 (a consumer holds 128 accumulators, like cooperative 128x256);
    - each with clusters 1x1, 2x1, 1x2 (a 2-CTA cluster multicasts the shared operand tile by TMA,
      halving its L2 traffic; 1x1 is added back because small grids lose a wave to clustering);
    - stream-K with 128x128 and 128x256, 1x1 only: it is for shapes with too few tiles.
    Left out: 256x256 and 128x512 (over MAX_ACCUMULATORS), 4- and 8-CTA clusters (a wave must
    fill whole clusters of SMs: worse quantisation on 132 SMs), tile K 32/128 (the auto stage count
    already balances stages against K; 64 is what the profiler uses for 16-bit types).
    """
    found = [CutlassConfig(m, n, 64, cm, cn, "coop") for m, n in ((128, 128), (128, 256), (256, 128))
             for cm, cn in CLUSTERS]
    found += [CutlassConfig(m, n, 64, cm, cn, "pingpong") for m, n in ((64, 128), (64, 256), (128, 128))
              for cm, cn in CLUSTERS]
    found += [CutlassConfig(128, n, 64, 1, 1, "streamk") for n in (128, 256)]
    return found


def why_not(shape: GemmShape, layout: str, cfg: CutlassConfig) -> str | None:
    """One line saying why `cfg` cannot compute `shape` in `layout`, or None if it can."""
    return _why_not(shape.M, shape.N, shape.K, shape.dtype, layout, cfg)


def applicable(shape: GemmShape, layout: str, cfg: CutlassConfig) -> bool:
    return why_not(shape, layout, cfg) is None


def _why_not(m: int, n: int, k: int, dtype: str, layout: str, cfg: CutlassConfig) -> str | None:
    if layout not in LAYOUTS:
        return f"layout must be one of {', '.join(LAYOUTS)}, not {layout!r}"
    if dtype not in ELEMENTS:
        return f"dtype must be one of {', '.join(ELEMENTS)}, not {dtype!r}"
    if cfg.problem:
        return cfg.problem
    # TMA global strides must be multiples of 16 bytes (CUDA driver API, cuTensorMapEncodeTiled):
    # the rows of A (K), of B (N for nn, K for nt) and of D, which the TMA epilogue stores (N)
    if k % 8:
        return f"K={k} is not a multiple of 8 (TMA needs 16-byte rows of A)"
    if n % 8:
        what = "of B and of the output" if layout == "nn" else "of the output (TMA-stored)"
        return f"N={n} is not a multiple of 8 (TMA needs 16-byte rows {what})"
    if max(m, n, k) >= 2**31:
        return "M, N and K must fit in 32-bit ints (the problem shape is cute::Shape<int, int, int, int>)"
    return None


def candidate_configs(shape: GemmShape, layout: str, num_sms: int = 132) -> list[CutlassConfig]:
    """The configs worth timing for one shape: applicable, tiles no larger than the problem (each
    dim rounded up to a power of two), stream-K only when the tiles cannot fill the GPU."""
    m_cap = max(64, 1 << (shape.M - 1).bit_length())
    n_cap = max(128, 1 << (shape.N - 1).bit_length())
    picked = []
    for cfg in configs():
        if not applicable(shape, layout, cfg) or cfg.tile_m > m_cap or cfg.tile_n > n_cap:
            continue
        tiles = -(-shape.M // cfg.tile_m) * -(-shape.N // cfg.tile_n)
        if cfg.schedule == "streamk" and tiles >= num_sms:
            continue
        picked.append(cfg)
    return picked
