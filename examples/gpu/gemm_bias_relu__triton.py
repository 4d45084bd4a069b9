"""Linear + bias + ReLU fused in one Triton GEMM, in true fp32 (no TF32).

y = relu(x @ W.T + b) with W and b read from `self.linear` (an nn.Linear under the same name
as the task's, so the evaluator loads the reference's weights). The products go through
tl.dot(..., input_precision="ieee"): fp32 FMAs on the CUDA cores, fp32 accumulation, so the
result meets the fp32 tolerance (TF32 would not). Tiles of 128x128x32, grouped launch order
for L2 reuse, masks on every edge, bias and ReLU applied before the one store.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_bias_relu_kernel(x_ptr, w_ptr, b_ptr, y_ptr, M, N, K,
                            stride_xm, stride_xk, stride_wn, stride_wk, stride_ym, stride_yn,
                            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                            GROUP_M: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    group_size = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((pid % in_group) % group_size)
    pid_n = (pid % in_group) // group_size

    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)).to(tl.int64)
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)).to(tl.int64)
    rk = tl.arange(0, BLOCK_K)
    x_ptrs = x_ptr + rm[:, None] * stride_xm + rk[None, :] * stride_xk     # (BLOCK_M, BLOCK_K)
    w_ptrs = w_ptr + rn[None, :] * stride_wn + rk[:, None] * stride_wk     # (BLOCK_K, BLOCK_N): W.T tile
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k_ok = (k0 + rk) < K
        a = tl.load(x_ptrs, mask=(rm[:, None] < M) & k_ok[None, :], other=0.0)
        b = tl.load(w_ptrs, mask=k_ok[:, None] & (rn[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")
        x_ptrs += BLOCK_K * stride_xk
        w_ptrs += BLOCK_K * stride_wk
    bias = tl.load(b_ptr + rn, mask=rn < N, other=0.0)
    acc = acc + bias[None, :]
    acc = tl.where((acc > 0) | (acc != acc), acc, 0.0)
    y_ptrs = y_ptr + rm[:, None] * stride_ym + rn[None, :] * stride_yn
    tl.store(y_ptrs, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


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
        y = torch.empty((M, N), device=x.device, dtype=x.dtype)
        if M == 0 or N == 0:
            return y.reshape(*lead, N)
        bm, bn, bk = 128, 128, 32
        grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
        linear_bias_relu_kernel[grid](x2, w, b, y, M, N, K,
                                      x2.stride(0), x2.stride(1), w.stride(0), w.stride(1), y.stride(0), y.stride(1),
                                      BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, num_warps=8, num_stages=3)
        return y.reshape(*lead, N)
