import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 128
DIM = 4096


class Model(nn.Module):
    """Mean squared error between predictions and targets (scalar output)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(predictions, targets)


def get_inputs():
    # predictions near their targets, off by a noise level drawn once per draw: the loss
    # changes from draw to draw (a constant cannot pass), and computing p*p - 2*p*t + t*t
    # instead of (p - t)**2 loses precision
    targets = torch.randn(BATCH, DIM)
    noise_level = 0.05 + 0.95 * torch.rand(1)
    return [targets + noise_level * torch.randn(BATCH, DIM), targets]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "mean squared error loss between two (BATCH, DIM) tensors (scalar output)",
    "sizes": {"cpu": {"BATCH": 128, "DIM": 4096}, "gpu": {"BATCH": 4096, "DIM": 32768}},
    # subtract, square, sum
    "flops": "3*BATCH*DIM",
    "bytes": "4*(2*BATCH*DIM + 1)",
}
