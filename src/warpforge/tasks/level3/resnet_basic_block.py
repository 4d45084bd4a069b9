import torch
import torch.nn as nn
import torch.nn.functional as F

BATCH = 2
CHANNELS = 16
HEIGHT = 32
WIDTH = 32


def _trained_batch_norm(channels: int) -> nn.BatchNorm2d:
    """A BatchNorm2d with the statistics and affine of a trained network, not the identity."""
    bn = nn.BatchNorm2d(channels)
    with torch.no_grad():
        bn.running_mean.copy_(0.2 * torch.randn(channels))
        bn.running_var.copy_(0.1 + 0.5 * torch.rand(channels))
        bn.weight.copy_(0.5 + torch.rand(channels))
        bn.bias.copy_(0.2 * torch.randn(channels))
    return bn


class Model(nn.Module):
    """ResNet basic block: relu(bn2(conv2(relu(bn1(conv1(x))))) + x), inference-mode batch norm."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = _trained_batch_norm(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = _trained_batch_norm(channels)

    @staticmethod
    def _norm(bn: nn.BatchNorm2d, y: torch.Tensor) -> torch.Tensor:
        # always the inference form (running statistics), whatever the module's train/eval mode
        return F.batch_norm(y, bn.running_mean, bn.running_var, bn.weight, bn.bias, training=False, eps=bn.eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self._norm(self.bn1, self.conv1(x)))
        y = self._norm(self.bn2, self.conv2(y))
        return torch.relu(y + x)


def get_inputs():
    return [torch.randn(BATCH, CHANNELS, HEIGHT, WIDTH)]


def get_init_inputs():
    return [CHANNELS]


WARPFORGE = {
    "description": "ResNet basic block: two 3x3 conv + batch norm layers with an identity shortcut",
    "sizes": {
        "cpu": {"BATCH": 2, "CHANNELS": 16, "HEIGHT": 32, "WIDTH": 32},
        "gpu": {"BATCH": 32, "CHANNELS": 128, "HEIGHT": 56, "WIDTH": 56},
    },
    # two convolutions, plus batch norm, ReLU and the residual add
    "flops": "2*(2*BATCH*CHANNELS*HEIGHT*WIDTH*CHANNELS*9) + 8*BATCH*CHANNELS*HEIGHT*WIDTH",
    "bytes": "4*(2*BATCH*CHANNELS*HEIGHT*WIDTH + 2*CHANNELS*CHANNELS*9 + 8*CHANNELS)",
}
