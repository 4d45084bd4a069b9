import torch
import torch.nn as nn

BATCH = 8
M = 64
K = 128
N = 96


class Model(nn.Module):
    """C[b] = A[b] @ B[b] for a batch of independent matrix products."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


def get_inputs():
    return [torch.randn(BATCH, M, K), torch.randn(BATCH, K, N)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "batched matrix multiply of (BATCH, M, K) by (BATCH, K, N)",
    "sizes": {
        "cpu": {"BATCH": 8, "M": 64, "K": 128, "N": 96},
        "gpu": {"BATCH": 128, "M": 512, "K": 512, "N": 512},
    },
    "flops": "2*BATCH*M*N*K",
    "bytes": "4*BATCH*(M*K + K*N + M*N)",
}
