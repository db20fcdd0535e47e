"""The one module of ours that reaches into torch's private exporter API, and the torch versions it
is known to work with.

Why private: the public `torch.onnx.export` runs decomposition, translation and its own optimizer
in one call. export_training_graph needs the steps apart: it drops torch.onnx's translations of the
ops in DECOMPOSE (wrong for a training step), names every op without a translation before
translating (unsupported.py), and runs its own optimizer in place of torch.onnx's (which would fold
parameters into constants). The joint forward+backward trace is torch.export's private
`_decompose_exported_program(joint_loss_index=0)`, as torch's own `_export_forward_backward` does.

These names change between torch releases without notice, so export_training_graph refuses any
torch outside SUPPORTED_TORCH at once (`check_torch`), and tests/test_private_api.py resolves every
name of PRIVATE_NAMES, so an upgrade shows where it breaks.
"""

from __future__ import annotations

import re

# the torch releases whose private exporter API this module was tested against: the tests ran on
# 2.13.0 (pyproject's torch extra); 2.13 patch releases take bug fixes only. Widen it only after
# the test suite (tests/test_private_api.py first) passes on the new release.
SUPPORTED_TORCH = (2, 13)

# every private name used here, as "module:attribute.attribute" (tests/test_private_api.py)
PRIVATE_NAMES = (
    "torch.onnx._internal.exporter._registration:ONNXRegistry.from_torchlib",
    "torch.onnx._internal.exporter._registration:ONNXRegistry.register_op",
    "torch.onnx._internal.exporter._registration:ONNXRegistry.is_registered",
    "torch.onnx._internal.exporter._core:_prepare_exported_program_for_export",
    "torch.onnx._internal.exporter._fx_passes:insert_type_promotion_nodes",
    "torch.onnx._internal.exporter._fx_passes:remove_assertion_nodes",
    "torch.fx.experimental._config:backed_size_oblivious",
    "torch.onnx._internal.exporter._core:_exported_program_to_onnx_program",
    "torch.onnx._internal.exporter._decomp:create_onnx_friendly_decomposition_table",
    "torch.onnx._internal.exporter._decomp:get_onnx_implemented_overloads",
    "torch.export.exported_program:_decompose_exported_program",
    "torch.export.exported_program:ExportedProgram._update",
    "torch.export.experimental:_copy_graph_module_and_signature",
    "torch.export.experimental:_remove_detach_pass",
    "torch.export.experimental:_export_forward_backward",
)


class UnsupportedTorch(RuntimeError):
    """The installed torch is not one whose private exporter API this module was tested against."""


def supported_range() -> str:
    major, minor = SUPPORTED_TORCH
    return f">={major}.{minor},<{major}.{minor + 1}"


def check_torch(version: str | None = None) -> None:
    """Raise UnsupportedTorch (one line naming the supported range) unless `version` (default: the
    installed torch) is a release of SUPPORTED_TORCH."""
    if version is None:
        import torch

        version = str(torch.__version__)
    found = re.match(r"(\d+)\.(\d+)", version)
    if not found or (int(found[1]), int(found[2])) != SUPPORTED_TORCH:
        raise UnsupportedTorch(f"export_training_graph supports torch {supported_range()} (it uses torch.onnx's "
                               f"private exporter API, which changes between releases); this is torch {version}")


def onnx_registry(drop, add: dict):
    """torch.onnx's registry of translations (torchlib's), less those of the ops `drop`, plus `add`
    ({OpOverload: onnxscript function}). Its `is_registered(op)` says whether op has a translation."""
    from torch.onnx._internal.exporter import _registration

    registry = _registration.ONNXRegistry.from_torchlib()
    for op in drop:
        registry.functions.pop(op.name(), None)
    for op, function in add.items():
        registry.register_op(op, function)
    return registry


def prepare_for_onnx(program, registry):
    """`program` decomposed and transformed exactly as torch.onnx does before translating it."""
    from torch.onnx._internal.exporter import _core

    return _core._prepare_exported_program_for_export(program, registry=registry)


def prepare_decomposed_for_onnx(program):
    """prepare_for_onnx for a program none of whose ops torch.onnx would decompose, without that
    decomposition (a new trace of the whole program, which would give the same graph back): type
    promotions made explicit and assertions removed, on a copy. This is torch 2.13's
    `_core._prepare_exported_program_for_export` less its `decompose_with_registry`."""
    import torch
    from torch.export.experimental import _copy_graph_module_and_signature
    from torch.onnx._internal.exporter import _fx_passes

    graph_module, signature = _copy_graph_module_and_signature(program)
    with torch.fx.experimental._config.patch(backed_size_oblivious=True):  # (as torch.onnx's)
        _fx_passes.insert_type_promotion_nodes(graph_module)
        graph_module = _fx_passes.remove_assertion_nodes(graph_module)
    return program._update(graph_module, signature)


def to_onnx_program(program, registry):
    """torch.onnx's translation of a prepared program (an ONNXProgram: `.model` in onnx_ir, not
    optimized)."""
    from torch.onnx._internal.exporter import _core

    return _core._exported_program_to_onnx_program(program, registry=registry)


def onnx_decomposition_table(registry) -> dict:
    """The decompositions torch.onnx applies for `registry` (the ops it translates are kept)."""
    from torch.onnx._internal.exporter import _decomp

    return _decomp.create_onnx_friendly_decomposition_table(set(_decomp.get_onnx_implemented_overloads(registry)))


def joint_trace(program, table: dict):
    """AOTAutograd's joint forward+backward of `program` (its loss is output 0) under the
    decompositions `table`, detach nodes removed."""
    from torch.export.experimental import _copy_graph_module_and_signature, _remove_detach_pass
    from torch.export.exported_program import _decompose_exported_program

    joint = _decompose_exported_program(program, cia_to_decomp={}, python_decomp_table=table, joint_loss_index=0,
                                        decompose_custom_triton_ops=False)
    graph_module, signature = _copy_graph_module_and_signature(joint)
    _remove_detach_pass(graph_module, signature)
    return joint._update(graph_module, signature)


def export_forward_backward(program):
    """torch's own joint forward+backward of `program` (its loss is output 0), with its default
    decompositions (models/routes.py's export_joint route)."""
    from torch.export.experimental import _export_forward_backward

    return _export_forward_backward(program)
