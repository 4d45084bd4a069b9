import torch
import torch.nn as nn

BATCH = 8
CHANNELS = 32
HEIGHT = 64
WIDTH = 64


class Model(nn.Module):
    """3x3 max pooling with stride 2 and padding 1 (the ResNet stem pool)."""

    def __init__(self):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return []


WARPFORGE = {
    "description": "2-D max pooling, 3x3 window, stride 2, padding 1 (NCHW)",
    "sizes": {
        "cpu": {"BATCH": 8, "CHANNELS": 32, "HEIGHT": 64, "WIDTH": 64},
        "gpu": {"BATCH": 32, "CHANNELS": 128, "HEIGHT": 224, "WIDTH": 224},
    },
    # 9 comparisons per output; output side (H - 1) // 2 + 1
    "flops": "9*BATCH*CHANNELS*((HEIGHT - 1)//2 + 1)*((WIDTH - 1)//2 + 1)",
    "bytes": "4*BATCH*CHANNELS*(HEIGHT*WIDTH + ((HEIGHT - 1)//2 + 1)*((WIDTH - 1)//2 + 1))",
}
