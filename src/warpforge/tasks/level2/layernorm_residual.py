import torch
import torch.nn as nn

ROWS = 256
DIM = 1024


class Model(nn.Module):
    """y = LayerNorm(x + residual): the post-norm residual add of a transformer."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor, residual: torch.Tensor) -> torch.Tensor:
        return self.norm(x + residual)


def get_inputs():
    return [torch.randn(ROWS, DIM), torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]


WARPFORGE = {
    "description": "residual add followed by layer normalisation over the last dimension",
    "sizes": {"cpu": {"ROWS": 256, "DIM": 1024}, "gpu": {"ROWS": 16384, "DIM": 4096}},
    "flops": "9*ROWS*DIM",
    "bytes": "4*(3*ROWS*DIM + 2*DIM)",
}
