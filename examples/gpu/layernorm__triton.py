"""LayerNorm over the last dimension in Triton: mean, then the centred variance, then
normalise with the module's own weight and bias (kept as `self.norm`, an nn.LayerNorm,
so the evaluator loads the reference's parameters into it).

One program per row, BLOCK <= 4096 columns per step, any row length; the centred two-pass
variance avoids the cancellation of E[x^2] - E[x]^2. Later passes re-read the row from L2.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layernorm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, n_cols, stride_x, stride_y, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        acc += tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(acc, axis=0) / n_cols
    acc = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / n_cols + eps)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + start + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        n = self.norm.normalized_shape[-1]
        x2 = x.contiguous().reshape(-1, n)
        y = torch.empty_like(x2)
        if x2.numel() == 0:
            return y.reshape(shape)
        w = self.norm.weight.detach().contiguous()
        b = self.norm.bias.detach().contiguous()
        block = min(triton.next_power_of_2(n), 4096)
        layernorm_kernel[(x2.shape[0],)](x2, w, b, y, n, x2.stride(0), y.stride(0), float(self.norm.eps),
                                         BLOCK=block, num_warps=8 if block >= 2048 else 4)
        return y.reshape(shape)
