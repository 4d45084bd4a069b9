"""Row softmax, one Triton kernel, one DRAM read and one DRAM write per element.

GPU size: (4096, 16384) fp32, a 64 KiB row.  Each program loads its whole row into registers
once (BLOCK = 16384, 16 warps -> 32 floats per thread), takes max, exp, sum and writes
exp(x - max) * (1 / sum): 2 * 4 * 4096 * 16384 = 537 MB of traffic, ~0.2 ms at H100 HBM speed.
Eager torch.softmax at dim=16384 cannot keep a 64 KiB row in its (48 KiB default) shared-memory
path, so it falls back to the multi-pass kernel that reads each row two to three times (the
later passes partly from L2); the one-read kernel should win by ~1.1-1.4x.  Rows longer than
16384 columns take an online (running max / rescaled sum) pass plus a write pass.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _softmax_row_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # whole row in registers: read once, write once
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride_x + cols, mask=mask, other=float("-inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    inv = 1.0 / tl.sum(e, axis=0)
    tl.store(y_ptr + row * stride_y + cols, (e * inv).to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _softmax_online_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
    # rows too long for registers: online max/sum pass, then a normalise-and-write pass
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * stride_x
    y_row = y_ptr + row * stride_y
    cols = tl.arange(0, BLOCK)
    m_vec = tl.full([BLOCK], float("-inf"), tl.float32)
    l_vec = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        m_new = tl.maximum(m_vec, x)
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_vec = l_vec * tl.exp(m_vec - safe) + tl.exp(x - safe)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    inv = 1.0 / tl.sum(l_vec * tl.exp(m_vec - m_safe), axis=0)
    for start in range(0, n_cols, BLOCK):
        mask = start + cols < n_cols
        x = tl.load(x_row + start + cols, mask=mask, other=float("-inf")).to(tl.float32)
        tl.store(y_row + start + cols, (tl.exp(x - m) * inv).to(y_ptr.dtype.element_ty), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.contiguous().reshape(-1, shape[-1])
        y = torch.empty_like(x2)
        rows, cols = x2.shape
        if rows == 0 or cols == 0:
            return y.reshape(shape)
        block = triton.next_power_of_2(cols)
        if block <= 16384:
            if block >= 16384:
                warps = 16
            elif block >= 4096:
                warps = 8
            elif block >= 1024:
                warps = 4
            else:
                warps = 2
            _softmax_row_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0), BLOCK=block,
                                         num_warps=warps)
        else:
            _softmax_online_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0), BLOCK=4096,
                                            num_warps=8)
        return y.reshape(shape)
