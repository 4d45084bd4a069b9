"""Row softmax as raw CUDA compiled by NVRTC through CuPy (cupy.RawModule).

One 512-thread block per row, rows of any length. Pass 1 keeps an online (max, rescaled sum)
pair per thread over float4 loads, merged across the block with warp shuffles and shared
memory; pass 2 re-reads the row (from L2) and writes exp(x - max) / sum with the accurate
expf. Lanes that have seen only -inf keep a zero sum, so the merge never makes NaN from
(-inf) - (-inf); an all -inf row ends as NaN, as torch.softmax gives.
Launched on CuPy's current stream, the legacy default stream (ordered with torch's).
"""
import cupy
import numpy as np
import torch
import torch.nn as nn

_SRC = r"""
#define NEG_INF __int_as_float(0xff800000)
#define THREADS 512

__device__ __forceinline__ void merge(float& m, float& s, float m2, float s2) {
    float mn = fmaxf(m, m2);
    if (mn == NEG_INF) return;                        // both empty so far
    float a = (m == NEG_INF) ? 0.f : s * expf(m - mn);
    float b = (m2 == NEG_INF) ? 0.f : s2 * expf(m2 - mn);
    m = mn;
    s = a + b;
}

__device__ __forceinline__ void push(float& m, float& s, float v) { merge(m, s, v, 1.f); }

extern "C" __global__ void __launch_bounds__(THREADS) softmax_rows(const float* __restrict__ x, float* __restrict__ y,
                                                                  long long n_cols, int vec4) {
    __shared__ float sm_m[THREADS / 32], sm_s[THREADS / 32];
    const long long row = blockIdx.x;
    const float* xr = x + row * n_cols;
    float* yr = y + row * n_cols;
    float m = NEG_INF, s = 0.f;
    if (vec4) {
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        const long long n4 = n_cols / 4;
        for (long long i = threadIdx.x; i < n4; i += THREADS) {
            float4 v = xr4[i];
            float mv = fmaxf(fmaxf(v.x, v.y), fmaxf(v.z, v.w));
            if (mv == NEG_INF) continue;
            float sv = expf(v.x - mv) + expf(v.y - mv) + expf(v.z - mv) + expf(v.w - mv);
            merge(m, s, mv, sv);
        }
    } else {
        for (long long i = threadIdx.x; i < n_cols; i += THREADS) push(m, s, xr[i]);
    }
    // block-wide merge of the (max, sum) pairs
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) {
        float m2 = __shfl_xor_sync(0xffffffffu, m, off);
        float s2 = __shfl_xor_sync(0xffffffffu, s, off);
        merge(m, s, m2, s2);
    }
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    if (lane == 0) { sm_m[warp] = m; sm_s[warp] = s; }
    __syncthreads();
    if (warp == 0) {
        m = lane < THREADS / 32 ? sm_m[lane] : NEG_INF;
        s = lane < THREADS / 32 ? sm_s[lane] : 0.f;
#pragma unroll
        for (int off = 16; off > 0; off >>= 1) {
            float m2 = __shfl_xor_sync(0xffffffffu, m, off);
            float s2 = __shfl_xor_sync(0xffffffffu, s, off);
            merge(m, s, m2, s2);
        }
        if (lane == 0) { sm_m[0] = m; sm_s[0] = s; }
    }
    __syncthreads();
    const float row_max = sm_m[0];
    const float inv = 1.f / sm_s[0];
    if (vec4) {
        const float4* xr4 = reinterpret_cast<const float4*>(xr);
        float4* yr4 = reinterpret_cast<float4*>(yr);
        const long long n4 = n_cols / 4;
        for (long long i = threadIdx.x; i < n4; i += THREADS) {
            float4 v = xr4[i];
            v.x = expf(v.x - row_max) * inv; v.y = expf(v.y - row_max) * inv;
            v.z = expf(v.z - row_max) * inv; v.w = expf(v.w - row_max) * inv;
            yr4[i] = v;
        }
    } else {
        for (long long i = threadIdx.x; i < n_cols; i += THREADS) yr[i] = expf(xr[i] - row_max) * inv;
    }
}
"""

_module = cupy.RawModule(code=_SRC, options=("--std=c++17",))
_softmax_rows = _module.get_function("softmax_rows")


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not x.is_cuda or x.dtype != torch.float32:
            raise TypeError("softmax__nvrtc needs a float32 CUDA tensor")
        shape = x.shape
        x2 = x.contiguous().reshape(-1, shape[-1])
        y = torch.empty_like(x2)
        rows, cols = x2.shape
        if rows == 0 or cols == 0:
            return y.reshape(shape)
        if rows > 2**31 - 1:
            raise ValueError("too many rows for one launch")
        vec4 = cols % 4 == 0 and x2.data_ptr() % 16 == 0 and y.data_ptr() % 16 == 0
        _softmax_rows((rows,), (512,), (x2.data_ptr(), y.data_ptr(), np.int64(cols), np.int32(vec4)))
        return y.reshape(shape)
