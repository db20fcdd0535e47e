"""runtime_ext/cann/acl.h and the simulated CANN runtime (cann_sim/src) declare the ACL types,
numbers and functions they use by hand: neither builds against CANN. CANN's own ACL headers ship in
the torch-npu wheel (torch_npu/include/third_party/acl/inc/acl/); these tests take them from
torch-npu 2.14.0 (downloaded once, only that folder kept under build/, never committed) and compile
both sets of declarations against them (cann_headers/*.cc), so a signature, enum value or error code
that differs from CANN's fails here. Each check is also shown to fail on a declaration changed on
purpose."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CHECKS = Path(__file__).with_name("cann_headers")
SIM_SRC = Path(__file__).with_name("cann_sim") / "src"
TORCH_NPU = "torch-npu==2.14.0"
# the wheel for one platform, whatever this machine is: the headers are the same in every one
WHEEL = ["--only-binary=:all:", "--platform", "manylinux_2_28_x86_64", "--python-version", "3.11"]
IN_WHEEL = "torch_npu/include/third_party/acl/inc/acl/"
CACHE = REPO / "build" / "cann-acl-headers" / "torch-npu-2.14.0"
NEEDED = ("acl.h", "acl_rt.h", "acl_base.h", "acl_op_compiler.h", "error_codes/rt_error_codes.h")


@pytest.fixture(scope="module")
def cann_include() -> Path:
    """An include/ folder holding CANN's acl/ headers from the torch-npu wheel."""
    include = CACHE / "include"
    if all((include / "acl" / name).is_file() for name in NEEDED):
        return include
    CACHE.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=CACHE, prefix=".fetch-") as tmp:
        done = subprocess.run([sys.executable, "-m", "pip", "download", TORCH_NPU, "--no-deps", *WHEEL, "-d", tmp],
                              capture_output=True, text=True)
        wheels = sorted(Path(tmp).glob("torch_npu-*.whl"))
        if done.returncode or not wheels:
            pytest.fail(f"could not download {TORCH_NPU}, whose wheel carries CANN's ACL headers (pip exit "
                        f"{done.returncode}):\n{done.stderr[-2000:]}")
        fresh = Path(tmp) / "include"
        with zipfile.ZipFile(wheels[0]) as wheel:
            for member in wheel.namelist():
                if member.startswith(IN_WHEEL) and member.endswith(".h"):
                    target = fresh / "acl" / member[len(IN_WHEEL):]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    target.write_bytes(wheel.read(member))
        missing = [name for name in NEEDED if not (fresh / "acl" / name).is_file()]
        if missing:
            pytest.fail(f"{wheels[0].name} has no {', '.join(missing)} under {IN_WHEEL}")
        shutil.rmtree(include, ignore_errors=True)
        os.replace(fresh, include)  # the wheel (44 MB) goes with the temporary folder
    return include


def _compiler() -> str:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.fail("no C++ compiler (CXX, g++ or c++) to compile the declarations against CANN's headers")
    return cxx


def _compile(source: Path, *include_dirs) -> subprocess.CompletedProcess:
    command = [_compiler(), "-std=c++17", "-fsyntax-only", "-Wall", *(f"-I{d}" for d in include_dirs), str(source)]
    return subprocess.run(command, capture_output=True, text=True)


def _ort_include(onnxruntime_headers) -> str:
    if onnxruntime_headers is None:
        pytest.fail("no onnxruntime include/ folder for runtime_ext's headers (pip install . fetches one; "
                    "or set ONNXRUNTIME_INCLUDE_DIR)")
    return onnxruntime_headers


def _changed(source: Path, folder: Path, *edits) -> Path:
    """A copy of `source` in `folder` with each (old, new) edit made (each old text must be there)."""
    text = source.read_text()
    for old, new in edits:
        assert old in text, f"{source.name} no longer holds {old!r}: update this test's edit"
        text = text.replace(old, new, 1)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / source.name).write_text(text)
    return folder


def test_runtime_ext_declarations_are_canns(cann_include, onnxruntime_headers):
    done = _compile(CHECKS / "runtime_ext_acl.cc", cann_include, REPO / "runtime_ext", _ort_include(onnxruntime_headers))
    assert done.returncode == 0, f"runtime_ext/cann/acl.h differs from CANN's headers:\n{done.stderr[-4000:]}"


def test_simulator_declarations_are_canns(cann_include):
    done = _compile(CHECKS / "cann_sim_acl.cc", cann_include, SIM_SRC)
    assert done.returncode == 0, f"the simulated CANN's declarations differ from CANN's headers:\n{done.stderr[-4000:]}"


def test_a_drifted_declaration_fails(cann_include, onnxruntime_headers, tmp_path):
    """The same checks on copies with one value and one signature changed: both are reported."""
    ours = _changed(REPO / "runtime_ext" / "cann" / "acl.h", tmp_path / "ours" / "cann",
                    ("kAclBFloat16 = 27", "kAclBFloat16 = 28"),
                    ("int32_t value, size_t count, aclrtStream stream)", "int32_t value, uint32_t count, aclrtStream stream)"))
    done = _compile(CHECKS / "runtime_ext_acl.cc", cann_include, ours.parent, REPO / "runtime_ext",
                    _ort_include(onnxruntime_headers))
    assert done.returncode != 0
    assert "kAclBFloat16 is not CANN's ACL_BF16" in done.stderr, done.stderr[-3000:]
    assert "aclrtMemsetAsync: CannApi's pointer type differs from CANN's declaration" in done.stderr, done.stderr[-3000:]

    sim = tmp_path / "sim"
    _changed(SIM_SRC / "simcann.h", sim, ("X(ACL_ERROR_OP_NOT_FOUND, 100024)", "X(ACL_ERROR_OP_NOT_FOUND, 100025)"))
    _changed(SIM_SRC / "acl_api.h", sim, ("size_t count, aclrtMemcpyKind kind);", "size_t count, int kind);"))
    done = _compile(CHECKS / "cann_sim_acl.cc", cann_include, sim)
    assert done.returncode != 0
    assert "ACL_ERROR_OP_NOT_FOUND differs from CANN's" in done.stderr, done.stderr[-3000:]
    assert "conflicting declaration of C function" in done.stderr and "aclrtMemcpy(" in done.stderr, done.stderr[-3000:]
