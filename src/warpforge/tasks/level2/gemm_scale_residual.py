import torch
import torch.nn as nn

BATCH = 128
DIM = 256


class Model(nn.Module):
    """y = x + scale * (x @ W.T + b): a scaled linear branch added back onto its input."""

    def __init__(self, dim: int, scale: float):
        super().__init__()
        self.linear = nn.Linear(dim, dim)
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.scale * self.linear(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, 0.5]


WARPFORGE = {
    "description": "square linear layer, scaled, plus a residual connection from the input",
    "sizes": {"cpu": {"BATCH": 128, "DIM": 256}, "gpu": {"BATCH": 4096, "DIM": 4096}},
    "flops": "2*BATCH*DIM*DIM + 3*BATCH*DIM",
    "bytes": "4*(2*BATCH*DIM + DIM*DIM + DIM)",
}
