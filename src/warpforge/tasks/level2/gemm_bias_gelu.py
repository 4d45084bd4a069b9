import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 128
IN_FEATURES = 256
OUT_FEATURES = 512


class Model(nn.Module):
    """y = gelu(x @ W.T + b) with the exact (erf) GELU: an MLP up-projection."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


WARPFORGE = {
    "description": "linear layer (GEMM + bias) followed by exact GELU",
    "sizes": {
        "cpu": {"BATCH": 128, "IN_FEATURES": 256, "OUT_FEATURES": 512},
        "gpu": {"BATCH": 2048, "IN_FEATURES": 2048, "OUT_FEATURES": 8192},
    },
    # GEMM, bias add, and about 5 operations for the GELU
    "flops": "2*BATCH*IN_FEATURES*OUT_FEATURES + 6*BATCH*OUT_FEATURES",
    "bytes": "4*(BATCH*IN_FEATURES + IN_FEATURES*OUT_FEATURES + OUT_FEATURES + BATCH*OUT_FEATURES)",
}
