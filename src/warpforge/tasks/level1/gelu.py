import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 16
DIM = 16384


class Model(nn.Module):
    """y = GELU(x) with the exact erf form (not the tanh approximation)."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(x)


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "elementwise exact (erf) GELU",
    "sizes": {"cpu": {"BATCH": 16, "DIM": 16384}, "gpu": {"BATCH": 4096, "DIM": 16384}},
    # 0.5 * x * (1 + erf(x / sqrt(2))): erf counted as one operation
    "flops": "5*BATCH*DIM",
    "bytes": "2*4*BATCH*DIM",
}
