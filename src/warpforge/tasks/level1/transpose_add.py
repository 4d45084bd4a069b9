import torch
import torch.nn as nn

N = 512
M = 1024


class Model(nn.Module):
    """C = A + B.T for A of shape (N, M) and B of shape (M, N): one operand read transposed."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return A + B.t()


def get_inputs():
    return [torch.randn(N, M), torch.randn(M, N)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "elementwise add of a matrix and a transposed matrix (strided memory access)",
    "sizes": {"cpu": {"N": 512, "M": 1024}, "gpu": {"N": 8192, "M": 8192}},
    "flops": "N*M",
    "bytes": "3*4*N*M",
}
