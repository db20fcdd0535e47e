"""The forward GroupNorm (followed or not by a swish), recognised in the spellings exporters write.

    z = GroupNorm(x; gamma, beta, G, eps):  per (n, group) mean and biased variance of x,
    xhat = (x - mean) / sqrt(var + eps),  z = xhat * gamma[c] + beta[c]

torch.onnx writes it as InstanceNormalization over Reshape(x, (N, G, -1)) with unit scale and zero
bias, reshaped back, then * Unsqueeze(gamma) + Unsqueeze(beta); the mean and rstd the backward
needs are computed beside it by a statistics chain (ReduceMean, Sub, Mul or Pow, ReduceMean, Add
eps, Sqrt, Reciprocal or 1 / .). `recognise(z)` finds the GroupNorm that computes z, whatever the
spelling, or raises Refuse with the reason; `check_statistics` proves a (mean, rstd) pair is that
GroupNorm's statistics. The backward proof (_group_norm_proof) and the forward fusion
(group_norm_swish) both start here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx_ir as ir

from ascend_grad.graph_passes._graph import axes_of, dims, producer, scalar, shape_tensor_dims, strip


class Refuse(Exception):
    """This subgraph is not (provably) the GroupNorm + swish backward; the message says why."""


@dataclass
class GroupNormForward:
    x: ir.Value
    gamma: ir.Value
    beta: ir.Value
    num_groups: int
    eps: float


def expect(node: ir.Node | None, what: str) -> ir.Node:
    if node is None:
        raise Refuse(what)
    return node


def reshape_dims(node: ir.Node) -> list[int | str | None] | None:
    """What a Reshape produces: its constant target (0 copies the input's dim, -1 unknown), else
    the shape recorded on its output."""
    target = shape_tensor_dims(node.inputs[1])
    if target is not None:
        source = dims(node.inputs[0]) or []
        allowzero = node.attributes.get_int("allowzero", 0)
        out: list[int | str | None] = []
        for k, d in enumerate(target):
            if d == 0 and not allowzero:
                out.append(source[k] if k < len(source) else None)
            else:
                out.append(None if d == -1 else d)
        return out
    return dims(node.outputs[0])


def reshape_of(value: ir.Value, rank: int) -> tuple[ir.Value, list] :
    node = expect(producer(strip(value), "Reshape"), "a Reshape is missing")
    shape = reshape_dims(node)
    if shape is None or len(shape) != rank:
        raise Refuse(f"a Reshape to rank {rank} has an unknown target")
    return strip(node.inputs[0]), shape


def unsqueezed(value: ir.Value, count: int) -> ir.Value:
    """The value under `count` trailing Unsqueeze(-1)s (or one Unsqueeze of `count` trailing axes)."""
    value = strip(value)
    added = 0
    while added < count:
        node = expect(producer(value, "Unsqueeze"), "an Unsqueeze is missing")
        axes = axes_of(node)
        base_rank = len(dims(node.inputs[0]) or []) if dims(node.inputs[0]) is not None else None
        trailing = axes is not None and (all(a < 0 for a in axes) or base_rank is not None)
        if not trailing:
            raise Refuse("an Unsqueeze's axes are not constant")
        if base_rank is not None:
            axes = sorted(a if a >= 0 else a + base_rank + len(axes) for a in axes)
            if axes != list(range(base_rank, base_rank + len(axes))):
                raise Refuse(f"an Unsqueeze adds axes {axes}, not trailing ones")
        elif axes != list(range(-len(axes), 0)) and sorted(axes) != list(range(-len(axes), 0)):
            raise Refuse(f"an Unsqueeze adds axes {axes}, not trailing ones")
        added += len(axes)
        value = strip(node.inputs[0])
    if added != count:
        raise Refuse("unexpected Unsqueeze axes")
    return value


def reduced(value: ir.Value, op_type: str, axes: list[int], keepdims: int, rank: int) -> ir.Value:
    node = expect(producer(strip(value), op_type), f"a {op_type} is missing")
    if node.attributes.get_int("keepdims", 1) != keepdims:
        raise Refuse(f"a {op_type} keeps dims differently")
    if axes_of(node, rank) != axes:
        raise Refuse(f"a {op_type} reduces axes {axes_of(node, rank)}, not {axes}")
    return strip(node.inputs[0])


def recognise(z: ir.Value) -> GroupNormForward:
    """z = InstanceNormalization(Reshape(x, (N, G, -1)), 1, 0) reshaped back, * gamma + beta."""
    if strip(z).producer() is None:
        raise Refuse("z is an input of this graph (a saved activation): no forward GroupNorm here to prove it")
    add = expect(producer(strip(z), "Add"), "z is not GroupNorm's output (no Add of beta)")
    for scaled, shifted in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        mul = producer(strip(scaled), "Mul")
        beta_unsqueeze = producer(strip(shifted), "Unsqueeze")
        if mul is None or beta_unsqueeze is None:
            continue
        for normalized, weight in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])):
            gamma_unsqueeze = producer(strip(weight), "Unsqueeze")
            back = producer(strip(normalized), "Reshape")
            norm = producer(strip(back.inputs[0]), "InstanceNormalization") if back is not None else None
            if gamma_unsqueeze is None or norm is None:
                continue
            if scalar(norm.inputs[1]) != 1.0 or scalar(norm.inputs[2]) != 0.0:
                raise Refuse("the InstanceNormalization has its own scale or bias")
            x, grouped = reshape_of(norm.inputs[0], 3)
            if not isinstance(grouped[1], int) or grouped[2] is not None and dims(x) is None:
                raise Refuse("the group count of the forward reshape is not constant")
            eps = norm.attributes.get_float("epsilon", 1e-5)
            return GroupNormForward(x, strip(gamma_unsqueeze.inputs[0]), strip(beta_unsqueeze.inputs[0]), int(grouped[1]), eps)
    raise Refuse("z is not GroupNorm's output (InstanceNormalization * gamma + beta)")


def _rounded(number: float, like: ir.Value) -> float:
    """number as `like`'s dtype holds it (a float16 graph keeps eps = 1e-5 as 1.0014e-05)."""
    dtype = like.dtype.numpy() if like.dtype is not None else np.float32
    return float(np.array(number, dtype=np.float32).astype(dtype))


def _grouped_x(value: ir.Value, forward: GroupNormForward) -> ir.Value:
    """value is Reshape(x, (N, G, -1))."""
    base, shape = reshape_of(value, 3)
    if base is not forward.x or shape[1] != forward.num_groups:
        raise Refuse("a statistic is not taken over x grouped by num_groups")
    return base


def check_statistics(mean: ir.Value, rstd: ir.Value, forward: GroupNormForward) -> None:
    """mean = mean over each group of x; rstd = 1 / sqrt(var + eps) with the forward's eps."""
    _grouped_x(reduced(mean, "ReduceMean", [2], 0, 3), forward)
    node = producer(strip(rstd))
    if node is not None and node.op_type == "Div" and scalar(node.inputs[0]) == 1.0:
        root = node.inputs[1]
    elif node is not None and node.op_type == "Reciprocal":
        root = node.inputs[0]
    else:
        raise Refuse("rstd is not 1 / sqrt(var + eps)")
    add = expect(producer(strip(expect(producer(strip(root), "Sqrt"), "rstd has no Sqrt").inputs[0]), "Add"), "no eps")
    for var, eps in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        if scalar(eps) is not None and scalar(eps) == _rounded(forward.eps, eps):
            break
    else:
        raise Refuse(f"rstd's eps is not the forward's ({forward.eps})")
    squares = producer(reduced(var, "ReduceMean", [2], 0, 3))
    if squares is not None and squares.op_type == "Mul" and strip(squares.inputs[0]) is strip(squares.inputs[1]):
        deviation = squares.inputs[0]
    elif squares is not None and squares.op_type == "Pow" and scalar(squares.inputs[1]) == 2.0:
        deviation = squares.inputs[0]
    else:
        raise Refuse("the variance is not the mean of squared deviations")
    centred = expect(producer(strip(deviation), "Sub"), "the deviations are not x - mean")
    grouped = _grouped_x(centred.inputs[0], forward)
    if _grouped_x(reduced(centred.inputs[1], "ReduceMean", [2], 1, 3), forward) is not grouped:
        raise Refuse("the deviations are not taken from the group mean")
