import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 256
CLASSES = 1000


class Model(nn.Module):
    """Mean cross-entropy of (BATCH, CLASSES) logits against int64 class targets."""

    def __init__(self):
        super().__init__()

    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets)


def get_inputs():
    # one random temperature per draw: the mean over many rows is otherwise almost the same
    # number for every draw, and a kernel returning a constant could pass
    temperature = 0.5 + 3.5 * torch.rand(1)
    logits = torch.randn(BATCH, CLASSES) * temperature
    targets = torch.randint(0, CLASSES, (BATCH,), dtype=torch.long)
    return [logits, targets]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "mean cross-entropy loss of logits against int64 class targets (scalar output)",
    "sizes": {"cpu": {"BATCH": 256, "CLASSES": 1000}, "gpu": {"BATCH": 4096, "CLASSES": 32000}},
    # max, subtract, exp, sum per logit
    "flops": "4*BATCH*CLASSES",
    "bytes": "4*BATCH*CLASSES + 8*BATCH + 4",
}
