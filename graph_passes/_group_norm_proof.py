"""Proof that a subgraph is the backward of GroupNorm followed by a swish, as torch writes it.

torch's native_group_norm_backward decomposition (torch._decomp), which every PyTorch export route
produces, computes from g = dy * swish'(z), the GroupNorm input x and its statistics:

    ds = sum_hw(g * x),  db = sum_hw(g)                          per (n, c)
    ds_val = sum_{c in group}(ds * gamma), db_val likewise       per (n, group)
    c1 = rstd * gamma,  c2 = (db_val * mean - ds_val) * rstd^3 * s,  c3 = -c2 * mean - db_val * rstd * s
    dx = g * c1 + x * c2 + c3                                    s = 1 / (C/G * HxW)
    dgamma = sum_n((ds - db * mean) * rstd),  dbeta = sum_n(db)

with the forward z = GroupNorm(x) and its statistics recognised by _group_norm_forward. Each piece
of the backward is checked: shapes and
axes from the Reshape and reduction constants, the elementwise parts as polynomials (so operand
order and association do not matter), constants by value. GroupNormSwishGrad recomputes z from
x, mean, rstd, gamma and beta, so it is the same math only when mean and rstd are x's statistics
with the forward's G and eps: that is checked too.
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from ascend_grad.graph_passes._algebra import Algebra, Poly, TooBig
from ascend_grad.graph_passes._graph import close, producer, scalar, strip, users, users_through_casts
from ascend_grad.graph_passes._group_norm_forward import (
    GroupNormForward, Refuse, check_grouping, check_same_shape, check_statistics, expect, per_channel, recognise, reduced,
    reshape_of, same_groups, same_parameter, unsqueezed,
)
from ascend_grad.graph_passes._shapes import axes_of, count_dim, same_dims, shape_of, shown
from ascend_grad.graph_passes._swish import Activation, match_swish_backward, quick_gelu_grad


@dataclass
class GroupNormBackward:
    dy: ir.Value
    mean: ir.Value
    rstd: ir.Value
    x: ir.Value
    gamma: ir.Value
    beta: ir.Value
    num_groups: int
    swish_scale: float
    dx: ir.Value
    dgamma: ir.Value | None  # None: the graph does not compute it
    dbeta: ir.Value | None
    forward: GroupNormForward


def _poly(value: ir.Value, stop=()) -> tuple[Algebra, Poly]:
    algebra = Algebra(stop=stop)
    try:
        return algebra, algebra.poly(value)
    except TooBig as error:
        raise Refuse(f"not a small polynomial ({error})") from None


def prove(g: ir.Value, swish: Activation) -> GroupNormBackward:
    """The GroupNorm + swish backward whose swish part computes g (raises Refuse)."""
    forward = recognise(swish.x)
    x, G = forward.x, forward.num_groups
    x_dims = shape_of(x)
    if x_dims is None or len(x_dims) < 3:
        raise Refuse("x's rank is unknown or below 3")
    rank = len(x_dims)
    N, C, HxW = x_dims[0], x_dims[1], count_dim(x_dims[2:])
    if not isinstance(HxW, int):
        raise Refuse(f"x's spatial size {shown(x_dims[2:])} is not static (torch's backward divides by it as a constant)")
    cpg = C // G  # (recognise proved C a multiple of G)

    # g's three uses: g * x (for ds), g grouped by channel (for db), g grouped by (group, channel)
    ds = db = g4 = None
    # (for x of rank 3, (N, C, HxW) already, the exporter reduces g and g * x without a Reshape)
    for node in users_through_casts(g):
        if node.op_type == "Mul" and any(strip(v) is x for v in node.inputs):
            for user in users(node.outputs[0]):
                if user.op_type == "Reshape":
                    ds = _channel_sum(user, [N, C, HxW])
                elif rank == 3 and _sums_hw(user):
                    ds = user.outputs[0]
        elif rank == 3 and _sums_hw(node):
            db = node.outputs[0]
        elif node.op_type == "Reshape":
            shape = shape_of(node.outputs[0])
            if shape is not None and len(shape) == 3:
                db = _channel_sum(node, [N, C, HxW])
            elif shape is not None and len(shape) == 4:
                g4, g4_shape = node.outputs[0], shape
    if ds is None or db is None or g4 is None:
        raise Refuse("g is not read as torch's native_group_norm_backward reads it (sums per (n, c) over "
                     f"(N, C, HxW) = {shown([N, C, HxW])}, and g grouped)")
    if not same_dims(g4_shape, [N, G, cpg, HxW]):
        raise Refuse(f"dx's grouping of g {shown(g4_shape)} is not (N, G, C/G, HxW) = {shown([N, G, cpg, HxW])} (num_groups {G})")

    dx_pre, dx = _dx_root(g4)
    check_same_shape(shape_of(dx), x, "dx reshaped back")
    terms = _dx_terms(dx_pre, g4, forward, g4_shape)
    c1, c2, c3 = (unsqueezed(terms[0], 1), unsqueezed(terms[1], 2), unsqueezed(terms[2], 2))
    mean, rstd, db_val, ds_val = _coefficients(c2, c3, 1.0 / (HxW * cpg))
    _check_c1(c1, rstd, forward, G, cpg)
    _check_group_sum(db_val, db, forward, [N, G, cpg])
    _check_group_sum(ds_val, ds, forward, [N, G, cpg])
    check_statistics(mean, rstd, forward)
    dgamma = _dgamma(ds, db, mean, rstd, [N, G, cpg])
    dbeta = next((u.outputs[0] for u in users(db) if u.op_type == "ReduceSum" and axes_of(u, 2) == [0]
                  and u.attributes.get_int("keepdims", 1) == 0 and shape_of(u.outputs[0]) == [C]), None)
    return GroupNormBackward(swish.dy, mean, rstd, x, forward.gamma, forward.beta, G, swish.scale, dx, dgamma, dbeta, forward)


def _channel_sum(reshape: ir.Node, channels: list) -> ir.Value | None:
    """ReduceSum over the last axis of Reshape(., (N, C, HxW)) (`channels`, x's dims grouped so)."""
    if not same_dims(shape_of(reshape.outputs[0]), channels):
        return None
    for user in users(reshape.outputs[0]):
        if _sums_hw(user):
            return user.outputs[0]
    return None


def _sums_hw(node: ir.Node) -> bool:
    """ReduceSum of an (N, C, HxW) tensor over HxW, dropping that axis."""
    return node.op_type == "ReduceSum" and axes_of(node, 3) == [2] and node.attributes.get_int("keepdims", 1) == 0


def _dx_root(g4: ir.Value) -> tuple[ir.Value, ir.Value]:
    """Follow g4 * c1 up through the Adds to the Reshape back to x's shape: (the sum, dx)."""
    current = None
    for node in users(g4):
        if node.op_type == "Mul":
            current = node.outputs[0]
    if current is None:
        raise Refuse("g grouped is not multiplied by c1")
    while True:
        following = users(current)
        if len(following) != 1:
            raise Refuse("dx's partial sums have other uses")
        node = following[0]
        if node.op_type == "Add":
            current = node.outputs[0]
        elif node.op_type == "Reshape":
            return current, node.outputs[0]
        else:
            raise Refuse(f"dx's sum ends in a {node.op_type}")


def _dx_terms(dx_pre: ir.Value, g4: ir.Value, forward: GroupNormForward, g4_shape) -> tuple[ir.Value, ir.Value, ir.Value]:
    """dx before the reshape = g4 * C1 + X4 * C2 + C3: returns C1, C2, C3."""
    algebra, poly = _poly(dx_pre, stop=[g4])
    gi = algebra.atom("value", strip(g4))
    if len(poly) != 3 or any(c != 1.0 for c in poly.values()):
        raise Refuse("dx is not g * c1 + x * c2 + c3")
    c1 = c2 = c3 = None
    for monomial in poly:
        atoms = [i for i, p in monomial if p == 1]
        if len(atoms) != len(monomial):
            raise Refuse("dx has a squared term")
        if gi in atoms and len(atoms) == 2:
            c1 = algebra.atoms[atoms[1 - atoms.index(gi)]][1]
        elif len(atoms) == 2:
            first, second = (algebra.atoms[i][1] for i in atoms)
            for x4, coefficient in ((first, second), (second, first)):
                if producer(strip(x4), "Reshape") is not None and reshape_of(x4, 4)[0] is forward.x:
                    if not same_dims(reshape_of(x4, 4)[1], g4_shape):
                        raise Refuse(f"x and g are grouped differently: {shown(reshape_of(x4, 4)[1])} and {shown(g4_shape)}")
                    c2 = coefficient
        elif len(atoms) == 1:
            c3 = algebra.atoms[atoms[0]][1]
    if c1 is None or c2 is None or c3 is None:
        raise Refuse("dx is not g * c1 + x * c2 + c3")
    return c1, c2, c3


def _coefficients(c2: ir.Value, c3: ir.Value, s: float) -> tuple[ir.Value, ir.Value, ir.Value, ir.Value]:
    """From c2 = s db_val mean rstd^3 - s ds_val rstd^3 and c3 = -c2 mean - s db_val rstd: the
    values mean, rstd, db_val, ds_val."""
    a2, p2 = _poly(c2)
    a3, p3 = _poly(c3)
    if len(p2) != 2 or len(p3) != 3:
        raise Refuse("c2 or c3 is not torch's formula")
    cubed = {i for m in p2 for i, p in m if p == 3}
    if len(cubed) != 1:
        raise Refuse("c2 has no rstd^3")
    (rstd_i,) = cubed
    three = next(m for m in p2 if len(m) == 3)
    two = next(m for m in p2 if len(m) == 2)
    if not (close(p2[three], s) and close(p2[two], -s)):
        raise Refuse(f"c2's factor is not 1 / (C/G * HxW) = {s}")
    ds_val = a2.atoms[next(i for i, _ in two if i != rstd_i)][1]
    others = [a2.atoms[i][1] for i, _ in three if i != rstd_i]
    rstd = a2.atoms[rstd_i][1]
    # in c3 the mean is the one squared
    for mean, db_val in ((others[0], others[1]), (others[1], others[0])):
        m, r, d, v = (a3.atom("value", strip(t)) for t in (mean, rstd, db_val, ds_val))
        expected = Poly({tuple(sorted(((d, 1), (m, 2), (r, 3)))): -s, tuple(sorted(((v, 1), (m, 1), (r, 3)))): s,
                         tuple(sorted(((d, 1), (r, 1)))): -s})
        if p3.keys() == expected.keys() and all(close(p3[k], expected[k]) for k in p3):
            return strip(mean), strip(rstd), strip(db_val), strip(ds_val)
    raise Refuse("c3 is not -c2 * mean - db_val * rstd / (C/G * HxW)")


def _times_gamma(factors: list[ir.Value], coefficient: float, forward: GroupNormForward, layout: list[int]) -> bool:
    """coefficient * prod(factors) is gamma laid out as `layout` (after leading 1s): one factor that
    holds gamma's values (a view of the parameter, or a folded copy), or - where gamma is a
    constant of one repeated value k, as a fresh GroupNorm's ones folded by an exporter - no
    factor and the coefficient k (the algebra takes such a constant for the number it holds)."""
    if not factors:
        return scalar(forward.gamma) is not None and coefficient == scalar(forward.gamma)
    if len(factors) != 1 or coefficient != 1.0:
        return False
    shape, k = shape_of(strip(factors[0])), len(layout)
    return (shape is not None and len(shape) >= k and shape[len(shape) - k:] == layout and all(d == 1 for d in shape[:len(shape) - k])
            and same_parameter(factors[0], forward.gamma))


def _check_c1(c1: ir.Value, rstd: ir.Value, forward: GroupNormForward, G: int, cpg: int) -> None:
    """c1 = Unsqueeze(rstd, -1) * gamma grouped (1, G, C/G) (a Reshape of gamma or a folded copy)."""
    algebra, poly = _poly(c1)
    if len(poly) != 1:
        raise Refuse("c1 is not rstd * gamma")
    ((monomial, coefficient),) = poly.items()
    values = [algebra.atoms[i][1] for i, power in monomial if power == 1]
    if len(values) != len(monomial):
        raise Refuse("c1 is not rstd * gamma")
    for per_group in values:
        if producer(strip(per_group), "Unsqueeze") is not None and unsqueezed(per_group, 1) is rstd:
            others = [v for v in values if v is not per_group]
            if not _times_gamma(others, coefficient, forward, [G, cpg]):
                raise Refuse("c1 does not use gamma grouped by num_groups")
            return
    raise Refuse("c1 is not rstd * gamma")


def _check_group_sum(value: ir.Value, per_channel: ir.Value, forward: GroupNormForward, channels: list) -> None:
    """value = sum over each group's channels of per_channel * Unsqueeze(gamma, 0); `channels`:
    per_channel's (N, C) grouped, (N, G, C/G)."""
    product, shape = reshape_of(reduced(value, "ReduceSum", [2], 0, 3), 3)
    if not same_dims(shape, channels):
        raise Refuse(f"a per-group sum is grouped as {shown(shape)}, not (N, G, C/G) = {shown(channels)}")
    algebra, poly = _poly(product, stop=[per_channel])
    target = algebra.atom("value", strip(per_channel))
    if len(poly) != 1:
        raise Refuse("a per-group sum is not of ds * gamma or db * gamma")
    ((monomial, coefficient),) = poly.items()
    if (target, 1) not in monomial:
        raise Refuse("a per-group sum is not of ds * gamma or db * gamma")
    others = [algebra.atoms[i][1] for i, power in monomial if i != target for _ in range(power)]
    if not _times_gamma(others, coefficient, forward, [channels[1] * channels[2]]):
        raise Refuse("a per-group sum is not weighted by gamma")


def _dgamma(ds, db, mean, rstd, channels: list) -> ir.Value | None:
    """dgamma = Reshape(sum_n((ds - db * mean) * rstd), (C,)), ds and db grouped (N, G, C/G) (`channels`)."""
    for reshape in users(ds):
        if reshape.op_type != "Reshape" or not same_dims(shape_of(reshape.outputs[0]), channels):
            continue
        for sub in users(reshape.outputs[0]):
            for mul in users(sub.outputs[0]):
                for total in users(mul.outputs[0]):
                    if total.op_type != "ReduceSum" or axes_of(total, 3) != [0] or total.attributes.get_int("keepdims", 1):
                        continue
                    ds3 = reshape.outputs[0]
                    algebra, poly = _poly(mul.outputs[0], stop=[ds3])
                    if _is_dgamma_sum(algebra, poly, ds3, db, mean, rstd):
                        result = total.outputs[0]  # (G, C/G)
                        flat = [u for u in users(result) if u.op_type == "Reshape"]
                        C = channels[1] * channels[2]
                        if len(flat) == 1 and len(users(result)) == 1 and shape_of(flat[0].outputs[0]) == [C]:
                            return flat[0].outputs[0]
                        return None  # not provably (C,): the decomposed dgamma stays
    return None


def _is_dgamma_sum(algebra: Algebra, poly: Poly, ds3, db, mean, rstd) -> bool:
    """poly == ds3 * r - db3 * m * r, where r = Unsqueeze(rstd, -1), m = Unsqueeze(mean, -1), db3 = db grouped."""
    if len(poly) != 2:
        return False
    d = algebra.atom("value", strip(ds3))
    for monomial, c in poly.items():
        values = [algebra.atoms[i][1] for i, _ in monomial]
        if c == 1.0 and len(monomial) == 2 and d in [i for i, _ in monomial]:
            r = values[1 - [i for i, _ in monomial].index(d)]
            if _safe_unsqueezed(r) is not rstd:
                return False
        elif c == -1.0 and len(monomial) == 3:
            bases = {id(_safe_unsqueezed(v)) for v in values}
            grouped = [v for v in values if producer(strip(v), "Reshape") is not None]
            if id(mean) not in bases or id(rstd) not in bases or len(grouped) != 1:
                return False
            if strip(producer(strip(grouped[0]), "Reshape").inputs[0]) is not db:
                return False
        else:
            return False
    return True


def _safe_unsqueezed(value: ir.Value) -> ir.Value | None:
    try:
        return unsqueezed(value, 1)
    except Refuse:
        return None


def prove_layer_norm_grad(grad: ir.Node) -> tuple[GroupNormBackward, Activation]:
    """The GroupNorm + swish backward around com.microsoft.LayerNormalizationGrad, as
    onnxruntime-training builds it from the forward LayerNormalization(Reshape(x, (N, G, -1)),
    ones, zeros, axis=2) (how models/ort_training respells torch's InstanceNormalization):

        g = dy * swish'(z)                 (QuickGeluGrad, or written out)
        dxr, _, _ = LayerNormalizationGrad(Reshape(g * gamma', (N, G, -1)), xr, ones, mean, inv_std_var)
        dx = Reshape(dxr, x's shape),  dgamma = sum_{n, hw}(g * xhat),  dbeta = sum_{n, hw}(g)

    LayerNormalizationGrad with unit scale is the normalisation's backward over each row: with
    h = g * gamma per channel it gives rstd * (h - mean(h) - xhat * mean(h * xhat)), GroupNorm's dx.
    mean and inv_std_var are the forward LayerNormalization's own outputs (N, G, 1)."""
    axis = grad.attributes.get_int("axis", -1)
    dy_grouped, xr, scale, mean, rstd = (grad.inputs[k] if k < len(grad.inputs) else None for k in range(5))
    if None in (dy_grouped, xr, scale, mean, rstd) or len(shape_of(xr) or []) != 3 or axis not in (2, -1):
        raise Refuse("LayerNormalizationGrad does not normalise rows of a (N, G, M) tensor")
    if scalar(scale) != 1.0:
        raise Refuse("LayerNormalizationGrad has a scale of its own")
    norm = producer(strip(mean), "LayerNormalization")
    if norm is None or mean.producer() is not norm or rstd.producer() is not norm or mean.index() != 1 or rstd.index() != 2:
        raise Refuse("mean and inv_std_var are not the forward LayerNormalization's")
    if strip(norm.inputs[0]) is not strip(xr) or norm.attributes.get_float("epsilon", 1e-5) != grad.attributes.get_float("epsilon", 1e-5):
        raise Refuse("the forward LayerNormalization normalises another tensor or with another eps")
    weighted, rows = reshape_of(dy_grouped, 3)
    product = expect(producer(weighted, "Mul"), "the rows' gradient is not g * gamma")
    for g, weight in ((product.inputs[0], product.inputs[1]), (product.inputs[1], product.inputs[0])):
        g = strip(g)
        swish = quick_gelu_grad(g) or match_swish_backward(g)
        if not isinstance(swish, Activation):
            continue
        forward = recognise(swish.x)
        if forward.spelling != "LayerNormalization" or not same_groups(forward.grouped, strip(xr)):
            raise Refuse("the swish's input is not this LayerNormalization's GroupNorm")
        x_dims = shape_of(forward.x)
        check_grouping(rows, forward.x, forward.num_groups, "the rows' gradient Reshape")
        if not same_parameter(per_channel(weight, len(x_dims), x_dims[1], "gamma"), forward.gamma):
            raise Refuse("the rows' gradient is not g * gamma")
        dx_users = [u for u in users(grad.outputs[0]) if u.op_type == "Reshape"]
        if len(dx_users) != 1 or len(users(grad.outputs[0])) != 1 or grad.outputs[0].is_graph_output():
            raise Refuse("dx is not reshaped back to x's shape")
        dx = dx_users[0].outputs[0]
        check_same_shape(shape_of(dx), forward.x, "dx reshaped back")
        dgamma = _channel_total(g, forward, normalized=True)
        dbeta = _channel_total(g, forward, normalized=False)
        return GroupNormBackward(swish.dy, mean, rstd, forward.x, forward.gamma, forward.beta, forward.num_groups,
                                 swish.scale, dx, dgamma, dbeta, forward), swish
    raise Refuse("no swish gradient feeds the rows' gradient")


def _channel_total(g: ir.Value, forward: GroupNormForward, normalized: bool) -> ir.Value | None:
    """sum over N and the spatial axes of g * xhat (normalized) or of g, as onnxruntime writes it:
    ReduceSum over every axis but 1 (kept or not), then views down to the (C,) gradient."""
    x_dims = shape_of(forward.x)
    rank = len(x_dims)
    candidates = []
    for node in users_through_casts(g):
        if normalized and node.op_type == "Mul":
            others = [strip(v) for v in node.inputs if strip(v) is not g]
            if len(others) == 1 and _is_normalized(others[0], forward):
                candidates.append(node.outputs[0])
        elif not normalized:
            candidates.append(g)
    for value in candidates:
        for total in users(value):
            if total.op_type == "ReduceSum" and axes_of(total, rank) == [a for a in range(rank) if a != 1]:
                out = total.outputs[0]
                while len(users(out)) == 1 and users(out)[0].op_type in ("Reshape", "Squeeze", "Identity") and not out.is_graph_output():
                    out = users(out)[0].outputs[0]
                if shape_of(out) == [x_dims[1]]:
                    return out
    return None


def _is_normalized(value: ir.Value, forward: GroupNormForward) -> bool:
    """value is xhat: the normalised groups reshaped back to x's shape."""
    back = producer(value, "Reshape")
    norm = producer(strip(back.inputs[0]), "LayerNormalization") if back is not None else None
    return norm is not None and same_groups(strip(norm.inputs[0]), forward.grouped)
