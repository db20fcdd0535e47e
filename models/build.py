"""Rebuild the committed training graphs, from the repository root:
`python -m ascend_grad.models.build [--only NAME ...]` (writes models/graphs/, then reinstall).

Each graph is one module, one export route, one variant; `graphs/manifest.json` records how it was
made, its input, and which fused ops the graph pass must produce from it (one per activation), or
why none. Needs torch (and, for the onnxruntime-training route, the venv that route makes).
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import onnx
import torch

from ascend_grad.models import modules, routes

# name -> (module factory, example input shape)
MODULES = {
    "silu_mlp": (lambda: modules.SiluMLP(), (4, 16)),
    "mish_mlp": (lambda: modules.MishMLP(), (4, 16)),
    "swish_mlp": (lambda: modules.SwishMLP(), (4, 16)),
    "scaled_swish_mlp": (lambda: modules.SwishMLP(beta=1.702), (4, 16)),
    "resblock": (lambda: modules.ResBlock(), (2, 4, 8, 8)),
    "resblock_b8": (lambda: modules.ResBlock(channels=4, hidden=64), (8, 4, 32, 32)),
    "gn_swish": (lambda: modules.GroupNormSwishBlock(), (2, 4, 8, 8)),
    "gn_scaled_swish": (lambda: modules.GroupNormSwishBlock(beta=1.5), (2, 4, 8, 8)),
}

SILU, MISH, GN, GNS = "SiluBackward", "MishBackward", "GroupNormSwishGrad", "GroupNormSwish"
# graph name -> (module, route, route options, expected fused ops, note)
GRAPH_SET = {
    "silu_mlp.aot.opt": ("silu_mlp", "aot", {}, {SILU: 1}, ""),
    "silu_mlp.aot.noopt": ("silu_mlp", "aot", {"optimize": False}, {SILU: 1}, ""),
    "silu_mlp.export.dyn": ("silu_mlp", "export", {"dynamic_batch": True}, {SILU: 1}, ""),
    "silu_mlp.compile_bw": ("silu_mlp", "compile_bw", {}, {SILU: 1}, ""),
    "silu_mlp.aot.fp16": ("silu_mlp", "aot", {"half": True}, {SILU: 1}, ""),
    "silu_mlp.ort_training": ("silu_mlp", "ort_training", {}, {SILU: 1}, "com.microsoft.QuickGeluGrad alpha=1"),
    "mish_mlp.aot.opt": ("mish_mlp", "aot", {}, {MISH: 1}, ""),
    "mish_mlp.aot.noopt": ("mish_mlp", "aot", {"optimize": False}, {MISH: 1}, ""),
    "mish_mlp.export.dyn": ("mish_mlp", "export", {"dynamic_batch": True}, {MISH: 1}, ""),
    "mish_mlp.compile_bw": ("mish_mlp", "compile_bw", {}, {MISH: 1}, ""),
    "mish_mlp.export.fp16": ("mish_mlp", "export", {"half": True}, {MISH: 1}, ""),
    "mish_mlp.ort_training": ("mish_mlp", "ort_training", {"rewrite": True}, {MISH: 1},
                              "Softplus respelled for onnxruntime-training: TanhGrad, ReluGrad, Sign"),
    "swish_mlp.aot.opt": ("swish_mlp", "aot", {}, {SILU: 1}, "hand-written x * sigmoid(x): the product rule"),
    "swish_mlp.export.dyn": ("swish_mlp", "export", {"dynamic_batch": True}, {SILU: 1}, ""),
    "swish_mlp.ort_training": ("swish_mlp", "ort_training", {}, {SILU: 1}, ""),
    "scaled_swish_mlp.aot.opt": ("scaled_swish_mlp", "aot", {}, {}, "x * sigmoid(1.702 x) alone: no op of the set"),
    "resblock.aot.opt": ("resblock", "aot", {}, {GN: 1, GNS: 1}, ""),
    "resblock.aot.noopt": ("resblock", "aot", {"optimize": False}, {GN: 1, GNS: 1}, ""),
    "resblock.export.opt": ("resblock", "export", {}, {GN: 1, GNS: 1}, ""),
    "resblock.export.dyn": ("resblock", "export", {"dynamic_batch": True}, {GN: 1, GNS: 1}, ""),
    "resblock.aot.fp16": ("resblock", "aot", {"half": True}, {GN: 1, GNS: 1}, ""),
    "resblock.compile_bw": ("resblock", "compile_bw", {}, {SILU: 1},
                            "backward only: z and x are inputs and beta is absent, so GroupNorm stays"),
    "resblock.ort_training": ("resblock", "ort_training", {"rewrite": True}, {GN: 1, GNS: 1},
                              "GroupNorm respelled for onnxruntime-training (LayerNormalizationGrad)"),
    "resblock_b8.aot.opt": ("resblock_b8", "aot", {}, {GN: 1, GNS: 1}, "the demo's default graph"),
    "gn_swish.aot.opt": ("gn_swish", "aot", {}, {GN: 1, GNS: 1}, "GroupNorm then hand-written swish"),
    "gn_swish.export.dyn": ("gn_swish", "export", {"dynamic_batch": True}, {GN: 1, GNS: 1}, ""),
    "gn_scaled_swish.aot.noopt": ("gn_scaled_swish", "aot", {"optimize": False}, {GN: 1, GNS: 1}, "swish_scale 1.5"),
    "gn_scaled_swish.export.opt": ("gn_scaled_swish", "export", {}, {GN: 1, GNS: 1}, "swish_scale 1.5"),
}


def make_module(name: str, seed: int = 0) -> torch.nn.Module:
    """The module with deterministic, generic parameters (GroupNorm's scale and shift not 1 and 0)."""
    return seeded_module(MODULES[name][0], seed)


def seeded_module(factory, seed: int = 0) -> torch.nn.Module:
    """`factory()` made after torch.manual_seed(seed), its GroupNorms' scale and shift made generic."""
    torch.manual_seed(seed)
    module = factory()
    with torch.no_grad():
        for pname, p in module.named_parameters():
            if "norm" in pname:
                p.copy_((1.0 if pname.endswith("weight") else 0.0) + 0.2 * torch.randn_like(p))
    return module


def example_input(name: str, seed: int = 1) -> torch.Tensor:
    return seeded_input(MODULES[name][1], seed)


def seeded_input(shape, seed: int = 1) -> torch.Tensor:
    torch.manual_seed(seed)
    return torch.randn(shape)


def build(name: str) -> tuple[onnx.ModelProto, dict]:
    module_name, route, options, expected, note = GRAPH_SET[name]
    module = make_module(module_name)
    x = example_input(module_name)
    options = dict(options)
    if options.pop("half", False):
        module, x = copy.deepcopy(module).half(), x.half()
    if route == "aot":
        model = routes.aot_joint(module, (x,), **options)
    elif route == "export":
        model = routes.export_joint(module, (x,), **options)
    elif route == "compile_bw":
        model = routes.compile_backward(module, (x,), **options)
    else:
        from ascend_grad.models import ort_training

        model = ort_training.joint_graph(module, (x,), **options)
    model.producer_name = f"ascend-grad models.build ({route})"
    entry = {"module": module_name, "route": route, "options": GRAPH_SET[name][2], "expected": expected, "note": note,
             "inputs": {i.name: [d.dim_value or d.dim_param for d in i.type.tensor_type.shape.dim] for i in model.graph.input}}
    return model, entry


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", choices=list(GRAPH_SET), help="rebuild only these graphs")
    parser.add_argument("--out", type=Path, default=Path("models/graphs"), help="where to write (default: %(default)s)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    manifest_path = args.out / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    for name in args.only or GRAPH_SET:
        model, entry = build(name)
        onnx.save(model, args.out / f"{name}.onnx")
        manifest[name] = entry
        print(f"{name}: {len(model.graph.node)} nodes", file=sys.stderr)
    manifest_path.write_text(json.dumps(dict(sorted(manifest.items())), indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
