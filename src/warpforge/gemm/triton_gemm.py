"""Triton HGEMM families we write and parameterise: tiled / split-K, stream-K, and a persistent TMA
kernel for Hopper. fp16 or bf16 in, fp32 accumulation, the input dtype out.

- `tiled` and `splitk` are one pointer-based kernel. It reads A and B through strides (so B may
  be a (K, N) matrix, "nn", or the (N, K) weight of x @ W.T, "nt"), masks every edge, and so
  handles M, N and K that are not multiples of 8 with no padding copy. With SPLIT_K > 1 each
  program reduces a slice of K, writes its fp32 partial tile to a workspace and bumps a per-tile
  counter; the program that arrives last sums the partials in a fixed order (the result does not
  depend on which program finished last), writes C and resets the counter to zero. One launch,
  no memset, no second reduction kernel (cuBLAS uses two launches for split-K).
- `streamk` splits the total work (tiles x K-iterations) evenly over a persistent grid of one
  program per SM; tiles cut between programs are fixed up the same way. It evens out the last
  wave when there are few tiles (Osama et al., "Stream-K", PPoPP 2023).
- `tma` is the persistent kernel of Triton's Hopper tutorial shape: one program per SM walks
  the tiles in group-M order, operands come in through TMA descriptors (edge tiles zero-filled by
  the hardware), with optional warp specialisation. TMA needs 16-byte row strides, so it applies
  only when K (and N for "nn") are multiples of 8.

The skinny-M (decode) case is `splitk` with BM = 16 or 32: M <= 64 makes the GEMM a stream over
B, and splitting K keeps every SM loading. Nothing here allocates during a call except the
workspaces (cached per device and stream, and reset by the kernels themselves), so the kernels
are stream-correct and can be captured in CUDA graphs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch

from warpforge.errors import UsageError
from warpforge.gemm.family import GemmFamily, Problem, num_sms
from warpforge.gemm.layout import GemmFn
from warpforge.gemm.shapes import GemmShape

try:  # Triton is an optional dependency (the `triton` extra)
    import triton
    import triton.language as tl

    HAVE_TRITON = True
except ImportError:  # pragma: no cover - exercised only without the extra
    HAVE_TRITON = False

FAMILIES = ("tiled", "splitk", "streamk", "tma")


@dataclass(frozen=True)
class TritonConfig:
    family: str
    bm: int
    bn: int
    bk: int
    stages: int = 3
    warps: int = 4
    group_m: int = 8
    split_k: int = 1
    ws: bool = False  # warp specialisation (tma only)

    @property
    def name(self) -> str:
        text = f"triton_{self.family}:BM{self.bm}-BN{self.bn}-BK{self.bk}-S{self.stages}-W{self.warps}-G{self.group_m}"
        if self.split_k > 1:
            text += f"-K{self.split_k}"
        if self.ws:
            text += "-WS"
        return text

    @classmethod
    def from_name(cls, name: str) -> TritonConfig:
        """Inverse of `name` ("triton_splitk:BM16-BN64-BK128-S4-W4-G8-K8")."""
        try:
            head, params = name.split(":", 1)
            family = head.removeprefix("triton_")
            fields: dict[str, Any] = {"family": family, "ws": False}
            keys = {"BM": "bm", "BN": "bn", "BK": "bk", "S": "stages", "W": "warps", "G": "group_m", "K": "split_k"}
            for part in params.split("-"):
                if part == "WS":
                    fields["ws"] = True
                    continue
                key = next(k for k in sorted(keys, key=len, reverse=True) if part.startswith(k))
                fields[keys[key]] = int(part[len(key):])
            if family not in FAMILIES:
                raise ValueError(family)
            return cls(**fields)
        except (ValueError, StopIteration, TypeError):
            raise UsageError(f"not a Triton GEMM configuration name: {name!r}") from None


def _smem_bytes(cfg: TritonConfig, elem: int = 2) -> int:
    return cfg.stages * (cfg.bm * cfg.bk + cfg.bk * cfg.bn) * elem


def applicable(shape: GemmShape, layout: str, cfg: TritonConfig) -> str | None:
    """None when `cfg` can run `shape`, else the reason it cannot."""
    if _smem_bytes(cfg) > 220 * 1024:
        return "tiles and stages exceed shared memory"
    if cfg.family == "tma":
        # TMA descriptors need 16-byte strides: rows of A (K), of B (N for nn, K for nt), of C (N)
        if shape.K % 8 or shape.N % 8:
            return "TMA needs K and N to be multiples of 8"
    if cfg.family in ("splitk", "streamk") and cfg.split_k > math.ceil(shape.K / cfg.bk):
        return "more K splits than K blocks"
    return None


def tiles(shape: GemmShape, cfg: TritonConfig) -> int:
    return math.ceil(shape.M / cfg.bm) * math.ceil(shape.N / cfg.bn)


def candidate_configs(shape: GemmShape, layout: str, num_sms: int = 132) -> list[TritonConfig]:
    """A pruned search space for one shape: a few tile shapes per family that suit its size.

    Heuristics: tiles no larger than the (rounded-up) problem; split-K and stream-K only when
    the tiles alone cannot fill the GPU; BM = 16/32 for decode-sized M; TMA only where aligned.
    """
    M, N, K = shape.M, shape.N, shape.K
    out: list[TritonConfig] = []

    def fits(bm: int, bn: int) -> bool:
        return bm <= max(16, 2 ** math.ceil(math.log2(M))) and bn <= max(32, 2 ** math.ceil(math.log2(N)))

    if M <= 64:  # skinny: B-streaming; small BM, split K until the SMs are covered
        bm = 16 if M <= 16 else (32 if M <= 32 else 64)
        for bn, bk, warps in ((32, 128, 4), (64, 128, 4), (64, 256, 4), (128, 64, 4), (128, 128, 8)):
            if not fits(bm, bn):
                continue
            t = math.ceil(M / bm) * math.ceil(N / bn)
            k_blocks = math.ceil(K / bk)
            for waves in (1, 2, 4):
                split = max(1, min(k_blocks, 64, round(waves * num_sms / t)))
                out.append(TritonConfig("splitk" if split > 1 else "tiled", bm, bn, bk, 4, warps, 8, split))
    else:
        for bm, bn, bk, stages, warps in ((64, 64, 64, 4, 4), (64, 128, 64, 4, 4), (128, 64, 64, 4, 4),
                                          (128, 128, 64, 3, 8), (128, 128, 64, 4, 4), (128, 256, 64, 3, 8),
                                          (256, 128, 64, 3, 8)):
            if not fits(bm, bn):
                continue
            base = TritonConfig("tiled", bm, bn, bk, stages, warps)
            out.append(base)
            out.append(TritonConfig("tma", bm, bn, bk, stages, warps))
            if bm * bn >= 128 * 128 and warps == 8:  # Triton 3.6's warp-specialisation pass fails with 4 warps
                out.append(TritonConfig("tma", bm, bn, bk, stages, warps, ws=True))
            t = tiles(shape, base)
            if t < num_sms:  # too few tiles for one wave: split K, or stream it
                k_blocks = math.ceil(K / bk)
                split = max(2, min(k_blocks, 64, round(2 * num_sms / t)))
                if k_blocks >= 2 * split:
                    out.append(TritonConfig("splitk", bm, bn, bk, stages, warps, 8, split))
                if k_blocks >= 4:
                    out.append(TritonConfig("streamk", bm, bn, bk, stages, warps))
    return [c for c in dict.fromkeys(out) if applicable(shape, layout, c) is None]


# ---------------------------------------------------------------- kernels

if HAVE_TRITON:

    @triton.jit
    def _group_pid(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
        width = GROUP_M * num_pid_n
        first_m = (tile_id // width) * GROUP_M
        size_m = min(num_pid_m - first_m, GROUP_M)
        pid_m = first_m + (tile_id % width) % size_m
        pid_n = (tile_id % width) // size_m
        return pid_m, pid_n

    @triton.jit
    def _mac(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, rm, rn, k_lo, k_hi,
             BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, EVEN_K: tl.constexpr):
        """fp32 sum over k in [k_lo, k_hi) of A[rm, k] * B[k, rn], BK at a time, edges masked."""
        rk = tl.arange(0, BK)
        a_ptrs = a_ptr + rm[:, None] * sam + (k_lo + rk)[None, :] * sak
        b_ptrs = b_ptr + (k_lo + rk)[:, None] * sbk + rn[None, :] * sbn
        mask_m = rm[:, None] < M
        mask_n = rn[None, :] < N
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for k in range(k_lo, k_hi, BK):
            if EVEN_K:
                a = tl.load(a_ptrs, mask=mask_m, other=0.0)
                b = tl.load(b_ptrs, mask=mask_n, other=0.0)
            else:
                kk = k + rk
                a = tl.load(a_ptrs, mask=mask_m & (kk[None, :] < k_hi), other=0.0)
                b = tl.load(b_ptrs, mask=(kk[:, None] < k_hi) & mask_n, other=0.0)
            acc = tl.dot(a, b, acc)
            a_ptrs += BK * sak
            b_ptrs += BK * sbk
        return acc

    @triton.jit
    def _fixup(acc, c_ptrs, mask_c, ws_ptr, cnt_ptr, slot, first_slot, parts, tile,
               BM: tl.constexpr, BN: tl.constexpr):
        """Store this program's partial tile; the last of `parts` programs sums them and writes C."""
        offs = tl.arange(0, BM)[:, None] * BN + tl.arange(0, BN)[None, :]
        tl.store(ws_ptr + slot.to(tl.int64) * (BM * BN) + offs, acc)
        done = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel")
        if done == parts - 1:
            total = tl.zeros((BM, BN), dtype=tl.float32)
            for j in range(0, parts):  # fixed order: bitwise the same whichever program came last
                total += tl.load(ws_ptr + (first_slot + j).to(tl.int64) * (BM * BN) + offs, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(c_ptrs.dtype.element_ty), mask=mask_c)
            tl.atomic_xchg(cnt_ptr + tile, 0)

    @triton.jit
    def _splitk_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                       BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                       SPLIT_K: tl.constexpr, EVEN_K: tl.constexpr):
        num_pid_m = tl.cdiv(M, BM)
        num_pid_n = tl.cdiv(N, BN)
        tile = tl.program_id(0)
        pid_k = tl.program_id(1)
        pid_m, pid_n = _group_pid(tile, num_pid_m, num_pid_n, GROUP_M)
        rm = pid_m * BM + tl.arange(0, BM)
        rn = pid_n * BN + tl.arange(0, BN)
        k_per = tl.cdiv(tl.cdiv(K, BK), SPLIT_K) * BK
        k_lo = pid_k * k_per
        k_hi = min(k_lo + k_per, K)
        acc = _mac(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, rm, rn, k_lo, k_hi, BM, BN, BK, EVEN_K)
        c_ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
        mask_c = (rm[:, None] < M) & (rn[None, :] < N)
        if SPLIT_K == 1:
            tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_c)
        else:
            _fixup(acc, c_ptrs, mask_c, ws_ptr, cnt_ptr, tile * SPLIT_K + pid_k, tile * SPLIT_K, SPLIT_K, tile, BM, BN)

    @triton.jit
    def _streamk_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
                        iters_per, max_parts,
                        BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr):
        num_pid_m = tl.cdiv(M, BM)
        num_pid_n = tl.cdiv(N, BN)
        k_iters = tl.cdiv(K, BK)
        total = num_pid_m * num_pid_n * k_iters
        p = tl.program_id(0)
        it = p * iters_per
        end = min(it + iters_per, total)
        while it < end:
            tile = it // k_iters
            tile_lo = tile * k_iters
            seg_end = min(end, tile_lo + k_iters)
            pid_m, pid_n = _group_pid(tile, num_pid_m, num_pid_n, GROUP_M)
            rm = pid_m * BM + tl.arange(0, BM)
            rn = pid_n * BN + tl.arange(0, BN)
            acc = _mac(a_ptr, b_ptr, M, N, K, sam, sak, sbk, sbn, rm, rn,
                       (it - tile_lo) * BK, min((seg_end - tile_lo) * BK, K), BM, BN, BK, False)
            c_ptrs = c_ptr + rm[:, None] * scm + rn[None, :] * scn
            mask_c = (rm[:, None] < M) & (rn[None, :] < N)
            if (it == tile_lo) & (seg_end == tile_lo + k_iters):
                tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_c)
            else:
                first_p = tile_lo // iters_per
                parts = (tile_lo + k_iters - 1) // iters_per - first_p + 1
                _fixup(acc, c_ptrs, mask_c, ws_ptr, cnt_ptr, tile * max_parts + (p - first_p),
                       tile * max_parts, parts, tile, BM, BN)
            it = seg_end

    @triton.jit
    def _tma_kernel(a_desc, b_desc, c_desc, M, N, K,
                    BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, GROUP_M: tl.constexpr,
                    NUM_SMS: tl.constexpr, B_KMAJOR: tl.constexpr, WS: tl.constexpr):
        num_pid_m = tl.cdiv(M, BM)
        num_pid_n = tl.cdiv(N, BN)
        k_tiles = tl.cdiv(K, BK)
        num_tiles = num_pid_m * num_pid_n
        for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_SMS, flatten=not WS, warp_specialize=WS):
            pid_m, pid_n = _group_pid(tile_id, num_pid_m, num_pid_n, GROUP_M)
            off_m = pid_m * BM
            off_n = pid_n * BN
            acc = tl.zeros((BM, BN), dtype=tl.float32)
            for ki in range(k_tiles):
                a = a_desc.load([off_m, ki * BK])
                if B_KMAJOR:
                    acc = tl.dot(a, b_desc.load([off_n, ki * BK]).T, acc)
                else:
                    acc = tl.dot(a, b_desc.load([ki * BK, off_n]), acc)
            c_desc.store([off_m, off_n], acc.to(c_desc.dtype))


# ---------------------------------------------------------------- launch

_workspaces: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}


def _workspace(device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """fp32 partial tiles and int32 per-tile counters (zero between calls: the kernels reset them).

    Cached per (device, stream) so concurrent streams never share counters. Under CUDA graph
    capture the buffers are made fresh and belong to the graph (the zeroing is captured too).
    """
    capturing = device.type == "cuda" and torch.cuda.is_current_stream_capturing()
    if capturing:
        return (torch.empty(floats, dtype=torch.float32, device=device),
                torch.zeros(counters, dtype=torch.int32, device=device))
    stream = torch.cuda.current_stream(device).cuda_stream if device.type == "cuda" else 0
    key = (device.index or 0, stream)
    ws = _workspaces.get(key)
    if ws is None or ws[0].numel() < floats or ws[1].numel() < counters:
        old_f, old_c = (ws[0].numel(), ws[1].numel()) if ws else (0, 0)
        ws = (torch.empty(max(floats, old_f), dtype=torch.float32, device=device),
              torch.zeros(max(counters, old_c), dtype=torch.int32, device=device))
        _workspaces[key] = ws
    return ws


def _b_strides(b: torch.Tensor, layout: str) -> tuple[int, int]:
    """Strides (over k, over n) of B as the kernels read it."""
    return (b.stride(0), b.stride(1)) if layout == "nn" else (b.stride(1), b.stride(0))


def launch(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, cfg: TritonConfig, layout: str = "nn") -> None:
    """C = A @ B into `out`. layout "nn": b is (K, N); "nt": b is the (N, K) weight of x @ W.T."""
    if not HAVE_TRITON:
        raise UsageError("the Triton GEMM kernels need Triton: pip install 'warpforge[triton]'")
    M, K = a.shape
    N = b.shape[1] if layout == "nn" else b.shape[0]
    sbk, sbn = _b_strides(b, layout)
    common = dict(num_warps=cfg.warps, num_stages=cfg.stages)
    if cfg.family in ("tiled", "splitk"):
        split = cfg.split_k if cfg.family == "splitk" else 1
        n_tiles = math.ceil(M / cfg.bm) * math.ceil(N / cfg.bn)
        ws, cnt = _workspace(a.device, n_tiles * split * cfg.bm * cfg.bn if split > 1 else 1, n_tiles if split > 1 else 1)
        even_k = K % (cfg.bk * split) == 0
        _splitk_kernel[(n_tiles, split)](a, b, out, ws, cnt, M, N, K, a.stride(0), a.stride(1), sbk, sbn,
                                         out.stride(0), out.stride(1), BM=cfg.bm, BN=cfg.bn, BK=cfg.bk,
                                         GROUP_M=cfg.group_m, SPLIT_K=split, EVEN_K=even_k, **common)
    elif cfg.family == "streamk":
        n_tiles = math.ceil(M / cfg.bm) * math.ceil(N / cfg.bn)
        k_iters = math.ceil(K / cfg.bk)
        programs = min(num_sms(a.device), n_tiles * k_iters)
        iters_per = math.ceil(n_tiles * k_iters / programs)
        max_parts = math.ceil(k_iters / iters_per) + 1
        ws, cnt = _workspace(a.device, n_tiles * max_parts * cfg.bm * cfg.bn, n_tiles)
        _streamk_kernel[(programs,)](a, b, out, ws, cnt, M, N, K, a.stride(0), a.stride(1), sbk, sbn,
                                     out.stride(0), out.stride(1), iters_per, max_parts,
                                     BM=cfg.bm, BN=cfg.bn, BK=cfg.bk, GROUP_M=cfg.group_m, **common)
    elif cfg.family == "tma":
        from triton.tools.tensor_descriptor import TensorDescriptor

        a_desc = TensorDescriptor.from_tensor(a, [cfg.bm, cfg.bk])
        b_desc = TensorDescriptor.from_tensor(b, [cfg.bk, cfg.bn] if layout == "nn" else [cfg.bn, cfg.bk])
        c_desc = TensorDescriptor.from_tensor(out, [cfg.bm, cfg.bn])
        sms = num_sms(a.device)
        n_tiles = math.ceil(M / cfg.bm) * math.ceil(N / cfg.bn)
        _tma_kernel[(min(sms, n_tiles),)](a_desc, b_desc, c_desc, M, N, K, BM=cfg.bm, BN=cfg.bn, BK=cfg.bk,
                                          GROUP_M=cfg.group_m, NUM_SMS=sms, B_KMAJOR=layout == "nt",
                                          WS=cfg.ws, **common)
    else:
        raise UsageError(f"unknown Triton GEMM family {cfg.family!r}: use one of {', '.join(FAMILIES)}")


def matmul(a: torch.Tensor, b: torch.Tensor, cfg: TritonConfig, layout: str = "nn") -> torch.Tensor:
    if a.dim() != 2 or b.dim() != 2:
        raise UsageError(f"matmul takes 2-D tensors, got {tuple(a.shape)} and {tuple(b.shape)}")
    N = b.shape[1] if layout == "nn" else b.shape[0]
    out = torch.empty((a.shape[0], N), dtype=a.dtype, device=a.device)
    launch(a, b, out, cfg, layout)
    return out


class TritonFamily(GemmFamily):
    """`triton_<family>:<params>`: the Triton kernels above, interpreted on the CPU."""

    name, form = "triton", "triton_<family>:<params>"
    transferred = timed_online = True

    def owns(self, choice: str) -> bool:
        return choice.startswith("triton_")

    def parse(self, choice: str) -> TritonConfig:
        return TritonConfig.from_name(choice)

    def configs(self, problem: Problem, limit: int, variants: int = 0) -> list[str]:
        if not HAVE_TRITON:
            return []
        return [c.name for c in candidate_configs(problem.shape, problem.layout, problem.sms)][:limit]

    def why_not(self, choice: str, shape: GemmShape, layout: str, device: str) -> str | None:
        return applicable(shape, layout, self.parse(choice)) if HAVE_TRITON else "Triton is not installed"

    def build(self, choice: str, layout: str, a: torch.Tensor, b: torch.Tensor) -> GemmFn:
        cfg = self.parse(choice)
        return lambda x, y: matmul(x, y, cfg, layout)


FAMILY = TritonFamily()
