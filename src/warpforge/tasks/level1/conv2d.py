import torch
import torch.nn as nn

BATCH = 4
IN_CHANNELS = 16
OUT_CHANNELS = 32
HEIGHT = 32
WIDTH = 32
KERNEL = 3


class Model(nn.Module):
    """2-D convolution, stride 1 with 'same' zero padding, with bias."""

    def __init__(self, in_channels: int, out_channels: int, kernel: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, kernel, padding=kernel // 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS, KERNEL]


WARPFORGE = {
    "description": "3x3 2-D convolution with bias, stride 1, same padding (NCHW)",
    "sizes": {
        "cpu": {"BATCH": 4, "IN_CHANNELS": 16, "OUT_CHANNELS": 32, "HEIGHT": 32, "WIDTH": 32, "KERNEL": 3},
        "gpu": {"BATCH": 32, "IN_CHANNELS": 64, "OUT_CHANNELS": 128, "HEIGHT": 128, "WIDTH": 128, "KERNEL": 3},
    },
    "flops": "2*BATCH*OUT_CHANNELS*HEIGHT*WIDTH*IN_CHANNELS*KERNEL*KERNEL",
    "bytes": "4*(BATCH*IN_CHANNELS*HEIGHT*WIDTH + OUT_CHANNELS*IN_CHANNELS*KERNEL*KERNEL + OUT_CHANNELS"
             " + BATCH*OUT_CHANNELS*HEIGHT*WIDTH)",
}
