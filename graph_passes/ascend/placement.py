"""Where onnxruntime-cann 1.24.4 will run each node of a graph, and the host<->device copies it adds.

Placement (single-operator mode, enable_cann_graph="0"): onnxruntime offers every node to the CANN
EP first; the EP takes a node iff one of its kernels (kernel_table) matches the node's op, domain,
since_version and the dtype bound to each type constraint; the rest goes to the CPU EP.

Copies, as onnxruntime's MemcpyTransformer inserts them after partitioning (memcpy_transformer.cc):
one MemcpyFromHost node per tensor that a host node (or a host-memory input of a CANN kernel)
produces and an NPU node reads, one MemcpyToHost node per tensor an NPU node produces and a host
node reads, however many readers it has. Graph inputs get a copy node only when both sides read
them (an input only the NPU reads is copied by the session, as is every graph output the NPU
produces: those transfers are counted apart). Initializers get none: onnxruntime places a copy of
each on every device that reads it when the session loads.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import onnx
import onnx_ir as ir

from ascend_grad import DOMAIN
from ascend_grad.graph_passes.ascend import kernel_table

NPU, HOST = "npu", "host"


@dataclass(frozen=True)
class Placement:
    node: str
    op_type: str
    device: str
    reason: str
    host_inputs: tuple[int, ...] = ()  # inputs the NPU kernel reads from host memory

    def to_dict(self) -> dict:
        return {"node": self.node, "op_type": self.op_type, "device": self.device, "reason": self.reason}


class CannotExport(ValueError):
    """The graph cannot be made right for onnxruntime-cann; the message says which node and why."""


class CannotLoad(CannotExport):
    """onnxruntime-cann has no kernel at all (NPU or host) for some node of the graph."""


def type_name(value: ir.Value | None) -> str | None:
    """onnxruntime's name of a value's type: "float", "float16", "seq(tensor(int64))", ..."""
    if value is None or value.type is None:
        return None
    kind = value.type
    if isinstance(kind, ir.TensorType):
        return kind.dtype.name.lower()
    if isinstance(kind, ir.SequenceType) and isinstance(kind.elem_type, ir.TensorType):
        return f"seq(tensor({kind.elem_type.dtype.name.lower()}))"
    return str(kind)


def _bindings(schema: onnx.defs.OpSchema, node: ir.Node, name: str) -> list[ir.Value | None]:
    """The node's inputs and outputs a kernel type constraint `name` binds: formal parameters whose
    type string or own name is `name` (onnxruntime resolves both), a variadic last one repeating."""
    bound = []
    for formals, actuals in ((schema.inputs, node.inputs), (schema.outputs, node.outputs)):
        for i, actual in enumerate(actuals):
            if not formals:
                break
            formal = formals[min(i, len(formals) - 1)]
            if i >= len(formals) and formal.option != onnx.defs.OpSchema.FormalParameterOption.Variadic:
                break
            if formal.type_str == name or formal.name == name:
                bound.append(actual)
    return bound


def _versions(kernels) -> str:
    return ", ".join(f"{a}" if b is None else f"{a}-{b}" for a, b, _ in kernels)


def _place_onnx(node: ir.Node, opset: int) -> tuple[str, str, tuple[int, ...]]:
    kernels = kernel_table.onnx_kernels(node.op_type)
    if not kernels:
        return HOST, f"onnxruntime-cann has no CANN kernel for {node.op_type}", ()
    try:
        schema = onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return HOST, f"{node.op_type} is not an ai.onnx op of opset {opset}", ()
    since = schema.since_version
    versioned = [k for k in kernels if kernel_table.version_matches(k[0], k[1], since)]
    if not versioned:
        return HOST, (f"this is {node.op_type}-{since} (opset {opset}); CANN's {node.op_type} kernels take "
                      f"since_version {_versions(kernels)} only"), ()
    refusals = []
    for first, _last, constraints in versioned:
        seen, wrong = [], None
        for name, allowed in constraints.items():
            for value in _bindings(schema, node, name):
                actual = type_name(value)
                if value is None or (value.name == "" and actual is None):  # an omitted optional
                    continue
                if actual not in allowed:
                    wrong = f"{name} is {actual or 'of unknown type'}, CANN takes {', '.join(allowed)}"
                    break
                seen.append(f"{name} {actual}")
            if wrong:
                break
        if wrong is None:
            types = ", ".join(dict.fromkeys(seen))
            return NPU, f"CANN kernel {node.op_type}-{first}" + (f" ({types})" if types else ""), \
                kernel_table.host_inputs(node.op_type, first)
        refusals.append(wrong)
    return HOST, f"CANN's {node.op_type}-{versioned[0][0]} kernel: " + "; ".join(dict.fromkeys(refusals)), ()


def _place_ours(node: ir.Node) -> tuple[str, str, tuple[int, ...]]:
    accepted = kernel_table.LIBRARY_KERNELS.get(node.op_type)
    if accepted is None:
        return HOST, f"the kernel library has no CANN kernel for {node.op_type}", ()
    actual = tuple(type_name(v) for v in node.inputs)
    if actual in accepted:
        return NPU, f"kernel library: CANN kernel (aclnn{node.op_type}) for {', '.join(dict.fromkeys(actual))}", ()
    listed = ", ".join(f"{v.name} {t}" for v, t in zip(node.inputs, actual) if v is not None)
    return HOST, (f"the library's CANN kernels for {node.op_type} do not take {listed} (aclnn{node.op_type}'s "
                  "dtype rule): its CPU kernel runs"), ()


def place_node(node: ir.Node, opset: int) -> Placement:
    if node.domain in ("", "ai.onnx"):
        device, reason, host = _place_onnx(node, opset)
    elif node.domain == DOMAIN:
        device, reason, host = _place_ours(node)
    else:
        device, reason, host = HOST, f"{node.domain} ops run on the CPU execution provider", ()
    return Placement(node.name, node.op_type, device, reason, host)


def unloadable(graph: ir.Graph) -> list[str]:
    """Nodes neither the CANN nor the CPU execution provider of the wheel has a kernel for."""
    missing = []
    for node in graph:
        if node.domain in ("", "ai.onnx", DOMAIN):
            continue
        known = kernel_table.CPU_CONTRIB_OPS.get(node.domain, frozenset())
        if node.op_type not in known:
            missing.append(f"{node.domain}::{node.op_type}")
    return missing


def place(model: ir.Model) -> list[Placement]:
    """Every node of the main graph, in graph order."""
    opset = model.opset_imports.get("", model.opset_imports.get("ai.onnx", 1))
    return [place_node(node, opset) for node in model.graph]


@dataclass(frozen=True)
class FlowNode:
    """A node as the copy count sees it."""

    device: str
    inputs: tuple[str, ...]  # "" for an omitted optional input
    outputs: tuple[str, ...]
    host_inputs: tuple[int, ...] = ()


@dataclass(frozen=True)
class Copies:
    from_host: int  # MemcpyFromHost nodes
    to_host: int  # MemcpyToHost nodes
    inputs_by_session: int  # graph inputs only the NPU reads: copied by the session, no node
    outputs_by_session: int  # graph outputs the NPU computes: copied by the session, no node

    @property
    def nodes(self) -> int:
        return self.from_host + self.to_host

    def to_dict(self) -> dict:
        return {"MemcpyFromHost": self.from_host, "MemcpyToHost": self.to_host,
                "graph_inputs_copied_by_the_session": self.inputs_by_session,
                "graph_outputs_copied_by_the_session": self.outputs_by_session}


def count_copies(nodes: Iterable[FlowNode], graph_inputs: Sequence[str], initializers: Iterable[str],
                 graph_outputs: Sequence[str]) -> Copies:
    """memcpy_transformer.cc's count for a graph whose nodes sit where `nodes` says."""
    constants = set(initializers) - set(graph_inputs)
    npu_reads, host_reads, npu_writes, host_writes = set(), set(), set(), set()
    for node in nodes:
        for i, name in enumerate(node.inputs):
            if not name or name in constants:
                continue
            on_npu = node.device == NPU and i not in node.host_inputs
            (npu_reads if on_npu else host_reads).add(name)
        (npu_writes if node.device == NPU else host_writes).update(o for o in node.outputs if o)
    inputs = set(graph_inputs) - constants
    both_read = {name for name in inputs if name in npu_reads and name in host_reads}
    return Copies(
        from_host=len(host_writes & npu_reads) + len(both_read),
        to_host=len(npu_writes & host_reads),
        inputs_by_session=len({name for name in inputs if name in npu_reads} - both_read),
        outputs_by_session=len({name for name in graph_outputs if name in npu_writes}),
    )


def flow(graph: ir.Graph, placements: Sequence[Placement]) -> list[FlowNode]:
    return [FlowNode(p.device, tuple(v.name if v is not None else "" for v in node.inputs),
                     tuple(v.name for v in node.outputs), p.host_inputs)
            for node, p in zip(graph, placements)]


def graph_copies(graph: ir.Graph, placements: Sequence[Placement]) -> Copies:
    return count_copies(flow(graph, placements), [v.name for v in graph.inputs], graph.initializers,
                        [v.name for v in graph.outputs])
