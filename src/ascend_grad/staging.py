"""Where the command line writes: every output goes to a fresh hidden folder beside OUT and is
moved into place only when every step succeeded; no output may be IN or a file IN reads."""

from __future__ import annotations

import argparse
import json
import os

from ascend_grad.model_file import InputError, input_files


def save_model(model, path: str) -> None:
    """OUT (a path in the staging folder, under OUT's final name); weights that were external stay
    in a side file named after OUT, so the `location` inside OUT is the final one."""
    import onnx_ir as ir

    external = any(isinstance(t.const_value, ir.ExternalTensor) for t in model.graph.initializers.values())
    if external:  # streamed tensor by tensor
        ir.save(model, path, external_data=os.path.basename(path) + ".data")
    else:
        ir.save(model, path)


def output_folder(path: str, what: str = "") -> str:
    """The folder an output goes to; refused (before any work) if it cannot be written there."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise InputError(f"{path}: is a directory; give the {what or 'output'} file's name")
    if not os.path.isdir(folder):
        raise InputError(f"{path}: cannot write: no folder {folder}")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"{path}: cannot write: the folder {folder} is not writable")
    if os.path.lexists(path) and not os.path.isfile(path):  # os.replace would swap out a device or a FIFO
        raise InputError(f"{path}: exists and is not a regular file")
    return folder


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)  # st_dev and st_ino: a hard link or a symlink is the same file
    except OSError:
        return os.path.abspath(a) == os.path.abspath(b)  # neither exists yet


def refuse_overwriting(args: argparse.Namespace, proto, outputs: list[str]) -> None:
    """No output may be IN, one of IN's external data files, or another output: OUT is read back
    (--verify), IN's weights are read while OUT's are written. Compared as files (a hard link or
    a symlink to IN is IN), not as path strings."""
    inputs = input_files(args.input, proto)
    for index, output in enumerate(outputs):
        report = bool(args.report) and index == len(outputs) - 1
        if any(same_file(output, source) for source in inputs):
            why = " (--verify runs IN and OUT side by side)" if args.verify and index == 0 else ""
            raise InputError(f"{output}: is {'IN' if same_file(output, args.input) else 'a file IN reads'}{why}; "
                             f"write {'the report' if report else 'OUT'} to another path")
        if report and any(same_file(output, other) for other in outputs[:-1]):
            raise InputError(f"{output}: the report would overwrite an output; write it to another path")


class Staging:
    """A fresh hidden folder beside OUT: every output is written there under its final name (so
    OUT's external data `location` is the final one) and moved into place with os.replace only
    once every step succeeded. Left any other way (an error, Ctrl-C), it is removed with all in it:
    no partial OUT, and an OUT from before stays as it was."""

    def __init__(self, output: str, report: str | None):
        self.output, self.report = output, report
        self.folder = os.path.dirname(os.path.abspath(output))
        self.dir = self.report_tmp = None

    def __enter__(self):
        import tempfile

        try:
            self.dir = tempfile.mkdtemp(prefix=".ascend-grad-", dir=self.folder)
        except OSError as error:
            raise InputError(f"{self.output}: cannot write: {error.strerror or error}") from None
        return self

    def path(self, suffix: str = "") -> str:
        return os.path.join(self.dir, os.path.basename(self.output) + suffix)

    def stage_report(self, result: dict) -> None:
        if self.report:
            self.report_tmp = stage_json(self.report, result)

    def commit(self) -> None:
        for suffix in (".data", ".ascend.json", ""):  # OUT last: it names the others
            if os.path.exists(self.path(suffix)):
                os.replace(self.path(suffix), self.output + suffix)
        if self.report_tmp:
            os.replace(self.report_tmp, self.report)
            self.report_tmp = None

    def __exit__(self, *exc):
        import shutil

        if self.dir:
            shutil.rmtree(self.dir, ignore_errors=True)
        if self.report_tmp:
            remove_quietly(self.report_tmp)
        return False


def remove_quietly(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass


def stage_json(path: str, result: dict) -> str:
    """`result` in a fresh temporary file beside `path`, to be os.replace'd onto it."""
    import secrets

    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.{secrets.token_hex(4)}.tmp")
    try:
        with open(tmp, "x") as f:  # "x": the default permissions, and never someone else's file
            json.dump(result, f, indent=1)
    except OSError as error:
        remove_quietly(tmp)
        raise InputError(f"{path}: cannot write: {error.strerror or error}") from None
    except BaseException:
        remove_quietly(tmp)
        raise
    return tmp
