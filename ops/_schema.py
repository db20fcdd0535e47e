"""What every op schema shares: dtype names, a readable view of the inference context, errors.

Each op module declares its `onnx.defs.OpSchema` and a type-and-shape inference function built on
`NodeView`; `register` puts both into onnx's registry so that `onnx.checker` and
`onnx.shape_inference` know the op. A rejected node raises `InferenceError` whose message starts
with the op name, e.g. ``[GroupNormSwishGrad] node 'n3': C (63) must be divisible by num_groups (32)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import onnx
from onnx import TensorProto, defs
from onnx.shape_inference import InferenceError

from ascend_grad import DOMAIN, OPSET_VERSION

# The element types every op accepts: compute is always float, half types are storage only.
FLOAT_TYPES = (TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.BFLOAT16)
FLOAT_TYPE_STRS = ("tensor(float)", "tensor(float16)", "tensor(bfloat16)")
MAX_RANK = 8  # aclnn's limit for every op of the set

Dim = int | str | None  # a known size, a symbolic name, or nothing known


def dtype_name(elem_type: int) -> str:
    return TensorProto.DataType.Name(elem_type).lower() if elem_type else "undefined"


def shape_str(dims: Sequence[Dim] | None) -> str:
    if dims is None:
        return "(unknown rank)"
    return "(" + ", ".join("?" if d is None else str(d) for d in dims) + ")"


def promote(a: int, b: int) -> int:
    """aclnn's promotion among float types: equal types stay, any mix computes in float."""
    return a if a == b else TensorProto.FLOAT


class NodeView:
    """The inference context of one node, in the terms the op checks use."""

    def __init__(self, op_type: str, ctx: onnx.shape_inference.InferenceContext):
        self.op_type = op_type
        self.ctx = ctx
        # onnx displays a node as "node OpType[domain] (name)": keep the name
        display = ctx.get_display_name()
        prefix = f"node {op_type}[{DOMAIN}]"
        rest = display[len(prefix) :].strip() if display.startswith(prefix) else display
        self.name = rest[1:-1] if rest.startswith("(") and rest.endswith(")") else rest

    def fail(self, message: str) -> InferenceError:
        where = f" node '{self.name}'" if self.name else ""
        return InferenceError(f"[{self.op_type}]{where}: {message}")

    def has_input(self, i: int) -> bool:
        return i < self.ctx.get_num_inputs() and self.ctx.has_input(i)

    def has_output(self, i: int) -> bool:
        return i < self.ctx.get_num_outputs() and self.ctx.has_output(i)

    def input_type(self, i: int) -> int:
        """The element type of input i, 0 when unknown."""
        t = self.ctx.get_input_type(i) if self.has_input(i) else None
        return t.tensor_type.elem_type if t is not None and t.HasField("tensor_type") else 0

    def input_dims(self, i: int) -> list[Dim] | None:
        """The dims of input i (int, symbolic str or None each), None when the rank is unknown."""
        t = self.ctx.get_input_type(i) if self.has_input(i) else None
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        dims: list[Dim] = []
        for d in t.tensor_type.shape.dim:
            if d.HasField("dim_value"):
                dims.append(d.dim_value)
            elif d.HasField("dim_param"):
                dims.append(d.dim_param)
            else:
                dims.append(None)
        return dims

    def attr(self, name: str, default=None):
        a = self.ctx.get_attribute(name)
        return default if a is None else onnx.helper.get_attribute_value(a)

    def attr_str(self, name: str, default: str) -> str:
        value = self.attr(name, default)
        return value.decode() if isinstance(value, bytes) else value

    def attr_flag(self, name: str, default: int = 1) -> int:
        value = self.attr(name, default)
        if value not in (0, 1):
            raise self.fail(f"{name} must be 0 or 1, got {value}")
        return value

    def check_float_type(self, i: int, what: str) -> int:
        elem_type = self.input_type(i)
        if elem_type and elem_type not in FLOAT_TYPES:
            raise self.fail(f"{what} must be float, float16 or bfloat16, got {dtype_name(elem_type)}")
        return elem_type

    def check_rank(self, dims: list[Dim] | None, what: str, low: int, high: int = MAX_RANK) -> None:
        if dims is not None and not low <= len(dims) <= high:
            raise self.fail(f"{what} must have rank {low} to {high}, got shape {shape_str(dims)}")

    def set_output(self, i: int, elem_type: int, dims: Sequence[Dim] | None) -> None:
        if not self.has_output(i) or not elem_type:
            return
        shape = None if dims is None else [d if isinstance(d, (int, str)) else None for d in dims]
        self.ctx.set_output_type(i, onnx.helper.make_tensor_type_proto(elem_type, shape))


def merge_dim(view: NodeView, a: Dim, b: Dim, mismatch: str) -> Dim:
    """The one dim two inputs must share: known sizes must agree, a known size beats a name."""
    if isinstance(a, int) and isinstance(b, int) and a != b:
        raise view.fail(mismatch)
    if isinstance(a, int) or b is None:
        return a
    return b


def same_shape(view: NodeView, a: list[Dim] | None, b: list[Dim] | None, names: str) -> list[Dim] | None:
    """The shape two inputs must share, as far as either knows it."""
    if a is None or b is None:
        return b if a is None else a
    mismatch = f"{names} must have the same shape, got {shape_str(a)} and {shape_str(b)}"
    if len(a) != len(b):
        raise view.fail(mismatch)
    return [merge_dim(view, da, db, mismatch) for da, db in zip(a, b)]


def attribute(name: str, kind: str, description: str, default=None) -> defs.OpSchema.Attribute:
    """An attribute of a schema: required when no default is given."""
    if default is None:
        attr_type = getattr(defs.OpSchema.AttrType, kind)
        return defs.OpSchema.Attribute(name, attr_type, description, required=True)
    return defs.OpSchema.Attribute(name, onnx.helper.make_attribute(name, default), description)


def tensor_param(name: str, type_str: str, description: str, optional: bool = False):
    option = defs.OpSchema.FormalParameterOption
    return defs.OpSchema.FormalParameter(
        name, type_str, description, param_option=option.Optional if optional else option.Single
    )


def make_schema(
    op_type: str,
    doc: str,
    inputs: Sequence[defs.OpSchema.FormalParameter],
    outputs: Sequence[defs.OpSchema.FormalParameter],
    type_params: Sequence[str],
    attributes: Sequence[defs.OpSchema.Attribute],
    infer: Callable[[NodeView], None],
) -> defs.OpSchema:
    """Declare the op and register it with onnx (once per process)."""
    schema = defs.OpSchema(
        op_type,
        DOMAIN,
        OPSET_VERSION,
        doc,
        inputs=inputs,
        outputs=outputs,
        type_constraints=[(p, list(FLOAT_TYPE_STRS), "float types") for p in type_params],
        attributes=attributes,
        node_determinism=defs.OpSchema.NodeDeterminism.Deterministic,
    )
    schema.set_type_and_shape_inference_function(lambda ctx: infer(NodeView(op_type, ctx)))
    if not defs.has(op_type, DOMAIN):
        defs.register_schema(schema)
    return schema
