import torch
import torch.nn as nn

M = 1024
K = 1024


class Model(nn.Module):
    """y = A @ x for a matrix A of shape (M, K) and a column vector x of shape (K, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, x)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, 1)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "matrix-vector product y = A @ x (memory-bound GEMV)",
    "sizes": {"cpu": {"M": 1024, "K": 1024}, "gpu": {"M": 8192, "K": 16384}},
    "flops": "2*M*K",
    "bytes": "4*(M*K + K + M)",
}
