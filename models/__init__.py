"""Reference training graphs: small PyTorch modules, the export routes that turn them into joint
forward+backward ONNX graphs, and the committed graphs they produced (models/graphs/), so tests and
the demo need no PyTorch. PyTorch is only needed to rebuild the graphs (`python -m
ascend_grad.models.build`).
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
