import torch
import torch.nn as nn

BATCH = 8
CHANNELS = 32
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    """2x2 average pooling with stride 2."""

    def __init__(self):
        super().__init__()
        self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "2-D average pooling, 2x2 window, stride 2 (NCHW)",
    "sizes": {
        "cpu": {"BATCH": 8, "CHANNELS": 32, "HEIGHT": 64, "WIDTH": 64},
        "gpu": {"BATCH": 32, "CHANNELS": 128, "HEIGHT": 256, "WIDTH": 256},
    },
    # one add per input element, one multiply per output
    "flops": "BATCH*CHANNELS*HEIGHT*WIDTH + BATCH*CHANNELS*(HEIGHT//2)*(WIDTH//2)",
    "bytes": "4*BATCH*CHANNELS*(HEIGHT*WIDTH + (HEIGHT//2)*(WIDTH//2))",
}
