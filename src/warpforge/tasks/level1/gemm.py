import torch
import torch.nn as nn

M = 256
N = 256
K = 256


class Model(nn.Module):
    """C = A @ B for A of shape (M, K) and B of shape (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "single-precision matrix multiply C = A @ B (square)",
    "sizes": {"cpu": {"M": 256, "N": 256, "K": 256}, "gpu": {"M": 4096, "N": 4096, "K": 4096}},
    "flops": "2*M*N*K",
    "bytes": "4*(M*K + K*N + M*N)",
}
