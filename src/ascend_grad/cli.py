"""The `ascend-grad` command. Exit status: 0 success, 2 bad input (one line on stderr), 1 internal error."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys

import ascend_grad
from ascend_grad.model_file import InputError, attributed, first_line, load_model, read_model
from ascend_grad.staging import Staging, output_folder, refuse_overwriting, remove_quietly, save_model, stage_json


def _attribute_text(attr) -> str:
    import onnx

    if not attr.default_value.type:
        return f"{attr.name} (required)"
    value = onnx.helper.get_attribute_value(attr.default_value)
    if isinstance(value, float):
        value = f"{value:.7g}"  # stored as float32: 1e-05, not 9.99999974e-06
    return f"{attr.name}={value.decode() if isinstance(value, bytes) else value}"


def cmd_ops(args: argparse.Namespace) -> int:
    """Print the op set: each op's inputs, outputs, attributes and dtypes, from the registered schemas."""
    import onnx

    from ascend_grad import ops  # registers the schemas

    for name in ops.__all__:
        if not name[0].isupper():
            continue
        schema = onnx.defs.get_schema(name, ascend_grad.OPSET_VERSION, ascend_grad.DOMAIN)
        inputs = ", ".join(p.name for p in schema.inputs)
        outputs = ", ".join(p.name + ("?" if p.option.name == "Optional" else "") for p in schema.outputs)
        print(f"{ascend_grad.DOMAIN}::{name}({inputs}) -> ({outputs})")
        attrs = ", ".join(_attribute_text(a) for _, a in sorted(schema.attributes.items()))
        if attrs:
            print(f"    attributes: {attrs}")
        for constraint in schema.type_constraints:
            types = ", ".join(t.removeprefix("tensor(").removesuffix(")") for t in constraint.allowed_type_strs)
            print(f"    {constraint.type_param_str}: {types}")
    return 0


def cmd_fuse(args: argparse.Namespace) -> int:
    """Fuse the decomposed backward passes (and GroupNorm forwards) of IN into ascend.grad nodes; write OUT."""
    from ascend_grad.graph_passes import fuse_backward_ops

    if os.path.isdir(args.input):
        return _fuse_artifacts(args)
    output_folder(args.output)  # before any work: a bad -o or --report costs nothing
    if args.report:
        output_folder(args.report, "report")
    proto, model = read_model(args.input)
    outputs = [args.output, args.output + ".data", *([args.output + ".ascend.json"] if args.target == "ascend" else []),
               *([args.report] if args.report else [])]
    refuse_overwriting(args, proto, outputs)
    if args.verify:
        _check_verify_memory(args.input, proto, args.verify_memory)
    fused, report = attributed(args.input, lambda: fuse_backward_ops(model))
    plan = None
    if args.target == "ascend":  # the graph made right for onnxruntime-cann, and its plan
        fused, plan = attributed(args.input, lambda: _export_for_ascend(fused, args.input))
    with Staging(args.output, args.report) as staging:
        try:
            attributed(args.input, lambda: save_model(fused, staging.path()))
        except OSError as error:
            raise InputError(f"{args.output}: cannot write: {error.strerror or error}") from None
        fused_ops = ", ".join(f"{op} x{n}" for op, n in report.counts.items() if n) or "nothing"
        print(f"fused: {fused_ops}; nodes {report.nodes_before} -> {report.nodes_after}")
        for where, why in report.refused.items():
            print(f"left alone: {where}: {why}")
        result = report.to_dict()
        if plan is not None:
            with open(staging.path(".ascend.json"), "w") as f:
                json.dump(plan, f, indent=1)
            _print_plan(plan)
            result["ascend"] = plan
        if args.verify:
            from ascend_grad.verify import compare_models

            errors = compare_models(args.input, staging.path(), memory_budget=args.verify_memory)  # OUT before it is OUT
            result["verify"] = errors
            worst = max(errors["relative_errors"].values(), default=0.0)
            print(f"verified {len(errors['relative_errors'])} outputs against the original: largest relative error "
                  f"{worst:.2e} (bound {errors['bound']:g})")
            if worst > errors["bound"]:  # nothing is written: OUT would be a wrong graph
                print("ascend-grad: error: the fused graph's outputs differ from the original's; nothing written",
                      file=sys.stderr)
                return 1
        staging.stage_report(result)
        staging.commit()
    print(f"wrote {args.output}")
    if plan is not None:
        options = ", ".join(f"{k}={v}" for k, v in {**plan["provider_options"], **plan["session_options"]}.items())
        print(f"wrote {args.output}.ascend.json (run OUT with {options}: runtime_ext.cann_session)")
    return 0


def _check_verify_memory(path: str, proto, budget: int) -> None:
    from ascend_grad.verify import CannotVerify, check_feed_memory

    try:
        check_feed_memory(proto, budget)
    except CannotVerify as error:
        raise InputError(f"{path}: {error}") from None


def _fuse_artifacts(args: argparse.Namespace) -> int:
    """fuse on a folder of onnxruntime-training artifacts: OUT is a folder of the same files, fused
    (graph_passes.fuse_training_artifacts)."""
    from ascend_grad.graph_passes import NotArtifacts, fuse_training_artifacts

    if args.target == "ascend":
        raise InputError(f"{args.input}: a folder of onnxruntime-training artifacts: their training graph holds "
                         "onnxruntime-training ops that onnxruntime-cann cannot load (--target ascend takes one ONNX file)")
    if args.verify:
        raise InputError(f"{args.input}: a folder of onnxruntime-training artifacts: --verify runs graphs in this "
                         "onnxruntime, which cannot run them; load OUT with onnxruntime.training.api")
    if args.report:
        output_folder(args.report, "report")
    try:
        report = fuse_training_artifacts(args.input, args.output)
    except NotArtifacts as error:
        raise InputError(str(error)) from None
    for name, fusion in report.models.items():
        fused_ops = ", ".join(f"{op} x{n}" for op, n in fusion.counts.items() if n) or "nothing"
        print(f"{name}: fused: {fused_ops}; nodes {fusion.nodes_before} -> {fusion.nodes_after}")
    for where, why in report.refused.items():
        print(f"left alone: {where}: {why}")
    carried = [f"{name} ({how})" if how != "copied" else name for name, how in report.written.items() if how != "fused"]
    print(f"carried over: {', '.join(carried)}")
    for name, why in report.dropped.items():
        print(f"not written: {name}: {why}")
    print(f"wrote {args.output}")
    _write_report(args.report, report.to_dict())
    return 0


def _export_for_ascend(fused, source: str):
    """The fused graph made right for onnxruntime-cann (graph_passes.ascend), or a one-line refusal."""
    from ascend_grad.graph_passes.ascend import CannotExport
    from ascend_grad.graph_passes.ascend.export import export_in_place

    try:
        return export_in_place(fused)
    except CannotExport as error:
        raise InputError(f"{source}: {error}") from None


def _print_plan(plan: dict) -> None:
    """A summary of OUT.ascend.json."""
    from collections import Counter

    print(f"ascend: {plan['npu_nodes']} nodes on the NPU, {plan['host_nodes']} on the host; host<->device copies "
          f"{plan['host_device_copies_before']} -> {plan['host_device_copies']} (Memcpy nodes onnxruntime inserts)")
    kinds = Counter(r["what"].split(" (")[0] for r in plan["rewrites"])
    for what, n in kinds.items():
        print(f"rewrote: {what}" + (f" x{n}" if n > 1 else ""))


TORCH_DTYPES = ("float32", "float16", "bfloat16", "float64", "int64", "int32", "bool")


def _input_spec(text: str) -> tuple[list[int], str | None]:
    """--input 2,3,64,64 or 2:int64: a shape (comma-separated, an empty shape for a scalar) and an
    optional dtype."""
    shape_text, _, dtype = text.partition(":")
    try:
        shape = [int(d) for d in shape_text.split(",") if d.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: a shape is comma-separated sizes, e.g. 2,3,64,64 or 2:int64") from None
    if any(d < 0 for d in shape):
        raise argparse.ArgumentTypeError(f"{text!r}: sizes must not be negative")
    if dtype and dtype not in TORCH_DTYPES:
        raise argparse.ArgumentTypeError(f"{text!r}: dtype {dtype!r} is not one of {', '.join(TORCH_DTYPES)}")
    return shape, dtype or None


def _load_factory(spec: str):
    """`package.module:factory` or `path/to/file.py:factory` -> the callable (a class or function)."""
    import importlib
    import importlib.util

    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name:
        raise InputError(f"{spec}: give the module as package.module:factory or file.py:factory")
    try:
        if where.endswith(".py"):
            if not os.path.isfile(where):
                raise InputError(f"{where}: no such file")
            loaded = importlib.util.spec_from_file_location(os.path.splitext(os.path.basename(where))[0], where)
            module = importlib.util.module_from_spec(loaded)
            sys.modules[loaded.name] = module
            loaded.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except InputError:
        raise
    except ImportError as error:
        raise InputError(f"{spec}: cannot import {where}: {error}") from None
    factory = module
    for part in name.split("."):
        if not hasattr(factory, part):
            raise InputError(f"{spec}: {where} has no attribute {name!r}")
        factory = getattr(factory, part)
    if not callable(factory):
        raise InputError(f"{spec}: {name} is not callable (give a class or a function returning a torch.nn.Module)")
    return factory


# what export_training_graph's steps are called on the command line
EXPORT_STEPS = {"trace": "tracing the training step (torch.export, autograd)",
                "check": "checking every op has an ONNX translation",
                "translate": "translating to ONNX (torch.onnx with ascend-grad's translations)",
                "fuse": "fusing what is left (graph pass)"}


def cmd_export(args: argparse.Namespace) -> int:
    """Build a PyTorch module from its factory, export one training step to ONNX, write OUT."""
    from collections import Counter

    try:
        import torch
    except ImportError:
        raise InputError('export needs PyTorch: pip install "ascend-grad[torch]"') from None
    from ascend_grad.models.export.torch_internals import UnsupportedTorch, check_torch

    try:
        check_torch()  # before the module is built: another torch fails here, in one line
    except UnsupportedTorch as error:
        raise InputError(str(error)) from None
    from ascend_grad.models.export.training_graph import BATCH_RANGE, export_training_graph
    from ascend_grad.models.export.unsupported import UnsupportedOpsError
    from ascend_grad.progress import Progress

    folder = os.path.dirname(os.path.abspath(args.output))
    if os.path.isdir(args.output) or not os.path.isdir(folder):  # before any work
        raise InputError(f"{args.output}: cannot write there (" + ("a directory" if os.path.isdir(args.output) else f"no folder {folder}") + ")")
    factory = _load_factory(args.module)
    dtype = getattr(torch, args.dtype)
    torch.manual_seed(args.seed)
    module = factory()
    if not isinstance(module, torch.nn.Module):
        raise InputError(f"{args.module}: returned a {type(module).__name__}, not a torch.nn.Module")
    module = torch.nn.Module.to(module, dtype)  # (not a subclass override: diffusers warns in its own)
    module.train(not args.eval)
    inputs = tuple(torch.randn(shape, dtype=dtype) if (kind or args.dtype) in ("float32", "float16", "bfloat16", "float64")
                   else torch.zeros(shape, dtype=getattr(torch, kind)) for shape, kind in args.input)
    parameters = sum(p.numel() for p in module.parameters())
    described = ", ".join(f"{tuple(t.shape)} {str(t.dtype).removeprefix('torch.')}" for t in inputs)
    print(f"{args.module}: {type(module).__name__}, {parameters:,} parameters, {'eval' if args.eval else 'train'} mode, "
          f"inputs {described}", file=sys.stderr)
    progress = Progress().follow(EXPORT_STEPS)
    try:
        model = export_training_graph(module, inputs, dynamic_batch=args.dynamic_batch, fuse=args.fuse, progress=progress)
    except UnsupportedOpsError as error:
        progress()
        print(f"ascend-grad: error: {error}", file=sys.stderr)
        return 2
    except Exception as error:  # torch.export's refusals (data-dependent control flow, ...): the module's fault
        progress()
        if os.environ.get("ASCEND_GRAD_DEBUG"):
            raise
        first = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise InputError(f"{args.module}: cannot be exported: {type(error).__name__}: {first}") from None
    progress()
    import onnx

    onnx.save(model, args.output, save_as_external_data=model.ByteSize() > 1_800_000_000,
              location=os.path.basename(args.output) + ".data")
    ours = Counter(n.op_type for n in model.graph.node if n.domain == ascend_grad.DOMAIN)
    held = ", ".join(f"{op} x{n}" for op, n in sorted(ours.items())) or "none"
    print(f"wrote {args.output}: {len(model.graph.node)} nodes, {len(model.graph.output)} outputs "
          f"(loss, gradients, buffer updates); ascend.grad nodes: {held}")
    batch_range = next((p.value for p in model.metadata_props if p.key == BATCH_RANGE), "")
    if batch_range and not batch_range.endswith(".."):
        print(f"note: the module branches on the batch size; the graph holds for batch sizes {batch_range}")
    if args.verify:
        return _verify_export(model, module, inputs)
    return 0


def _verify_export(model, module, inputs) -> int:
    """Run the graph (with the kernel library) and PyTorch's step in float64; compare every output."""
    from ascend_grad.models.export.reference import step_errors, torch_step
    from ascend_grad.testing import TOLERANCE, run_kernels

    feeds = {i.name: t.numpy() for i, t in zip(model.graph.input, inputs)}
    got, want = run_kernels(model, feeds), torch_step(module, inputs)
    errors = step_errors(got, want)
    worst = max(errors, key=errors.get)
    bound = 10 * TOLERANCE.get(got["loss"].dtype, 1e-5)
    print(f"verified {len(got)} outputs against PyTorch (float64): largest relative error {errors[worst]:.2e} "
          f"({worst}); bound {bound:g}")
    if errors[worst] > bound:
        print("ascend-grad: error: the exported graph differs from PyTorch's step", file=sys.stderr)
        return 1
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    """Fuse the bundled training graphs, verify them, time a training step both ways."""
    from ascend_grad import demo
    from ascend_grad.models import graph_path

    for name in args.graphs or ():  # before any output: a typo costs nothing
        try:
            graph_path(name)
        except FileNotFoundError as error:
            raise InputError(str(error)) from None
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise InputError(f"{args.out}: exists and is not a folder; the demo writes a folder of models")
    try:  # before any work, so a bad -o costs nothing
        os.makedirs(args.out, exist_ok=True)
    except OSError as error:
        raise InputError(f"{args.out}: cannot create the output folder: {error.strerror or error}") from None
    if not os.access(args.out, os.W_OK):
        raise InputError(f"{args.out}: the output folder is not writable")
    if args.target == "ascend":
        from ascend_grad import demo_ascend

        try:
            return demo_ascend.run(args.out)
        except demo_ascend.NoNpu as error:
            raise InputError(str(error)) from None
    return demo.run(args.out, args.graphs or demo.GRAPHS, args.threads, args.seconds)


def cmd_info(args: argparse.Namespace) -> int:
    """What a model holds: its size, the ascend.grad nodes in it, and the decomposed backward
    passes and GroupNorm forwards the graph pass would fuse (or why not). Nothing is written."""
    from collections import Counter

    from ascend_grad.graph_passes import fuse_backward_ops

    model = load_model(args.model)
    graph = model.graph
    ours = Counter(n.op_type for n in graph.all_nodes() if n.domain == ascend_grad.DOMAIN)
    opsets = ", ".join(f"{d or 'ai.onnx'} {v}" for d, v in sorted(model.opset_imports.items()))
    first = (f"{args.model}: {sum(1 for _ in graph.all_nodes())} nodes, {len(graph.inputs)} inputs, "
             f"{len(graph.outputs)} outputs, {len(graph.initializers)} initializers; opsets: {opsets}")
    held = ", ".join(f"{op} x{n}" for op, n in sorted(ours.items())) or "none"
    functions = sorted(name for domain, name, _ in model.functions if domain == ascend_grad.DOMAIN)
    second = f"ascend.grad nodes: {held}" + (f" (function bodies attached: {', '.join(functions)})" if functions else "")
    _, report = attributed(args.model, lambda: fuse_backward_ops(model))  # on the loaded copy: the file is not touched
    print(first)
    print(second)
    fusable = ", ".join(f"{op} x{n}" for op, n in report.counts.items() if n) or "none"
    print(f"the graph pass fuses: {fusable}"
          + (f" ({report.nodes_before} -> {report.nodes_after} nodes)" if report.counts and any(report.counts.values()) else ""))
    for where, why in report.refused.items():
        print(f"recognised but left alone: {where}: {why}")
    return 0


BENCHMARKS = {
    "kernels": "the fused kernels vs ATen, torch.compile, the decomposed graph and the memory floor",
    "training_step": "a whole training step of a bundled graph, original vs fused",
    "training_artifacts": "onnxruntime-training's Module + AdamW loop on the ResBlock's artifacts, original vs fused",
    "graph_pass": "the graph pass's time by graph size",
    "models": "export and a training step of real models (diffusers UNet/VAE, CNNs): fused vs plain vs torch",
    "translations": "each ATen backward translation of models/export in onnxruntime vs PyTorch eager",
    "chart": "the kernel benchmark as a PNG chart",
}


def cmd_bench(args: argparse.Namespace) -> int:
    """Run one of the benchmarks of ascend_grad.bench (its own options follow its name)."""
    import importlib

    module = importlib.import_module(f"ascend_grad.bench.{args.benchmark}")
    return module.main(args.options, prog=f"ascend-grad bench {args.benchmark}")


def _write_report(path: str | None, result: dict) -> None:
    """The report, written aside and moved into place: never half a file."""
    if path:
        tmp = stage_json(path, result)
        try:
            os.replace(tmp, path)
        finally:
            remove_quietly(tmp)


def _byte_count(text: str) -> int:
    """An argparse type: a number of bytes, with an optional K/M/G/T suffix (powers of 1024)."""
    scale = 1024 ** (" KMGT".index(text[-1].upper()) if text and text[-1].upper() in "KMGT" else 0)
    try:
        value = float(text[:-1] if scale > 1 else text) * scale
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of bytes (e.g. 1073741824 or 1G)") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
    return int(value)


def _positive(kind):
    """An argparse type: a number of `kind` above zero."""
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not 0 < value < float("inf"):
            raise argparse.ArgumentTypeError(f"{text} must be a finite number above 0")
        return value

    parse.__name__ = kind.__name__
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="ascend-grad",
        description="SiLU, Mish and GroupNorm+SiLU backward passes as single ONNX nodes (domain ascend.grad).",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {ascend_grad.__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    commands.required = True
    ops_parser = commands.add_parser("ops", help="list the op set (inputs, outputs, attributes, dtypes)")
    ops_parser.set_defaults(run=cmd_ops)
    fuse = commands.add_parser(
        "fuse", help="fuse the decomposed SiLU, Mish and GroupNorm+swish backward passes and GroupNorm(+swish) forwards",
        description="Replace every decomposed SiLU, Mish and GroupNorm+swish backward, and every GroupNorm followed "
        "or not by a swish, in IN that is provably the op's math by one ascend.grad node, attach the ops' function "
        "bodies, and write OUT. Training and inference (forward-only) graphs alike.",
    )
    fuse.add_argument("input", metavar="IN.onnx", help="an ONNX file, or a folder of onnxruntime-training artifacts "
                      "(training_model.onnx, eval_model.onnx, optimizer_model.onnx, checkpoint): OUT is then a folder of "
                      "the same files, fused, that onnxruntime.training.api loads")
    fuse.add_argument("-o", "--output", metavar="OUT.onnx", required=True)
    fuse.add_argument("--target", choices=["cpu", "ascend"], default="cpu",
                      help="where the fused graph runs: cpu (onnxruntime's CPU execution provider with the kernel library, "
                      "or the ops' function bodies anywhere), or ascend (onnxruntime-cann's CANN execution provider: "
                      "OUT made right for it, and its plan in OUT.ascend.json)")
    fuse.add_argument("--verify", action="store_true",
                      help="run IN and OUT in onnxruntime (OUT with the kernel library) on random inputs and compare every output")
    fuse.add_argument("--verify-memory", type=_byte_count, default=1 << 30, metavar="BYTES",
                      help="the most memory --verify may give the random inputs it makes (symbolic dims count as 2); "
                      "a file declaring bigger inputs is refused before any work. Bytes, or with K, M, G, T "
                      "(powers of 1024), e.g. 4G (default: 1G)")
    fuse.add_argument("--report", metavar="FILE.json", help="write what was fused, and why anything was left alone")
    fuse.set_defaults(run=cmd_fuse)

    export = commands.add_parser(
        "export", help="export a PyTorch module's training step (forward, loss, backward) to ONNX",
        description="Build a module from its factory, export one training step (forward, the loss mean(out^2), "
        "the gradients of every parameter that requires grad, the updated buffers) to ONNX and write OUT. "
        "With --fuse the backward of every SiLU, Mish and GroupNorm+SiLU is an ascend.grad node. Needs PyTorch.",
    )
    export.add_argument("module", metavar="MODULE", help="package.module:factory or file.py:factory (a class or a "
                        "function returning a torch.nn.Module, called with no arguments)")
    export.add_argument("--input", type=_input_spec, action="append", required=True, metavar="SHAPE[:DTYPE]",
                        help="an example input, in order, e.g. 2,3,64,64 or 2:int64 (repeat for each input)")
    export.add_argument("--dtype", choices=["float32", "float16", "bfloat16", "float64"], default="float32",
                        help="the module's and the float inputs' dtype (default: %(default)s)")
    export.add_argument("-o", "--output", metavar="OUT.onnx", required=True)
    export.add_argument("--fuse", action="store_true", help="ascend.grad nodes for SiLU, Mish and GroupNorm+SiLU backward")
    export.add_argument("--dynamic-batch", action="store_true", help="dimension 0 of every input symbolic")
    export.add_argument("--eval", action="store_true", help="the module in eval mode (BatchNorm uses, and keeps, its running statistics)")
    export.add_argument("--seed", type=int, default=0, help="torch.manual_seed before building the module (default: %(default)s)")
    export.add_argument("--verify", action="store_true",
                        help="run the graph in onnxruntime (with the kernel library) and compare every output with PyTorch's step in float64")
    export.set_defaults(run=cmd_export)

    demo = commands.add_parser(
        "demo", help="the main job on the bundled training graphs: fuse, verify, time a training step both ways",
        description="Fuse the bundled training graphs (a diffusion-UNet ResBlock Conv->GroupNorm->SiLU->Conv with "
        "batch 8, a SiLU MLP and a Mish MLP), show what was fused, check every output of the fused graphs "
        "against the unfused ones in onnxruntime, time a training step both ways and write the fused models.",
    )
    demo.add_argument("-o", "--out", default="ascend-grad-demo", metavar="DIR",
                      help="where to write the fused models and report.json (default: %(default)s)")
    demo.add_argument("--threads", type=_positive(int), help="onnxruntime intra-op threads for the timing (default: all cores)")
    demo.add_argument("--seconds", type=_positive(float), default=3.0, help="time spent timing the training step (default: %(default)s)")
    demo.add_argument("--graphs", nargs="+", metavar="NAME", help="bundled graphs to use instead of the default three")
    demo.add_argument("--target", choices=["cpu", "ascend"], default="cpu",
                      help="ascend: the ResBlock step on an Ascend NPU through onnxruntime-cann, or on the simulated one "
                      "the test suite builds (it says which)")
    demo.set_defaults(run=cmd_demo)

    info = commands.add_parser("info", help="which of the fusable patterns a model contains, and which ascend.grad ops it holds")
    info.add_argument("model", metavar="MODEL.onnx")
    info.set_defaults(run=cmd_info)

    bench = commands.add_parser(
        "bench", help="run a benchmark (kernels, training_step, training_artifacts, models, translations, graph_pass, chart)",
        description="Run a benchmark; the options after its name are its own (ascend-grad bench kernels --help).\n"
        + "\n".join(f"  {name:14s} {text}" for name, text in BENCHMARKS.items()),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    bench.add_argument("benchmark", nargs="?", default="kernels", choices=list(BENCHMARKS))
    bench.add_argument("options", nargs=argparse.REMAINDER, help="the benchmark's own options")
    bench.set_defaults(run=cmd_bench)
    return parser


def _one_line(text: str) -> str:
    return " ".join(str(text).splitlines())  # a name or path with a newline must not make two lines


@contextlib.contextmanager
def _quiet_libraries():
    """No library speaks on stderr while a command runs (onnx_ir's and onnxscript's logging, any
    warnings): stderr is ours, one line on error and nothing on success. ASCEND_GRAD_DEBUG=1 lets
    them speak. (onnxruntime's C++ logger is quieted where verify makes its sessions.)"""
    if os.environ.get("ASCEND_GRAD_DEBUG"):
        yield
        return
    import logging
    import warnings

    previous = logging.root.manager.disable
    logging.disable(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        logging.disable(previous)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 with a usage line on bad arguments
    from ascend_grad.verify import CannotVerify

    try:
        with _quiet_libraries():
            return args.run(args)
    except BrokenPipeError:  # the reader went away (| head): stop quietly, flush nothing more
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 1
    except (InputError, CannotVerify, OSError) as error:  # bad input: one line, no traceback
        print(f"ascend-grad: error: {_one_line(error)}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("ascend-grad: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # a bug of ours: one line, the traceback on request
        if os.environ.get("ASCEND_GRAD_DEBUG"):
            raise
        print(f"ascend-grad: internal error: {type(error).__name__}: {first_line(error)} "
              "(ASCEND_GRAD_DEBUG=1 shows the traceback)", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
