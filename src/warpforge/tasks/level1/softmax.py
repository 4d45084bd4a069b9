import torch
import torch.nn as nn

BATCH = 64
DIM = 4096


class Model(nn.Module):
    """Softmax over the last dimension of a (BATCH, DIM) tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "row-wise softmax over the last dimension",
    "sizes": {"cpu": {"BATCH": 64, "DIM": 4096}, "gpu": {"BATCH": 4096, "DIM": 16384}},
    # max, subtract, exp, sum, divide per element
    "flops": "5*BATCH*DIM",
    "bytes": "2*4*BATCH*DIM",
}
