import torch
import torch.nn as nn

BATCH = 256
IN_FEATURES = 512
OUT_FEATURES = 1024


class Model(nn.Module):
    """y = sum over features of (x @ W.T + b): a linear layer followed by a row sum (as in
    KernelBench's level-2 GEMM + reduction chains)."""

    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]


WARPFORGE = {
    "description": "linear layer followed by a sum over its outputs; the sum commutes with the GEMM",
    "sizes": {
        "cpu": {"BATCH": 256, "IN_FEATURES": 512, "OUT_FEATURES": 1024},
        "gpu": {"BATCH": 8192, "IN_FEATURES": 4096, "OUT_FEATURES": 8192},
    },
    # the least work the result needs (the speed-of-light check rejects anything faster): every
    # weight read once and summed, one dot product per row; not the reference's GEMM
    "flops": "IN_FEATURES*OUT_FEATURES + 2*BATCH*IN_FEATURES",
    "bytes": "4*(BATCH*IN_FEATURES + IN_FEATURES*OUT_FEATURES + OUT_FEATURES + BATCH)",
}
