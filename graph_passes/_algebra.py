"""Elementwise subgraphs as canonical polynomials: proof that a decomposed gradient is the math.

Exporters spell the same gradient many ways (operands commuted, `1 - s` as Sub or as Add of a
Neg, the product rule of a hand-written `x * sigmoid(x)` instead of silu_backward's formula,
constants as scalars or full-shape initializers). Expanded into a polynomial over its atoms (the
opaque tensors, and sigmoid / tanh(softplus) of a tensor), every spelling of one formula gives the
same polynomial, and two different formulas give different ones: equality of polynomials is a
proof of equality of the math, not a heuristic.

Atoms are opaque values (anything that is not + - * / by a constant, Neg, a small Pow, or a
transparent Cast/Expand/Identity), `sigmoid(a)` and `tanh(softplus(a))` keyed by the value `a`.
Values listed as `stop` stay atoms even when they are computed by arithmetic (the activation
input z of a swish must be one atom).
"""

from __future__ import annotations

from collections.abc import Iterable

import onnx_ir as ir

from ascend_grad.graph_passes._graph import producer, scalar, strip

Monomial = tuple[tuple[int, int], ...]  # sorted (atom index, power) pairs
MAX_TERMS = 48  # a gradient has a handful of terms; past this the subgraph is something else
MAX_DEPTH = 16


class Poly(dict):
    """{monomial: coefficient}; the empty monomial is the constant term."""

    @staticmethod
    def constant(c: float) -> Poly:
        return Poly({(): c}) if c else Poly()

    @staticmethod
    def atom(index: int) -> Poly:
        return Poly({((index, 1),): 1.0})

    def __add__(self, other: Poly) -> Poly:
        out = Poly(self)
        for m, c in other.items():
            total = out.get(m, 0.0) + c
            if total:
                out[m] = total
            else:
                out.pop(m, None)
        return out

    def scale(self, k: float) -> Poly:
        return Poly({m: c * k for m, c in self.items()}) if k else Poly()

    def __mul__(self, other: Poly) -> Poly:
        out = Poly()
        for ma, ca in self.items():
            for mb, cb in other.items():
                out = out + Poly({_times(ma, mb): ca * cb})
        return out

    def atoms(self) -> set[int]:
        return {i for m in self for i, _ in m}


def _times(a: Monomial, b: Monomial) -> Monomial:
    powers = dict(a)
    for i, p in b:
        powers[i] = powers.get(i, 0) + p
    return tuple(sorted(powers.items()))


class TooBig(Exception):
    """The subgraph is not a small polynomial (too deep, too many terms)."""


class Algebra:
    """Builds polynomials of values of one graph, interning atoms and remembering which value
    computes which polynomial (so a factor found in the algebra can be handed back as a value)."""

    def __init__(self, stop: Iterable[ir.Value] = ()):
        self.stop = {strip(v) for v in stop}
        self.atoms: list[tuple[str, ir.Value]] = []  # (kind, value): kind "value", "sigmoid", "tanh_softplus"
        self._index: dict[tuple[str, int], int] = {}
        self._memo: dict[int, Poly] = {}
        self._computed: list[tuple[ir.Value, Poly]] = []

    def atom(self, kind: str, value: ir.Value) -> int:
        key = (kind, id(value))
        if key not in self._index:
            self._index[key] = len(self.atoms)
            self.atoms.append((kind, value))
        return self._index[key]

    def poly(self, value: ir.Value, depth: int = 0) -> Poly:
        value = strip(value)
        if id(value) in self._memo:
            return self._memo[id(value)]
        if depth > MAX_DEPTH:
            raise TooBig(f"deeper than {MAX_DEPTH} nodes")
        result = self._build(value, depth)
        if len(result) > MAX_TERMS:
            raise TooBig(f"more than {MAX_TERMS} terms")
        self._memo[id(value)] = result
        self._computed.append((value, result))
        return result

    def value_computing(self, poly: Poly) -> ir.Value | None:
        """The first value seen whose polynomial is `poly` (a factor handed back as a tensor)."""
        for value, computed in self._computed:
            if computed.keys() == poly.keys() and all(abs(computed[m] - c) <= 1e-12 * max(1.0, abs(c)) for m, c in poly.items()):
                return value
        return None

    def _build(self, value: ir.Value, depth: int) -> Poly:
        c = scalar(value)
        if c is not None:
            return Poly.constant(c)
        node = producer(value)
        tanh_grad = value.producer()
        if value not in self.stop and tanh_grad is not None and tanh_grad.domain == "com.microsoft" and tanh_grad.op_type == "TanhGrad":
            y = self.poly(tanh_grad.inputs[1], depth + 1)  # TanhGrad(dY, Y) = dY * (1 - Y^2), by definition
            return self.poly(tanh_grad.inputs[0], depth + 1) * (Poly.constant(1.0) + (y * y).scale(-1.0))
        if value in self.stop or node is None:
            return Poly.atom(self.atom("value", value))
        op, ins = node.op_type, node.inputs
        if op in ("Add", "Sum"):  # (Sum: onnxruntime-training accumulates a tensor's gradients)
            terms, total = self._softplus_derivatives(list(ins), depth)
            for term in terms:
                total = total + self.poly(term, depth + 1)
            return total
        if op == "Sub":
            return self.poly(ins[0], depth + 1) + self.poly(ins[1], depth + 1).scale(-1.0)
        if op == "Mul":
            return self.poly(ins[0], depth + 1) * self.poly(ins[1], depth + 1)
        if op == "Neg":
            return self.poly(ins[0], depth + 1).scale(-1.0)
        if op == "Div" and scalar(ins[1]) not in (None, 0.0):
            return self.poly(ins[0], depth + 1).scale(1.0 / scalar(ins[1]))
        if op == "Pow" and scalar(ins[1]) in (1.0, 2.0, 3.0):
            base = self.poly(ins[0], depth + 1)
            out = base
            for _ in range(int(scalar(ins[1])) - 1):
                out = out * base
            return out
        argument = sigmoid_argument(value)
        if argument is not None:
            return Poly.atom(self.atom("sigmoid", argument))
        argument = tanh_softplus_argument(value)
        if argument is not None:
            return Poly.atom(self.atom("tanh_softplus", argument))
        return Poly.atom(self.atom("value", value))

    def _softplus_derivatives(self, terms: list[ir.Value], depth: int) -> tuple[list[ir.Value], Poly]:
        """Take out of a sum's terms each pair that is onnxruntime-training's derivative of the
        overflow-free softplus relu(x) + log(1 + exp(-|x|)) (how ascend_grad.training respells it):

            ReluGrad(d, relu(x)) + (-(d / (1 + e)) * e) * sign(x),   e = exp(-|x|)

        = d * (step(x) - sign(x) e / (1 + e)), which is d * sigmoid(x) for x != 0 (x > 0:
        1 - sigmoid(-x); x < 0: sigmoid(x)) and 0 at x = 0, where d * sigmoid(x) is 0 too only if d
        is: so a pair counts as d * sigmoid(x) only when every term of d holds the factor x (as
        in Mish's backward, d = dy * x * (1 - t^2)). Returns the other terms and the pairs' sum."""
        total = Poly()
        for a in list(terms):
            relu_grad = strip(a).producer()
            if relu_grad is None or relu_grad.domain != "com.microsoft" or relu_grad.op_type != "ReluGrad":
                continue
            relu = producer(strip(relu_grad.inputs[1]), "Relu")
            x = strip(relu.inputs[0]) if relu is not None else None
            d = strip(relu_grad.inputs[0])
            for b in terms:
                if x is not None and b is not a and _sign_term(b, x, d):
                    poly_d = self.poly(d, depth + 1)
                    xi = self.atom("value", x)
                    if poly_d and all(any(i == xi for i, _ in m) for m in poly_d):
                        total = total + poly_d * Poly.atom(self.atom("sigmoid", x))
                        terms = [t for t in terms if t is not a and t is not b]
                        break
        return terms, total

    def atoms_of_kind(self, poly: Poly, kind: str) -> list[int]:
        return sorted(i for i in poly.atoms() if self.atoms[i][0] == kind)


def _exp_minus_abs(value: ir.Value, x: ir.Value) -> bool:
    """value is exp(-|x|)."""
    exp = producer(strip(value), "Exp")
    neg = producer(strip(exp.inputs[0]), "Neg") if exp is not None else None
    absolute = producer(strip(neg.inputs[0]), "Abs") if neg is not None else None
    return absolute is not None and strip(absolute.inputs[0]) is x


def _sign_term(value: ir.Value, x: ir.Value, d: ir.Value) -> bool:
    """value is (-(d / (1 + e)) * e) * sign(x), e = exp(-|x|), as onnxruntime-training's gradient
    builders write the derivative of log(1 + exp(-|x|)) (either operand order of each Mul)."""
    mul = producer(strip(value), "Mul")
    for negated, sign in ((mul.inputs[0], mul.inputs[1]), (mul.inputs[1], mul.inputs[0])) if mul is not None else ():
        sign_node, neg = producer(strip(sign), "Sign"), producer(strip(negated), "Neg")
        if sign_node is None or neg is None or strip(sign_node.inputs[0]) is not x:
            continue
        inner = producer(strip(neg.inputs[0]), "Mul")
        for quotient, e in ((inner.inputs[0], inner.inputs[1]), (inner.inputs[1], inner.inputs[0])) if inner is not None else ():
            div = producer(strip(quotient), "Div")
            if div is None or strip(div.inputs[0]) is not d or not _exp_minus_abs(e, x):
                continue
            if _exponent_of_one_plus_exp(div.inputs[1]) is not None and _exp_minus_abs(_one_plus(div.inputs[1]), x):
                return True
    return False


def _one_plus(value: ir.Value) -> ir.Value | None:
    """e, if value is 1 + e (either order)."""
    add = producer(strip(value), "Add")
    for one, other in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])) if add is not None else ():
        if scalar(one) == 1.0:
            return other
    return None


def sigmoid_argument(value: ir.Value) -> ir.Value | None:
    """a, if value is sigmoid(a): Sigmoid(a), or 1 / (1 + exp(-a)) written out."""
    node = producer(strip(value))
    if node is None:
        return None
    if node.op_type == "Sigmoid":
        return strip(node.inputs[0])
    if node.op_type == "Reciprocal":
        denominator = node.inputs[0]
    elif node.op_type == "Div" and scalar(node.inputs[0]) == 1.0:
        denominator = node.inputs[1]
    else:
        return None
    exponent = _exponent_of_one_plus_exp(denominator)
    neg = producer(exponent, "Neg") if exponent is not None else None
    return strip(neg.inputs[0]) if neg is not None else None


def _exponent_of_one_plus_exp(value: ir.Value) -> ir.Value | None:
    """e, if value is 1 + exp(e) (either order)."""
    add = producer(strip(value), "Add")
    if add is None:
        return None
    for one, other in ((add.inputs[0], add.inputs[1]), (add.inputs[1], add.inputs[0])):
        exp = producer(strip(other), "Exp")
        if scalar(one) == 1.0 and exp is not None:
            return strip(exp.inputs[0])
    return None


# softplus(a) = a for a > T is torch's default (T = 20): tanh of either rounds to 1 in float, so
# tanh(softplus) is the same number; a smaller T would not be.
SOFTPLUS_MIN_THRESHOLD = 20.0


def softplus_argument(value: ir.Value) -> ir.Value | None:
    """a, if value is softplus(a): Softplus(a), log(1 + exp(a)), or torch's thresholded
    Where(a > T, a, Softplus(a)) with T >= 20."""
    node = producer(strip(value))
    if node is None:
        return None
    if node.op_type == "Softplus":
        return strip(node.inputs[0])
    if node.op_type == "Log":
        return _exponent_of_one_plus_exp(node.inputs[0])
    if node.op_type == "Add":  # relu(a) + log(1 + exp(-|a|)), overflow-free (ascend_grad.training's)
        for relu, log in ((node.inputs[0], node.inputs[1]), (node.inputs[1], node.inputs[0])):
            relu_node, log_node = producer(strip(relu), "Relu"), producer(strip(log), "Log")
            if relu_node is not None and log_node is not None:
                a = strip(relu_node.inputs[0])
                inner = _one_plus(log_node.inputs[0])
                if inner is not None and _exp_minus_abs(inner, a):
                    return a
    if node.op_type == "Where":
        greater = producer(strip(node.inputs[0]), "Greater")
        inner = softplus_argument(node.inputs[2])
        if greater is None or inner is None:
            return None
        threshold = scalar(greater.inputs[1])
        same = strip(greater.inputs[0]) is inner and strip(node.inputs[1]) is inner
        if same and threshold is not None and threshold >= SOFTPLUS_MIN_THRESHOLD:
            return inner
    return None


def tanh_softplus_argument(value: ir.Value) -> ir.Value | None:
    """a, if value is tanh(softplus(a))."""
    node = producer(strip(value), "Tanh")
    return softplus_argument(node.inputs[0]) if node is not None else None


def cofactors(poly: Poly, atoms: list[int]) -> dict[tuple[int, ...], Poly]:
    """Group the terms of poly by the powers of `atoms`: {powers: the rest of those terms}."""
    groups: dict[tuple[int, ...], Poly] = {}
    for monomial, c in poly.items():
        powers = dict(monomial)
        key = tuple(powers.pop(a, 0) for a in atoms)
        rest = tuple(sorted(powers.items()))
        groups[key] = groups.get(key, Poly()) + Poly({rest: c})
    return groups


def divide(p: Poly, q: Poly, first: list[int]) -> Poly | None:
    """p / q if q divides p exactly, else None: long division by leading terms in the lexicographic
    order that ranks the atoms `first` highest (for one divisor, a zero remainder is exactly
    divisibility). Coefficients that cancel to within 1e-12 of the largest count as zero."""
    atoms = list(first) + sorted((p.atoms() | q.atoms()) - set(first))

    def key(monomial: Monomial) -> tuple[int, ...]:
        powers = dict(monomial)
        return tuple(powers.get(a, 0) for a in atoms)

    tiny = 1e-12 * max((abs(c) for c in p.values()), default=0.0)
    lead = max(q, key=key)
    quotient, rest = Poly(), Poly(p)
    for _ in range(4 * MAX_TERMS):
        rest = Poly({m: c for m, c in rest.items() if abs(c) > tiny})
        if not rest:
            return quotient
        top = max(rest, key=key)
        powers = dict(top)
        for a, k in lead:
            powers[a] = powers.get(a, 0) - k
            if powers[a] < 0:
                return None  # the leading term is not a multiple of q's: no exact quotient
        term = Poly({tuple(sorted((a, k) for a, k in powers.items() if k)): rest[top] / q[lead]})
        quotient = quotient + term
        rest = rest + (term * q).scale(-1.0)
    return None
