"""ReLU as a plain PyTorch rewrite (the `torch` compile path): one clamp, no custom kernel.

It is the honest yardstick for the relu exploits (tests/fixtures/gpu_exploits/*side_stream*.py compare
their time with this one).
"""
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.clamp_min(x, 0.0)
