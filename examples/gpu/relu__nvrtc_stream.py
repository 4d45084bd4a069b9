"""ReLU through NVRTC on torch's current stream, written the way CuPy documents it, with four
patterns a static policy wrongly refused before the sandbox existed: `cupy.cuda.ExternalStream`
wrapping torch's current stream, a forward parameter named `input`, `os.makedirs` for a scratch
folder, and `ctypes` for a pointer-sized integer. Expected: correct, custom kernel.
"""
import ctypes
import os

import cupy
import numpy as np
import torch
import torch.nn as nn

_SRC = r"""
extern "C" __global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long long n) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float v = x[i];
        y[i] = (v > 0.f || v != v) ? v : 0.f;
    }
}
"""
os.makedirs(os.path.join(os.getcwd(), "build"), exist_ok=True)  # a build folder, in the candidate's own work folder
_kernel = cupy.RawModule(code=_SRC).get_function("relu_kernel")


class ModelNew(nn.Module):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input.contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        ptr_x = ctypes.c_void_p(x.data_ptr()).value  # a pointer as a C value
        stream = cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
        with stream:
            _kernel((min((n + 255) // 256, 65535 * 8),), (256,), (np.uint64(ptr_x), np.uint64(y.data_ptr()), np.int64(n)))
        return y
