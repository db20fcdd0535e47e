"""What an exported training graph must reproduce, computed by PyTorch itself.

- `torch_step`: one training step in eager PyTorch (autograd), keyed by the exported graph's output
  names: `loss`, `grad.<parameter>` for the parameters that require grad, `buffer.<name>` for every
  buffer (its value after the step). In float64 by default: the reference the float32 graph is held to.
- `step_errors`: how far a graph's outputs are from that step, output by output.
- `activation_counts`: how many SiLU, Mish, GroupNorm and GroupNorm-then-SiLU the module's forward calls,
  counted at the torch.nn.functional level (independently of the exporter), so a test can say
  whether every one of them ended as an ascend.grad node.
"""

from __future__ import annotations

import copy
from collections import Counter

import numpy as np
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from ascend_grad.models.modules import _tensors


def _loss_in(dtype):
    """default_loss computed in `dtype` (default_loss itself rounds to float32)."""

    def loss(output):
        tensors = [output] if isinstance(output, torch.Tensor) else [t for t in _tensors(output) if t.is_floating_point()]
        return sum(t.to(dtype).square().mean() for t in tensors)

    return loss


def torch_step(module: torch.nn.Module, example_inputs, loss_fn=None, dtype=torch.float64) -> dict[str, np.ndarray]:
    """Loss, gradients and buffers after one step of a copy of `module` (the module is not touched),
    its floating-point parameters, buffers and inputs cast to `dtype`."""
    model = torch.nn.Module.to(copy.deepcopy(module), dtype)  # (not a subclass override: diffusers warns in its own)
    inputs = [t.to(dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t for t in example_inputs]
    loss = (loss_fn or _loss_in(dtype))(model(*inputs))
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    grads = torch.autograd.grad(loss, [p for _, p in params], allow_unused=True)
    result = {"loss": loss.detach().numpy()}
    result.update({f"grad.{n}": (torch.zeros_like(p) if g is None else g).numpy() for (n, p), g in zip(params, grads)})
    result.update({f"buffer.{n}": b.detach().numpy() for n, b in model.named_buffers()})
    return result


def step_errors(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> dict[str, float]:
    """max |got - want| / max |want| for each output of `got` (an integer output: 0 if equal, else inf).

    An output that is zero by the math (a bias whose shift the next BatchNorm removes, the running
    mean of a normalised input) has no scale of its own: its float32 value is the rounding left by
    cancelling terms of the size of the other outputs of its kind, so it is measured against the
    largest of them (gradients against the largest gradient, buffers against the largest buffer).
    """
    largest = {kind: max((float(np.abs(v).max()) for k, v in want.items() if k.startswith(kind) and v.size), default=0.0)
               for kind in ("grad.", "buffer.")}
    errors = {}
    for name, value in got.items():
        ref = want[name]
        if np.issubdtype(value.dtype, np.integer) or np.issubdtype(value.dtype, np.bool_):
            errors[name] = 0.0 if np.array_equal(value, ref) else float("inf")
            continue
        scale = float(np.abs(ref).max()) if ref.size else 0.0
        kind = next((k for k in largest if name.startswith(k)), None)
        if kind and scale < 1e-12 * largest[kind]:  # zero by the math
            scale = largest[kind]
        diff = np.abs(value.astype(np.float64) - ref).max() if ref.size else 0.0
        errors[name] = float(diff / scale) if scale else float(diff)
    return errors


class _Counter(TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()
        self.norms: list = []  # every GroupNorm output (kept alive, so identity means the same tensor)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func is F.group_norm:
            self.norms.append(result)
            self.counts["GroupNorm"] += 1  # every one, followed by a SiLU or not
        elif func is F.silu:
            self.counts["GroupNorm+SiLU" if any(args[0] is t for t in self.norms) else "SiLU"] += 1
        elif func is F.mish:
            self.counts["Mish"] += 1
        return result


def activation_counts(module: torch.nn.Module, example_inputs) -> Counter:
    """{"SiLU": n, "Mish": n, "GroupNorm+SiLU": n, "GroupNorm": n} over one forward of a copy of
    `module`; a SiLU counts as GroupNorm+SiLU when its input is a GroupNorm's output; "GroupNorm"
    counts every GroupNorm, followed by a SiLU or not."""
    counter = _Counter()
    with torch.no_grad(), counter:
        copy.deepcopy(module)(*example_inputs)
    return counter.counts
