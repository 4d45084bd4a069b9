import torch
import torch.nn as nn

BATCH = 128
IN_FEATURES = 256
OUT_FEATURES = 256


class Model(nn.Module):
    """y = relu(x @ W.T + b): a linear layer followed by ReLU."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


WARPFORGE = {
    "description": "linear layer (GEMM + bias) followed by ReLU",
    "sizes": {
        "cpu": {"BATCH": 128, "IN_FEATURES": 256, "OUT_FEATURES": 256},
        "gpu": {"BATCH": 4096, "IN_FEATURES": 4096, "OUT_FEATURES": 4096},
    },
    "flops": "2*BATCH*IN_FEATURES*OUT_FEATURES + 2*BATCH*OUT_FEATURES",
    "bytes": "4*(BATCH*IN_FEATURES + IN_FEATURES*OUT_FEATURES + OUT_FEATURES + BATCH*OUT_FEATURES)",
}
