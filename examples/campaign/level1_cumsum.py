"""Inclusive prefix sum along the last dimension: one Triton program per row, the whole row
(up to 8192 columns) scanned in registers with tl.cumsum in one shot, fp32 accumulation.

GPU size: (8192, 8192) fp32.  Each element is read once and written once (537 MB, ~0.2 ms at
H100 HBM speed); with 8192 programs of 8 warps (32 floats per thread, ~3 programs per SM) every
SM has ~100 KB of loads in flight.  Eager torch.cumsum on the innermost dim runs its generic
row-scan kernel, which walks each row in small sequential chunks with a block-wide scan and
carry per chunk and does not reach DRAM bandwidth; expect ~1.5-3x.  Rows longer than 8192
are scanned in 8192-wide chunks with a running carry.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _cumsum_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr,
                   SINGLE: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    if SINGLE:
        mask = cols < n_cols
        x = tl.load(x_row + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(y_row + cols, tl.cumsum(x, axis=0).to(y_ptr.dtype.element_ty), mask=mask)
    else:
        carry = tl.sum(tl.zeros([BLOCK], tl.float32), axis=0)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            x = tl.load(x_row + start + cols, mask=mask, other=0.0).to(tl.float32)
            tl.store(y_row + start + cols, (tl.cumsum(x, axis=0) + carry).to(y_ptr.dtype.element_ty),
                     mask=mask)
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
        rows, cols = x2.shape
        if rows == 0 or cols == 0:
            return y.reshape(shape)
        block = triton.next_power_of_2(cols)
        single = block <= 8192
        block = min(block, 8192)
        warps = 8 if block >= 4096 else (4 if block >= 1024 else 2)
        _cumsum_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0), BLOCK=block, SINGLE=single,
                                num_warps=warps)
        return y.reshape(shape)
