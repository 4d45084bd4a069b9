import torch
import torch.nn as nn

# the cpu preset is smaller than gemm.py's: CPU float16 matmul is ~20x slower than float32
M = 128
N = 128
K = 128


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
    "sizes": {"cpu": {"M": 128, "N": 128, "K": 128}, "gpu": {"M": 4096, "N": 4096, "K": 4096}},
    "flops": "2*M*N*K",
    "bytes": "2*(M*K + K*N + M*N)",
}
