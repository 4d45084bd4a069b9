import torch
import torch.nn as nn

N = 512
M = 512


class Model(nn.Module):
    """C = diag(A) @ B: row i of B scaled by A[i], written as a dense matmul."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.diag(A) @ B


def get_inputs():
    return [torch.randn(N), torch.randn(N, M)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "diag(A) @ B for A of shape (N,) and B of shape (N, M); the reference builds the dense diagonal",
    "sizes": {"cpu": {"N": 512, "M": 512}, "gpu": {"N": 4096, "M": 4096}},
    # the work the result needs (one multiply per output), not the 2*N*N*M of the dense reference
    "flops": "N*M",
    "bytes": "4*(N + 2*N*M)",
}
