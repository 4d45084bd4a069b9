import math

import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
SEQ = 64
EMBED = 128
HEADS = 4


class Model(nn.Module):
    """Pre-norm transformer block: x + attn(ln1(x)), then h + mlp(ln2(h)); causal attention, GELU MLP."""

    def __init__(self, embed: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(embed)
        self.qkv_proj = nn.Linear(embed, 3 * embed)
        self.out_proj = nn.Linear(embed, embed)
        self.ln2 = nn.LayerNorm(embed)
        self.fc_in = nn.Linear(embed, 4 * embed)
        self.fc_out = nn.Linear(4 * embed, embed)

    def attention(self, x: torch.Tensor) -> torch.Tensor:
        batch, seq, embed = x.shape
        head_dim = embed // self.heads
        qkv = self.qkv_proj(x).view(batch, seq, 3, self.heads, head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        scores = q @ k.transpose(-2, -1) / math.sqrt(head_dim)
        future = torch.ones(seq, seq, dtype=torch.bool, device=x.device).triu(1)
        probs = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1)
        return self.out_proj((probs @ v).transpose(1, 2).reshape(batch, seq, embed))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.ln1(x))
        return h + self.fc_out(F.gelu(self.fc_in(self.ln2(h))))


def get_inputs():
    return [torch.randn(BATCH, SEQ, EMBED)]


def get_init_inputs():
    return [EMBED, HEADS]


WARPFORGE = {
    "description": "pre-norm transformer block: LayerNorm, causal self-attention, LayerNorm, 4x GELU MLP",
    "sizes": {
        "cpu": {"BATCH": 2, "SEQ": 64, "EMBED": 128, "HEADS": 4},
        "gpu": {"BATCH": 4, "SEQ": 1024, "EMBED": 1024, "HEADS": 16},
    },
    # projections (8*E^2 per token), full attention matmuls, MLP (16*E^2 per token)
    "flops": "24*BATCH*SEQ*EMBED*EMBED + 4*BATCH*SEQ*SEQ*EMBED",
    "bytes": "4*(2*BATCH*SEQ*EMBED + 12*EMBED*EMBED + 13*EMBED)",
}
