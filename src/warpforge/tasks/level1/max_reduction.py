import torch
import torch.nn as nn

BATCH = 16
DIM1 = 256
DIM2 = 256


class Model(nn.Module):
    """Maximum over the last dimension of a (BATCH, DIM1, DIM2) tensor (values only)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, DIM1, DIM2)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "max over the last dimension of a 3-D tensor",
    "sizes": {
        "cpu": {"BATCH": 16, "DIM1": 256, "DIM2": 256},
        "gpu": {"BATCH": 64, "DIM1": 2048, "DIM2": 2048},
    },
    "flops": "BATCH*DIM1*DIM2",
    "bytes": "4*(BATCH*DIM1*DIM2 + BATCH*DIM1)",
}
