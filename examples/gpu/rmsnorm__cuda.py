"""RMSNorm as CUDA C++ through load_inline, for Hopper (sm_90a).

One 256-thread block per row: float4 loads of the row to sum the squares (fp32, warp
shuffles then shared memory across warps), then a second sweep (from L2) writing
x * rsqrt(mean(x^2) + eps) * weight. A scalar kernel serves rows whose length is not a
multiple of 4 or tensors that are not 16-byte aligned. `self.weight` has the task's name and
shape, so the evaluator loads the reference's scale into it.

Build-time choice as in gelu__cuda.py: the .cu includes only the CUDA runtime and the C++
wrapper only the ATen / c10 headers it needs.
"""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
#include <cstdint>
#include <cuda_runtime.h>

constexpr int THREADS = 256;

__device__ __forceinline__ float block_sum(float v, float* smem) {
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) smem[warp] = v;
    __syncthreads();
    if (warp == 0) {
        v = lane < THREADS / 32 ? smem[lane] : 0.f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
        if (lane == 0) smem[0] = v;
    }
    __syncthreads();
    return smem[0];
}

__global__ void __launch_bounds__(THREADS) rmsnorm_vec4_kernel(const float4* __restrict__ x, const float4* __restrict__ w,
                                                               float4* __restrict__ y, int64_t dim4, float eps) {
    __shared__ float smem[32];
    const float4* xr = x + (int64_t)blockIdx.x * dim4;
    float4* yr = y + (int64_t)blockIdx.x * dim4;
    float ss = 0.f;
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < dim4; i += THREADS) {
        float4 v = xr[i];
        ss += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
    }
    ss = block_sum(ss, smem);
    const float inv = rsqrtf(ss / (float)(4 * dim4) + eps);
#pragma unroll 4
    for (int64_t i = threadIdx.x; i < dim4; i += THREADS) {
        float4 v = xr[i], g = w[i];
        v.x = v.x * inv * g.x; v.y = v.y * inv * g.y; v.z = v.z * inv * g.z; v.w = v.w * inv * g.w;
        yr[i] = v;
    }
}

__global__ void __launch_bounds__(THREADS) rmsnorm_scalar_kernel(const float* __restrict__ x, const float* __restrict__ w,
                                                                 float* __restrict__ y, int64_t dim, float eps) {
    __shared__ float smem[32];
    const float* xr = x + (int64_t)blockIdx.x * dim;
    float* yr = y + (int64_t)blockIdx.x * dim;
    float ss = 0.f;
    for (int64_t i = threadIdx.x; i < dim; i += THREADS) { float v = xr[i]; ss += v * v; }
    ss = block_sum(ss, smem);
    const float inv = rsqrtf(ss / (float)dim + eps);
    for (int64_t i = threadIdx.x; i < dim; i += THREADS) yr[i] = xr[i] * inv * w[i];
}

cudaError_t rmsnorm_launch(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps,
                           cudaStream_t stream) {
    if (rows > 0x7fffffffLL) return cudaErrorInvalidValue;
    bool vec = dim % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(w) % 16 == 0
               && reinterpret_cast<uintptr_t>(y) % 16 == 0;
    if (vec)
        rmsnorm_vec4_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(reinterpret_cast<const float4*>(x),
            reinterpret_cast<const float4*>(w), reinterpret_cast<float4*>(y), dim / 4, eps);
    else
        rmsnorm_scalar_kernel<<<(unsigned)rows, THREADS, 0, stream>>>(x, w, y, dim, eps);
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

cudaError_t rmsnorm_launch(const float* x, const float* w, float* y, int64_t rows, int64_t dim, float eps,
                           cudaStream_t stream);

at::Tensor rmsnorm_forward(const at::Tensor& x, const at::Tensor& weight, double eps) {
    TORCH_CHECK(x.is_cuda() && weight.is_cuda(), "rmsnorm_forward: expected CUDA tensors");
    TORCH_CHECK(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat, "rmsnorm_forward: expected float32");
    TORCH_CHECK(x.dim() >= 1 && x.size(-1) == weight.numel(), "rmsnorm_forward: weight does not match the last dimension");
    const c10::cuda::CUDAGuard guard(x.device());
    at::Tensor input = x.contiguous();
    at::Tensor w = weight.contiguous();
    at::Tensor out = at::empty_like(input);
    const int64_t dim = input.size(-1);
    if (input.numel() == 0 || dim == 0) return out;
    cudaError_t err = rmsnorm_launch(input.const_data_ptr<float>(), w.const_data_ptr<float>(), out.mutable_data_ptr<float>(),
                                     input.numel() / dim, dim, static_cast<float>(eps),
                                     c10::cuda::getCurrentCUDAStream().stream());
    TORCH_CHECK(err == cudaSuccess, "rmsnorm kernel launch failed: ", cudaGetErrorString(err));
    return out;
}
"""

_ext = load_inline(
    name="wf_gpu_rmsnorm_cuda_v1",
    cpp_sources=CPP_SRC,
    cuda_sources=CUDA_SRC,
    functions=["rmsnorm_forward"],
    extra_cuda_cflags=["-O3", "-gencode=arch=compute_90a,code=sm_90a"],
    no_implicit_headers=True,
    with_pytorch_error_handling=False,
    verbose=False,
)


class ModelNew(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext.rmsnorm_forward(x, self.weight.detach(), float(self.eps))
