"""Linear + row sum, rewritten algebraically: sum_n (x @ W.T + b)[m, n] = x[m, :] . colsum(W) + sum(b).

The reference runs a full 8192x4096x8192 fp32 GEMM (550 GFLOP, ~10 ms on H100 FP32 cores) and then
reduces its 256 MB output. The sum over output features commutes with the GEMM, so this candidate
reads W once to form w_sum[k] = sum_n W[n, k] (128 MB, split over 32 row slabs x 32 column blocks
so ~1024 programs stream it at DRAM bandwidth), folds the slabs and sum(b) in a tiny kernel, and
then does one GEMV y = x @ w_sum + sum(b) (x: 128 MB, read once). Total ~256 MB of DRAM traffic,
about 0.1 ms at ~3 TB/s: the minimum the result needs. All accumulation is fp32 over fewer
terms per rounding than the reference's GEMM-then-sum, so the error is at fp32 level.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _colsum_partial_kernel(w_ptr, p_ptr, N, K, stride_wn, stride_wk, rows_per_split,
                           BLOCK_R: tl.constexpr, BLOCK_K: tl.constexpr):
    kb = tl.program_id(0)
    s = tl.program_id(1)
    rk = kb * BLOCK_K + tl.arange(0, BLOCK_K)
    k_ok = rk < K
    rr = tl.arange(0, BLOCK_R)
    row0 = s * rows_per_split
    row_end = tl.minimum(row0 + rows_per_split, N)
    acc = tl.zeros((BLOCK_R, BLOCK_K), dtype=tl.float32)
    for r0 in range(row0, row_end, BLOCK_R):
        rows = r0 + rr
        msk = (rows < row_end)[:, None] & k_ok[None, :]
        w = tl.load(w_ptr + rows.to(tl.int64)[:, None] * stride_wn + rk[None, :] * stride_wk,
                    mask=msk, other=0.0)
        acc += w
    tl.store(p_ptr + s * K + rk, tl.sum(acc, axis=0), mask=k_ok)


@triton.jit
def _finalize_kernel(p_ptr, b_ptr, ws_ptr, K, N, S,
                     BLOCK_S: tl.constexpr, BLOCK_K: tl.constexpr, BLOCK_B: tl.constexpr):
    pid = tl.program_id(0)
    nkb = tl.cdiv(K, BLOCK_K)
    if pid < nkb:
        rk = pid * BLOCK_K + tl.arange(0, BLOCK_K)
        rs = tl.arange(0, BLOCK_S)
        msk = (rs < S)[:, None] & (rk < K)[None, :]
        p = tl.load(p_ptr + rs[:, None] * K + rk[None, :], mask=msk, other=0.0)
        tl.store(ws_ptr + rk, tl.sum(p, axis=0), mask=rk < K)
    else:
        # last program: sum of the bias, stored after w_sum
        rb = tl.arange(0, BLOCK_B)
        acc = tl.zeros((BLOCK_B,), dtype=tl.float32)
        for n0 in range(0, N, BLOCK_B):
            acc += tl.load(b_ptr + n0 + rb, mask=(n0 + rb) < N, other=0.0)
        tl.store(ws_ptr + K, tl.sum(acc, axis=0))


@triton.jit
def _gemv_kernel(x_ptr, ws_ptr, y_ptr, M, K, stride_xm, stride_xk,
                 BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    pid = tl.program_id(0)
    rm = pid * BLOCK_M + tl.arange(0, BLOCK_M)
    m_ok = rm < M
    rm_c = tl.where(m_ok, rm, 0).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_K), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_ok = kk < K
        ws = tl.load(ws_ptr + kk, mask=k_ok, other=0.0)
        xv = tl.load(x_ptr + rm_c[:, None] * stride_xm + kk[None, :] * stride_xk,
                     mask=k_ok[None, :], other=0.0)
        acc += xv * ws[None, :]
    bsum = tl.load(ws_ptr + K)
    tl.store(y_ptr + rm, tl.sum(acc, axis=1) + bsum, mask=m_ok)


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight.detach()
        b = self.linear.bias.detach().contiguous()
        lead = x.shape[:-1]
        x2 = x.reshape(-1, x.shape[-1]).contiguous()
        M, K = x2.shape
        N = w.shape[0]
        y = torch.empty((M,), device=x.device, dtype=torch.float32)
        if M == 0:
            return y.reshape(*lead, 1)
        # 1) column sums of W in S row slabs
        bk_c, br = 128, 32
        S = max(1, min(32, triton.cdiv(N, br)))
        rows_per_split = triton.cdiv(triton.cdiv(N, S), br) * br
        S = triton.cdiv(N, rows_per_split) if N > 0 else 1
        part = torch.empty((S, K), device=x.device, dtype=torch.float32)
        if N > 0:
            _colsum_partial_kernel[(triton.cdiv(K, bk_c), S)](
                w, part, N, K, w.stride(0), w.stride(1), rows_per_split,
                BLOCK_R=br, BLOCK_K=bk_c, num_warps=4, num_stages=1)
        else:
            part.zero_()
        # 2) fold the slabs; the extra program sums the bias into ws[K]
        ws = torch.empty((K + 1,), device=x.device, dtype=torch.float32)
        bk_f = 256
        _finalize_kernel[(triton.cdiv(K, bk_f) + 1,)](
            part, b, ws, K, N, S, BLOCK_S=triton.next_power_of_2(S), BLOCK_K=bk_f,
            BLOCK_B=1024, num_warps=4)
        # 3) y = x @ w_sum + sum(b)
        bm, bk = 16, 512
        _gemv_kernel[(triton.cdiv(M, bm),)](x2, ws, y, M, K, x2.stride(0), x2.stride(1),
                                            BLOCK_M=bm, BLOCK_K=bk, num_warps=8, num_stages=3)
        return y.reshape(*lead, 1)
