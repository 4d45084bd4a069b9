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
    # a random scale per row: with plain randn the mean would be ~2 for every draw, and a
    # kernel returning a constant would pass
    predictions = torch.randn(BATCH, DIM) * (2 * torch.rand(BATCH, 1))
    return [predictions, torch.randn(BATCH, DIM)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "mean squared error loss between two (BATCH, DIM) tensors (scalar output)",
    "sizes": {"cpu": {"BATCH": 128, "DIM": 4096}, "gpu": {"BATCH": 4096, "DIM": 32768}},
    # subtract, square, sum
    "flops": "3*BATCH*DIM",
    "bytes": "4*(2*BATCH*DIM + 1)",
}
