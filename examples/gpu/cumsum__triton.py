"""Inclusive prefix sum along the last dimension in Triton: one program per row, blocks of up
to 2048 columns scanned with tl.cumsum, plus the running total of the blocks before.

Any row length; fp32 accumulation (a tree scan inside each block, a sequential carry between).
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def cumsum_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    carry = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + start + cols, tl.cumsum(x, axis=0) + carry, mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        if x.dim() == 0:
            return x.clone()
        x2 = x.contiguous().reshape(-1, shape[-1])
        y = torch.empty_like(x2)
        if x2.numel() == 0:
            return y.reshape(shape)
        block = min(triton.next_power_of_2(x2.shape[1]), 2048)
        cumsum_kernel[(x2.shape[0],)](x2, y, x2.shape[1], x2.stride(0), y.stride(0), BLOCK=block,
                                      num_warps=8 if block >= 2048 else 4)
        return y.reshape(shape)
