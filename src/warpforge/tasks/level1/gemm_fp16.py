import torch
import torch.nn as nn

M = 256
N = 256
K = 256


class Model(nn.Module):
    """C = A @ B in half precision (the inputs are float16, so the matmul is)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K, dtype=torch.float16), torch.randn(K, N, dtype=torch.float16)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "half-precision matrix multiply C = A @ B with float16 inputs and output",
    "sizes": {"cpu": {"M": 256, "N": 256, "K": 256}, "gpu": {"M": 4096, "N": 4096, "K": 4096}},
    "flops": "2*M*N*K",
    "bytes": "2*(M*K + K*N + M*N)",
}
