"""Sum over the middle dimension of a (B, D1, D2) tensor as raw CUDA through NVRTC (CuPy).

One thread per output element (b, j): it walks down D1 with stride D2, so a warp reads 32
neighbouring floats of one row at a time (coalesced). Eight independent accumulators keep
eight loads in flight per thread and shorten the fp32 summation chains. 128-thread blocks
spread the B*D2 outputs over every SM. Launched on CuPy's current (legacy default) stream.
"""
import cupy
import numpy as np
import torch
import torch.nn as nn

_SRC = r"""
extern "C" __global__ void __launch_bounds__(128) sum_dim1(const float* __restrict__ x, float* __restrict__ y,
                                                           long long B, long long D1, long long D2) {
    const long long idx = (long long)blockIdx.x * 128 + threadIdx.x;
    if (idx >= B * D2) return;
    const long long b = idx / D2, j = idx - b * D2;
    const float* p = x + b * D1 * D2 + j;
    float a[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) a[k] = 0.f;
    long long i = 0;
    for (; i + 8 <= D1; i += 8) {
#pragma unroll
        for (int k = 0; k < 8; ++k) a[k] += p[(i + k) * D2];
    }
    for (; i < D1; ++i) a[0] += p[i * D2];
    y[idx] = ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
"""

_module = cupy.RawModule(code=_SRC, options=("--std=c++17",))
_sum_dim1 = _module.get_function("sum_dim1")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32 or x.dim() != 3:
            raise TypeError("sum_reduction__nvrtc needs a 3-D float32 CUDA tensor")
        x = x.contiguous()
        B, D1, D2 = x.shape
        y = torch.empty((B, D2), device=x.device, dtype=x.dtype)
        total = B * D2
        if total == 0:
            return y
        if D1 == 0:
            return y.zero_()
        args = (x.data_ptr(), y.data_ptr(), np.int64(B), np.int64(D1), np.int64(D2))
        _sum_dim1(((total + 127) // 128,), (128,), args)
        return y
