"""The normalisation family.

torch.onnx's translations of batch norm (onnxscript's torch_lib) export it in inference mode
whatever `training` says (normalised by the running statistics, which stay unchanged): exact for
an inference export, wrong in a training step. For a training graph these ops are left to
PyTorch's own decomposition instead (torch._decomp's native_batch_norm_helper: batch mean and
biased variance, the running statistics updated with momentum and the unbiased variance), which
the exporter then translates op by op. Eval mode (`_native_batch_norm_legit_no_training`) keeps
torch_lib's BatchNormalization. GroupNorm and LayerNorm need nothing here: their backward is
decomposed, or ours (ascend.py).
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# ops whose torch_lib translation is wrong for training: decomposed by PyTorch, never translated
DECOMPOSE = {
    aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit.default,
    aten._native_batch_norm_legit.no_stats,
    aten.native_batch_norm.default,
}

TABLE: dict = {}
