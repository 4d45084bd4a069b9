import math

import torch
import torch.nn as nn

BATCH = 2
SEQ = 64
EMBED = 128
HEADS = 4


class Model(nn.Module):
    """Causal multi-head self-attention with q/k/v/out projections (with bias)."""

    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.heads = heads
        self.q_proj = nn.Linear(embed, embed)
        self.k_proj = nn.Linear(embed, embed)
        self.v_proj = nn.Linear(embed, embed)
        self.out_proj = nn.Linear(embed, embed)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, embed = x.shape
        head_dim = embed // self.heads

        def split_heads(t: torch.Tensor) -> torch.Tensor:
            return t.view(batch, seq, self.heads, head_dim).transpose(1, 2)

        q, k, v = split_heads(self.q_proj(x)), split_heads(self.k_proj(x)), split_heads(self.v_proj(x))
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        context = (probs @ v).transpose(1, 2).reshape(batch, seq, embed)
        return self.out_proj(context)


def get_inputs():
    return [torch.randn(BATCH, SEQ, EMBED)]


def get_init_inputs():
    return [EMBED, HEADS]


WARPFORGE = {
    "description": "causal multi-head self-attention: q/k/v projections, masked softmax, output projection",
    "sizes": {
        "cpu": {"BATCH": 2, "SEQ": 64, "EMBED": 128, "HEADS": 4},
        "gpu": {"BATCH": 4, "SEQ": 2048, "EMBED": 1024, "HEADS": 16},
    },
    # four projections plus Q @ K.T and P @ V counted in full (a causal kernel can skip half)
    "flops": "8*BATCH*SEQ*EMBED*EMBED + 4*BATCH*SEQ*SEQ*EMBED",
    "bytes": "4*(2*BATCH*SEQ*EMBED + 4*EMBED*EMBED + 4*EMBED)",
}
