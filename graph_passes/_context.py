"""What one run of the fusion pass keeps while it works: its notes (what it fused, why it left
recognised gradients alone), the proofs a rule's check hands to its rewrite, and the memo of the
graph readers (_graph.strip, _graph.scalar, _shapes.shape_of).

A run opens a fresh context (`running()`), so nothing carries over between runs or leaks into a
concurrent one (it is a ContextVar); outside a run the readers simply do not memoise.
"""

from __future__ import annotations

import contextlib
import contextvars
from dataclasses import dataclass, field

import onnx_ir as ir


@dataclass
class PassContext:
    refused: dict[str, str] = field(default_factory=dict)  # "Op at <activation input>": reason
    fused: list[dict] = field(default_factory=list)
    proofs: dict[ir.Value, object] = field(default_factory=dict)  # anchor value -> proof, check to rewrite
    memo: dict[str, dict[ir.Value, object]] = field(default_factory=lambda: {"strip": {}, "scalar": {}, "shape": {}})

    def graph_changed(self) -> None:
        """A rewrite rewires readers: what was memoised about them no longer holds. Shapes still
        do (a fused node's outputs have the shapes of the values they replace)."""
        for name, table in self.memo.items():
            if name != "shape":
                table.clear()


_current: contextvars.ContextVar[PassContext | None] = contextvars.ContextVar("ascend_grad_fusion", default=None)


def current() -> PassContext:
    context = _current.get()
    if context is None:
        raise RuntimeError("the fusion rules run inside a FusionPass (graph_passes._fuse)")
    return context


def memo(table: str) -> dict[ir.Value, object] | None:
    """The memo table of the running pass, or None outside one."""
    context = _current.get()
    return None if context is None else context.memo[table]


@contextlib.contextmanager
def running():
    context = PassContext()
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
