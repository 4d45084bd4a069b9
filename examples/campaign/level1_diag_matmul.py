"""diag(A) @ B computed as what it is: C[i, j] = A[i] * B[i, j], one Triton elementwise pass.

GPU size: N = M = 4096 fp32.  Eager builds the dense 4096x4096 diagonal (64 MB written) and
runs a full fp32 GEMM (2 * 4096^3 = 137 GFLOP, ~2-3 ms on the H100's non-tensor-core fp32
path).  This kernel reads B once (64 MB) plus A (16 KB) and writes C once (64 MB): ~45 us at
HBM speed, so the speedup should be ~40-60x.  The result is bit-identical to the reference:
each dense dot product is A[i]*B[i,j] plus exact zeros.  Tiles of 4 rows x 1024 columns,
4096 programs, 128-bit vector loads.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _diag_scale_kernel(a_ptr, b_ptr, c_ptr, N, M, stride_bn, stride_bm, stride_cn,
                       BR: tl.constexpr, BC: tl.constexpr):
    pid_r = tl.program_id(0)
    pid_c = tl.program_id(1)
    r = pid_r.to(tl.int64) * BR + tl.arange(0, BR)
    c = pid_c.to(tl.int64) * BC + tl.arange(0, BC)
    mask_r = r < N
    mask = mask_r[:, None] & (c < M)[None, :]
    a = tl.load(a_ptr + r, mask=mask_r, other=0.0)
    b = tl.load(b_ptr + r[:, None] * stride_bn + c[None, :] * stride_bm, mask=mask, other=0.0)
    tl.store(c_ptr + r[:, None] * stride_cn + c[None, :], a[:, None] * b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        dtype = torch.promote_types(A.dtype, B.dtype)
        A = A.contiguous().to(dtype)
        B = B.contiguous().to(dtype)
        N = A.shape[0]
        M = B.shape[1]
        C = torch.empty((N, M), dtype=dtype, device=B.device)
        if N == 0 or M == 0:
            return C
        BC = min(triton.next_power_of_2(M), 1024)
        BR = max(1, 4096 // BC)
        BR = min(BR, triton.next_power_of_2(N))
        grid = (triton.cdiv(N, BR), triton.cdiv(M, BC))
        _diag_scale_kernel[grid](A, B, C, N, M, B.stride(0), B.stride(1), C.stride(0),
                                 BR=BR, BC=BC, num_warps=4)
        return C
