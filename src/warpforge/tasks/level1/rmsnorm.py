import torch
import torch.nn as nn

ROWS = 256
DIM = 1024


class Model(nn.Module):
    """RMSNorm: x / sqrt(mean(x^2) + eps) * weight, over the last dimension."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        # not all ones, so a kernel that drops the scale is caught
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        inv_rms = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return x * inv_rms * self.weight


def get_inputs():
    return [torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM, 1e-6]


WARPFORGE = {
    "description": "RMS normalisation over the last dimension with a learnable scale",
    "sizes": {"cpu": {"ROWS": 256, "DIM": 1024}, "gpu": {"ROWS": 16384, "DIM": 4096}},
    # square, sum, normalise, scale
    "flops": "4*ROWS*DIM",
    "bytes": "4*(2*ROWS*DIM + DIM)",
}
