"""Row softmax in Triton for rows of any length: an online pass (running max and rescaled
sum per lane, so the row is read once to normalise) and a write pass.

One program per row, BLOCK <= 4096 columns per step. The write pass re-reads the row, which
is recent enough to come from L2 at the suite's sizes. Rows holding only -inf stay NaN-free
in the running sums (their lanes keep a zero sum) and end as NaN, as torch.softmax does.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, y_ptr, n_cols, stride_x, stride_y, BLOCK: tl.constexpr):
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
        tl.store(y_row + start + cols, tl.exp(x - m_safe) * inv, mask=mask)


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
        block = min(triton.next_power_of_2(cols), 4096)
        softmax_kernel[(rows,)](x2, y, cols, x2.stride(0), y.stride(0), BLOCK=block,
                                num_warps=8 if block >= 2048 else 4)
        return y.reshape(shape)
