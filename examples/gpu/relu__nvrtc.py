"""ReLU as raw CUDA compiled at run time by NVRTC through CuPy (cupy.RawModule).

The same kernels as relu__cuda.py without any C++ build: four float4 vectors per thread,
a scalar kernel for the tail or unaligned tensors. torch tensors are passed by their
data_ptr() (a 64-bit value CuPy hands to the kernel as the pointer); counts are 64-bit.
Kernels go to CuPy's current stream, the legacy default stream, which is ordered with
torch's default stream. NaN passes through, as torch.relu does.
"""
import cupy
import numpy as np
import torch
import torch.nn as nn

_SRC = r"""
__device__ __forceinline__ float relu1(float v) { return (v > 0.f || v != v) ? v : 0.f; }

extern "C" __global__ void __launch_bounds__(256) relu_vec4(const float4* __restrict__ x, float4* __restrict__ y,
                                                            long long n4) {
    long long base = (long long)blockIdx.x * (256 * 4) + threadIdx.x;
    float4 v[4];
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        long long i = base + k * 256LL;
        if (i < n4) v[k] = x[i];
    }
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        long long i = base + k * 256LL;
        if (i < n4) {
            float4 r = v[k];
            r.x = relu1(r.x); r.y = relu1(r.y); r.z = relu1(r.z); r.w = relu1(r.w);
            y[i] = r;
        }
    }
}

extern "C" __global__ void __launch_bounds__(256) relu_scalar(const float* __restrict__ x, float* __restrict__ y,
                                                              long long start, long long n) {
    for (long long i = start + (long long)blockIdx.x * 256 + threadIdx.x; i < n; i += (long long)gridDim.x * 256)
        y[i] = relu1(x[i]);
}
"""

_module = cupy.RawModule(code=_SRC, options=("--std=c++17",))
_relu_vec4 = _module.get_function("relu_vec4")
_relu_scalar = _module.get_function("relu_scalar")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError("relu__nvrtc needs a float32 CUDA tensor")
        x = x.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        done = 0
        if x.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0 and n >= 4:
            n4 = n // 4
            _relu_vec4(((n4 + 1023) // 1024,), (256,), (x.data_ptr(), y.data_ptr(), np.int64(n4)))
            done = 4 * n4
        if done < n:
            blocks = min((n - done + 255) // 256, 65535)
            _relu_scalar((blocks,), (256,), (x.data_ptr(), y.data_ptr(), np.int64(done), np.int64(n)))
        return y
