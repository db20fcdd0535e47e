"""Put our ops into the forward graph before autograd runs (ascend.py): in the training IR of
torch.export, every SiLU, Mish, and GroupNorm whose only use is a SiLU, becomes the custom op whose
backward is ours.

The training IR keeps in-place ops (nn.SiLU(inplace=True) is `aten.silu_`): such a node becomes the
functional op, and every later use of the tensor it overwrote reads the op's result instead. That is
exact only when the tensor is nobody's view and no view of it is read later (writing into it would
also change those); otherwise, and for dtypes the op set lacks (float64), the node stays as it is
and the graph pass (graph_passes) fuses its spelled-out backward afterwards.
"""

from __future__ import annotations

import operator
from collections import Counter

import torch
from torch import fx

from ascend_grad.models.export import ascend  # noqa: F401  (registers torch.ops.ascend_grad)

aten = torch.ops.aten
DTYPES = (torch.float32, torch.float16, torch.bfloat16)  # the op set's dtypes

ACTIVATIONS = {
    aten.silu.default: torch.ops.ascend_grad.silu.default,
    aten.silu_.default: torch.ops.ascend_grad.silu.default,
    aten.mish.default: torch.ops.ascend_grad.mish.default,
    aten.mish_.default: torch.ops.ascend_grad.mish.default,
}
IN_PLACE = {aten.silu_.default, aten.mish_.default}
SILU = {aten.silu.default, aten.silu_.default}


def _dtype(node) -> torch.dtype | None:
    value = node.meta.get("val") if isinstance(node, fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def _is_view(node: fx.Node) -> bool:
    """The node's output aliases one of its inputs (a view, or an in-place op's result)."""
    schema = getattr(node.target, "_schema", None)
    return bool(schema and schema.returns and schema.returns[0].alias_info is not None)


def _has_aliases(node: fx.Node) -> bool:
    """Something else shares node's memory: it is a graph input, a view, or has views taken of it."""
    if node.op != "call_function" or _is_view(node):
        return True
    return any(_is_view(user) and user.target not in IN_PLACE for user in node.users)


def _replace(graph: fx.Graph, old: fx.Node, new: fx.Node, overwritten: fx.Node | None) -> None:
    """Uses of `old` read `new`; for an in-place `old`, so do the later uses of `overwritten`."""
    old.replace_all_uses_with(new)
    if overwritten is not None:
        order = {n: k for k, n in enumerate(graph.nodes)}
        for user in list(overwritten.users):
            if user is not new and order[user] > order[new]:
                user.replace_input_with(overwritten, new)
    graph.erase_node(old)


def _insert(graph: fx.Graph, where: fx.Node, target, args, meta) -> fx.Node:
    with graph.inserting_before(where):
        node = graph.call_function(target, args)
    node.meta.update(meta)
    return node


def substitute(graph_module: fx.GraphModule) -> Counter:
    """Rewrite the training-IR graph in place; returns how many of each op were substituted."""
    graph = graph_module.graph
    done: Counter = Counter()
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in ACTIVATIONS:
            continue
        (x,) = node.args[:1]
        in_place = node.target in IN_PLACE
        if _dtype(node) not in DTYPES or (in_place and _has_aliases(x)):
            continue
        norm = x if node.target in SILU else None
        if norm is not None and _fusable_group_norm(norm, node):
            _, num_groups, weight, bias, eps = _group_norm_args(norm)
            fused = _insert(graph, norm, torch.ops.ascend_grad.group_norm_swish.default,
                            (norm.args[0], weight, bias, num_groups, eps), {"nn_module_stack": norm.meta.get("nn_module_stack", {})})
            y = _insert(graph, node, operator.getitem, (fused, 0), node.meta)
            _replace(graph, node, y, None)
            graph.erase_node(norm)
            done["GroupNormSwish"] += 1
            continue
        new = _insert(graph, node, ACTIVATIONS[node.target], (x,), node.meta)
        _replace(graph, node, new, x if in_place else None)
        done["SiLU" if node.target in SILU else "Mish"] += 1
    graph.lint()
    graph_module.recompile()
    return done


def _fusable_group_norm(norm: fx.Node, activation: fx.Node) -> bool:
    """aten.group_norm(x, G, weight, bias, eps) read by this SiLU only, in a dtype of the op set."""
    if norm.op != "call_function" or norm.target != aten.group_norm.default or len(norm.users) != 1:
        return False
    x, _, weight, bias, _ = _group_norm_args(norm)
    return all(_dtype(v) in DTYPES for v in (x, weight, bias) if v is not None) and _dtype(norm) in DTYPES


def _group_norm_args(norm: fx.Node) -> tuple:
    """aten.group_norm's (input, num_groups, weight, bias, eps), defaults filled in."""
    defaults = {"weight": None, "bias": None, "eps": 1e-5}
    names = ["input", "num_groups", "weight", "bias", "eps"]
    given = dict(zip(names, norm.args))
    given.update({k: v for k, v in norm.kwargs.items() if k in names})
    return tuple(given.get(k, defaults.get(k)) for k in names)
