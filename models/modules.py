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
    """The mean of the output's squares, in float; for a structured output (tuple, dict, dataclass
    such as diffusers' UNet2DOutput), the sum of that over its floating-point tensors."""
    if isinstance(output, torch.Tensor):
        return output.float().square().mean()
    tensors = [t for t in _tensors(output) if t.is_floating_point()]
    if not tensors:
        raise TypeError(f"default_loss: the module's output ({type(output).__name__}) holds no floating-point tensor")
    return sum(t.float().square().mean() for t in tensors)


def _tensors(output) -> list:
    import dataclasses

    from torch.utils._pytree import tree_leaves

    if dataclasses.is_dataclass(output) and not isinstance(output, type):
        return _tensors([getattr(output, f.name) for f in dataclasses.fields(output)])
    return [t for t in tree_leaves(output) if isinstance(t, torch.Tensor)]


# ---- CNN building blocks of real detectors and classifiers (YOLO, EfficientNet), small: the shapes
# the exporter must handle (strided and depthwise convs, BatchNorm in train mode, pools, upsampling)


class ConvBNAct(nn.Sequential):
    """Conv (any stride, groups) -> BatchNorm -> SiLU or Mish: YOLOv5/v8's Conv, YOLOv4's CBM."""

    def __init__(self, c_in: int, c_out: int, k: int = 3, stride: int = 1, groups: int = 1, act: str = "silu"):
        super().__init__(nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(c_out),
                         nn.SiLU(inplace=True) if act == "silu" else nn.Mish())


class MBConv(nn.Module):
    """EfficientNet's inverted bottleneck: 1x1 expand, depthwise k x k (stride), squeeze-excitation
    (adaptive average pool, SiLU, sigmoid gate), 1x1 project; a residual when the shape allows."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1, expand: int = 4, k: int = 3):
        super().__init__()
        hidden = c_in * expand
        self.expand = ConvBNAct(c_in, hidden, 1)
        self.depthwise = ConvBNAct(hidden, hidden, k, stride, groups=hidden)
        self.squeeze, self.excite = nn.Conv2d(hidden, max(1, c_in // 4), 1), nn.Conv2d(max(1, c_in // 4), hidden, 1)
        self.project = nn.Sequential(nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out))
        self.residual = stride == 1 and c_in == c_out

    def forward(self, x):
        h = self.depthwise(self.expand(x))
        gate = torch.sigmoid(self.excite(F.silu(self.squeeze(F.adaptive_avg_pool2d(h, 1)))))
        y = self.project(h * gate)
        return x + y if self.residual else y


class CSPMish(nn.Module):
    """YOLOv4's CSP stage: a stride-2 CBM, two branches (one through Mish residual bottlenecks), concat, CBM."""

    def __init__(self, c_in: int, c_out: int, blocks: int = 1):
        super().__init__()
        half = c_out // 2
        self.down = ConvBNAct(c_in, c_out, 3, 2, act="mish")
        self.split1, self.split2 = ConvBNAct(c_out, half, 1, act="mish"), ConvBNAct(c_out, half, 1, act="mish")
        self.blocks = nn.ModuleList(nn.Sequential(ConvBNAct(half, half, 1, act="mish"), ConvBNAct(half, half, 3, act="mish"))
                                    for _ in range(blocks))
        self.merge = ConvBNAct(2 * half, c_out, 1, act="mish")

    def forward(self, x):
        x = self.down(x)
        a, b = self.split1(x), self.split2(x)
        for block in self.blocks:
            b = b + block(b)
        return self.merge(torch.cat([a, b], 1))


class SPPF(nn.Module):
    """YOLOv5's spatial pyramid pooling (fast): three chained 5x5 stride-1 max pools, concatenated."""

    def __init__(self, c_in: int, c_out: int):
        super().__init__()
        self.reduce, self.pool, self.merge = ConvBNAct(c_in, c_in // 2, 1), nn.MaxPool2d(5, 1, 2), ConvBNAct(2 * c_in, c_out, 1)

    def forward(self, x):
        x = self.reduce(x)
        y1 = self.pool(x)
        y2 = self.pool(y1)
        return self.merge(torch.cat([x, y1, y2, self.pool(y2)], 1))


class TinyDetector(nn.Module):
    """A detector-style network: a CSP/Mish and MBConv backbone with BatchNorm, SPPF, a PAN neck
    (nearest upsampling + concat, stride-2 conv + concat) and two 1x1 heads. Input (N, 3, 32k, 32k)."""

    def __init__(self, width: int = 16, outputs: int = 8):
        super().__init__()
        w = width
        self.stem = ConvBNAct(3, w, 3, 2)  # /2
        self.stage1 = CSPMish(w, 2 * w)  # /4
        self.stage2 = MBConv(2 * w, 4 * w, stride=2)  # /8
        self.stage3 = nn.Sequential(MBConv(4 * w, 4 * w), ConvBNAct(4 * w, 8 * w, 3, 2))  # /16
        self.sppf = SPPF(8 * w, 8 * w)
        self.up = nn.Upsample(scale_factor=2, mode="nearest")
        self.lateral = ConvBNAct(12 * w, 4 * w, 1)
        self.down = ConvBNAct(4 * w, 4 * w, 3, 2)
        self.fuse = ConvBNAct(12 * w, 8 * w, 3)
        self.head_small, self.head_large = nn.Conv2d(4 * w, outputs, 1), nn.Conv2d(8 * w, outputs, 1)

    def forward(self, x):
        p3 = self.stage2(self.stage1(self.stem(x)))
        p4 = self.sppf(self.stage3(p3))
        n3 = self.lateral(torch.cat([self.up(p4), p3], 1))
        n4 = self.fuse(torch.cat([self.down(n3), p4], 1))
        return self.head_small(n3), self.head_large(n4)


class TinyClassifier(nn.Module):
    """EfficientNet-style classifier: stem, MBConvs, average pooling (2x2 then adaptive to 1), Linear."""

    def __init__(self, width: int = 16, classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(ConvBNAct(3, width, 3, 2), MBConv(width, width), MBConv(width, 2 * width, 2, k=5),
                                      nn.AvgPool2d(2), ConvBNAct(2 * width, 4 * width, 1))
        self.pool, self.fc = nn.AdaptiveAvgPool2d(1), nn.Linear(4 * width, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


# ---- real models from their library (diffusers: a test dependency, imported only here), small
# configs with the library's default block types, attention included


def diffusers_unet():
    """diffusers' UNet2DModel with one block of each of its default block types: a ResNet down block
    (a stride-2 conv after it), an attention down block, the mid block with attention, an attention
    up block (nearest upsampling and a conv after it) and a ResNet up block; 32/64 channels, one
    ResNet per block, 32 groups (G == C in the 32-channel blocks). The default config repeats the
    attention blocks three times over 32/32/64/64 channels: the same spellings, twice the nodes and
    twice the export time. Inputs: sample (N, 3, 16, 16), timestep (N,) int64."""
    import diffusers

    return diffusers.UNet2DModel(sample_size=16, in_channels=3, out_channels=3, layers_per_block=1,
                                 block_out_channels=(32, 64), down_block_types=("DownBlock2D", "AttnDownBlock2D"),
                                 up_block_types=("AttnUpBlock2D", "UpBlock2D"))


def diffusers_vae():
    """diffusers' AutoencoderKL with two down/up blocks (a stride-2 conv after an asymmetric pad,
    nearest upsampling) and its attention mid blocks, 32 groups. Input: sample (N, 3, 16, 16)."""
    import diffusers

    return diffusers.AutoencoderKL(in_channels=3, out_channels=3, latent_channels=4, layers_per_block=1,
                                   block_out_channels=(32, 64), down_block_types=("DownEncoderBlock2D",) * 2,
                                   up_block_types=("UpDecoderBlock2D",) * 2, sample_size=16)


# the models the tests and `ascend-grad bench models` run: name -> (factory, example inputs for a batch of n)
REAL_MODELS = {
    "unet": (diffusers_unet, lambda n: (torch.randn(n, 3, 16, 16), torch.arange(n) * 97 % 1000)),
    "vae": (diffusers_vae, lambda n: (torch.randn(n, 3, 16, 16),)),
    "detector": (TinyDetector, lambda n: (torch.randn(n, 3, 64, 64),)),
    "classifier": (TinyClassifier, lambda n: (torch.randn(n, 3, 32, 32),)),
}
