"""Reading a model file the command line was given, trusting nothing in it: every check runs on
the protobuf before onnx_ir (or anything else) reads a byte of external data or uses a name, and a
file that fails one is an InputError (exit 2, one line) naming what is wrong and where."""

from __future__ import annotations

import os


class InputError(ValueError):
    """Bad input to the command line: exit status 2, one line on stderr."""


def quote(name) -> str:
    """A name as it can go in a one-line message: quoted, escaped, cut short."""
    text = repr(name if len(name) <= 80 else name[:77] + ("..." if isinstance(name, str) else b"..."))
    return text


def read_model(path: str):
    """(the ModelProto without its external data, the same as an onnx_ir model), or a one-line error.
    Everything about the file is checked on the proto before onnx_ir (or anything else) reads a
    byte of external data or trusts a name."""
    import onnx
    import onnx_ir as ir

    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory, not an ONNX file")
    if not os.path.isfile(path):
        raise InputError(f"{path}: no such file")
    if os.path.getsize(path) == 0:
        raise InputError(f"{path}: not an ONNX model (empty file)")
    try:
        proto = onnx.load(path, load_external_data=False)
    except OSError as error:  # unreadable (permissions)
        raise InputError(f"{path}: cannot read: {error.strerror or error}") from None
    except Exception as error:  # a parse failure: not an ONNX model
        raise InputError(f"{path}: not an ONNX model ({type(error).__name__})") from None
    # protobuf decodes many short byte strings without complaint; every ONNX model sets ir_version
    # and imports at least one opset
    if proto.ir_version < 1 or not proto.opset_import:
        raise InputError(f"{path}: not an ONNX model (ir_version {proto.ir_version}, "
                         f"{len(proto.opset_import)} opset imports)")
    _check_text(path, proto)
    _check_external_data(path, proto)
    _check_graph(path, proto.graph, set(), "")
    try:
        model = ir.serde.deserialize_model(proto)
    except Exception as error:  # what the checks above do not cover, onnx_ir's own refusals
        raise InputError(f"{path}: not a valid ONNX model ({type(error).__name__}: {first_line(error)})") from None
    ir.external_data.set_base_dir(model.graph, os.path.dirname(path))  # as ir.load does
    return proto, model


def load_model(path: str):
    """An ONNX file as an onnx_ir model (weights in external data stay on disk), or a one-line error."""
    return read_model(path)[1]


def first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:200] if text else ""


def _check_text(path: str, message) -> None:
    """Every string field (names, op types, domains) is UTF-8: protobuf hands invalid ones over as
    bytes, which onnx_ir keeps and then cannot serialize (or prints a traceback about)."""
    found = _bad_text(message)
    if found:
        where, value = found
        raise InputError(f"{path}: model{where} is not valid UTF-8 ({quote(value)})")


def _bad_text(message):
    """(where, the bytes) of the first string field that is not UTF-8, or None."""
    for field, value in message.ListFields():
        if field.type not in (field.TYPE_STRING, field.TYPE_MESSAGE):
            continue  # float_data and the like: millions of numbers, no text
        items = value if field.is_repeated else (value,)
        for i, item in enumerate(items):
            if field.type == field.TYPE_STRING:
                found = None if item.__class__ is str else ("", item)
            else:
                found = _bad_text(item)
            if found:
                at = f".{field.name}" + (f"[{i}]" if field.is_repeated else "")
                if field.message_type is not None and field.message_type.name == "NodeProto" and isinstance(item.op_type, str):
                    at += f" ({item.op_type})"
                return at + found[0], found[1]
    return None


def _subgraphs(node):
    for attr in node.attribute:
        if attr.HasField("g"):
            yield attr.g
        yield from attr.graphs


def _tensors(graph, nested: bool):
    """(tensor, what it is, in a subgraph?) for every tensor a graph holds, subgraphs included."""
    for tensor in graph.initializer:
        yield tensor, f"initializer {quote(tensor.name)}", nested
    for sparse in graph.sparse_initializer:
        yield sparse.values, f"sparse initializer {quote(sparse.values.name)}", nested
        yield sparse.indices, f"sparse initializer {quote(sparse.values.name)} (indices)", nested
    for node in graph.node:
        for attr in node.attribute:
            what = f"attribute {quote(attr.name)} of node {quote(node.name)} ({node.op_type})"
            if attr.HasField("t"):
                yield attr.t, what, nested
            for tensor in attr.tensors:
                yield tensor, what, nested
            if attr.HasField("sparse_tensor"):
                yield attr.sparse_tensor.values, what, nested
        for sub in _subgraphs(node):
            yield from _tensors(sub, True)


def _check_external_data(path: str, proto) -> None:
    """External data stays inside the model's folder and is all there: checked on the raw
    `location` strings before any file they name is touched (no stat, no open of a file outside),
    and messages never give the size or contents of a file outside. The graph pass reads small
    constants (eps, shapes, axes) from external data, and a missing file would otherwise look
    like a graph with nothing to fuse."""
    from onnx import TensorProto

    folder = os.path.realpath(os.path.dirname(os.path.abspath(path)))
    tensors = list(_tensors(proto.graph, False))
    for function in proto.functions:
        for node in function.node:
            for attr in node.attribute:
                if attr.HasField("t"):
                    tensors.append((attr.t, f"a tensor of function {quote(function.name)}", True))
    needed: dict[str, tuple[int, str]] = {}
    for tensor, what, nested in tensors:
        if tensor.data_location != TensorProto.EXTERNAL:
            continue
        if nested:
            raise InputError(f"{path}: {what} is in a subgraph or function and keeps its data in an external "
                             "file; only the main graph's tensors may")
        entries = {entry.key: entry.value for entry in tensor.external_data}
        location = entries.get("location", "")
        if not location:
            raise InputError(f"{path}: {what} keeps its data in an external file but gives no location")
        if os.path.isabs(location) or location.startswith(("/", "\\")) or (len(location) > 1 and location[1] == ":"):
            raise InputError(f"{path}: {what}: external data location {quote(location)} is an absolute path; "
                             "it must be relative to the model's folder")
        parts = location.replace("\\", "/").split("/")
        if ".." in parts:
            raise InputError(f"{path}: {what}: external data location {quote(location)} has a '..' component; "
                             "it must stay inside the model's folder")
        if "\x00" in location:
            raise InputError(f"{path}: {what}: external data location {quote(location)} holds a NUL byte")
        try:
            offset, length = (int(entries.get(key) or 0) for key in ("offset", "length"))
        except ValueError:
            raise InputError(f"{path}: {what}: external data offset/length are not integers") from None
        if offset < 0 or length < 0:
            raise InputError(f"{path}: {what}: negative external data offset or length")
        resolved = _resolve_inside(folder, parts)
        if resolved is None:
            raise InputError(f"{path}: {what}: external data location {quote(location)} leads outside the model's "
                             "folder (through a symbolic link)")
        end = offset + (length if "length" in entries else _nbytes(path, tensor, what))
        previous = needed.get(resolved, (0, location))
        needed[resolved] = (max(previous[0], end), previous[1])
    for file, (end, location) in sorted(needed.items()):
        if not os.path.isfile(file):
            raise InputError(f"{path}: its external data file {location} is missing")
        links = os.stat(file).st_nlink
        if links > 1:  # a hard link can be a file from anywhere; onnx_ir refuses to read one
            raise InputError(f"{path}: its external data file {location} has {links} hard links; "
                             "give it a file of its own (a copy)")
        if os.path.getsize(file) < end:
            raise InputError(f"{path}: its external data file {location} is {os.path.getsize(file)} bytes, "
                             f"the initializers need {end}")


def _resolve_inside(folder: str, parts: list[str]) -> str | None:
    """The file `parts` names under `folder` with every symbolic link followed, or None if it leads
    outside. Only what is inside the folder is looked at (lstat, readlink): a link's target is
    judged by its text before anything it names is touched."""
    pending, current, hops = list(parts), folder, 0
    while pending:
        part = pending.pop(0)
        if part in ("", "."):
            continue
        if part == "..":
            if current == folder:
                return None
            current = os.path.dirname(current)
            continue
        candidate = os.path.join(current, part)
        if not os.path.islink(candidate):
            current = candidate
            continue
        hops += 1
        if hops > 40:  # a loop of links
            return None
        target = os.readlink(candidate)
        if os.path.isabs(target):
            if not target.startswith(folder + os.sep):
                return None
            target, current = target[len(folder) + 1:], folder
        pending = target.split(os.sep) + pending
    return current


def _nbytes(path: str, tensor, what: str) -> int:
    """The bytes a tensor's dims and dtype take."""
    import math

    import onnx_ir as ir

    try:
        bits = ir.DataType(tensor.data_type).bitwidth
    except (ValueError, TypeError):
        raise InputError(f"{path}: {what}: data type {tensor.data_type} cannot be kept in external data") from None
    return (math.prod(tensor.dims) * bits + 7) // 8


_KNOWN_TYPES = None


def _known_types() -> set[int]:
    global _KNOWN_TYPES
    if _KNOWN_TYPES is None:
        import onnx_ir as ir

        _KNOWN_TYPES = {int(t) for t in ir.DataType}
    return _KNOWN_TYPES


def _check_type(path: str, type_proto, what: str) -> None:
    """A value's declared type: a known element type, no negative dim."""
    kind = type_proto.WhichOneof("value")
    if kind in ("tensor_type", "sparse_tensor_type"):
        tensor = getattr(type_proto, kind)
        if tensor.elem_type not in _known_types():
            raise InputError(f"{path}: {what} has an unknown element type {tensor.elem_type}")
        for dim in tensor.shape.dim:
            if dim.HasField("dim_value") and dim.dim_value < 0:
                shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in tensor.shape.dim]
                raise InputError(f"{path}: {what} has a negative dimension: shape {shape}")
    elif kind == "sequence_type":
        _check_type(path, type_proto.sequence_type.elem_type, what)
    elif kind == "optional_type":
        _check_type(path, type_proto.optional_type.elem_type, what)
    elif kind == "map_type":
        _check_type(path, type_proto.map_type.value_type, what)


def _check_tensor(path: str, tensor, what: str) -> None:
    from onnx import TensorProto

    if tensor.data_type not in _known_types() or tensor.data_type == TensorProto.UNDEFINED:
        raise InputError(f"{path}: {what} has an unknown data type {tensor.data_type}")
    if any(d < 0 for d in tensor.dims):
        raise InputError(f"{path}: {what} has a negative dimension: dims {list(tensor.dims)}")
    if tensor.data_location != TensorProto.EXTERNAL and tensor.HasField("raw_data") and tensor.data_type != TensorProto.STRING:
        need = _nbytes(path, tensor, what)
        if len(tensor.raw_data) != need:
            raise InputError(f"{path}: {what}: dims {list(tensor.dims)} need {need} bytes of data, it holds "
                             f"{len(tensor.raw_data)}")


def _node_text(node, index: int) -> str:
    return f"node {quote(node.name) if node.name else '#' + str(index)} ({node.op_type})"


def _free_names(graph) -> set[str]:
    """The names a subgraph reads from the graphs around it."""
    defined = {v.name for v in graph.input} | {t.name for t in graph.initializer}
    defined |= {s.values.name for s in graph.sparse_initializer}
    defined |= {o for n in graph.node for o in n.output}
    used = {i for n in graph.node for i in n.input if i} | {o.name for o in graph.output}
    used |= {name for n in graph.node for sub in _subgraphs(n) for name in _free_names(sub)}
    return used - defined


def _check_graph(path: str, graph, outer: set[str], where: str) -> None:
    """What onnx_ir and the graph pass take for granted: named initializers, known types, no
    negative dims, every value produced once, every input defined, no cycle. Subgraphs too
    (they may read the names of the graphs around them)."""
    inside = f" (in the subgraph {quote(graph.name)})" if where else ""
    own: set[str] = set()
    for value in (*graph.input, *graph.output, *graph.value_info):
        _check_type(path, value.type, f"value {quote(value.name)}{inside}")
    for index, tensor in enumerate(graph.initializer):
        if not tensor.name:
            raise InputError(f"{path}: initializer #{index}{inside} has no name")
        own.add(tensor.name)
    own |= {v.name for v in graph.input} | {s.values.name for s in graph.sparse_initializer}
    for tensor, what, nested in _tensors(graph, False):
        if not nested:
            _check_tensor(path, tensor, what + inside)
    producer: dict[str, int] = {}
    for index, node in enumerate(graph.node):
        for name in node.output:
            if not name:
                continue
            if name in producer or name in own:
                by = _node_text(graph.node[producer[name]], producer[name]) if name in producer else "a graph input or initializer"
                raise InputError(f"{path}: {_node_text(node, index)}{inside}: output {quote(name)} is already "
                                 f"defined by {by}")
            producer[name] = index
    available = outer | own | producer.keys()
    needs: list[set[int]] = []
    for index, node in enumerate(graph.node):
        reads = [name for name in node.input if name]
        for sub in _subgraphs(node):
            _check_graph(path, sub, available, where + "/" + node.op_type)
            reads += sorted(_free_names(sub))
        for name in reads:
            if name not in available:
                raise InputError(f"{path}: {_node_text(node, index)}{inside}: input {quote(name)} is not a graph input, "
                                 "an initializer or any node's output")
        needs.append({producer[name] for name in reads if name in producer})
    for value in graph.output:
        if value.name not in available:
            raise InputError(f"{path}: graph output {quote(value.name)}{inside} is not produced by any node, input or "
                             "initializer")
    _check_acyclic(path, graph, needs, inside)


def _check_acyclic(path: str, graph, needs: list[set[int]], inside: str) -> None:
    """Kahn's algorithm; on a cycle, name a node that is on it (not merely after it)."""
    users: dict[int, list[int]] = {}
    waiting = [len(n) for n in needs]
    for index, need in enumerate(needs):
        for other in need:
            users.setdefault(other, []).append(index)
    ready = [i for i, n in enumerate(waiting) if n == 0]
    done = 0
    while ready:
        index = ready.pop()
        done += 1
        for user in users.get(index, ()):
            waiting[user] -= 1
            if waiting[user] == 0:
                ready.append(user)
    if done == len(needs):
        return
    left = {i for i, n in enumerate(waiting) if n > 0}
    seen, current = [], min(left)
    while current not in seen:  # walk back through what is left: it comes round to a cycle
        seen.append(current)
        current = min(needs[current] & left)
    raise InputError(f"{path}: the graph{inside} has a cycle: {_node_text(graph.node[current], current)} "
                     "depends on its own output")


def input_files(path: str, proto) -> list[str]:
    """IN and the files its external data is in (already checked to be inside IN's folder)."""
    folder = os.path.dirname(os.path.abspath(path))
    locations = {entry.value for tensor, _, _ in _tensors(proto.graph, False)
                 for entry in tensor.external_data if entry.key == "location"}
    return [path, *(os.path.join(folder, location) for location in sorted(locations))]


def attributed(path: str, action):
    """action(); if it fails and onnx's checker finds IN malformed, a one-line InputError (the
    graph's fault), else the error as it is (ours: internal error)."""
    try:
        return action()
    except (InputError, KeyboardInterrupt, MemoryError):
        raise
    except Exception as error:
        import onnx

        try:
            onnx.checker.check_model(path)  # from the path: external data resolved beside it
            problem = None
        except onnx.checker.ValidationError as invalid:
            problem = first_line(invalid)
        except Exception:
            problem = None
        if problem is None:
            raise
        raise InputError(f"{path}: not a valid ONNX graph: {problem} (the graph pass stopped on it: "
                         f"{type(error).__name__})") from None
