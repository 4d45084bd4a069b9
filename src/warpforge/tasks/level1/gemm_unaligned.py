import torch
import torch.nn as nn

# No dimension is a multiple of 8: vectorised loads and tile edges need masking.
M = 255
N = 129
K = 193


class Model(nn.Module):
    """C = A @ B with odd sizes, A of shape (M, K) and B of shape (K, N)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "single-precision matrix multiply with sizes that are not multiples of 8",
    "sizes": {"cpu": {"M": 255, "N": 129, "K": 193}, "gpu": {"M": 3079, "N": 2053, "K": 2819}},
    "flops": "2*M*N*K",
    "bytes": "4*(M*K + K*N + M*N)",
}
