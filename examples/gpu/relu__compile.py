"""ReLU through `torch.compile` inside the candidate: Inductor starts its own compile-worker and
progress threads, which a thread check wrongly refused before the sandbox existed.
Expected: correct (a PyTorch-path kernel Inductor generated).
"""
import torch
import torch.nn as nn


@torch.compile(dynamic=False)
def _relu(x: torch.Tensor) -> torch.Tensor:
    return torch.clamp_min(x, 0.0)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _relu(x)
