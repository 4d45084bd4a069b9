"""Linear + bias + ReLU as one Triton GEMM with a fused epilogue, fp32-accurate on tensor cores.

y = relu(x @ W.T + b). The products run through tl.dot(..., input_precision="tf32x3"): each fp32
operand is split into a TF32 "high" part and a TF32 "low" remainder and three TF32 tensor-core
MMAs (hi*hi + hi*lo + lo*hi) are accumulated in fp32, which keeps the error at fp32 level
(about 1e-7 relative, far inside the task's 1e-5) while using the tensor cores instead of the
CUDA-core FFMA path that an fp32 cuBLAS SGEMM is bound to (H100: ~67 TFLOP/s FP32 vs ~495 TF32).
Bias and ReLU are applied to the accumulator before the single store, so the 64 MB output is
written once and never re-read; eager PyTorch runs addmm and then a separate ReLU pass (read +
write of the output). At 4096^3 the GEMM dominates; the win is the tensor-core GEMM itself.
128x64x32 tiles (4 warps, 4 stages; best of a sweep on H100), grouped launch order for L2 reuse, masks on every edge, int64 row offsets.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _linear_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                        stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        GROUP_M: tl.constexpr, EVEN_K: tl.constexpr, PREC: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_size)
    pid_n = (pid % in_group) // group_size

    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_ok = rm < M
    n_ok = rn < N
    # clamp out-of-range rows/cols to a valid row so the K loop needs no M/N masks
    rm_c = tl.where(m_ok, rm, 0).to(tl.int64)
    rn_c = tl.where(n_ok, rn, 0).to(tl.int64)
    x_ptrs = x_ptr + rm_c[:, None] * stride_xm + rk[None, :] * stride_xk     # (BM, BK)
    w_ptrs = w_ptr + rn_c[None, :] * stride_wn + rk[:, None] * stride_wk     # (BK, BN) = W.T tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        if EVEN_K:
            a = tl.load(x_ptrs)
            b = tl.load(w_ptrs)
        else:
            k_ok = (k0 + rk) < K
            a = tl.load(x_ptrs, mask=k_ok[None, :], other=0.0)
            b = tl.load(w_ptrs, mask=k_ok[:, None], other=0.0)
        acc = tl.dot(a, b, acc, input_precision=PREC)
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    bias = tl.load(b_ptr + rn, mask=n_ok, other=0.0)
    acc = acc + bias[None, :]
    acc = tl.where((acc > 0) | (acc != acc), acc, 0.0)   # relu, NaN propagates like torch.relu
    y_ptrs = y_ptr + rm.to(tl.int64)[:, None] * stride_ym + rn[None, :] * stride_yn
    tl.store(y_ptrs, acc, mask=m_ok[:, None] & n_ok[None, :])


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
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        if M == 0 or N == 0:
            return y.reshape(*lead, N)
        bm, bn, bk = 128, 64, 32
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        _linear_relu_kernel[grid](x2, w, b, y, M, N, K,
                                  x2.stride(0), x2.stride(1), w.stride(0), w.stride(1),
                                  y.stride(0), y.stride(1),
                                  BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=16,
                                  EVEN_K=(K % bk == 0), PREC="tf32x3", num_warps=4, num_stages=4)
        return y.reshape(*lead, N)
