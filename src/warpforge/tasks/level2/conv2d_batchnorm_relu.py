import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 4
IN_CHANNELS = 16
OUT_CHANNELS = 32
HEIGHT = 32
WIDTH = 32


class Model(nn.Module):
    """3x3 convolution (no bias), inference-mode batch norm, ReLU: a CNN building block."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(in_channels, out_channels, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(out_channels)
        # statistics and affine of a trained network, so the batch norm is not the identity
        with torch.no_grad():
            self.bn.running_mean.copy_(0.2 * torch.randn(out_channels))
            self.bn.running_var.copy_(0.1 + 0.5 * torch.rand(out_channels))
            self.bn.weight.copy_(0.5 + torch.rand(out_channels))
            self.bn.bias.copy_(0.2 * torch.randn(out_channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv(x)
        # always the inference form (running statistics), whatever the module's train/eval mode
        y = F.batch_norm(y, self.bn.running_mean, self.bn.running_var, self.bn.weight, self.bn.bias,
                         training=False, eps=self.bn.eps)
        return torch.relu(y)


def get_inputs():
    return [torch.randn(BATCH, IN_CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [IN_CHANNELS, OUT_CHANNELS]


WARPFORGE = {
    "description": "3x3 conv (no bias) + inference batch norm + ReLU, foldable into one conv",
    "sizes": {
        "cpu": {"BATCH": 4, "IN_CHANNELS": 16, "OUT_CHANNELS": 32, "HEIGHT": 32, "WIDTH": 32},
        "gpu": {"BATCH": 32, "IN_CHANNELS": 64, "OUT_CHANNELS": 128, "HEIGHT": 112, "WIDTH": 112},
    },
    "flops": "2*BATCH*OUT_CHANNELS*HEIGHT*WIDTH*IN_CHANNELS*9 + 3*BATCH*OUT_CHANNELS*HEIGHT*WIDTH",
    "bytes": "4*(BATCH*IN_CHANNELS*HEIGHT*WIDTH + OUT_CHANNELS*IN_CHANNELS*9 + 4*OUT_CHANNELS"
             " + BATCH*OUT_CHANNELS*HEIGHT*WIDTH)",
}
