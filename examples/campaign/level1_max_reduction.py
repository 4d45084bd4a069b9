"""amax over the last dimension: each Triton program reduces a [ROWS, 2048] tile in
registers (NaN-propagating max, as torch.amax), one read of the input, one small write.

GPU size: (64, 2048, 2048) fp32 = 1.07 GB read, 0.5 MB written: ~0.36 ms at H100 HBM speed.
Programs of 4 rows x 2048 columns (8 warps, 32 floats per thread, 32768 programs) issue all
their loads up front, so each SM keeps several 32 KB tiles in flight.  Eager torch.amax runs
one reduction kernel that is already near bandwidth, so the gain is modest (~1.0-1.2x):
better memory-level parallelism and no split/vectorization heuristics.  Rows longer than the
column block are reduced in a loop with a running elementwise max.
"""
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _amax_rows_kernel(x_ptr, y_ptr, n_rows, n_cols, stride_x,
                      ROWS: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    r = pid.to(tl.int64) * ROWS + tl.arange(0, ROWS)
    mask_r = r < n_rows
    cols = tl.arange(0, BLOCK)
    acc = tl.full([ROWS, BLOCK], float("-inf"), tl.float32)
    for start in range(0, n_cols, BLOCK):
        mask = mask_r[:, None] & (start + cols < n_cols)[None, :]
        x = tl.load(x_ptr + r[:, None] * stride_x + (start + cols)[None, :], mask=mask,
                    other=float("-inf")).to(tl.float32)
        acc = tl.maximum(acc, x, propagate_nan=tl.PropagateNan.ALL)
    m = tl.max(acc, axis=1)
    # tl.max's combine ignores NaN; torch.amax propagates it
    has_nan = tl.max((acc != acc).to(tl.int32), axis=1) > 0
    m = tl.where(has_nan, float("nan"), m)
    tl.store(y_ptr + r, m.to(y_ptr.dtype.element_ty), mask=mask_r)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x2 = x.contiguous().reshape(-1, shape[-1])
        rows, cols = x2.shape
        y = torch.empty((rows,), dtype=x.dtype, device=x.device)
        if rows == 0:
            return y.reshape(shape[:-1])
        block = min(triton.next_power_of_2(cols), 2048)
        r = max(1, 8192 // block)
        r = min(r, triton.next_power_of_2(rows))
        grid = (triton.cdiv(rows, r),)
        _amax_rows_kernel[grid](x2, y, rows, cols, x2.stride(0), ROWS=r, BLOCK=block, num_warps=8)
        return y.reshape(shape[:-1])
