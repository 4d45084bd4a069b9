import torch
import torch.nn as nn

BATCH = 128
DIM = 4096


class Model(nn.Module):
    """Inclusive prefix sum along the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "inclusive prefix sum (scan) along the last dimension",
    "sizes": {"cpu": {"BATCH": 128, "DIM": 4096}, "gpu": {"BATCH": 8192, "DIM": 8192}},
    "flops": "BATCH*DIM",
    "bytes": "2*4*BATCH*DIM",
}
