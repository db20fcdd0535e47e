"""A collection of small graphs from many torch.onnx exporter settings, forward-only and training,
for the graph pass to fuse (issue 11, "Spellings"). Rebuild from the repository root:
`python -m ascend_grad.models.collection [--only NAME ...]` (writes models/graphs/collection/, then
reinstall); CI never exports them.

Three small modules (models/modules.py): a ResBlock core Conv -> GroupNorm(6, 30) -> SiLU -> Conv
(`gn_silu`), the same with a hand-written swish of scale 1.5, z * sigmoid(1.5 z)
(`gn_scaled_swish`), and Linear -> Mish -> Linear (`mish_mlp`). Each setting (`SETTINGS`) is:

- kind: "forward" (the module in eval mode, its forward only, exported by torch.onnx directly) or
  "training" (the joint forward+backward graph of routes.py: `aot` = aot_joint, `export` =
  export_joint; outputs loss and grad.<parameter>);
- exporter: "dynamo" (torch.onnx.export(dynamo=True), `optimize` its optimize=) or "torchscript"
  (dynamo=False, `optimize` its do_constant_folding=);
- opset: 17, 18, 20 or 21 (what the exporter emits is kept: GroupNormalization at 21, say);
- batch: "static" or "dynamic" (dimension 0 of input_0 symbolic; the aot route is static only);
- dtype: "float32", or "float16" / "bfloat16": the export run under torch.autocast("cpu", dtype);
- params: "initializers"; "inputs" (the parameters are arguments of the exported function, named as
  in named_parameters(): a functional wrapper for a forward graph, the joint graph's own arguments for
  a training graph); "export_params=False" (torch.onnx.export's own flag).

`graphs/collection/manifest.json` records, per graph, its settings, its inputs (shape, dtype), its
node count and op histogram, and the fused ops the graph pass must make of it, by construction:
forward {"GroupNormSwish": one per GroupNorm}; training the same plus one GroupNormSwishGrad per
GroupNorm+swish, one MishBackward per Mish (and SiluBackward 0: each SiLU here follows a GroupNorm).
A setting whose export fails, emits another opset than asked, or gives a model that onnx's checker or
onnxruntime refuses is recorded as {"skipped": reason} and has no file.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import sys
from collections import Counter
from pathlib import Path

import onnx
import torch
from torch import nn

from ascend_grad.models import GRAPHS, modules, routes
from ascend_grad.models.export.interface import rename_interface

COLLECTION = GRAPHS / "collection"

# name -> (factory, example input shape, {"gn": GroupNorm+swish count, "mish": Mish count})
# (sizes chosen apart: N 2, C_in 3, rank 4, C 30, G 6, C/G 5, H x W 7 x 9 = 63, so that no constant the
# exporter writes stands for two of them: torch.onnx shares one Constant between equal Python ints)
MODULES = {
    "gn_silu": (lambda: modules.ResBlock(channels=3, hidden=30, groups=6), (2, 3, 7, 9), {"gn": 1, "mish": 0}),
    "gn_scaled_swish": (lambda: modules.GroupNormSwishBlock(channels=3, hidden=30, groups=6, beta=1.5), (2, 3, 7, 9),
                        {"gn": 1, "mish": 0}),
    "mish_mlp": (lambda: modules.MishMLP(width=6, hidden=10), (2, 6), {"gn": 0, "mish": 1}),
}
DTYPES = {"float32": None, "float16": torch.float16, "bfloat16": torch.bfloat16}
SHORT = {"float32": "f32", "float16": "f16", "bfloat16": "bf16", "initializers": "init", "inputs": "inputs",
         "export_params=False": "noparams", "static": "static", "dynamic": "dyn"}

# (module, opset, batch, dtype, params), each exported by every forward exporter ("inputs" is
# export_params=False for the TorchScript exporter, which has no other way)
FORWARD_ROWS = [
    ("gn_silu", 17, "static", "float32", "initializers"),
    ("gn_silu", 18, "static", "float32", "initializers"),
    ("gn_scaled_swish", 20, "dynamic", "float32", "initializers"),
    ("gn_silu", 21, "static", "float32", "initializers"),
    ("gn_scaled_swish", 21, "dynamic", "float32", "inputs"),
    ("gn_silu", 18, "static", "float16", "initializers"),
    ("gn_scaled_swish", 21, "static", "float16", "inputs"),
    ("gn_scaled_swish", 18, "static", "bfloat16", "initializers"),
    ("mish_mlp", 17, "dynamic", "float32", "inputs"),
]
FORWARD_EXPORTERS = [("dynamo", True), ("dynamo", False), ("torchscript", True), ("torchscript", False)]
# each by every training route and dynamo optimize on/off (the aot route: static batch only)
TRAINING_ROWS = [
    ("gn_silu", 18, "static", "float32", "initializers"),
    ("gn_scaled_swish", 20, "dynamic", "float32", "inputs"),
    ("gn_silu", 21, "dynamic", "float16", "initializers"),
    ("mish_mlp", 21, "dynamic", "float32", "initializers"),
    ("mish_mlp", 18, "static", "float16", "inputs"),
    ("gn_scaled_swish", 18, "static", "bfloat16", "initializers"),
    ("gn_silu", 17, "static", "float32", "initializers"),
]
TRAINING_ROUTES = [("aot", True), ("aot", False), ("export", True), ("export", False)]
# the TorchScript exporter on the aot joint graph, do_constant_folding on and off
TORCHSCRIPT_TRAINING_ROWS = [("gn_silu", 17, "static", "float32", "initializers"),
                             ("mish_mlp", 18, "static", "float32", "initializers")]


def _setting(kind, route, exporter, optimize, module, opset, batch, dtype, params) -> dict:
    return {"kind": kind, "module": module, "route": route, "exporter": exporter, "optimize": optimize,
            "opset": opset, "batch": batch, "dtype": dtype, "params": params}


def _name(s: dict) -> str:
    if s["exporter"] == "dynamo":
        how = f"{'dynamo' if s['kind'] == 'forward' else s['route']}.{'opt' if s['optimize'] else 'noopt'}"
    else:
        how = f"{'ts' if s['kind'] == 'forward' else s['route'] + '-ts'}.{'fold' if s['optimize'] else 'nofold'}"
    kind = "fwd" if s["kind"] == "forward" else "train"
    return ".".join([s["module"], kind, how, f"o{s['opset']}", SHORT[s["batch"]], SHORT[s["dtype"]], SHORT[s["params"]]])


def _settings() -> dict[str, dict]:
    table = []
    for exporter, optimize in FORWARD_EXPORTERS:
        for module, opset, batch, dtype, params in FORWARD_ROWS:
            if exporter == "torchscript" and params == "inputs":
                params = "export_params=False"
            table.append(_setting("forward", "module", exporter, optimize, module, opset, batch, dtype, params))
    # dynamo's own export_params=False, once
    table.append(_setting("forward", "module", "dynamo", True, "gn_silu", 18, "static", "float32", "export_params=False"))
    for route, optimize in TRAINING_ROUTES:
        for module, opset, batch, dtype, params in TRAINING_ROWS:
            table.append(_setting("training", route, "dynamo", optimize, module, opset,
                                  batch if route == "export" else "static", dtype, params))
    for optimize in (True, False):
        for module, opset, batch, dtype, params in TORCHSCRIPT_TRAINING_ROWS:
            table.append(_setting("training", "aot", "torchscript", optimize, module, opset, batch, dtype, params))
    settings = {_name(s): s for s in table}
    assert len(settings) == len(table), "two settings with one name"
    return settings


SETTINGS = _settings()


def expected_counts(setting: dict) -> dict[str, int]:
    """The fused ops the graph pass must make of the graph, by construction."""
    counts = MODULES[setting["module"]][2]
    if setting["kind"] == "forward":
        return {"GroupNormSwish": counts["gn"]}
    return {"GroupNormSwishGrad": counts["gn"], "SiluBackward": 0, "MishBackward": counts["mish"],
            "GroupNormSwish": counts["gn"]}


def make_module(name: str) -> nn.Module:
    """The module of MODULES with its deterministic parameters (seed 0, generic GroupNorm scale/shift)."""
    from ascend_grad.models import build

    return build.seeded_module(MODULES[name][0])


def example_input(name: str) -> torch.Tensor:
    from ascend_grad.models import build

    return build.seeded_input(MODULES[name][1])


class Skipped(Exception):
    """The exporter cannot make this setting's graph (the message: why, in one line)."""


class _Log(logging.Handler):
    """What the exporter and its optimizer log while exporting (a failed opset conversion, say)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        line = record.getMessage().splitlines()[0] if record.getMessage() else ""
        if record.exc_info and record.exc_info[1] is not None:
            line += f" ({_one_line(record.exc_info[1])})"
        self.lines.append(line)


def _one_line(error: BaseException) -> str:
    """The error's type and the first line of its root cause's message (torch.onnx wraps the error
    that stopped it in a banner)."""
    cause = error
    while cause.__cause__ is not None:
        cause = cause.__cause__
    text = " ".join(str(cause).split())  # one line (some messages go on over two)
    kind = type(error).__name__ if cause is error else f"{type(error).__name__} <- {type(cause).__name__}"
    return f"{kind}: {text[:300]}"


class _ParametersAsArguments(nn.Module):
    """forward(x, parameters): the module run with the given {name: value} parameters (torch.func), so
    that the exporter sees the parameters as inputs (a dict: torch.onnx keeps its dynamic_shapes as
    given, where it turns the tuple of *args into a list that torch.export then refuses)."""

    def __init__(self, module: nn.Module):
        super().__init__()
        self.__dict__["inner"] = module  # not a submodule: the wrapper holds no parameters of its own

    def forward(self, x, parameters):
        return torch.func.functional_call(self.inner, parameters, (x,))


def _forward_graph(module: nn.Module, x: torch.Tensor, s: dict) -> onnx.ModelProto:
    module = module.eval()
    params = dict(module.named_parameters())
    dynamic = s["batch"] == "dynamic"
    export_params = s["params"] != "export_params=False"
    if s["exporter"] == "torchscript":  # (its parameters as inputs: export_params=False only)
        return routes.to_onnx(module, (x,), s["optimize"], {"input_0": {0: "batch"}} if dynamic else None, dynamo=False,
                              opset_version=s["opset"], input_names=["input_0"], output_names=["output_0"],
                              export_params=export_params)
    batch = {0: torch.export.Dim("batch", min=2)} if dynamic else None
    if s["params"] == "inputs":  # (a keyword argument: torch.onnx would take a trailing dict in args for kwargs)
        program, names, options = _ParametersAsArguments(module), ["input_0", *params], {"kwargs": {"parameters": params}}
        shapes = {"x": batch, "parameters": {n: None for n in params}} if dynamic else None
    else:
        program, names, options, shapes = module, ["input_0"], {}, (batch,) if dynamic else None
    model = routes.to_onnx(program, (x,), s["optimize"], shapes, opset_version=s["opset"], table=None,
                           export_params=export_params, **options)
    renames = {i.name: new for i, new in zip(model.graph.input, names)}
    return rename_interface(model, renames, ["output_0"])


def _training_graph(module: nn.Module, x: torch.Tensor, s: dict) -> onnx.ModelProto:
    options = {"optimize": s["optimize"], "opset_version": s["opset"], "params_as_inputs": s["params"] == "inputs"}
    if s["route"] == "aot":
        return routes.aot_joint(module.train(), (x,), dynamo=s["exporter"] == "dynamo", **options)
    return routes.export_joint(module.train(), (x,), dynamic_batch=s["batch"] == "dynamic", **options)


def _dims(value) -> list:
    return [d.dim_value if d.HasField("dim_value") else d.dim_param for d in value.type.tensor_type.shape.dim]


def export(name: str) -> onnx.ModelProto:
    """The graph of setting `name`, checked (valid ONNX, loads in onnxruntime); Skipped if it cannot be."""
    s = SETTINGS[name]
    module, x = make_module(s["module"]), example_input(s["module"])
    autocast = torch.autocast("cpu", dtype=DTYPES[s["dtype"]]) if DTYPES[s["dtype"]] else contextlib.nullcontext()
    log = _Log()
    logging.getLogger().addHandler(log)
    try:
        with autocast:
            model = (_forward_graph if s["kind"] == "forward" else _training_graph)(module, x, s)
    except Exception as error:  # noqa: BLE001 - the exporter's error is the point
        raise Skipped(f"the exporter fails: {_one_line(error)}") from None
    finally:
        logging.getLogger().removeHandler(log)
    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    if opset != s["opset"]:
        why = ([line for line in log.lines if "convert" in line.lower()] or ["no reason logged"])[-1]
        raise Skipped(f"the exporter emits opset {opset}, not {s['opset']}: {why}")
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as error:  # noqa: BLE001
        raise Skipped(f"the exporter emits an invalid model (onnx.checker): {_one_line(error)}") from None
    try:
        import onnxruntime as ort

        ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as error:  # noqa: BLE001
        raise Skipped(f"onnxruntime refuses the exported model: {_one_line(error)}") from None
    model.producer_name = f"ascend-grad models.collection ({s['kind']}, {s['exporter']})"
    return model


def build(name: str) -> tuple[onnx.ModelProto | None, dict]:
    """(model, manifest entry), or (None, entry with "skipped": reason)."""
    s = SETTINGS[name]
    try:
        model = export(name)
    except Skipped as why:
        return None, {"settings": s, "skipped": str(why)}
    initializers = {t.name for t in model.graph.initializer}
    inputs = {i.name: {"shape": _dims(i), "dtype": onnx.helper.tensor_dtype_to_np_dtype(i.type.tensor_type.elem_type).name}
              for i in model.graph.input if i.name not in initializers}
    ops = Counter(f"{n.domain}.{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type for n in model.graph.node)
    return model, {"settings": s, "inputs": inputs, "expected": expected_counts(s), "nodes": len(model.graph.node),
                   "ops": dict(sorted(ops.items()))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(SETTINGS), metavar="NAME", help="rebuild only these graphs")
    parser.add_argument("--out", type=Path, default=Path("models/graphs/collection"), help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    manifest = {name: entry for name, entry in manifest.items() if name in SETTINGS}
    for name in args.only or SETTINGS:
        model, entry = build(name)
        path = args.out / f"{name}.onnx"
        if model is None:
            path.unlink(missing_ok=True)
            print(f"{name}: skipped: {entry['skipped']}", file=sys.stderr)
        else:
            for node in model.graph.node:  # torch's notes (stack traces, fx nodes, scopes): half the bytes
                del node.metadata_props[:]
            onnx.save(model, path)
            print(f"{name}: {entry['nodes']} nodes", file=sys.stderr)
        manifest[name] = entry
    for stale in args.out.glob("*.onnx"):
        if stale.stem not in SETTINGS:
            stale.unlink()
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
