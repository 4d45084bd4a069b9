"""Scale + causal mask + softmax of attention scores in one Triton kernel that reads only the
unmasked (lower-triangle) half of the scores.

GPU size: (4, 16, 2048, 2048) fp32 = 1.07 GB of scores.  Eager runs four passes with
materialised intermediates: scores*scale (read 1.07 GB, write 1.07 GB), masked_fill (read
1.07 GB + mask, write 1.07 GB), softmax (read >= 1.07 GB, write 1.07 GB): >= 6.4 GB plus the
triu mask build.  Here one program handles one query row i: it loads only columns j <= i
(masked loads issue no DRAM traffic for j > i, whose values cannot affect the result because
masked_fill replaces them), scales, takes max/exp/sum in registers, and writes the whole row
(zeros above the diagonal): ~0.54 GB read + 1.07 GB written, ~4x less traffic than eager, so
~3.5-4x faster at H100 bandwidth.  Rows whose unmasked scores are all -inf give NaN, as in
the reference.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _causal_softmax_kernel(x_ptr, y_ptr, n_q, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    q = row % n_q  # query index inside its (n_q, n_cols) matrix
    cols = tl.arange(0, BLOCK)
    in_row = cols < n_cols
    keep = in_row & (cols <= q)
    # load bound rounded up to a multiple of 4 so the compiler can prove 4-wide mask constancy
    # and keep 128-bit vector loads; the extra (at most 3) masked lanes are reset below
    lim = tl.minimum((q // 4 + 1) * 4, n_cols)
    x = tl.load(x_ptr + row * n_cols + cols, mask=cols < lim, other=0.0).to(tl.float32)
    s = tl.where(keep, x * scale, float("-inf"))
    m = tl.max(s, axis=0)
    e = tl.exp(s - m)
    inv = 1.0 / tl.sum(e, axis=0)
    tl.store(y_ptr + row * n_cols + cols, (e * inv).to(y_ptr.dtype.element_ty), mask=in_row)


@triton.jit
def _causal_softmax_long_kernel(x_ptr, y_ptr, n_q, n_cols, scale, BLOCK: tl.constexpr):
    # long rows: online max/sum over the unmasked prefix, then write the whole row
    row = tl.program_id(0).to(tl.int64)
    q = row % n_q
    x_row = x_ptr + row * n_cols
    y_row = y_ptr + row * n_cols
    cols = tl.arange(0, BLOCK)
    n_keep = tl.minimum(q + 1, n_cols)
    m_vec = tl.full([BLOCK], float("-inf"), tl.float32)
    l_vec = tl.zeros([BLOCK], tl.float32)
    for start in range(0, n_keep, BLOCK):
        keep = start + cols < n_keep
        x = tl.load(x_row + start + cols, mask=keep, other=0.0).to(tl.float32)
        s = tl.where(keep, x * scale, float("-inf"))
        m_new = tl.maximum(m_vec, s)
        safe = tl.where(m_new == float("-inf"), 0.0, m_new)
        l_vec = l_vec * tl.exp(m_vec - safe) + tl.exp(s - safe)
        m_vec = m_new
    m = tl.max(m_vec, axis=0)
    m_safe = tl.where(m == float("-inf"), 0.0, m)
    inv = 1.0 / tl.sum(l_vec * tl.exp(m_vec - m_safe), axis=0)
    for start in range(0, n_cols, BLOCK):
        in_row = start + cols < n_cols
        keep = start + cols < n_keep
        x = tl.load(x_row + start + cols, mask=keep, other=0.0).to(tl.float32)
        s = tl.where(keep, x * scale, float("-inf"))
        tl.store(y_row + start + cols, (tl.exp(s - m) * inv).to(y_ptr.dtype.element_ty), mask=in_row)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        shape = scores.shape
        n_cols = shape[-1]
        n_q = shape[-2]
        x = scores.contiguous()
        y = torch.empty_like(x)
        rows = x.numel() // n_cols if n_cols > 0 else 0
        if rows == 0:
            return y
        block = triton.next_power_of_2(n_cols)
        if block <= 8192:
            warps = 8 if block >= 4096 else (4 if block >= 1024 else 2)
            _causal_softmax_kernel[(rows,)](x, y, n_q, n_cols, float(self.scale), BLOCK=block,
                                            num_warps=warps)
        else:
            _causal_softmax_long_kernel[(rows,)](x, y, n_q, n_cols, float(self.scale), BLOCK=4096,
                                                 num_warps=8)
        return y
