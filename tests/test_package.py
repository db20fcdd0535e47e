"""The distribution: one import package (ascend_grad) with the user's folders as subpackages, the
stable names of SPEC.md, and the console script."""

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import ascend_grad


def test_spec_names():
    assert ascend_grad.DOMAIN == "ascend.grad" and ascend_grad.OPSET_VERSION == 1
    from ascend_grad import ops

    for name in ("SiluBackward", "MishBackward", "GroupNormSwishGrad", "GroupNormSwish"):
        assert getattr(ops, name).name == name
    for name in ("silu_backward", "mish_backward", "group_norm_swish", "group_norm_swish_grad"):
        assert callable(getattr(ops.reference, name))


def test_installs_no_generic_top_level_names():
    """Everything the wheel puts into site-packages lives under ascend_grad/ (or its dist-info)."""
    files = importlib.metadata.files("ascend-grad")
    tops = {Path(str(f)).parts[0] for f in files if not str(f).startswith("..")}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"ascend_grad"}
    assert any(str(f).replace("\\", "/").startswith("ascend_grad/ops/") for f in files)


def test_imports_the_installed_package_not_the_checkout():
    purelib = Path(sysconfig.get_paths()["purelib"]).resolve()
    assert purelib in Path(ascend_grad.__file__).resolve().parents


def test_console_script():
    script = Path(sys.executable).with_name("ascend-grad")
    done = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout.strip() == f"ascend-grad {ascend_grad.__version__}"
    done = subprocess.run([script, "ops"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "ascend.grad::GroupNormSwishGrad(dy, mean, rstd, x, gamma, beta) -> (dx, dgamma?, dbeta?)" in done.stdout
    assert "eps=1e-05" in done.stdout
    done = subprocess.run([script, "no-such-command"], capture_output=True, text=True)
    assert done.returncode == 2 and "invalid choice" in done.stderr


REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "flavour",
    ["onnxruntime-cann==1.24.4", "onnxruntime-training-cpu==1.19.2"],
)
def test_installs_beside_an_onnxruntime_flavour(flavour, tmp_path, installed_beside):
    """`pip install <this repository>` into an environment holding another onnxruntime distribution
    keeps it: no CPU onnxruntime pulled over it, and the flavour's runtime is what ascend_grad uses."""
    if sys.version_info[:2] != (3, 11) or sysconfig.get_platform() != "linux-x86_64":
        pytest.skip(f"{flavour} has wheels for CPython 3.11 on Linux x86_64 only; this is {sysconfig.get_platform()} {sys.version}")
    python = installed_beside(flavour)  # (shared with the CANN session tests)
    # (the environment's distributions as its python sees them: it may have no pip of its own, make_venv)
    listed = subprocess.run([python, "-c", "import importlib.metadata as m; print('\\n'.join(d.metadata['Name'] for d in m.distributions()))"],
                            capture_output=True, text=True, check=True).stdout
    names = {re.sub(r"[-_.]+", "-", line).lower() for line in listed.split()}
    assert flavour.split("==")[0] in names and "ascend-grad" in names
    assert "onnxruntime" not in names, listed
    probe = (
        "import onnxruntime as ort, ascend_grad.runtime_ext as r, importlib.metadata as m;"
        "print(ort.__version__, [d for d in m.distribution('ascend-grad').requires if 'onnxruntime' in d]);"
        "o = r.session_options()"
    )
    done = subprocess.run([python, "-c", probe], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    version, requirement = done.stdout.split(" ", 1)
    assert version == flavour.split("==")[1]
    assert flavour.split("==")[0] + ">=1.19" in requirement
