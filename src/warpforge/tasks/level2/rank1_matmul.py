import torch
import torch.nn as nn

N = 512
K = 512
M = 512


class Model(nn.Module):
    """C = outer(u, v) @ B: a rank-one matrix, built densely, times a dense matrix."""

    def __init__(self):
        super().__init__()

    def forward(self, u: torch.Tensor, v: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.outer(u, v) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(K), torch.randn(K, M)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "outer(u, v) @ B for u (N,), v (K,), B (K, M); the reference builds the dense rank-one matrix",
    "sizes": {"cpu": {"N": 512, "K": 512, "M": 512}, "gpu": {"N": 8192, "K": 8192, "M": 8192}},
    # the least work the result needs (the speed-of-light check rejects anything faster): v @ B,
    # then one multiply per output; not the reference's dense outer product and GEMM
    "flops": "2*K*M + N*M",
    "bytes": "4*(N + K + K*M + N*M)",
}
