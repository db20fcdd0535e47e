"""The pooling and resampling family: the backward of avg/max/adaptive pools and of upsampling that
torch.onnx (torch 2.13) cannot export, or exports slowly through torch's decompositions."""

from __future__ import annotations

TABLE: dict = {}
