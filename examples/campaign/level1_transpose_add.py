"""C = A + B.T with a tiled Triton kernel: both operands and the output are accessed with
fully coalesced loads/stores; the transpose happens on-chip (tl.trans of the B tile, which
Triton turns into a shared-memory layout conversion).

GPU size: A, B are (8192, 8192) fp32: the minimum traffic is 3 * 268 MB = 805 MB (~0.3 ms on
an H100).  Eager `A + B.t()` runs one TensorIterator kernel whose output follows A's layout,
so B is read with a stride of 8192 floats between neighbouring threads: every 4-byte element
pulls a 32-byte sector, and most of that amplification misses L2 at this size.  Tiling
64x64 keeps every global access coalesced; expect ~2-4x over eager.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _transpose_add_kernel(a_ptr, b_ptr, c_ptr, N, M,
                          stride_an, stride_am, stride_bm, stride_bn, stride_cn, stride_cm,
                          BI: tl.constexpr, BJ: tl.constexpr):
    pid_i = tl.program_id(0)
    pid_j = tl.program_id(1)
    i = pid_i.to(tl.int64) * BI + tl.arange(0, BI)  # rows of A / C, columns of B
    j = pid_j.to(tl.int64) * BJ + tl.arange(0, BJ)  # columns of A / C, rows of B
    mask_i = i < N
    mask_j = j < M
    mask_ij = mask_i[:, None] & mask_j[None, :]
    a = tl.load(a_ptr + i[:, None] * stride_an + j[None, :] * stride_am, mask=mask_ij, other=0.0)
    # B tile read along its own rows (contiguous in i), then transposed on chip
    b = tl.load(b_ptr + j[:, None] * stride_bm + i[None, :] * stride_bn,
                mask=mask_j[:, None] & mask_i[None, :], other=0.0)
    c = a + tl.trans(b)
    tl.store(c_ptr + i[:, None] * stride_cn + j[None, :] * stride_cm, c, mask=mask_ij)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        A = A.contiguous()
        B = B.contiguous()
        N, M = A.shape
        dtype = torch.promote_types(A.dtype, B.dtype)
        if A.dtype != dtype:
            A = A.to(dtype)
        if B.dtype != dtype:
            B = B.to(dtype)
        C = torch.empty((N, M), dtype=dtype, device=A.device)
        if N == 0 or M == 0:
            return C
        BI, BJ = 64, 64
        grid = (triton.cdiv(N, BI), triton.cdiv(M, BJ))
        _transpose_add_kernel[grid](A, B, C, N, M,
                                    A.stride(0), A.stride(1), B.stride(0), B.stride(1),
                                    C.stride(0), C.stride(1), BI=BI, BJ=BJ, num_warps=4)
        return C
