"""The `ascend-grad` command. Exit status: 0 success, 2 bad input (one line on stderr), 1 internal error."""

from __future__ import annotations

import argparse
import sys

import ascend_grad


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
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 with a usage line on bad arguments
    try:
        return args.run(args)
    except (OSError, ValueError) as error:  # bad input: one line, no traceback
        print(f"ascend-grad: error: {error}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
