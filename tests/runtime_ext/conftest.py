import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def onnxruntime_headers():
    """An onnxruntime include/ folder: ONNXRUNTIME_INCLUDE_DIR, else one a build of the library
    already fetched (pip install . puts it under build/<wheel tag>), else None."""
    if os.environ.get("ONNXRUNTIME_INCLUDE_DIR"):
        return os.environ["ONNXRUNTIME_INCLUDE_DIR"]
    for found in sorted((REPO / "build").glob("*/onnxruntime-headers/onnxruntime_c_api.h")):
        return str(found.parent)
    return None
