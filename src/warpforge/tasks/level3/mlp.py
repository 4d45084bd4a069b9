import torch
import torch.nn as nn

BATCH = 64
IN_FEATURES = 256
HIDDEN = 512
OUT_FEATURES = 128


class Model(nn.Module):
    """Three-layer MLP: linear, ReLU, linear, ReLU, linear (all with bias)."""

    def __init__(self, in_features: int, hidden: int, out_features: int):
        super().__init__()
        self.layers = nn.Sequential(
            nn.Linear(in_features, hidden),
            nn.ReLU(),
            nn.Linear(hidden, hidden),
            nn.ReLU(),
            nn.Linear(hidden, out_features),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, HIDDEN, OUT_FEATURES]


WARPFORGE = {
    "description": "three-layer MLP with ReLU activations",
    "sizes": {
        "cpu": {"BATCH": 64, "IN_FEATURES": 256, "HIDDEN": 512, "OUT_FEATURES": 128},
        "gpu": {"BATCH": 4096, "IN_FEATURES": 1024, "HIDDEN": 4096, "OUT_FEATURES": 1024},
    },
    "flops": "2*BATCH*(IN_FEATURES*HIDDEN + HIDDEN*HIDDEN + HIDDEN*OUT_FEATURES)",
    "bytes": "4*(BATCH*IN_FEATURES + IN_FEATURES*HIDDEN + HIDDEN*HIDDEN + HIDDEN*OUT_FEATURES"
             " + 2*HIDDEN + OUT_FEATURES + BATCH*OUT_FEATURES)",
}
