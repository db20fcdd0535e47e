"""The PyTorch modules whose training graphs the graph pass is tested on.

Each is small (a few thousand parameters) so the exported graphs can be committed; each uses one of
the activations whose backward the pass fuses.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class SiluMLP(nn.Module):
    """Linear -> SiLU -> Linear (LLaMA-style MLP, YOLO heads)."""

    def __init__(self, width: int = 16, hidden: int = 32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(F.silu(self.fc1(x)))


class MishMLP(nn.Module):
    """Linear -> Mish -> Linear (YOLOv4-style CSP blocks)."""

    def __init__(self, width: int = 16, hidden: int = 32):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)

    def forward(self, x):
        return self.fc2(F.mish(self.fc1(x)))


class SwishMLP(nn.Module):
    """Linear -> hand-written swish x * sigmoid(b x) -> Linear; b = 1 is SiLU written out."""

    def __init__(self, width: int = 16, hidden: int = 32, beta: float = 1.0):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, hidden), nn.Linear(hidden, width)
        self.beta = beta

    def forward(self, x):
        h = self.fc1(x)
        return self.fc2(h * torch.sigmoid(h) if self.beta == 1.0 else h * torch.sigmoid(self.beta * h))


class ResBlock(nn.Module):
    """The core of a diffusion-UNet ResBlock: Conv -> GroupNorm(32) -> SiLU -> Conv."""

    def __init__(self, channels: int = 4, hidden: int = 64, groups: int = 32):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, hidden, 3, padding=1)
        self.norm = nn.GroupNorm(groups, hidden)
        self.conv2 = nn.Conv2d(hidden, channels, 3, padding=1)

    def forward(self, x):
        return self.conv2(F.silu(self.norm(self.conv1(x))))


class GroupNormSwishBlock(nn.Module):
    """Conv -> GroupNorm -> hand-written swish x * sigmoid(b x) -> Conv."""

    def __init__(self, channels: int = 4, hidden: int = 32, groups: int = 8, beta: float = 1.0):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, hidden, 3, padding=1)
        self.norm = nn.GroupNorm(groups, hidden)
        self.conv2 = nn.Conv2d(hidden, channels, 3, padding=1)
        self.beta = beta

    def forward(self, x):
        z = self.norm(self.conv1(x))
        return self.conv2(z * torch.sigmoid(z) if self.beta == 1.0 else z * torch.sigmoid(self.beta * z))


def default_loss(output):
    return output.float().square().mean()
