"""Finding the backward of a swish y = z * sigmoid(b z) (SiLU is b = 1) in any spelling.

    dz = dy * (s + b z s (1 - s)),  s = sigmoid(b z)

torch's silu_backward decomposition writes dy * s * (1 + z (1 - s)); autograd of a hand-written
z * sigmoid(b z) writes the product rule dy s + b (dy z) s (1 - s); both are the same polynomial
in the atoms dy, z, s, which is what is checked (see _algebra).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import onnx_ir as ir

from ascend_grad.graph_passes._algebra import Algebra, Poly, TooBig, cofactors, sigmoid_argument, tanh_softplus_argument
from ascend_grad.graph_passes._graph import producer, scalar, strip

# the last node of a gradient: dy * f'(x) or its terms summed (a - b for the Mish product rule)
ANCHORS = ("Mul", "Add", "Sub")

# a graph without one of these computes no sigmoid (written out: 1 / (1 + exp(-a)))
SIGMOID_OPS = frozenset({"Sigmoid", "Exp"})

_ARITHMETIC = {"Add", "Sub", "Mul", "Neg", "Div", "Pow", "Identity", "Cast", "CastLike", "Expand"}


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


def linear_in(argument: ir.Value) -> tuple[ir.Value, float]:
    """(z, b) with argument = b * z: b from a Mul (or Div) by a constant, else z = argument, b = 1."""
    node = producer(argument)
    if node is not None and node.op_type in ("Mul", "Div"):
        for k in (1, 0) if node.op_type == "Mul" else (1,):
            b = scalar(node.inputs[k])
            if b is not None and b != 0.0:
                return strip(node.inputs[1 - k]), (b if node.op_type == "Mul" else 1.0 / b)
    return argument, 1.0


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=0.0)


def _same_poly(a: Poly, b: Poly) -> bool:
    return a.keys() == b.keys() and all(_close(a[m], b[m]) for m in a)


def match_swish_backward(root: ir.Value) -> Activation | str:
    """The swish backward computing `root`, or why `root` is not one."""
    arguments = arguments_near(root, sigmoid_argument)
    if not arguments:
        return "no sigmoid feeds this value"
    reason = "not the swish gradient dy * (s + b z s (1 - s))"
    for argument in arguments:
        z, b = linear_in(argument)
        algebra = Algebra(stop=[z, argument])
        try:
            poly = algebra.poly(root)
        except TooBig as error:
            return f"not a small polynomial ({error})"
        s, zi = algebra.atom("sigmoid", argument), algebra.atom("value", z)
        groups = cofactors(poly, [s, zi])
        if set(groups) != {(1, 0), (1, 1), (2, 1)}:
            continue
        D = groups[(1, 0)]
        if not D.atoms() or not (_same_poly(groups[(1, 1)], D.scale(b)) and _same_poly(groups[(2, 1)], D.scale(-b))):
            continue  # (a constant D is a part of a gradient, not the whole)
        dy = algebra.value_computing(D)
        if dy is None:
            return "the incoming gradient is not one tensor of the graph"
        return Activation(dy, z, b)
    return reason


def match_mish_backward(root: ir.Value) -> Activation | str:
    """dx = dy * (t + x s - x s t^2), t = tanh(softplus(x)), s = sigmoid(x)."""
    for x in arguments_near(root, tanh_softplus_argument):
        algebra = Algebra(stop=[x])
        try:
            poly = algebra.poly(root)
        except TooBig as error:
            return f"not a small polynomial ({error})"
        t, xi = algebra.atom("tanh_softplus", x), algebra.atom("value", x)
        s = algebra.atom("sigmoid", x)
        groups = cofactors(poly, [t, s, xi])
        if set(groups) != {(1, 0, 0), (0, 1, 1), (2, 1, 1)}:
            continue
        D = groups[(1, 0, 0)]
        if not D.atoms() or not (_same_poly(groups[(0, 1, 1)], D) and _same_poly(groups[(2, 1, 1)], D.scale(-1.0))):
            continue
        dy = algebra.value_computing(D)
        if dy is None:
            return "the incoming gradient is not one tensor of the graph"
        return Activation(dy, x)
    return "not the Mish gradient dy * (t + x s (1 - t^2))"
