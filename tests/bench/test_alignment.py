"""The alignment sweep's machinery on tiny cases (its timings are never asserted): arrays land where
asked, the kernel writes the placed output in place, and the table has a row per case."""

import numpy as np
import pytest

from ascend_grad.bench import alignment
from ascend_grad.testing import BFLOAT16, PAGE, to_ort_value


@pytest.mark.parametrize("dtype", [np.dtype(np.float32), BFLOAT16])
@pytest.mark.parametrize("offset", [0, 16, 528, 4080])
def test_placed_arrays_start_where_asked_and_keep_their_values(dtype, offset):
    like = np.arange(1000).astype(dtype)
    array = alignment.placed_copy(like, offset)
    assert array.ctypes.data % PAGE == offset and array.dtype == dtype
    assert np.array_equal(array.astype(np.float32), like.astype(np.float32))


def test_a_placed_output_receives_the_result(monkeypatch):
    """The sweep binds its output array in place: were onnxruntime to write elsewhere, it would time
    another placement than it reports."""
    monkeypatch.setattr(alignment, "ELEMENTWISE_SIZES", [4099])
    case = alignment.cases(np.dtype(np.float32), None)[0]
    runner = alignment.Runner(case, 1)
    placement = (16, 16, 64)
    feeds = runner.placed_feeds(placement)
    out = alignment.placed_copy(np.full_like(feeds["self"], np.nan), placement[2])
    binding = runner.session.io_binding()
    for name, value in feeds.items():
        binding.bind_ortvalue_input(name, to_ort_value(value))
    binding.bind_ortvalue_output("gradInput", to_ort_value(out))
    runner.session.run_with_iobinding(binding)
    from ascend_grad.ops import reference
    from ascend_grad.testing import assert_close

    assert_close(out, reference.silu_backward(feeds["gradOutput"], feeds["self"]))


def test_the_sweep_has_a_row_per_case_and_thread_count(monkeypatch, capsys):
    monkeypatch.setattr(alignment, "ELEMENTWISE_SIZES", [1 << 12])
    monkeypatch.setattr(alignment, "GROUP_NORM_SHAPE", (1, 32, 4, 4))
    monkeypatch.setattr(alignment, "NHWC_SHAPE", (1, 4, 4, 32))
    monkeypatch.setattr(alignment, "PLACEMENTS", alignment.PLACEMENTS[:3])
    monkeypatch.setattr(alignment, "median_ms", lambda fn, **_: (fn(), 1.0)[1])
    rows = alignment.sweep((1, 2), ("float32",))
    # 2 elementwise ops at 1 size, GroupNormSwishGrad and GroupNormSwish NCHW and NHWC; 2 thread counts
    assert len(rows) == 6 * 2 and all(len(row) == len(alignment.SWEEP_HEADER) for row in rows)
    assert sum("NHWC" in row[0] for row in rows) == 2 * 2
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert len(lines) == len(rows) + 1  # the header, then a line per row
