import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
IN_CHANNELS = 8
OUT_CHANNELS = 32
HEIGHT = 32
WIDTH = 32
GROUPS = 8


class Model(nn.Module):
    """3x3 convolution with bias, group normalisation, exact GELU."""

    def __init__(self, in_channels: int, out_channels: int, groups: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1)
        self.norm = nn.GroupNorm(groups, out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, GROUPS]


WARPFORGE = {
    "description": "3x3 conv + GroupNorm + exact GELU (a diffusion U-Net block)",
    "sizes": {
        "cpu": {"BATCH": 4, "IN_CHANNELS": 8, "OUT_CHANNELS": 32, "HEIGHT": 32, "WIDTH": 32, "GROUPS": 8},
        "gpu": {"BATCH": 32, "IN_CHANNELS": 64, "OUT_CHANNELS": 128, "HEIGHT": 128, "WIDTH": 128,
                "GROUPS": 32},
    },
    # conv with bias, then about 8 operations per element for the norm and 5 for the GELU
    "flops": "2*BATCH*OUT_CHANNELS*HEIGHT*WIDTH*IN_CHANNELS*9 + 14*BATCH*OUT_CHANNELS*HEIGHT*WIDTH",
    "bytes": "4*(BATCH*IN_CHANNELS*HEIGHT*WIDTH + OUT_CHANNELS*IN_CHANNELS*9 + 3*OUT_CHANNELS"
             " + BATCH*OUT_CHANNELS*HEIGHT*WIDTH)",
}
