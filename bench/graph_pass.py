"""How long the graph pass takes, by graph size: `python -m ascend_grad.bench.graph_pass`.

Three graphs, each at about 1k, 10k and 100k nodes:
  resblock_tiled    copies of the bundled training graph resblock.aot.opt side by side (one
                    GroupNorm+SiLU backward and 7 graph outputs each);
  silu_blocks       SiLU backwards as torch spells them, each with 4 unrelated nodes after it
                    (10 nodes per block, every block fused);
  random_arithmetic sigmoid/tanh/softplus and + - * wired at random to recent values: everything
                    the recognisers look at, and no gradient (nothing fused, every anchor examined).
It prints seconds and microseconds per node for fuse_backward_ops on an onnx.ModelProto
(deserialising, shape inference where needed, the rules, dead-node removal, serialising).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

SHAPE = [4, 8]
F = TensorProto.FLOAT


def _model(nodes, output):
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, F, SHAPE) for n in ("dy", "x")],
        [helper.make_tensor_value_info(output, F, SHAPE)],
        [helper.make_tensor("one", F, [], [1.0])],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)


def silu_blocks(blocks: int) -> onnx.ModelProto:
    """`blocks` SiLU backwards as torch spells them, each followed by 4 unrelated nodes and feeding
    the next: 10 nodes per block."""
    nodes, x = [], "x"
    for i in range(blocks):
        p = f"b{i}."
        nodes += [
            helper.make_node("Sigmoid", [x], [p + "s"]),
            helper.make_node("Sub", ["one", p + "s"], [p + "1-s"]),
            helper.make_node("Mul", [x, p + "1-s"], [p + "x(1-s)"]),
            helper.make_node("Add", [p + "x(1-s)", "one"], [p + "a"]),
            helper.make_node("Mul", [p + "s", p + "a"], [p + "d"]),
            helper.make_node("Mul", ["dy", p + "d"], [p + "dx"]),
            helper.make_node("Add", [p + "dx", x], [p + "r"]),
            helper.make_node("Relu", [p + "r"], [p + "relu"]),
            helper.make_node("Neg", [p + "relu"], [p + "n"]),
            helper.make_node("Tanh", [p + "n"], [p + "y"]),
        ]
        x = p + "y"
    return _model(nodes, x)


def random_arithmetic(n: int, seed: int = 0) -> onnx.ModelProto:
    """n nodes of sigmoid/tanh/softplus/exp and + - * wired to recent values: everything the
    recognisers look at, and no gradient."""
    rng = np.random.default_rng(seed)
    values, nodes = ["x", "dy"], []
    for i in range(n):
        def near():
            return values[-1 - int(rng.integers(0, min(8, len(values))))]
        if rng.random() < 0.3:
            op = ["Sigmoid", "Tanh", "Softplus", "Neg"][rng.integers(0, 4)]
            nodes.append(helper.make_node(op, [near()], [f"v{i}"]))
        else:
            op = ["Add", "Sub", "Mul", "Mul"][rng.integers(0, 4)]
            nodes.append(helper.make_node(op, [near(), near()], [f"v{i}"]))
        values.append(f"v{i}")
    return _model(nodes, values[-1])


def tiled(name: str, copies: int) -> onnx.ModelProto:
    """`copies` of a bundled graph in one graph, each copy's names prefixed k<i>/."""
    from ascend_grad.models import graph_path

    model = onnx.load(graph_path(name))
    graph = helper.make_graph([], f"{copies} x {name}", [], [])
    for k in range(copies):
        def rename(value: str) -> str:
            return f"k{k}/{value}" if value else value

        for node in model.graph.node:
            copy = graph.node.add()
            copy.CopyFrom(node)
            copy.name = rename(node.name)
            copy.input[:] = [rename(v) for v in node.input]
            copy.output[:] = [rename(v) for v in node.output]
        for source, target in ((model.graph.initializer, graph.initializer), (model.graph.input, graph.input),
                               (model.graph.output, graph.output), (model.graph.value_info, graph.value_info)):
            for item in source:
                copy = target.add()
                copy.CopyFrom(item)
                copy.name = rename(item.name)
    tiled_model = helper.make_model(graph, opset_imports=model.opset_import, ir_version=model.ir_version)
    tiled_model.functions.extend(model.functions)
    return tiled_model


def tiled_to(name: str, nodes: int) -> onnx.ModelProto:
    """As many copies of a bundled graph as make about `nodes` nodes."""
    from ascend_grad.models import graph_path

    return tiled(name, max(1, round(nodes / len(onnx.load(graph_path(name)).graph.node))))


GRAPHS = {"resblock_tiled": lambda n: tiled_to("resblock.aot.opt", n), "silu_blocks": lambda n: silu_blocks(n // 10), "random_arithmetic": random_arithmetic}


def run(sizes=(1_000, 10_000, 100_000), out=None) -> list[tuple[str, int, float, int]]:
    from ascend_grad.graph_passes import fuse_backward_ops

    out = out or sys.stdout  # (read at the call: a caller may have replaced sys.stdout since the import)

    rows = []
    print("| graph | nodes | fused | seconds | us per node |", file=out)
    print("|---|---|---|---|---|", file=out)
    for name, make in GRAPHS.items():
        for n in sizes:
            model = make(n)
            n = len(model.graph.node)
            gc.collect()  # the previous case's garbage is not this one's cost
            start = time.perf_counter()
            _, report = fuse_backward_ops(model)
            seconds = time.perf_counter() - start
            fused = sum(report.counts.values())
            rows.append((name, n, seconds, fused))
            print(f"| {name} | {n} | {fused} | {seconds:.2f} | {seconds / n * 1e6:.0f} |", file=out, flush=True)
    return rows


def main(argv=None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.graph_pass", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    run(parser.parse_args(argv).sizes)
    return 0


if __name__ == "__main__":
    sys.exit(main())
