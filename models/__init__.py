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



def __getattr__(name: str):
    """`export_training_graph` (SPEC.md, "PyTorch export"), imported on first use: it needs PyTorch,
    the rest of this package does not."""
    if name == "export_training_graph":
        from ascend_grad.models.export.training_graph import export_training_graph

        return export_training_graph
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
