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

from ascend_grad.graph_passes._graph import close, constant_array, producer, scalar, strip
from ascend_grad.graph_passes._shapes import axes_of, count_dim, divided, same_dims, shape_of, shown


class Refuse(Exception):
    """This subgraph is not (provably) the GroupNorm + swish backward; the message says why."""


@dataclass
class GroupNormForward:
    """z = GroupNorm(x; gamma, beta, num_groups, eps). gamma and beta are what the graph reads: the
    1-D parameter itself where the spelling reads it through views (Unsqueeze, Reshape), else a
    constant holding its values in another shape (an exporter's folded copy); `per_group`: one
    value per group (GroupNormalization before opset 21)."""

    x: ir.Value
    gamma: ir.Value
    beta: ir.Value
    num_groups: int
    eps: float
    z: ir.Value | None = None
    spelling: str = ""
    per_group: bool = False
    grouped: ir.Value | None = None  # Reshape(x, (N, G, -1)) in the spellings that regroup x


def expect(node: ir.Node | None, what: str) -> ir.Node:
    if node is None:
        raise Refuse(what)
    return node


def reshape_of(value: ir.Value, rank: int) -> tuple[ir.Value, list]:
    """(input, the dims it is reshaped to) of the Reshape computing `value`, derived from the
    Reshape's input and target (_shapes), never from the output's recorded shape."""
    node = expect(producer(strip(value), "Reshape"), "a Reshape is missing")
    shape = shape_of(node.outputs[0])
    if shape is None or len(shape) != rank:
        raise Refuse(f"a Reshape to rank {rank} has a target that is not provably of that rank ({shown(shape)})")
    return strip(node.inputs[0]), shape


def grouping(x_dims: list, G: int) -> list | None:
    """(N, G, C/G * HxW): x (N, C, *spatial) regrouped by num_groups G, or None when C is not a
    known multiple of G."""
    if x_dims is None or len(x_dims) < 2 or not isinstance(x_dims[1], int) or G <= 0 or x_dims[1] % G:
        return None
    return [x_dims[0], G, divided(count_dim(x_dims[1:]), G)]


def check_grouping(groups_shape: list, x: ir.Value, G: int, what: str) -> None:
    """`groups_shape` is exactly x regrouped by G, (N, G, C/G * HxW); else Refuse with both shapes."""
    x_dims = shape_of(x)
    expected = grouping(x_dims, G)
    if expected is None:
        raise Refuse(f"{what}: x's C is not a known multiple of num_groups {G} (x is {shown(x_dims)})")
    if not same_dims(groups_shape, expected):
        raise Refuse(f"{what} regroups x {shown(x_dims)} as {shown(groups_shape)}, not (N, G, C/G * HxW) = {shown(expected)}")


def check_same_shape(shape: list | None, x: ir.Value, what: str) -> None:
    """`shape` is provably x's shape; else Refuse with both."""
    if not same_dims(shape, shape_of(x)):
        raise Refuse(f"{what} is {shown(shape)}, not x's shape {shown(shape_of(x))}")


def unsqueezed(value: ir.Value, count: int) -> ir.Value:
    """The value under `count` trailing Unsqueeze(-1)s (or one Unsqueeze of `count` trailing axes)."""
    value = strip(value)
    added = 0
    while added < count:
        node = expect(producer(value, "Unsqueeze"), "an Unsqueeze is missing")
        axes = axes_of(node)
        base_rank = len(shape_of(node.inputs[0])) if shape_of(node.inputs[0]) is not None else None
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


class NotFound(Refuse):
    """No GroupNorm computes this value at all (as opposed to one that cannot be proven)."""


_VIEWS = ("Reshape", "Unsqueeze", "Squeeze", "Flatten")


def view_base(value: ir.Value) -> ir.Value:
    """`value` under float Casts, Identity and the views that keep its elements in order."""
    value = strip(value)
    while (node := producer(value)) is not None and node.op_type in _VIEWS:
        value = strip(node.inputs[0])
    return value


def same_parameter(a: ir.Value, b: ir.Value) -> bool:
    """a and b hold the same values in the same order: views of one tensor, or constants equal by
    value (an exporter's folded copy of a parameter beside the parameter)."""
    a, b = view_base(a), view_base(b)
    if a is b:
        return True
    x, y = constant_array(a), constant_array(b)
    return x is not None and y is not None and x.size == y.size and bool(np.array_equal(x.reshape(-1), y.reshape(-1)))


def per_channel(value: ir.Value, rank: int, C: int | None, what: str) -> ir.Value:
    """The parameter that `value`, broadcast over (N, C, *spatial), gives each channel: `value` is
    (C, 1, ..., 1) with or without leading 1s. Returns the 1-D tensor under its views when there
    is one (the parameter itself), else `value` (a constant in that shape)."""
    try:  # the parameter under trailing Unsqueezes, as torch writes it
        base = unsqueezed(value, rank - 2)
        if C is not None and shape_of(base) == [C]:
            return base
    except Refuse:
        pass
    shape = shape_of(strip(value))
    if shape is None or len(shape) > rank or not all(isinstance(d, int) for d in shape):
        raise Refuse(f"{what} has no static shape")
    padded = [1] * (rank - len(shape)) + shape
    if padded[0] != 1 or any(d != 1 for d in padded[2:]) or C is None or padded[1] != C:
        raise Refuse(f"{what} of shape {shape} is not one value per channel of x (C = {C})")
    base = strip(value)
    while len(shape_of(base) or []) != 1 and (node := producer(base)) is not None and node.op_type in _VIEWS:
        base = strip(node.inputs[0])
    return base if shape_of(base) == [C] else strip(value)


def as_channels(op, value: ir.Value, forward: GroupNormForward, dtype: ir.DataType | None) -> ir.Value:
    """`value` (forward.gamma or .beta) as the 1-D (C,) tensor of `dtype` a fused node reads: the
    parameter itself when it is one, else its values as a new initializer (a folded copy in
    another shape, one value per group repeated per channel), else (not a constant) nodes that
    reshape it."""
    per_group = forward.per_group
    if per_group or len(shape_of(value) or []) != 1:
        G, C = forward.num_groups, shape_of(forward.x)[1]
        array = constant_array(value)
        if array is not None:
            array = np.repeat(array.reshape(-1), C // G) if per_group else array.reshape(-1)
            value = _initializer(forward.x.graph, f"{value.name}_per_channel", array)
        elif per_group:
            grouped = op.Reshape(value, op.Constant(value_ints=[G, 1]))
            value = op.Reshape(op.Expand(grouped, op.Constant(value_ints=[G, C // G])), op.Constant(value_ints=[C]))
        else:
            value = op.Reshape(value, op.Constant(value_ints=[-1]))
    if dtype is not None and value.dtype is not None and value.dtype != dtype:
        value = op.Cast(value, to=dtype)
    return value


def _initializer(graph: ir.Graph | None, name: str, array: np.ndarray) -> ir.Value:
    taken = graph.initializers if graph is not None else {}
    unique, k = name, 1
    while unique in taken:
        unique, k = f"{name}_{k}", k + 1
    value = ir.Value(name=unique, shape=ir.Shape(array.shape), type=ir.TensorType(ir.DataType.from_numpy(array.dtype)),
                     const_value=ir.tensor(array))
    if graph is not None:
        graph.register_initializer(value)
    return value


def recognise(z: ir.Value) -> GroupNormForward:
    """The GroupNorm computing z, in any spelling below, or Refuse (NotFound: none at all):

    - GroupNormalization (opset 18: gamma and beta per group; 21: per channel);
    - normalised groups * gamma + beta, the groups Reshape(x, (N, G, -1)) normalised by
      InstanceNormalization or LayerNormalization (unit scale, zero bias), or by their statistics
      ((g - mean) * rstd, (g - mean) / sqrt(var + eps)), reshaped back to x's shape; gamma and
      beta broadcast per channel, as views of the parameters or as folded constants.
    """
    value = strip(z)
    node = producer(value)
    if value.producer() is None:
        raise NotFound("z is an input of this graph (a saved activation): no forward GroupNorm here to prove it")
    if node is not None and node.op_type == "GroupNormalization":
        return _group_normalization(node, value)
    if node is not None and node.op_type == "Reshape" and _normalized_groups(strip(node.inputs[0])) is not None:
        raise Refuse("the GroupNorm has no affine gamma and beta (affine off)")
    if node is None or node.op_type != "Add":
        raise NotFound("z is not GroupNorm's output (no Add of beta)")
    for scaled, shifted in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
        mul = producer(strip(scaled), "Mul")
        for normalized, weight in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])) if mul else ():
            back = producer(strip(normalized), "Reshape")
            found = _normalized_groups(strip(back.inputs[0])) if back is not None else None
            if found is None and back is None:  # (N, C, L) with G == C: the regrouping kept x's shape
                found = _normalized_groups(strip(normalized))
            if found is None:
                continue
            grouped, eps, spelling = found
            x, groups_shape = reshape_of(grouped, 3)
            G, x_dims = groups_shape[1], shape_of(x)
            if not isinstance(G, int) or G <= 0:
                raise Refuse(f"the forward's group count {shown(groups_shape[1:2])} is not a constant")
            check_grouping(groups_shape, x, G, "the forward's Reshape")
            # the normalised groups back in x's layout (G == C with x (N, C, L): no Reshape back)
            check_same_shape(shape_of(back.outputs[0] if back is not None else strip(normalized)), x,
                             "the normalised groups reshaped back")
            C = x_dims[1]
            gamma = per_channel(weight, len(x_dims), C, "gamma")
            beta = per_channel(shifted, len(x_dims), C, "beta")
            return GroupNormForward(x, gamma, beta, G, eps, z=value, spelling=spelling, grouped=grouped)
    raise NotFound("z is not GroupNorm's output (normalised groups * gamma + beta)")


def _group_normalization(node: ir.Node, z: ir.Value) -> GroupNormForward:
    version = node.version or (node.graph.opset_imports.get("", 0) if node.graph is not None else 0)
    G = node.attributes.get_int("num_groups", 0)
    x, scale, bias = strip(node.inputs[0]), strip(node.inputs[1]), strip(node.inputs[2])
    x_dims = shape_of(x)
    C = x_dims[1] if x_dims is not None and len(x_dims) >= 2 and isinstance(x_dims[1], int) else None
    if node.attributes.get_int("stash_type", 1) != 1:
        raise Refuse(f"GroupNormalization computes in type {node.attributes.get_int('stash_type', 1)}, not float")
    if C is None or G <= 0 or C % G:
        raise Refuse(f"GroupNormalization's C ({C}) is unknown or not a multiple of num_groups {G}")
    per_group = version < 21  # opset 18 scales each group, 21 each channel
    expected = G if per_group else C
    for name, value in (("scale", scale), ("bias", bias)):
        if shape_of(value) != [expected]:
            raise Refuse(f"GroupNormalization-{version}'s {name} has shape {shown(shape_of(value))}, not ({expected},)")
    eps = node.attributes.get_float("epsilon", 1e-5)
    return GroupNormForward(x, scale, bias, G, eps, z=z, spelling=f"GroupNormalization-{version}",
                            per_group=per_group and G != C)


def _normalized_groups(core: ir.Value) -> tuple[ir.Value, float, str] | None:
    """(groups, eps, spelling) if `core` normalises each row of the rank-3 `groups` to zero mean
    and unit variance (biased, + eps); None if it is no normalisation; Refuse if it is one that
    differs (a scale or a bias of its own)."""
    node = producer(core)
    if node is None:
        return None
    if node.op_type in ("InstanceNormalization", "LayerNormalization"):
        groups = strip(node.inputs[0])
        if node.op_type == "LayerNormalization":
            if core is not node.outputs[0] or len(shape_of(groups) or []) != 3 or node.attributes.get_int("axis", -1) not in (2, -1):
                return None
            bias = node.inputs[2] if len(node.inputs) > 2 else None
        else:
            bias = node.inputs[2]
        if scalar(node.inputs[1]) != 1.0 or (bias is not None and scalar(bias) != 0.0):
            raise Refuse(f"the {node.op_type} has its own scale or bias")
        return groups, node.attributes.get_float("epsilon", 1e-5), node.op_type
    # the decomposition: (g - mean) * rstd, or (g - mean) / sqrt(var + eps)
    pairs = {"Mul": ((0, 1), (1, 0)), "Div": ((0, 1),)}.get(node.op_type, ())
    for i, j in pairs:
        centred = producer(strip(node.inputs[i]), "Sub")
        if centred is None:
            continue
        groups = strip(centred.inputs[0])
        try:
            if node.op_type == "Mul":
                mean_groups, eps_value = statistics(centred.inputs[1], node.inputs[j])
            else:
                root = expect(producer(strip(node.inputs[j]), "Sqrt"), "the deviations are not divided by sqrt(var + eps)")
                mean_groups = group_mean(centred.inputs[1])
                var, eps_value = _plus_eps(root.inputs[0])
                _check_variance(var, mean_groups)
        except Refuse:
            continue
        if same_groups(mean_groups, groups) and len(shape_of(groups) or []) == 3:
            return groups, float(scalar(eps_value)), "statistics"
    return None


def _rounded(number: float, like: ir.Value) -> float:
    """number as `like`'s dtype holds it (a float16 graph keeps eps = 1e-5 as 1.0014e-05)."""
    dtype = like.dtype.numpy() if like.dtype is not None else np.float32
    return float(np.array(number, dtype=np.float32).astype(dtype))


def group_mean(value: ir.Value) -> ir.Value:
    """g, if `value` is the mean of each row of the rank-3 g (N, G, M) (kept dims or not, or a view
    of it): ReduceMean, or ReduceSum divided by M."""
    value = strip(value)
    while (node := producer(value)) is not None and node.op_type in ("Squeeze", "Unsqueeze", "Reshape"):
        value = strip(node.inputs[0])
    if node is not None and node.op_type == "ReduceMean" and axes_of(node, 3) == [2]:
        return strip(node.inputs[0])
    if node is not None and node.op_type in ("Div", "Mul"):
        total = producer(strip(node.inputs[0]), "ReduceSum")
        factor = scalar(node.inputs[1])
        if total is not None and axes_of(total, 3) == [2] and factor:
            groups = strip(total.inputs[0])
            M = _row_length(groups)
            if M is not None and close(factor if node.op_type == "Div" else 1.0 / factor, M):
                return groups
    raise Refuse("a statistic is not the mean over each group")


def same_groups(a: ir.Value, b: ir.Value) -> bool:
    """a and b are one regrouping of x: the same value, or Reshapes of x to the same shape (an
    exporter that does not merge common subexpressions regroups x once per use)."""
    if a is b:
        return True
    ra, rb = producer(a, "Reshape"), producer(b, "Reshape")
    return (ra is not None and rb is not None and strip(ra.inputs[0]) is strip(rb.inputs[0])
            and same_dims(shape_of(a), shape_of(b)))


def _row_length(groups: ir.Value) -> int | None:
    """M of a (N, G, M) regrouping of x, when it is a known size."""
    shape = shape_of(groups)
    return shape[2] if shape is not None and len(shape) == 3 and isinstance(shape[2], int) else None


def _plus_eps(value: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(var, eps) from var + eps."""
    add = expect(producer(strip(value), "Add"), "no eps is added to the variance")
    for var, eps in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        if scalar(eps) is not None:
            return var, eps
    raise Refuse("no constant eps is added to the variance")


def _check_variance(var: ir.Value, groups: ir.Value) -> None:
    """var = the mean over each group of (g - mean(g))^2."""
    squares = producer(group_mean(var))
    if squares is not None and squares.op_type == "Mul" and strip(squares.inputs[0]) is strip(squares.inputs[1]):
        deviation = squares.inputs[0]
    elif squares is not None and squares.op_type == "Pow" and scalar(squares.inputs[1]) == 2.0:
        deviation = squares.inputs[0]
    else:
        raise Refuse("the variance is not the mean of squared deviations")
    centred = expect(producer(strip(deviation), "Sub"), "the deviations are not x - mean")
    if not (same_groups(strip(centred.inputs[0]), groups) and same_groups(group_mean(centred.inputs[1]), groups)):
        raise Refuse("the deviations are not taken from the group mean")


def statistics(mean: ir.Value, rstd: ir.Value) -> tuple[ir.Value, ir.Value]:
    """(g, eps) if mean and rstd are the mean and 1 / sqrt(var + eps) of each row of g (N, G, M):
    rstd as Reciprocal(Sqrt), 1 / Sqrt or Pow(., -0.5); eps the constant (its value as the graph
    holds it)."""
    groups = group_mean(mean)
    node = producer(strip(rstd))
    while node is not None and node.op_type in ("Squeeze", "Unsqueeze", "Reshape"):
        node = producer(strip(node.inputs[0]))
    if node is not None and node.op_type == "Div" and scalar(node.inputs[0]) == 1.0:
        root = expect(producer(strip(node.inputs[1]), "Sqrt"), "rstd has no Sqrt").inputs[0]
    elif node is not None and node.op_type == "Reciprocal":
        root = expect(producer(strip(node.inputs[0]), "Sqrt"), "rstd has no Sqrt").inputs[0]
    elif node is not None and node.op_type == "Pow" and scalar(node.inputs[1]) == -0.5:
        root = node.inputs[0]
    else:
        raise Refuse("rstd is not 1 / sqrt(var + eps)")
    var, eps = _plus_eps(root)
    _check_variance(var, groups)
    return groups, eps


def check_statistics(mean: ir.Value, rstd: ir.Value, forward: GroupNormForward) -> None:
    """mean = mean over each group of x; rstd = 1 / sqrt(var + eps) with the forward's eps: a
    statistics chain, or the mean and inv_std_var outputs of the forward's LayerNormalization."""
    norm = strip(mean).producer()
    if norm is not None and norm.op_type == "LayerNormalization" and forward.spelling == "LayerNormalization":
        if (strip(mean) is norm.outputs[1] and len(norm.outputs) > 2 and strip(rstd) is norm.outputs[2]
                and same_groups(strip(norm.inputs[0]), forward.grouped)
                and norm.attributes.get_float("epsilon", 1e-5) == forward.eps):
            return
        raise Refuse("mean and rstd are not the GroupNorm's LayerNormalization statistics")
    groups, eps = statistics(mean, rstd)
    x, shape = reshape_of(groups, 3)
    if x is not forward.x:
        raise Refuse("a statistic is not taken over x grouped by num_groups")
    check_grouping(shape, x, forward.num_groups, "the statistics' Reshape")
    if scalar(eps) != _rounded(forward.eps, eps):
        raise Refuse(f"rstd's eps is not the forward's ({forward.eps})")
