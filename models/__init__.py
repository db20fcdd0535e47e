"""The PyTorch side: `export_training_graph` (export/: a module -> one ONNX training graph with our
ops), and the reference training graphs: small PyTorch modules, the export routes that turn them
into joint forward+backward ONNX graphs, and the committed graphs they produced (models/graphs/), so
tests and the demo need no PyTorch. PyTorch is needed only to export or to rebuild the graphs
(`python -m ascend_grad.models.build`).
"""

from pathlib import Path

GRAPHS = Path(__file__).resolve().parent / "graphs"


def graph_path(name: str) -> Path:
    """The committed graph `name` (e.g. "resblock.aot.opt"), as a path."""
    path = GRAPHS / f"{name}.onnx"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in GRAPHS.glob("*.onnx")))
        raise FileNotFoundError(f"no bundled graph {name!r}; the bundled graphs are: {known}")
    return path


def export_training_graph(module, example_inputs, loss_fn=None, *, dynamic_batch: bool = False, progress=None):
    """One ONNX graph computing the forward, the loss and the gradients of `module` (SPEC.md, "PyTorch
    export"; needs PyTorch): see ascend_grad.models.export.training_graph."""
    from ascend_grad.models.export import training_graph

    return training_graph.export_training_graph(module, example_inputs, loss_fn, dynamic_batch=dynamic_batch,
                                                progress=progress)
