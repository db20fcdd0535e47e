"""Runs scripts in the onnxruntime-cann venv against the simulated CANN runtime (tests/conftest.py
loads this file by path and hands a `Cann` to the tests as the `cann` fixture).

CANN is found either the real way (ASCEND_HOME_PATH=<root>, LD_LIBRARY_PATH=<root>/lib64, as
CANN's set_env.sh does) or by preloading: the script first loads every simulated library with
ctypes.CDLL(path, RTLD_GLOBAL) and no variable is set. Each run writes the simulator's report
(SIMCANN_REPORT) at exit; `Cann.assert_clean` checks it."""

from __future__ import annotations

import importlib.util
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV_SPEC = ("onnxruntime-cann==1.24.4", "numpy<2")
# Variables that decide how the child finds CANN or what the simulator does: the run sets them.
OWN_VARIABLES = ("ASCEND_HOME_PATH", "LD_LIBRARY_PATH", "LD_PRELOAD", "SIMCANN_REPORT", "SIMCANN_FAIL")


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"cann_sim_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


build = _load("build")


def unsupported_reason() -> str | None:
    """Why the onnxruntime-cann 1.24.4 wheel cannot be installed here, else None."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "aarch64"):
        return f"onnxruntime-cann 1.24.4 has wheels for x86_64/aarch64 Linux only, not {sys.platform} {platform.machine()}"
    if sys.version_info[:2] != (3, 11):
        return f"onnxruntime-cann 1.24.4 has cp311 wheels only, this is Python {sys.version_info[0]}.{sys.version_info[1]}"
    return None


class Cann:
    def __init__(self, root: Path, python: Path):
        self.root = Path(root)
        self.python = Path(python)
        self.lib64 = self.root / "lib64"
        # libascendcl first: the others need it (their DT_NEEDED resolve to the loaded one)
        self.libraries = [self.lib64 / name for name in build.LIBRARIES]

    def environment(self, env: dict | None = None, preload: bool = False, report: str | None = None) -> dict:
        out = {k: v for k, v in os.environ.items() if k not in OWN_VARIABLES}
        if not preload:
            out["ASCEND_HOME_PATH"] = str(self.root)
            out["LD_LIBRARY_PATH"] = str(self.lib64)
        if report:
            out["SIMCANN_REPORT"] = report
        out.update(env or {})
        return out

    def preamble(self, preload: bool) -> str:
        lines = ["import sys", f"sys.path.insert(0, {str(HERE)!r})  # simacl"]
        if preload:
            lines.append("import ctypes")
            lines += [f"ctypes.CDLL({str(lib)!r}, ctypes.RTLD_GLOBAL)" for lib in self.libraries]
        return "\n".join(lines) + "\n"

    def run(self, script: str, *args, env: dict | None = None, preload: bool = False, timeout: float = 600):
        """Runs `script` (Python source) in the CANN venv -> (CompletedProcess, report dict, or None
        when the process died before writing it)."""
        with tempfile.TemporaryDirectory(prefix="cann-run-") as tmp:
            path = Path(tmp) / "script.py"
            path.write_text(self.preamble(preload) + script)
            report_path = Path(tmp) / "report.json"
            proc = subprocess.run([str(self.python), str(path), *map(str, args)], capture_output=True, text=True,
                                  timeout=timeout, env=self.environment(env, preload, str(report_path)), cwd=tmp)
            report = json.loads(report_path.read_text()) if report_path.exists() else None
        return proc, report

    def run_models(self, models: list[dict], out_dir: Path, preload: bool = False, env: dict | None = None, timeout: float = 900):
        """Runs run_models.py on `models` (see there) -> (results by name, report); outputs are
        loaded as lists of arrays under "cann" and "cpu"."""
        import numpy as np

        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        spec = out_dir / "spec.json"
        spec.write_text(json.dumps(models))
        proc, report = self.run((HERE / "run_models.py").read_text(), spec, out_dir, preload=preload, env=env, timeout=timeout)
        assert proc.returncode == 0, f"run_models.py failed ({proc.returncode}):\n{proc.stderr[-4000:]}"
        results = {}
        for r in json.loads((out_dir / "results.json").read_text()):
            for side in ("cann", "cpu"):
                path = out_dir / f"{r['name']}.{side}.npz"
                if path.exists():
                    with np.load(path) as z:
                        r[side] = [z[f"arr_{i}"] for i in range(len(z.files))]
            results[r["name"]] = r
        return results, report

    @staticmethod
    def assert_clean(report: dict | None, what: str = "the run"):
        """No violation and nothing left behind at exit. onnxruntime-cann 1.24.4 frees its arena
        chunks, pinned host memory and stream when its sessions go at interpreter exit (measured:
        0 bytes live), so any live byte, tensor, executor, stream or event is a leak."""
        assert report is not None, f"{what}: no simulator report (the process died before exit)"
        problems = []
        if report["violation_count"]:
            problems.append(f"{report['violation_count']} protocol violations: {report['violations'][:10]}")
        for key in ("live_device_bytes", "live_host_bytes", "live_tensors", "unused_executors", "live_streams",
                    "live_events", "live_tensor_descs", "live_data_buffers", "live_op_attrs"):
            if report[key]:
                problems.append(f"{key} = {report[key]}")
        assert not problems, f"{what}: simulator report not clean: " + "; ".join(problems)


def running_in_cann_venv() -> bool:
    """Whether this python already holds onnxruntime-cann 1.24.4 with numpy 1 (as an Atlas host's
    environment does, and the emulated aarch64 one of tests/aarch64): it then runs the scripts."""
    from importlib import metadata

    try:
        return metadata.version("onnxruntime-cann") == "1.24.4" and metadata.version("numpy").startswith("1.")
    except metadata.PackageNotFoundError:
        return False


def make(root=None, venvs=None) -> Cann:
    """Builds the simulator (if its sources changed) and the CANN venv (once), unless this python is one."""
    from ascend_grad.venvs import venv_python

    root = build.build(root)
    if running_in_cann_venv():
        return Cann(root, Path(sys.executable))
    python = venv_python(*VENV_SPEC, root=venvs or build.REPO / "build" / "venvs")
    return Cann(root, python)
