import torch
import torch.nn as nn

BATCH = 16
DIM = 16384


class Model(nn.Module):
    """y = max(x, 0) elementwise."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "elementwise ReLU",
    "sizes": {"cpu": {"BATCH": 16, "DIM": 16384}, "gpu": {"BATCH": 4096, "DIM": 16384}},
    "flops": "BATCH*DIM",
    "bytes": "2*4*BATCH*DIM",
}
