"""Finding the backward of a swish y = z * sigmoid(b z) (SiLU is b = 1) in any spelling.

    dz = dy * (s + b z s (1 - s)),  s = sigmoid(b z)

torch's silu_backward decomposition writes dy * s * (1 + z (1 - s)); autograd of a hand-written
z * sigmoid(b z) writes the product rule dy s + b (dy z) s (1 - s); both are the same polynomial
in the atoms dy, z, s, which is what is checked (see _algebra).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx_ir as ir

from ascend_grad.graph_passes._algebra import Algebra, Poly, TooBig, cofactors, divide, sigmoid_argument, tanh_softplus_argument
from ascend_grad.graph_passes._graph import close, producer, scalar, strip

# the last node of a gradient: dy * f'(x) or its terms summed (a - b for the Mish product rule)
ANCHORS = ("Mul", "Add", "Sub")

# a graph without one of these computes no sigmoid (written out: 1 / (1 + exp(-a)))
SIGMOID_OPS = frozenset({"Sigmoid", "Exp"})

_ARITHMETIC = {"Add", "Sum", "Sub", "Mul", "Neg", "Div", "Pow", "Identity", "Cast", "CastLike", "Expand"}


@dataclass
class Activation:
    """A recognised activation backward: dx = f'(x) * dy."""

    dy: ir.Value  # the incoming gradient
    x: ir.Value  # the activation's input (z for a swish after GroupNorm)
    scale: float = 1.0  # the b of a swish


def arguments_near(root: ir.Value, find, depth: int = 8) -> list[ir.Value]:
    """The arguments a of the sigmoids (find=sigmoid_argument) or tanh(softplus) terms that the
    arithmetic computing `root` reads, nearest first."""
    found: list[ir.Value] = []
    frontier, seen = [root], set()
    for _ in range(depth):
        following = []
        for value in frontier:
            value = strip(value)
            if id(value) in seen:
                continue
            seen.add(id(value))
            argument = find(value)
            if argument is not None:
                if all(argument is not f for f in found):
                    found.append(argument)
                continue
            node = producer(value)
            if node is not None and node.op_type in _ARITHMETIC:
                following.extend(node.inputs)
        frontier = following
    return found


def quick_gelu_grad(value: ir.Value) -> Activation | None:
    """com.microsoft.QuickGeluGrad(dy, z){alpha}, onnxruntime-training's swish backward: b = alpha."""
    node = value.producer()
    if node is None or node.domain != "com.microsoft" or node.op_type != "QuickGeluGrad":
        return None
    return Activation(node.inputs[0], strip(node.inputs[1]), node.attributes.get_float("alpha", 1.702))


def quick_gelu(value: ir.Value) -> tuple[ir.Value, float] | None:
    """(z, b) if value = com.microsoft.QuickGelu(z){alpha = b} = z * sigmoid(b z)."""
    node = value.producer()
    if node is None or node.domain != "com.microsoft" or node.op_type != "QuickGelu":
        return None
    return strip(node.inputs[0]), node.attributes.get_float("alpha", 1.702)


def linear_in(argument: ir.Value) -> tuple[ir.Value, float]:
    """(z, b) with argument = b * z: b from a Mul (or Div) by a constant, else z = argument, b = 1."""
    node = producer(argument)
    if node is not None and node.op_type in ("Mul", "Div"):
        for k in (1, 0) if node.op_type == "Mul" else (1,):
            b = scalar(node.inputs[k])
            if b is not None and b != 0.0:
                return strip(node.inputs[1 - k]), (b if node.op_type == "Mul" else 1.0 / b)
    return argument, 1.0


def _same_poly(a: Poly, b: Poly) -> bool:
    return a.keys() == b.keys() and all(close(a[m], b[m]) for m in a)


def _swish_form(root: ir.Value, z: ir.Value, argument: ir.Value, b: float) -> Activation | str | None:
    """The swish backward in atoms z and s = sigmoid(argument), or None if the polynomial is not
    that form (a string: why it cannot be one at all)."""
    algebra = Algebra(stop=[z, argument])
    try:
        poly = algebra.poly(root)
    except TooBig as error:
        return f"not a small polynomial ({error})"
    s, zi = algebra.atom("sigmoid", argument), algebra.atom("value", z)
    groups = cofactors(poly, [s, zi])
    if set(groups) == {(1, 0), (1, 1), (2, 1)}:  # D s + b D z s - b D z s^2, D free of s and z
        D = groups[(1, 0)]
        if not (_same_poly(groups[(1, 1)], D.scale(b)) and _same_poly(groups[(2, 1)], D.scale(-b))):
            return None
    else:  # D may hold s and z too (a loss right after the activation: dy = 2 y / n): divide
        S, Z = Poly.atom(s), Poly.atom(zi)
        D = divide(poly, S * (Poly.constant(1.0) + Z.scale(b) + (Z * S).scale(-b)), [s, zi])
        if D is None:
            return None
    return _activation(algebra, D, z, b)


def _activation(algebra: Algebra, D: Poly, x: ir.Value, b: float = 1.0) -> Activation | str | None:
    """Activation(dy, x) with dy the graph's value computing D, the gradient's cofactor."""
    if not D.atoms():
        return None  # a constant D is a part of a gradient, not the whole
    dy = algebra.value_computing(D)
    if dy is None:
        return "the incoming gradient is not one tensor of the graph"
    return Activation(dy, x, b)


def match_swish_backward(root: ir.Value) -> Activation | str:
    """The swish backward computing `root`, or why `root` is not one."""
    arguments = arguments_near(root, sigmoid_argument)
    if not arguments:
        return "no sigmoid feeds this value"
    for argument in arguments:
        z, b = linear_in(argument)
        found = _swish_form(root, z, argument, b)
        if found is not None:
            return found
    return "not the swish gradient dy * (s + b z s (1 - s))"


def _mish_form(root: ir.Value, x: ir.Value) -> Activation | str | None:
    """dx = dy * (t + x s - x s t^2) in atoms t = tanh(softplus(x)), s = sigmoid(x) and x."""
    algebra = Algebra(stop=[x])
    try:
        poly = algebra.poly(root)
    except TooBig as error:
        return f"not a small polynomial ({error})"
    t, xi, s = algebra.atom("tanh_softplus", x), algebra.atom("value", x), algebra.atom("sigmoid", x)
    groups = cofactors(poly, [t, s, xi])
    if set(groups) == {(1, 0, 0), (0, 1, 1), (2, 1, 1)}:
        D = groups[(1, 0, 0)]
        if not (_same_poly(groups[(0, 1, 1)], D) and _same_poly(groups[(2, 1, 1)], D.scale(-1.0))):
            return None
    else:  # dy computed from the activation itself: divide
        T, S, X = Poly.atom(t), Poly.atom(s), Poly.atom(xi)
        D = divide(poly, T + X * S + (X * S * T * T).scale(-1.0), [t, s, xi])
        if D is None:
            return None
    return _activation(algebra, D, x)


def match_mish_backward(root: ir.Value) -> Activation | str:
    """The Mish backward computing `root`, or why `root` is not one."""
    for x in arguments_near(root, tanh_softplus_argument):
        found = _mish_form(root, x)
        if found is not None:
            return found
    return "not the Mish gradient dy * (t + x s (1 - t^2))"
