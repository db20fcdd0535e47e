"""Which onnxruntime ascend-grad depends on, decided when the wheel is built (a scikit-build-core
metadata provider: pyproject.toml, [tool.scikit-build.metadata.dependencies]).

onnxruntime comes as several distributions that all install the same `onnxruntime` import package
(onnxruntime, onnxruntime-cann, onnxruntime-training, onnxruntime-gpu, ...). A fixed requirement on
`onnxruntime` would make pip install the CPU build over the flavour a user already has (the files
of one package overwrite the other's). So: when the environment being installed into already holds
a distribution that provides `onnxruntime`, depend on that distribution; otherwise on onnxruntime.
ASCEND_GRAD_ONNXRUNTIME=<distribution> decides it by hand (building a wheel for another machine);
ASCEND_GRAD_ONNXRUNTIME=none requires none (the distributable wheels, build_support/wheels: they
cannot know the machine they will be installed on): the flavour already there stays, the extra
`ascend-grad[cpu]` brings onnxruntime where there is none, and `import ascend_grad` says which to
install when there is none.
"""

from __future__ import annotations

import os
import sysconfig
from importlib import metadata


def installed_onnxruntime() -> str | None:
    """The distribution that provides the `onnxruntime` package in the target environment, if any.

    pip builds in an isolated environment, but with the target's interpreter: sys.prefix, and so
    sysconfig's site-packages, are the target's."""
    paths = sorted({sysconfig.get_paths()[key] for key in ("purelib", "platlib")})
    found = []
    for dist in metadata.distributions(path=paths):
        files = dist.files or []
        if any(str(f).replace("\\", "/") == "onnxruntime/__init__.py" for f in files):
            found.append(dist.metadata["Name"])
    # a flavour beside plain onnxruntime (installed over it): the flavour is what the user chose
    flavours = [name for name in found if name.lower() != "onnxruntime"]
    return (flavours or found or [None])[0]


def dynamic_metadata(field: str, settings: dict | None = None) -> list[str]:
    if field != "dependencies":
        raise RuntimeError(f"onnxruntime_dependency provides 'dependencies', not {field!r}")
    settings = dict(settings or {})
    base = list(settings.pop("base", []))
    minimum = settings.pop("minimum", "1.19")
    if settings:
        raise RuntimeError(f"onnxruntime_dependency: unknown settings {sorted(settings)}")
    runtime = os.environ.get("ASCEND_GRAD_ONNXRUNTIME") or installed_onnxruntime() or "onnxruntime"
    if runtime == "none":
        return base
    return [*base, f"{runtime}>={minimum}"]
