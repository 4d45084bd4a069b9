import torch
import torch.nn as nn

ROWS = 256
DIM = 1024


class Model(nn.Module):
    """Fused add + RMSNorm as in LLM decoders: returns (rmsnorm(x + residual), x + residual)."""

    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        # not all ones, so a kernel that drops the scale is caught
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x: torch.Tensor, residual: torch.Tensor):
        hidden = x + residual
        inv_rms = torch.rsqrt(hidden.pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return hidden * inv_rms * self.weight, hidden


def get_inputs():
    return [torch.randn(ROWS, DIM), torch.randn(ROWS, DIM)]


def get_init_inputs():
    return [DIM, 1e-6]


WARPFORGE = {
    "description": "residual add + RMSNorm returning both the normalised and the summed tensor",
    "sizes": {"cpu": {"ROWS": 256, "DIM": 1024}, "gpu": {"ROWS": 16384, "DIM": 4096}},
    "flops": "5*ROWS*DIM",
    "bytes": "4*(4*ROWS*DIM + DIM)",
}
