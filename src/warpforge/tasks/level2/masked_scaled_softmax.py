import torch
import torch.nn as nn

BATCH = 2
HEADS = 4
SEQ = 128


class Model(nn.Module):
    """Attention probabilities: softmax(scale * scores) with a causal mask over the last two dims."""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        seq = scores.shape[-1]
        future = torch.ones(seq, seq, dtype=torch.bool, device=scores.device).triu(1)
        return torch.softmax((scores * self.scale).masked_fill(future, float("-inf")), dim=-1)


def get_inputs():
    return [torch.randn(BATCH, HEADS, SEQ, SEQ)]


def get_init_inputs():
    return [0.125]


WARPFORGE = {
    "description": "scale, causal mask and softmax of (BATCH, HEADS, SEQ, SEQ) attention scores",
    "sizes": {"cpu": {"BATCH": 2, "HEADS": 4, "SEQ": 128}, "gpu": {"BATCH": 4, "HEADS": 16, "SEQ": 2048}},
    # scale, mask, then softmax's max, subtract, exp, sum, divide
    "flops": "7*BATCH*HEADS*SEQ*SEQ",
    "bytes": "2*4*BATCH*HEADS*SEQ*SEQ",
}
