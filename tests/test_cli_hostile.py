"""The command line on hostile files: for every file of a corpus made here (truncated and
byte-flipped copies of bundled graphs, malformed graphs, escaping external data, absurd input
shapes) and each of `info`, `fuse` and `fuse --verify`, either success with nothing on stderr, or
exit 2 with one line "ascend-grad: error: ..." -- never an internal error, a traceback or library
noise, and never an output (or a temporary file) left behind by a failure. Run in-process (capfd
sees the C++ libraries' stderr too); a few subprocess cases prove the whole process is quiet."""

import builtins
import logging
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import TensorProto, helper

from ascend_grad import cli
from ascend_grad.models import graph_path

SEED = 20261202  # the byte flips; fixed so the corpus (and its size, quoted in docs/reliability.md) never changes
BASES = ["silu_mlp.aot.opt", "mish_mlp.export.dyn", "silu_mlp.ort_training", "gn_scaled_swish.export.opt"]
CUTS = [1, 2, 7, 64, 0.25, 0.5, 0.75, -1]  # byte counts, fractions of the file, and one byte short
FLIPS = 14  # byte-flipped copies of each base
COMMANDS = ["info", "fuse", "verify"]


# ---- building blocks

def _vi(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, initializers=(), opsets=(("", 18),)):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in opsets], ir_version=10)


def _relu(shape=(4,), elem=TensorProto.FLOAT):
    return _model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", list(shape), elem)],
                  [_vi("y", list(shape), elem)])


def _save(model, path: Path, replace: dict[bytes, bytes] | None = None) -> Path:
    """Saved, with placeholder bytes swapped in the serialized file (names that are not UTF-8)."""
    data = model.SerializeToString()
    for old, new in (replace or {}).items():
        assert old in data
        data = data.replace(old, new)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def _external_tensor(name, location, dims=(4,), **entries):
    tensor = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(dims), data_location=TensorProto.EXTERNAL)
    for key, value in {"location": location, **entries}.items():
        entry = tensor.external_data.add()
        entry.key, entry.value = key, str(value)
    return tensor


def _with_external(folder: Path, location, **entries) -> Path:
    """y = x + w, w in external data at `location`."""
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [4])], [_vi("y", [4])],
                   [_external_tensor("w", location, **entries)])
    return _save(model, folder / "model.onnx")


def _secret(root: Path) -> Path:
    """A file outside every model's folder: its size and contents must never show."""
    secret = root / "outside-secret.bin"
    if not secret.exists():
        secret.write_bytes(b"TOPSECRET" * 111)  # 999 bytes
    return secret


# ---- the crafted part of the corpus: name -> builder(folder) -> model path

def _cycle(folder):
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="r1"), helper.make_node("Relu", ["a"], ["b"], name="r2"),
             helper.make_node("Relu", ["a"], ["y"], name="r3")]
    return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]), folder / "m.onnx")


def _self_loop(folder):
    nodes = [helper.make_node("Add", ["x", "s"], ["s"], name="acc"), helper.make_node("Relu", ["s"], ["y"], name="r")]
    return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]), folder / "m.onnx")


def _bad_utf8(field):
    def build(folder):
        nodes = [helper.make_node("Relu", ["x"], ["QQQ1"], name="QQQ2"), helper.make_node("Relu", ["QQQ1"], ["y"], name="r")]
        placeholder = {"value": b"QQQ1", "node": b"QQQ2"}[field]
        return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]), folder / "m.onnx", {placeholder: b"\xff\xfe\xc3("})
    return build


def _bad_utf8_op(folder):
    nodes = [helper.make_node("QQQ3", ["x"], ["y"], name="n", domain="custom.x")]
    return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])], opsets=(("", 18), ("custom.x", 1))), folder / "m.onnx",
                 {b"QQQ3": b"\xc3\x28\xa0\xa1"})


def _undefined_input(folder):
    nodes = [helper.make_node("Add", ["x", "nowhere"], ["y"], name="add")]
    return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]), folder / "m.onnx")


def _undefined_input_with_newline(folder):
    nodes = [helper.make_node("Add", ["x", "two\nlines"], ["y"], name="add")]
    return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]), folder / "m.onnx")


def _undefined_output(folder):
    return _save(_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [_vi("x", [4])],
                        [_vi("y", [4]), _vi("ghost", [4])]), folder / "m.onnx")


def _two_producers(folder):
    nodes = [helper.make_node("Relu", ["x"], ["y"], name="r1"), helper.make_node("Neg", ["x"], ["y"], name="r2")]
    return _save(_model(nodes, [_vi("x", [4])], [_vi("y", [4])]), folder / "m.onnx")


def _negative_dim(folder):
    return _save(_relu((-3, 16)), folder / "m.onnx")


def _negative_initializer_dim(folder):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    w.dims[0] = -4
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [4])], [_vi("y", [4])], [w])
    return _save(model, folder / "m.onnx")


def _unknown_elem_type(folder):
    return _save(_relu((4,), elem=77), folder / "m.onnx")


def _unknown_initializer_type(folder):
    w = helper.make_tensor("w", TensorProto.FLOAT, [4], [1.0, 2.0, 3.0, 4.0])
    w.data_type = 99
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [4])], [_vi("y", [4])], [w])
    return _save(model, folder / "m.onnx")


def _short_raw_data(folder):
    w = TensorProto(name="w", data_type=TensorProto.FLOAT, dims=[1 << 40], raw_data=b"\x00" * 16)
    model = _model([helper.make_node("Add", ["x", "w"], ["y"], name="add")], [_vi("x", [4])], [_vi("y", [4])], [w])
    return _save(model, folder / "m.onnx")


def _input_shape(shape, elem=TensorProto.FLOAT):
    return lambda folder: _save(_relu(shape, elem), folder / "m.onnx")


def _no_elem_type(folder):
    model = _relu((4,))
    model.graph.input[0].type.tensor_type.elem_type = 0
    return _save(model, folder / "m.onnx")


def _sequence_input(folder):
    seq = helper.make_tensor_sequence_value_info("x", TensorProto.FLOAT, [4])
    nodes = [helper.make_node("SequenceAt", ["x", "zero"], ["y"], name="at")]
    zero = helper.make_tensor("zero", TensorProto.INT64, [], [0])
    return _save(_model(nodes, [seq], [_vi("y", [4])], [zero]), folder / "m.onnx")


def _unused_initializer(folder):
    model = _relu((4,))
    model.graph.initializer.append(helper.make_tensor("unused", TensorProto.FLOAT, [4], [1.0] * 4))
    return _save(model, folder / "m.onnx")


def _binary_string_attribute(folder):
    """A custom op keeping bytes in a string attribute: valid enough to fuse (onnx_ir logs a warning)."""
    node = helper.make_node("Blob", ["x"], ["y"], name="blob", domain="custom.x", payload=b"\xff\x00\xfe")
    return _save(_model([node], [_vi("x", [4])], [_vi("y", [4])], opsets=(("", 18), ("custom.x", 1))), folder / "m.onnx")


def _subgraph_reads_undefined(folder):
    branch = helper.make_graph([helper.make_node("Relu", ["nowhere"], ["b"], name="inner")], "then", [], [_vi("b", [4])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["c"], name="inner2")], "else", [], [_vi("c", [4])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=other)]
    return _save(_model(nodes, [_vi("x", [4]), _vi("cond", [], TensorProto.BOOL)], [_vi("y", [4])]), folder / "m.onnx")


def _cycle_through_subgraph(folder):
    """The If's branch reads `z`, which is computed from the If's own output."""
    branch = helper.make_graph([helper.make_node("Relu", ["z"], ["b"], name="inner")], "then", [], [_vi("b", [4])])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["c"], name="inner2")], "else", [], [_vi("c", [4])])
    nodes = [helper.make_node("If", ["cond"], ["t"], name="if", then_branch=branch, else_branch=other),
             helper.make_node("Relu", ["t"], ["z"], name="after"), helper.make_node("Relu", ["z"], ["y"], name="out")]
    return _save(_model(nodes, [_vi("x", [4]), _vi("cond", [], TensorProto.BOOL)], [_vi("y", [4])]), folder / "m.onnx")


def _external(location_of, **entries):
    """A model whose w lives at location_of(folder) (which may set up links)."""
    def build(folder):
        folder.mkdir(parents=True, exist_ok=True)
        return _with_external(folder, location_of(folder), **entries)
    return build


def _dotdot(folder):
    _secret(folder.parent)
    return "../outside-secret.bin"


def _nested_dotdot(folder):
    _secret(folder.parent)
    (folder / "sub").mkdir()
    return "sub/../../outside-secret.bin"


def _absolute(folder):
    return str(_secret(folder.parent))


def _symlink_out(folder):
    os.symlink(_secret(folder.parent), folder / "link.bin")
    return "link.bin"


def _symlinked_folder_out(folder):
    _secret(folder.parent)
    os.symlink(folder.parent, folder / "up")
    return "up/outside-secret.bin"


def _relative_symlink_out(folder):
    _secret(folder.parent)
    os.symlink("../outside-secret.bin", folder / "rel.bin")
    return "rel.bin"


def _hard_link(folder):
    os.link(_secret(folder.parent), folder / "hard.bin")
    return "hard.bin"


def _missing(folder):
    return "not-there.bin"


def _short(folder):
    (folder / "w.bin").write_bytes(b"\x00" * 7)
    return "w.bin"


def _good(folder):
    (folder / "w.bin").write_bytes(b"\x00" * 16)
    return "w.bin"


def _symlink_inside(folder):
    (folder / "data").mkdir()
    (folder / "data" / "w.bin").write_bytes(b"\x00" * 16)
    os.symlink("data/w.bin", folder / "alias.bin")
    return "alias.bin"


def _a_folder(folder):
    (folder / "dir.bin").mkdir()
    return "dir.bin"


def _fifo(folder):
    os.mkfifo(folder / "fifo.bin")  # opening it would block forever
    return "fifo.bin"


def _external_in_subgraph(folder):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "w.bin").write_bytes(b"\x00" * 16)
    branch = helper.make_graph([helper.make_node("Add", ["x", "w"], ["b"], name="inner")], "then", [], [_vi("b", [4])],
                               [_external_tensor("w", "w.bin")])
    other = helper.make_graph([helper.make_node("Relu", ["x"], ["c"], name="inner2")], "else", [], [_vi("c", [4])])
    nodes = [helper.make_node("If", ["cond"], ["y"], name="if", then_branch=branch, else_branch=other)]
    return _save(_model(nodes, [_vi("x", [4]), _vi("cond", [], TensorProto.BOOL)], [_vi("y", [4])]), folder / "m.onnx")


# name -> (builder, what each command must do: "ok" or a fragment of the one-line error; a tuple
# gives (info, fuse, verify))
CRAFTED = {
    "cycle": (_cycle, "has a cycle: node 'r1' (Relu)"),
    "self_loop": (_self_loop, "has a cycle: node 'acc' (Add)"),
    "utf8_value_name": (_bad_utf8("value"), "output[0] is not valid UTF-8"),
    "utf8_node_name": (_bad_utf8("node"), "name is not valid UTF-8"),
    "utf8_op_type": (_bad_utf8_op, "op_type is not valid UTF-8"),
    "undefined_input": (_undefined_input, "node 'add' (Add): input 'nowhere' is not"),
    "undefined_input_newline": (_undefined_input_with_newline, "input 'two\\nlines' is not"),
    "undefined_output": (_undefined_output, "graph output 'ghost' is not produced"),
    "two_producers": (_two_producers, "output 'y' is already defined by node 'r1'"),
    "negative_dim": (_negative_dim, "value 'x' has a negative dimension: shape [-3, 16]"),
    "negative_initializer_dim": (_negative_initializer_dim, "initializer 'w' has a negative dimension"),
    "unknown_elem_type": (_unknown_elem_type, "value 'x' has an unknown element type 77"),
    "unknown_initializer_type": (_unknown_initializer_type, "initializer 'w' has an unknown data type 99"),
    "short_raw_data": (_short_raw_data, "initializer 'w': dims [1099511627776] need 4398046511104 bytes"),
    "input_2^31x16": (_input_shape((1 << 31, 16)), ("ok", "ok", "input 'x' alone, shape [2147483648, 16]")),
    "input_2^62": (_input_shape((1 << 62, 1 << 62)), ("ok", "ok", "over its budget of 1 GiB")),
    "input_2^62_int64": (_input_shape((1 << 62,), TensorProto.INT64), ("ok", "ok", "over its budget of 1 GiB")),
    "no_elem_type": (_no_elem_type, ("ok", "ok", "input 'x' has no element type")),
    "sequence_input": (_sequence_input, ("ok", "ok", "input 'x' is not a tensor")),
    "unused_initializer": (_unused_initializer, "ok"),
    "binary_string_attribute": (_binary_string_attribute, ("ok", "ok", "does not run in this onnxruntime")),
    "subgraph_reads_undefined": (_subgraph_reads_undefined, "node 'inner' (Relu)"),
    "cycle_through_subgraph": (_cycle_through_subgraph, "has a cycle"),
    "external_dotdot": (_external(_dotdot), "location '../outside-secret.bin' has a '..' component"),
    "external_nested_dotdot": (_external(_nested_dotdot), "has a '..' component"),
    "external_absolute": (_external(_absolute), "is an absolute path"),
    "external_symlink_out": (_external(_symlink_out), "location 'link.bin' leads outside the model's folder"),
    "external_symlinked_folder_out": (_external(_symlinked_folder_out), "leads outside the model's folder"),
    "external_relative_symlink_out": (_external(_relative_symlink_out), "leads outside the model's folder"),
    "external_hard_link": (_external(_hard_link), "hard.bin has 2 hard links"),
    "external_missing": (_external(_missing), "not-there.bin is missing"),
    "external_short": (_external(_short), "w.bin is 7 bytes, the initializers need 16"),
    "external_bad_offset": (_external(_good, offset="eight"), "offset/length are not integers"),
    "external_negative_offset": (_external(_good, offset=-8), "negative external data offset"),
    "external_past_the_end": (_external(_good, offset=1 << 62), "the initializers need"),
    "external_a_folder": (_external(_a_folder), "dir.bin is missing"),
    "external_fifo": (_external(_fifo), "fifo.bin is missing"),
    "external_no_location": (_external(lambda folder: ""), "gives no location"),
    "external_symlink_inside": (_external(_symlink_inside), "ok"),
    "external_good": (_external(_good), "ok"),
    "external_in_subgraph": (_external_in_subgraph, "in a subgraph or function and keeps its data in an external file"),
}


def _mutants() -> dict[str, tuple[str, bytes | None, int | None]]:
    """name -> (base graph, cut point or None, flipped position or None): deterministic."""
    out = {}
    for base in BASES:
        size = os.path.getsize(graph_path(base))
        for cut in CUTS:
            at = int(size * cut) if isinstance(cut, float) else (cut if cut > 0 else size + cut)
            out[f"{base}.cut{at}"] = (base, at, None)
        chooser = random.Random(f"{SEED}:{base}")
        for position in sorted(chooser.sample(range(size), FLIPS)):
            out[f"{base}.flip{position}"] = (base, None, position)
    return out


MUTANTS = _mutants()
CORPUS_SIZE = len(CRAFTED) + len(MUTANTS)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> dict[str, tuple[Path, object]]:
    """name -> (model path, expectation: "ok"/fragment/3-tuple, or None for mutants: any clean outcome)."""
    root = tmp_path_factory.mktemp("corpus")
    files = {}
    for name, (build, expect) in CRAFTED.items():
        files[name] = (build(root / name), expect)
    for name, (base, cut, position) in MUTANTS.items():
        data = bytearray(Path(graph_path(base)).read_bytes())
        if cut is not None:
            data = data[:cut]
        else:
            data[position] ^= 1 + random.Random(f"{SEED}:{name}").randrange(255)
        path = root / name / "m.onnx"
        path.parent.mkdir()
        path.write_bytes(bytes(data))
        files[name] = (path, None)
    return files


class _Records(logging.Handler):
    """Library log records that reach the root logger: noise, even where pytest hides it."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def _run(capfd, *argv):
    records = _Records()
    logging.getLogger().addHandler(records)
    try:
        status = cli.main([str(a) for a in argv])
    finally:
        logging.getLogger().removeHandler(records)
    out, err = capfd.readouterr()
    return status, out, err + "".join(f"[log] {r.getMessage()}\n" for r in records.records)


def _argv(command, model, out_dir):
    if command == "info":
        return ["info", model]
    return ["fuse", model, "-o", out_dir / "out.onnx"] + (["--verify"] if command == "verify" else [])


def _problem(status, err, out_dir) -> str | None:
    """What breaks the contract, if anything."""
    leftovers = sorted(p.name for p in out_dir.iterdir()) if out_dir.exists() else []
    if status == 0:
        if err:
            return f"success with stderr {err!r}"
        if any(name.startswith(".") for name in leftovers):
            return f"temporary files left: {leftovers}"
        return None
    lines = err.splitlines()
    if status != 2 or len(lines) != 1 or not lines[0].startswith("ascend-grad: error:"):
        return f"exit {status}, stderr {err[:600]!r}"
    if leftovers:
        return f"failed but left {leftovers}"
    return None


@pytest.mark.parametrize("command", COMMANDS)
def test_the_corpus(corpus, command, capfd, tmp_path):
    """Every file, one command: a clean success or one line and exit 2; nothing left on failure."""
    problems, outcomes = [], {"ok": 0, "refused": 0}
    for index, (name, (model, expect)) in enumerate(corpus.items()):
        out_dir = tmp_path / str(index)
        out_dir.mkdir()
        status, _, err = _run(capfd, *_argv(command, model, out_dir))
        problem = _problem(status, err, out_dir)
        if expect is not None and problem is None:
            wanted = expect[COMMANDS.index(command)] if isinstance(expect, tuple) else expect
            if wanted == "ok" and status != 0:
                problem = f"expected success, got {err.strip()!r}"
            elif wanted != "ok" and (status != 2 or wanted not in err):
                problem = f"expected an error with {wanted!r}, got exit {status} {err.strip()!r}"
        if problem:
            problems.append(f"{name}: {problem}")
        outcomes["ok" if status == 0 else "refused"] += 1
    print(f"hostile corpus: {len(corpus)} files (seed {SEED}), {command}: {outcomes['ok']} ran, "
          f"{outcomes['refused']} refused with one line")
    assert len(corpus) == CORPUS_SIZE == 129  # quoted in docs/reliability.md (test_the_docs_quote_the_corpus)
    assert not problems, "\n".join(problems)


def test_the_docs_quote_the_corpus():
    """docs/reliability.md's table gives the corpus's size and the runs it makes (one per command)."""
    docs = (Path(__file__).resolve().parents[1] / "docs" / "reliability.md").read_text()
    assert f"the command line on {CORPUS_SIZE} files" in docs
    assert f"| {CORPUS_SIZE * len(COMMANDS)} runs |" in docs


# ---- the findings, one by one

@pytest.fixture
def touched(monkeypatch):
    """The paths opened or stat'ed that name the secret file outside the model's folder."""
    seen = []

    def spy(function):
        def wrapper(path, *args, **kwargs):
            if "outside-secret" in str(path if not isinstance(path, int) else ""):
                seen.append((function.__name__, str(path)))
            return function(path, *args, **kwargs)
        return wrapper

    for module, name in ((os, "stat"), (os, "lstat"), (os, "open"), (builtins, "open")):
        monkeypatch.setattr(module, name, spy(getattr(module, name)))
    return seen


@pytest.mark.parametrize("case", ["external_dotdot", "external_nested_dotdot", "external_absolute",
                                  "external_symlink_out", "external_symlinked_folder_out",
                                  "external_relative_symlink_out"])
@pytest.mark.parametrize("command", COMMANDS)
def test_external_data_outside_the_folder_is_refused_untouched(case, command, tmp_path, capfd, touched):
    """Refused (exit 2) before the file outside is stat'ed or opened, naming the initializer and
    its location, never the outside file's size or contents (info used to print its size)."""
    fragment = CRAFTED[case][1]
    build_with_length = _external({"external_dotdot": _dotdot, "external_nested_dotdot": _nested_dotdot,
                                   "external_absolute": _absolute, "external_symlink_out": _symlink_out,
                                   "external_symlinked_folder_out": _symlinked_folder_out,
                                   "external_relative_symlink_out": _relative_symlink_out}[case], length=4000)
    model = build_with_length(tmp_path / "model")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    touched.clear()  # building the case looked at it
    status, out, err = _run(capfd, *_argv(command, model, out_dir))
    assert _problem(status, err, out_dir) is None and status == 2, err
    assert "initializer 'w'" in err and fragment in err
    assert "999" not in err + out and "TOPSECRET" not in err + out
    assert touched == []


def test_external_data_in_a_subgraph_is_refused(tmp_path, capfd):
    model = _external_in_subgraph(tmp_path / "m")
    status, _, err = _run(capfd, "info", model)
    assert status == 2 and "initializer 'w' is in a subgraph" in err, err


@pytest.mark.parametrize("case", ["cycle", "self_loop", "utf8_value_name", "utf8_node_name", "undefined_input",
                                  "undefined_output", "two_producers", "negative_dim", "unknown_elem_type",
                                  "short_raw_data", "cycle_through_subgraph"])
@pytest.mark.parametrize("command", COMMANDS)
def test_malformed_graphs_are_one_line_errors(case, command, tmp_path, capfd):
    """They used to be internal errors (exit 1: a cycle, a name that is not UTF-8, onnx_ir's
    SerdeError), a traceback on stderr, or a success with a warning (an undefined input)."""
    build, fragment = CRAFTED[case]
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    status, _, err = _run(capfd, *_argv(command, build(tmp_path / "m"), out_dir))
    assert _problem(status, err, out_dir) is None and status == 2, err
    assert fragment in err, err


@pytest.mark.parametrize(("shape", "fragment"), [((1 << 31, 16), "shape [2147483648, 16]"),
                                                 ((1 << 62, 1 << 62), "over its budget of 1 GiB")])
def test_verify_refuses_inputs_over_its_memory_budget(shape, fragment, tmp_path, capfd):
    """Used to be a MemoryError or numpy's 'array is too big' (internal errors), after OUT was written."""
    model = _save(_relu(shape), tmp_path / "m.onnx")
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    status, _, err = _run(capfd, *_argv("verify", model, out_dir))
    assert _problem(status, err, out_dir) is None and status == 2, err
    assert "input 'x'" in err and fragment in err and "--verify-memory" in err


def test_verify_memory_budget_option(tmp_path, capfd):
    model = _save(_relu((512, 1024)), tmp_path / "m.onnx")  # 2 MiB of float32
    status, _, err = _run(capfd, "fuse", model, "-o", tmp_path / "o.onnx", "--verify", "--verify-memory", "1M")
    assert status == 2 and "2 MiB, over its budget of 1 MiB" in err, err
    status, out, err = _run(capfd, "fuse", model, "-o", tmp_path / "o.onnx", "--verify", "--verify-memory", "3M")
    assert status == 0 and err == "" and "verified 1 outputs" in out, err
    assert "--verify-memory" in cli.build_parser()._subparsers._group_actions[0].choices["fuse"].format_help()


@pytest.mark.parametrize("verify", [False, True])
@pytest.mark.parametrize("alias", ["hard link", "symlink", "same path"])
def test_out_never_overwrites_in(alias, verify, tmp_path, capfd):
    """A hard link used to defeat the --verify guard (realpaths compared as strings), and without
    --verify OUT was written over IN."""
    source = tmp_path / "in.onnx"
    shutil.copy(graph_path("silu_mlp.aot.opt"), source)
    before = source.read_bytes()
    out = tmp_path / "out.onnx"
    if alias == "hard link":
        os.link(source, out)
    elif alias == "symlink":
        os.symlink(source, out)
    else:
        out = source
    status, _, err = _run(capfd, "fuse", source, "-o", out, *(["--verify"] if verify else []))
    assert status == 2 and "write OUT to another path" in err and len(err.splitlines()) == 1, err
    assert source.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted({"in.onnx", out.name})


def test_outputs_never_overwrite_in_s_external_data(tmp_path, capfd):
    model = _with_external(tmp_path, "w.bin")
    (tmp_path / "w.bin").write_bytes(b"\x00" * 16)
    os.symlink("w.bin", tmp_path / "o.onnx.data")  # OUT's side file is IN's weights
    status, _, err = _run(capfd, "fuse", model, "-o", tmp_path / "o.onnx")
    assert status == 2 and "o.onnx.data: is a file IN reads" in err, err
    status, _, err = _run(capfd, "fuse", model, "-o", tmp_path / "x.onnx", "--report", tmp_path / "w.bin")
    assert status == 2 and "write the report to another path" in err, err
    status, _, err = _run(capfd, "fuse", model, "-o", tmp_path / "x.onnx", "--report", tmp_path / "x.onnx")
    assert status == 2 and "the report would overwrite an output" in err, err
    assert (tmp_path / "w.bin").read_bytes() == b"\x00" * 16
    assert _entries(tmp_path) == ["model.onnx", "o.onnx.data", "w.bin"]


def _entries(folder):
    return sorted(p.name for p in folder.iterdir())


def test_a_report_that_cannot_be_written_is_refused_before_any_work(tmp_path, capfd):
    """OUT used to be written, then the report failed (exit 2 with OUT left behind)."""
    out = tmp_path / "o.onnx"
    status, out_text, err = _run(capfd, "fuse", graph_path("silu_mlp.aot.opt"), "-o", out, "--report",
                                 tmp_path / "no" / "r.json")
    assert status == 2 and "r.json: cannot write: no folder" in err and out_text == "", err
    assert _entries(tmp_path) == []
    (tmp_path / "r.json").mkdir()
    status, _, err = _run(capfd, "fuse", graph_path("silu_mlp.aot.opt"), "-o", out, "--report", tmp_path / "r.json")
    assert status == 2 and "is a directory; give the report file's name" in err, err
    assert _entries(tmp_path) == ["r.json"]


def test_a_failed_run_leaves_an_old_out_as_it_was(tmp_path, capfd):
    """--verify on a graph onnxruntime cannot run: OUT (and its plan, report) used to be overwritten."""
    out = tmp_path / "o.onnx"
    out.write_bytes(b"old")
    (tmp_path / "r.json").write_text("{}")
    status, _, err = _run(capfd, "fuse", graph_path("silu_mlp.ort_training"), "-o", out, "--verify",
                          "--report", tmp_path / "r.json")
    assert status == 2 and "does not run in this onnxruntime" in err, err
    assert out.read_bytes() == b"old" and (tmp_path / "r.json").read_text() == "{}"
    assert _entries(tmp_path) == ["o.onnx", "r.json"]


def test_ctrl_c_leaves_nothing(tmp_path, capfd, monkeypatch):
    from ascend_grad import verify

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(verify, "compare_models", interrupted)
    status, _, err = _run(capfd, "fuse", graph_path("resblock.aot.opt"), "-o", tmp_path / "o.onnx", "--verify",
                          "--target", "ascend", "--report", tmp_path / "r.json")
    assert status == 130 and err == "ascend-grad: interrupted\n"
    assert _entries(tmp_path) == []


def test_every_output_lands_together(tmp_path, capfd):
    """OUT, OUT.data, OUT.ascend.json and the report, moved into place from a staging folder that
    is gone afterwards; OUT's external data `location` is OUT.data's final name."""
    source = tmp_path / "in" / "m.onnx"
    source.parent.mkdir()
    onnx.save(onnx.load(graph_path("resblock.aot.opt")), source, save_as_external_data=True, location="m.bin",
              size_threshold=256)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    status, _, err = _run(capfd, "fuse", source, "-o", out_dir / "f.onnx", "--target", "ascend", "--verify",
                          "--report", out_dir / "r.json")
    assert status == 0 and err == "", err
    assert _entries(out_dir) == ["f.onnx", "f.onnx.ascend.json", "f.onnx.data", "r.json"]
    locations = {e.value for t in onnx.load(out_dir / "f.onnx", load_external_data=False).graph.initializer
                 for e in t.external_data if e.key == "location"}
    assert locations == {"f.onnx.data"}


def ascend_grad(*args):
    script = shutil.which("ascend-grad", path=str(Path(sys.executable).parent))
    return subprocess.run([script, *map(str, args)], capture_output=True, text=True)


@pytest.mark.parametrize(("case", "command"), [("unused_initializer", "verify"), ("binary_string_attribute", "fuse")])
def test_success_is_silent_in_a_whole_process(case, command, tmp_path):
    """onnxruntime's C++ logger warned about the unused initializer (twice, in colour) and onnx_ir
    logged the string attribute that is not UTF-8, on runs that succeeded."""
    model = CRAFTED[case][0](tmp_path / "m")
    done = ascend_grad(*_argv(command, model, tmp_path))
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_errors_are_one_line_in_a_whole_process(tmp_path):
    """A value name that is not UTF-8: onnx_ir's shape inference logged a traceback, then an internal error."""
    model = CRAFTED["utf8_value_name"][0](tmp_path / "m")
    done = ascend_grad(*_argv("verify", model, tmp_path))
    assert _problem(done.returncode, done.stderr, tmp_path / "none") is None and done.returncode == 2, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m"]
