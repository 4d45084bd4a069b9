import torch
import torch.nn as nn

ROWS = 256
DIM = 1024


class Model(nn.Module):
    """LayerNorm over the last dimension, with a learnable scale and shift."""

    def __init__(self, dim: int):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM]


WARPFORGE = {
    "description": "layer normalisation over the last dimension of a (ROWS, DIM) tensor",
    "sizes": {"cpu": {"ROWS": 256, "DIM": 1024}, "gpu": {"ROWS": 16384, "DIM": 4096}},
    # mean, variance, normalise, scale and shift: about 8 operations per element
    "flops": "8*ROWS*DIM",
    "bytes": "4*(2*ROWS*DIM + 2*DIM)",
}
