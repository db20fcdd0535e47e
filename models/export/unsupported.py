"""Every op torch.onnx could not translate, named at once with the modules that use it, before the
translation starts.

The joint graph, decomposed exactly as torch.onnx will decompose it, tells WHICH ops have no
translation. It no longer says which module each came from (AOTAutograd drops the module stack),
so each forward op of the training IR (which has it) is traced again alone, forward and backward,
under the same decompositions: the modules whose op produces a missing op are the ones named.
That second tracing happens only when something is missing.
"""

from __future__ import annotations

from collections import defaultdict

import torch
from torch import fx
from torch.utils._pytree import tree_leaves, tree_map

from ascend_grad.models.export.joint import PREFIX, math_attention


class UnsupportedOpsError(NotImplementedError):
    """Ops of the training step with no ONNX translation; `ops` maps each to the modules using it."""

    def __init__(self, ops: dict[str, list[str]]):
        self.ops = ops
        lines = [f"  {op}: used by {', '.join(where) if where else '(module not found)'}" for op, where in ops.items()]
        super().__init__(
            f"export_training_graph: {len(ops)} op{'s' if len(ops) > 1 else ''} of the training step "
            f"{'have' if len(ops) > 1 else 'has'} no ONNX translation (nothing was exported):\n" + "\n".join(lines)
        )


def missing_ops(program: torch.export.ExportedProgram, registry) -> set:
    """The OpOverloads of `program` (already decomposed for torch.onnx) that `registry` cannot translate."""
    return {n.target for n in program.graph.nodes
            if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload) and not registry.is_registered(n.target)}


def raise_for(missing: set, training_ir: torch.export.ExportedProgram, table: dict) -> None:
    """Raise UnsupportedOpsError naming `missing` ops and the modules of `training_ir` that use them."""
    if not missing:
        return
    where: dict[str, set] = defaultdict(set)
    for node in training_ir.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        for op in _step_ops(node, table) & missing:
            where[str(op)].add(_module_of(node))
    raise UnsupportedOpsError({str(op): sorted(where.get(str(op), ())) for op in sorted(missing, key=str)})


def _module_of(node: fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return "(the loss)"
    path, kind = list(stack.values())[-1]
    name = kind if isinstance(kind, str) else getattr(kind, "__name__", str(kind))
    path = path.removeprefix(PREFIX) if path != PREFIX.rstrip(".") else ""
    return f"{path or '(top)'} ({name.rsplit('.', 1)[-1]})"


def _example(value):
    """A real tensor like the traced value `value` (a FakeTensor, maybe of symbolic size)."""
    if isinstance(value, torch.SymInt):
        return value.node.hint if value.node.hint is not None else 2
    if not isinstance(value, torch.Tensor):
        return value
    shape = [_example(d) for d in value.shape]
    return torch.ones(shape, dtype=value.dtype) if value.dtype.is_floating_point else torch.zeros(shape, dtype=value.dtype)


def _step_ops(node: fx.Node, table: dict) -> set:
    """The ops of `node`'s op run alone, forward and backward, decomposed by `table`."""
    from torch.fx.experimental.proxy_tensor import make_fx

    args, kwargs = tree_map(lambda a: _example(a.meta.get("val")) if isinstance(a, fx.Node) else a, (node.args, node.kwargs))
    tensors = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]

    def step(*values):
        with torch.enable_grad():
            leaves = [v.detach().requires_grad_(v.is_floating_point()) for v in values]
            copies = iter([v.clone() for v in leaves])  # in-place ops must not write a leaf
            call_args, call_kwargs = tree_map(lambda a: next(copies) if isinstance(a, torch.Tensor) else a, (args, kwargs))
            outputs = [o for o in tree_leaves(node.target(*call_args, **call_kwargs))
                       if isinstance(o, torch.Tensor) and o.requires_grad]
            wanted = [v for v in leaves if v.requires_grad]
            if not outputs or not wanted:
                return outputs
            return torch.autograd.grad(outputs, wanted, [torch.ones_like(o) for o in outputs], allow_unused=True)

    try:
        with math_attention():
            graph = make_fx(step, decomposition_table=table)(*tensors).graph
    except Exception:  # an op that cannot run alone on made-up values: it is not attributed
        return set()
    return {n.target for n in graph.nodes if n.op == "call_function"}
