"""The boundary with other projects' private API. onnxscript's and onnx_ir's private modules, and
torch's private exporter API (torch.onnx._internal, torch.export's private names), are used in two
adapter modules only (models/export/torch_internals.py, onnxscript_internals.py); every private name
the package uses still exists in the installed versions (a failure names the one that went: the
first test to read after an upgrade); another torch is refused at once, in one line."""

import ast
import importlib
from pathlib import Path

import pytest

import ascend_grad

PACKAGE = Path(ascend_grad.__file__).resolve().parent
THEIRS = ("torch", "onnxscript", "onnx_ir")
ADAPTERS = {"models/export/torch_internals.py", "models/export/onnxscript_internals.py"}
# torch's private modules that other code may use: long-standing utilities rather than the exporter
# (the reference export routes, the modules' tree utilities, the decompositions every torch route
# shares); the names test below still resolves each of them
ELSEWHERE = ("torch._decomp", "torch.utils._pytree", "torch._functorch.", "torch._dispatch.")


def _is_private(dotted: str) -> bool:
    return any(part.startswith("_") for part in dotted.split("."))


def _private_imports():
    """(file in the package, line, "module:name" or "module") of every import of a private module or
    name of onnxscript, onnx_ir or torch, in every Python file of the installed package."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in THEIRS:
                found += [(where, node.lineno, f"{node.module}:{a.name}") for a in node.names
                          if _is_private(node.module) or a.name.startswith("_")]
            elif isinstance(node, ast.Import):
                found += [(where, node.lineno, a.name) for a in node.names
                          if a.name.split(".")[0] in THEIRS and _is_private(a.name)]
    return found


def _adapter_names():
    from ascend_grad.models.export import onnxscript_internals, torch_internals

    return [*torch_internals.PRIVATE_NAMES, *onnxscript_internals.PRIVATE_NAMES]


def _resolve(name: str):
    """The object "module:attribute.attribute" names (an attribute may be a submodule)."""
    module, _, attributes = name.partition(":")
    found = importlib.import_module(module)
    for k, attribute in enumerate(attributes.split(".") if attributes else ()):
        if not hasattr(found, attribute) and k == 0:
            importlib.import_module(f"{module}.{attribute}")  # (a submodule not imported yet)
        found = getattr(found, attribute)
    return found


def test_private_imports_only_in_the_adapters():
    outside = [f"{where}:{line}: {name}" for where, line, name in _private_imports()
               if where not in ADAPTERS and not name.startswith(ELSEWHERE)]
    assert not outside, "private imports outside the adapter modules: " + "; ".join(outside)


def test_the_adapters_are_found():
    """(The scan reads the installed package: it must see the adapters' own private imports.)"""
    assert {where for where, _, _ in _private_imports()} >= ADAPTERS


@pytest.mark.parametrize("name", sorted({*(name for _, _, name in _private_imports()), *_adapter_names()}))
def test_private_name_exists(name):
    pytest.importorskip(name.split(".")[0].split(":")[0])
    try:
        _resolve(name)
    except (ImportError, AttributeError) as error:
        pytest.fail(f"{name} is gone from the installed {name.split('.')[0]} ({type(error).__name__}: {error}): "
                    f"the adapter module that uses it needs porting before the version bound in pyproject.toml moves")


def test_the_export_optimizer_still_prefilters_onnxscript_rules():
    """_by_op_type leaves a rule as it is when onnxscript's rule or pattern classes changed: the export
    would still be right, only slower. Every default rule with one output node is prefiltered today."""
    pytest.importorskip("torch")
    from onnxscript import rewriter

    from ascend_grad.models.export import onnxscript_internals

    rules = [rule for rule in rewriter._DEFAULT_REWRITE_RULES if rule._target_pattern.has_single_output_node]
    left = [type(rule).__name__ for rule in rules if onnxscript_internals._by_op_type(rule) is rule]
    assert rules and not left, f"rules no longer prefiltered (onnxscript's rule internals changed): {left}"


@pytest.mark.parametrize("version, supported", [("2.13.0", True), ("2.13.0+cpu", True), ("2.13.1", True),
                                                ("2.12.1", False), ("2.14.0", False), ("2.130.0", False),
                                                ("3.13.0", False), ("unknown", False)])
def test_check_torch(version, supported):
    from ascend_grad.models.export.torch_internals import UnsupportedTorch, check_torch

    if supported:
        check_torch(version)
    else:
        with pytest.raises(UnsupportedTorch, match=r"supports torch >=2\.13,<2\.14 .* this is torch "):
            check_torch(version)


def test_the_installed_torch_is_supported():
    pytest.importorskip("torch")
    from ascend_grad.models.export.torch_internals import check_torch

    check_torch()  # (the version the tests run on is the one pyproject's torch extra pins)


def test_another_torch_fails_at_once_in_one_line(monkeypatch):
    torch = pytest.importorskip("torch")
    from ascend_grad.models import export_training_graph
    from ascend_grad.models.export import joint
    from ascend_grad.models.export.torch_internals import UnsupportedTorch

    monkeypatch.setattr(torch, "__version__", "2.14.0")
    monkeypatch.setattr(joint, "trace", lambda *args, **kwargs: pytest.fail("traced on an unsupported torch"))
    with pytest.raises(UnsupportedTorch) as raised:
        export_training_graph(torch.nn.Linear(2, 2), torch.zeros(1, 2))
    message = str(raised.value)
    assert "\n" not in message and "torch >=2.13,<2.14" in message and "this is torch 2.14.0" in message, message


def test_the_command_line_says_it_in_one_line(monkeypatch, tmp_path, capsys):
    torch = pytest.importorskip("torch")
    from ascend_grad import cli

    monkeypatch.setattr(torch, "__version__", "2.14.0")
    assert cli.main(["export", "no_such_module:factory", "--input", "1,2", "-o", str(tmp_path / "o.onnx")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "supports torch >=2.13,<2.14" in err[0] and "2.14.0" in err[0], err
    assert not (tmp_path / "o.onnx").exists()
