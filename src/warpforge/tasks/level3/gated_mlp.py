import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 128
DIM = 256
HIDDEN = 512


class Model(nn.Module):
    """SwiGLU feed-forward as in LLaMA: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, dim: int, hidden: int):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def get_inputs():
    return [torch.randn(TOKENS, DIM)]


def get_init_inputs():
    return [DIM, HIDDEN]


WARPFORGE = {
    "description": "SwiGLU gated MLP (gate, up and down projections without bias)",
    "sizes": {
        "cpu": {"TOKENS": 128, "DIM": 256, "HIDDEN": 512},
        "gpu": {"TOKENS": 4096, "DIM": 2048, "HIDDEN": 5632},
    },
    # three GEMMs plus silu and the gating multiply (about 5 operations per hidden element)
    "flops": "6*TOKENS*DIM*HIDDEN + 5*TOKENS*HIDDEN",
    "bytes": "4*(2*TOKENS*DIM + 3*DIM*HIDDEN)",
}
