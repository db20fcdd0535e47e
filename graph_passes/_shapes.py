"""The shapes the proofs rely on, derived from what the graph computes, not read from its value_info.

A recorded shape (value_info, an exporter's annotation) is a claim that onnxruntime does not enforce
for intermediates: a Reshape whose target was changed keeps its old value_info, and onnxruntime
only warns ("falling back to lenient merge") and runs. So the views and the elementwise ops a proof
reads are followed to what they produce:

- Reshape: 0 copies the input's dim at that index (unless allowzero = 1: then 0 is a zero-sized
  dim), -1 is the element count left over, computed symbolically;
- Squeeze, Unsqueeze, Flatten, Expand, Transpose, reductions, broadcasting elementwise ops, the
  normalisations (shape kept);
- shape tensors: constants, Shape(v) of a value whose shape is derived, Concat, Gather, Slice and
  integer arithmetic over them.

Graph inputs, constants and the outputs of any other op keep their recorded shape (graph inputs are
checked by onnxruntime; the rest is the exporter's word where nothing here can do better).

A dim is an int, a symbolic name (str), a product of those with a rational factor (`Size`, e.g.
C/G * H * W for a regrouped x with symbolic H and W), or None where no derivation is possible. An
unnamed dim of a recorded shape becomes a name of its own ("?<value>:<axis>"), so Shape(v) of it
still matches v. Every derived shape holds wherever the graph as written runs: a Reshape's output
has its input's element count, a broadcast the larger of two dims that disagree only if one is 1.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import onnx_ir as ir

from ascend_grad.graph_passes import _context
from ascend_grad.graph_passes._graph import constant_array

@dataclass(frozen=True)
class Size:
    """A dim that is a product: factor * prod(name ** power) (never a plain int or name: see `_dim`)."""

    factor: Fraction
    powers: tuple[tuple[str, int], ...]  # sorted, no zero powers

    def __str__(self) -> str:
        parts = [str(self.factor)] if self.factor != 1 else []
        parts += [_name(name) if power == 1 else f"{_name(name)}^{power}" for name, power in self.powers]
        return "*".join(parts) or "1"


def _name(name: str) -> str:
    return "?" if name.startswith("?") else name  # (an unnamed dim's own name means nothing to a reader)


def shown(shape) -> str:
    """A shape for a refusal: (2, 32, 128), (batch, 32, 2*H*W), (?, 64): ? is a size nothing here knows."""
    if shape is None:
        return "(unknown rank)"
    return "(" + ", ".join("?" if d is None else _name(d) if isinstance(d, str) else str(d) for d in shape) + ")"


def _terms(d) -> tuple[Fraction, Counter] | None:
    """d as (factor, powers of names), or None for an unknown dim."""
    if d is None:
        return None
    if isinstance(d, int):
        return Fraction(d), Counter()
    if isinstance(d, str):
        return Fraction(1), Counter({d: 1})
    return d.factor, Counter(dict(d.powers))


def _dim(factor: Fraction, powers: Counter):
    """The canonical dim of a product: an int or a name where it is one, else a Size."""
    powers = {k: v for k, v in powers.items() if v}
    if not powers and factor.denominator == 1:
        return int(factor)
    if factor == 1 and len(powers) == 1 and next(iter(powers.values())) == 1:
        return next(iter(powers))
    return Size(factor, tuple(sorted(powers.items())))


def product(shape) -> tuple[Fraction, Counter] | None:
    """The element count of a shape (None if a dim or the rank is unknown)."""
    if shape is None:
        return None
    factor, powers = Fraction(1), Counter()
    for d in shape:
        terms = _terms(d)
        if terms is None:
            return None
        factor *= terms[0]
        powers.update(terms[1])
    return factor, powers


def _quotient(total, known):
    """total / known as a dim (the -1 of a Reshape), or None."""
    if total is None or known is None or known[0] == 0:
        return None
    powers = Counter(total[1])
    powers.subtract(known[1])
    return _dim(total[0] / known[0], powers)


def count_dim(shape):
    """The element count of a shape as one dim (an int, a name or a Size), or None."""
    total = product(shape)
    return None if total is None else _dim(*total)


def divided(d, k: int):
    """d / k as a dim (C/G * HxW from C * HxW), or None."""
    terms = _terms(d)
    return None if terms is None or k == 0 else _dim(terms[0] / k, terms[1])


def same(a, b) -> bool:
    """Two dims provably equal (an unknown dim equals nothing)."""
    return a is not None and b is not None and a == b


def same_dims(a, b) -> bool:
    """Two shapes provably equal: the same rank, every dim provably equal."""
    return a is not None and b is not None and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))


# ---------------------------------------------------------------------------------------------
# shapes of values

_KEEP_SHAPE = {  # ops whose (first) output has their first input's shape
    "Identity", "Cast", "CastLike", "Sigmoid", "Tanh", "Softplus", "Exp", "Log", "Sqrt", "Reciprocal", "Neg",
    "Abs", "Relu", "Sign", "Erf", "InstanceNormalization", "LayerNormalization", "GroupNormalization",
}
_BROADCAST = {"Add", "Sub", "Mul", "Div", "Pow", "Sum", "Max", "Min", "Where", "Greater", "Less", "Equal"}
_REDUCTIONS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceSumSquare", "ReduceL2"}


def shape_of(value: ir.Value | None) -> list | None:
    """The dims `value` has wherever the graph runs (see the module docstring), or None when its
    rank is unknown."""
    if value is None:
        return None
    table = _context.memo("shape")
    if table is None:  # outside a pass: a memo for this call
        with _context.running():
            return shape_of(value)
    if value not in table:
        _derive_upstream(value, table)
    found = table[value]
    return None if found is None else list(found)  # (a copy: the memo keeps a tuple)


def _derive_upstream(value: ir.Value, table: dict) -> None:
    """The shapes of `value` and of every value it is computed from, sources first, without
    recursion (a training graph's chains run thousands of nodes deep); each derivation then finds
    its inputs' shapes in `table`."""
    stack, expanded = [value], set()
    while stack:
        v = stack[-1]
        node = v.producer()
        if v in table:
            stack.pop()
        elif node is None or v in expanded:
            table[v] = _shape_of(v)
            stack.pop()
        else:
            expanded.add(v)  # (a value met again while expanded is a cycle: derived as it stands)
            stack.extend(i for i in node.inputs if i is not None and i not in table and i not in expanded)


def recorded(value: ir.Value) -> list | None:
    """The shape on the value as the graph records it; an unnamed dim gets a name of its own."""
    if value.shape is None:
        return None
    out = []
    for k, d in enumerate(value.shape):
        if isinstance(d, int):
            out.append(d)
        elif isinstance(d, ir.SymbolicDim) and d.value is not None:
            out.append(d.value)
        else:  # (by name: a fused node's output takes the name and the shape of the value it replaces)
            out.append(f"?{value.name or id(value)}:{k}")
    return out


def _shape_of(value: ir.Value) -> tuple | None:
    tensor = ir.convenience.get_const_tensor(value)
    if tensor is not None:
        return tuple(int(d) for d in tensor.shape)
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        found = recorded(value)
        return None if found is None else tuple(found)
    derived = _derived(node, value)
    if derived is NotImplemented or (derived is None and node.op_type not in _VIEWS):
        derived = recorded(value)
    elif derived is not None and node.op_type not in _VIEWS:
        derived = _named(derived, recorded(value))
    return None if derived is None else tuple(derived)


_VIEWS = {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Expand"}  # (their recorded shapes go stale when edited)


def _opaque(d) -> bool:
    """A dim that is unknown, or a product over dims that have no name (what a MatMul, a Pad or a
    Slice without recorded names leads to): a recorded name says more."""
    return d is None or isinstance(d, Size) and any(name.startswith("?") for name, _ in d.powers)


def _named(derived: list, claimed: list | None) -> list:
    """`derived` with its opaque dims named as the graph records them, where the record agrees
    with every dim derived exactly (else the record is stale, and says nothing)."""
    if claimed is None or len(claimed) != len(derived):
        return derived
    def exact(d):
        return isinstance(d, int) or isinstance(d, str) and not d.startswith("?")
    if any(exact(d) and exact(c) and d != c for d, c in zip(derived, claimed)):
        return derived
    return [c if _opaque(d) and exact(c) else d for d, c in zip(derived, claimed)]


def _derived(node: ir.Node, value: ir.Value):
    op, ins = node.op_type, node.inputs
    if op in _KEEP_SHAPE and value is node.outputs[0]:
        return shape_of(ins[0])
    if op in _BROADCAST:
        return broadcast(*(shape_of(v) for v in ins if v is not None))
    if op == "Reshape":
        return reshaped(node)
    if op == "Expand":
        return broadcast(shape_of(ins[0]), shape_tensor(ins[1]))
    if op in ("Squeeze", "Unsqueeze"):
        return _squeezed(node)
    if op == "Flatten":
        source = shape_of(ins[0])
        if source is None:
            return None
        axis = node.attributes.get_int("axis", 1)
        axis = axis + len(source) if axis < 0 else axis
        return [count_dim(source[:axis]), count_dim(source[axis:])] if 0 <= axis <= len(source) else None
    if op == "Transpose":
        source = shape_of(ins[0])
        if source is None:
            return None
        perm = node.attributes.get_ints("perm", list(reversed(range(len(source)))))
        return [source[p] for p in perm] if sorted(perm) == list(range(len(source))) else None
    if op in _REDUCTIONS:
        return _reduced(node)
    if op == "ConstantOfShape":
        return shape_tensor(ins[0])
    return NotImplemented


def broadcast(*shapes) -> list | None:
    """numpy's broadcast of shapes (None if a rank is unknown or two sizes clash)."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for k in range(rank):
        column = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
        wide = [d for d in column if d != 1]
        if not wide:
            out.append(1)
            continue
        sizes = {d for d in wide if isinstance(d, int)}
        if len(sizes) > 1:
            return None  # 2 against 3: the graph does not run
        if sizes:  # a named dim beside a size n > 1 is n wherever it runs (it must be 1 or n)
            out.append(sizes.pop())
        elif all(same(d, wide[0]) for d in wide):
            out.append(wide[0])
        else:
            out.append(None)  # two names: either may be 1
    return out


def reshaped(node: ir.Node) -> list | None:
    """The dims a Reshape produces from its input's dims and its target (None when the target is
    not known, or is not a valid target: two -1s, 0 past the input's rank, 0 and -1 with allowzero)."""
    source, target = shape_of(node.inputs[0]), shape_tensor(node.inputs[1])
    if source is None or target is None:
        return None
    allowzero = node.attributes.get_int("allowzero", 0)
    out = []
    for k, d in enumerate(target):
        if d == 0 and not allowzero:
            if k >= len(source):
                return None
            d = source[k]
        out.append(d)
    if out.count(-1) > 1 or (-1 in out and allowzero and 0 in target):
        return None
    if -1 in out:
        k = out.index(-1)
        out[k] = _quotient(product(source), product(out[:k] + out[k + 1:]))
    return out


def _squeezed(node: ir.Node) -> list | None:
    source = shape_of(node.inputs[0])
    if source is None:
        return None
    if node.op_type == "Unsqueeze":
        axes = axes_of(node)
        if axes is None:
            return None
        rank = len(source) + len(axes)
        axes = sorted(a + rank if a < 0 else a for a in axes)
        if len(set(axes)) != len(axes) or any(not 0 <= a < rank for a in axes):
            return None
        rest = iter(source)
        return [1 if k in axes else next(rest) for k in range(rank)]
    axes = axes_of(node, len(source)) if len(node.inputs) > 1 or "axes" in node.attributes else None
    if axes is None:  # no axes: every dim that is 1 goes, which needs them all known
        if not all(isinstance(d, int) for d in source):
            return None
        return [d for d in source if d != 1]
    if any(not 0 <= a < len(source) or (isinstance(source[a], int) and source[a] != 1) for a in axes):
        return None  # (a named dim squeezed is 1 wherever the graph runs)
    return [d for k, d in enumerate(source) if k not in axes]


def _reduced(node: ir.Node) -> list | None:
    source = shape_of(node.inputs[0])
    if source is None:
        return None
    rank = len(source)
    given = len(node.inputs) > 1 and node.inputs[1] is not None or "axes" in node.attributes
    axes = axes_of(node, rank) if given else []
    if axes is None:
        return None
    if not axes:
        if node.attributes.get_int("noop_with_empty_axes", 0):
            return source
        axes = list(range(rank))
    if node.attributes.get_int("keepdims", 1):
        return [1 if k in axes else d for k, d in enumerate(source)]
    return [d for k, d in enumerate(source) if k not in axes]


# ---------------------------------------------------------------------------------------------
# shape tensors (Reshape and Expand targets, axes)

def axes_of(node: ir.Node, rank: int | None = None) -> list[int] | None:
    """The axes of a reduction or (un)squeeze: the second input (opset 13+/18+; exporters that do
    not fold constants compute it) or the attribute, made non-negative for an input of rank `rank`
    (None if the input is derived to have another rank: -1 would be another axis)."""
    axes = shape_tensor(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1] is not None else None
    if axes is None and "axes" in node.attributes:
        axes = list(node.attributes["axes"].value)
    if axes is None or not all(isinstance(a, int) for a in axes):
        return None
    if rank is None:
        return axes
    source = shape_of(node.inputs[0])
    if source is not None and len(source) != rank:
        return None
    return sorted(a + rank if a < 0 else a for a in axes)


def shape_tensor(value: ir.Value | None) -> list | None:
    """The dims a 1-D int64 shape tensor holds: constants, Shape(v) of a value whose shape is
    derived, and Concat, Gather, Slice, Squeeze/Unsqueeze/Reshape (of a 0-D or 1-D one), Cast and
    integer Add/Sub/Mul/Div over them. None if any part is unknown."""
    if value is None:
        return None
    array = constant_array(value)
    if array is not None:
        return [int(v) for v in array.reshape(-1)] if array.dtype.kind in "iu" and array.ndim <= 1 else None
    node = value.producer()
    if node is None or node.domain not in ("", "ai.onnx"):
        return None
    op, ins = node.op_type, node.inputs
    if op == "Shape":
        source = shape_of(ins[0])
        if source is None:
            return None
        rank = len(source)
        start, end = node.attributes.get_int("start", 0), node.attributes.get_int("end", rank)
        start, end = (max(0, min(rank, k + rank if k < 0 else k)) for k in (start, end))
        return source[start:end]
    if op == "Concat":
        parts = [shape_tensor(v) for v in ins]
        return None if any(p is None for p in parts) else [d for p in parts for d in p]
    if op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape"):
        return shape_tensor(ins[0])  # (a 0-D or 1-D shape tensor keeps its values in order)
    if op == "Gather":
        data, indices = shape_tensor(ins[0]), constant_array(ins[1])
        if data is None or indices is None or indices.dtype.kind not in "iu" or node.attributes.get_int("axis", 0) != 0:
            return None
        picked = [int(i) + len(data) if i < 0 else int(i) for i in indices.reshape(-1)]
        return [data[i] for i in picked] if all(0 <= i < len(data) for i in picked) else None
    if op == "Slice":
        data = shape_tensor(ins[0])
        bounds = [constant_array(v) if v is not None else None for v in ins[1:5]]
        if data is None or bounds[0] is None or bounds[1] is None or any(b is not None and b.size != 1 for b in bounds):
            return None
        if bounds[2] is not None and int(bounds[2].reshape(-1)[0]) not in (0, -1):
            return None
        step = int(bounds[3].reshape(-1)[0]) if bounds[3] is not None else 1
        start, end = int(bounds[0].reshape(-1)[0]), int(bounds[1].reshape(-1)[0])
        return data[slice(start, end, step)] if step > 0 else None
    if op == "Range":
        start, limit, delta = (shape_tensor(v) for v in ins)
        if not all(p and len(p) == 1 and isinstance(p[0], int) for p in (start, limit, delta)) or delta[0] == 0:
            return None
        return list(range(start[0], limit[0], delta[0]))
    if op in ("Add", "Sub", "Mul", "Div") and len(ins) == 2:  # (also the rank arithmetic of dynamo's unfolded axes)
        a, b = shape_tensor(ins[0]), shape_tensor(ins[1])
        if a is None or b is None or (len(a) != len(b) and 1 not in (len(a), len(b))):
            return None
        pairs = [(a[k % len(a)], b[k % len(b)]) for k in range(max(len(a), len(b)))]
        return [_arithmetic(op, x, y) for x, y in pairs]
    return None


def _arithmetic(op: str, x, y):
    """x op y for two dims of a shape tensor (None where the result is no dim here)."""
    if isinstance(x, int) and isinstance(y, int):
        if op == "Div":
            return None if y == 0 else int(x / y)  # (ONNX integer division truncates)
        return {"Add": x + y, "Sub": x - y, "Mul": x * y}[op]
    tx, ty = _terms(x), _terms(y)
    if tx is None or ty is None or op in ("Add", "Sub"):
        return None
    powers = Counter(tx[1])
    if op == "Mul":
        powers.update(ty[1])
        return _dim(tx[0] * ty[0], powers)
    return None  # a named dim divided: exact only if it divides, which nothing here knows
