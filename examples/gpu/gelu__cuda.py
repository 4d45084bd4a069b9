"""Exact (erf) GELU as CUDA C++ through load_inline, for Hopper (sm_90a).

y = 0.5 * x * (1 + erf(x / sqrt(2))) with the accurate erff (no fast-math), four float4
vectors per thread, a scalar kernel for the tail or unaligned tensors.

Build-time choice: the .cu file includes only the CUDA runtime (no_implicit_headers=True) and
the C++ wrapper includes only the ATen / c10 headers it uses (not torch/extension.h), which
roughly halves a cold build. Without torch's error-handling wrapper, TORCH_CHECK failures
still reach Python as RuntimeError through pybind11.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cstdint>
#include <cuda_runtime.h>

__device__ __forceinline__ float gelu1(float v) { return 0.5f * v * (1.0f + erff(v * 0.70710678118654752440f)); }

constexpr int THREADS = 256;
constexpr int VEC_PER_THREAD = 4;

__global__ void __launch_bounds__(THREADS) gelu_vec4_kernel(const float4* __restrict__ x,
                                                            float4* __restrict__ y, int64_t n4) {
    int64_t base = (int64_t)blockIdx.x * (THREADS * VEC_PER_THREAD) + threadIdx.x;
    float4 v[VEC_PER_THREAD];
#pragma unroll
    for (int k = 0; k < VEC_PER_THREAD; ++k) {
        int64_t i = base + (int64_t)k * THREADS;
        if (i < n4) v[k] = x[i];
    }
#pragma unroll
    for (int k = 0; k < VEC_PER_THREAD; ++k) {
        int64_t i = base + (int64_t)k * THREADS;
        if (i < n4) {
            float4 r = v[k];
            r.x = gelu1(r.x); r.y = gelu1(r.y); r.z = gelu1(r.z); r.w = gelu1(r.w);
            y[i] = r;
        }
    }
}

__global__ void __launch_bounds__(THREADS) gelu_scalar_kernel(const float* __restrict__ x,
                                                              float* __restrict__ y, int64_t start, int64_t n) {
    for (int64_t i = start + (int64_t)blockIdx.x * THREADS + threadIdx.x; i < n; i += (int64_t)gridDim.x * THREADS)
        y[i] = gelu1(x[i]);
}

cudaError_t gelu_launch(const float* x, float* y, int64_t n, cudaStream_t stream) {
    int64_t done = 0;
    bool aligned = (reinterpret_cast<uintptr_t>(x) % 16 == 0) && (reinterpret_cast<uintptr_t>(y) % 16 == 0);
    if (aligned) {
        int64_t n4 = n / 4;
        if (n4 > 0) {
            int64_t per_block = (int64_t)THREADS * VEC_PER_THREAD;
            int64_t blocks = (n4 + per_block - 1) / per_block;
            gelu_vec4_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(
                reinterpret_cast<const float4*>(x), reinterpret_cast<float4*>(y), n4);
            cudaError_t err = cudaGetLastError();
            if (err != cudaSuccess) return err;
        }
        done = 4 * n4;
    }
    if (done < n) {
        int64_t blocks = (n - done + THREADS - 1) / THREADS;
        if (blocks > 65535) blocks = 65535;
        gelu_scalar_kernel<<<(unsigned)blocks, THREADS, 0, stream>>>(x, y, done, n);
    }
    return cudaGetLastError();
}
"""

CPP_SRC = r"""
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty_like.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#include <torch/csrc/utils/pybind.h>

cudaError_t gelu_launch(const float* x, float* y, int64_t n, cudaStream_t stream);

at::Tensor gelu_forward(const at::Tensor& x) {
    TORCH_CHECK(x.is_cuda(), "gelu_forward: expected a CUDA tensor");
    TORCH_CHECK(x.scalar_type() == at::kFloat, "gelu_forward: expected float32");
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor input = x.contiguous();
    at::Tensor out = at::empty_like(input);
    int64_t n = input.numel();
    if (n == 0) return out;
    cudaError_t err = gelu_launch(input.const_data_ptr<float>(), out.mutable_data_ptr<float>(), n,
                                  c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "gelu kernel launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

_ext = load_inline(
    name="wf_gpu_gelu_cuda_v1",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["gelu_forward"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
    no_implicit_headers=True,
    with_pytorch_error_handling=False,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.gelu_forward(x)
