"""The benchmark chart: results.md's kernel table parses back into kernels.Row objects, and draw writes a PNG."""

import re
import struct
import sys
from pathlib import Path

import pytest

from ascend_grad.bench import chart, kernels

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results.md"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def expected_cases():
    elementwise = [f"{op} {n >> 20}M" for op in ("SiluBackward", "MishBackward") for n in kernels.SIZES]
    group_norm = [f"{op} {shape} G={kernels.GROUPS}" for op in ("GroupNormSwishGrad", "GroupNormSwish")
                  for shape in kernels.GROUP_NORM_SHAPES]
    nhwc = [f"{op} NHWC {kernels.NHWC_SHAPE} G={kernels.GROUPS}" for op in ("GroupNormSwishGrad", "GroupNormSwish")]
    return elementwise + group_norm + nhwc


def table_line(case, dtype, threads):
    """The numbers of one line of the committed table (section "## Kernels": results.md also keeps an
    earlier machine's run), read with a regex rather than with chart's parser."""
    number = r"([0-9.]+)"
    pattern = (rf"^\| {re.escape(case)} \| {dtype} \| {threads} \| {number} \| {number} \([0-9.]+x\) \| "
               rf"{number} \([0-9.]+x\) \| {number} \([0-9.]+x\) \| {number} \([0-9.]+x\) \|$")
    text = RESULTS.read_text()
    start = text.index("\n## Kernels\n")
    section = text[start:text.index("\n## ", start + 1)]
    (match,) = re.finditer(pattern, section, re.M)
    return [float(value) for value in match.groups()]


def test_every_case_of_the_benchmark_for_float32_at_1_and_2_threads():
    rows = chart.rows_from_results(RESULTS)
    assert all(isinstance(row, kernels.Row) for row in rows)
    float32 = {(row.case, row.threads): row for row in rows if row.dtype == "float32"}
    assert set(float32) == {(case, t) for case in expected_cases() for t in (1, 2)}
    assert chart.case_labels() == expected_cases()
    # Only the kernel table (run for some of the dtypes): the later sections' tables add no rows.
    dtypes = {row.dtype for row in rows}
    assert "float32" in dtypes and dtypes <= set(kernels.DTYPES)
    assert len(rows) == len(expected_cases()) * 2 * len(dtypes)


@pytest.mark.parametrize("case, dtype, threads", [
    ("MishBackward 16M", "float32", 2),
    ("GroupNormSwishGrad (1, 512, 128, 128) G=32", "float32", 1),
    ("SiluBackward 1M", "bfloat16", 2),
    ("GroupNormSwish NHWC (2, 64, 64, 320) G=32", "bfloat16", 1),
])
def test_values_are_the_table_numbers(case, dtype, threads):
    (row,) = [r for r in chart.rows_from_results(RESULTS) if (r.case, r.dtype, r.threads) == (case, dtype, threads)]
    assert [row.fused, row.aten, row.compiled, row.decomposed, row.floor] == table_line(case, dtype, threads)


def test_rows_round_trip_through_the_markdown(tmp_path):
    rows = chart.rows_from_results(RESULTS)
    text = "\n".join(["# x", "", "| " + " | ".join(kernels.HEADER) + " |", "|" + "---|" * len(kernels.HEADER)]
                     + ["| " + " | ".join(row.cells()) + " |" for row in rows] + ["", "## Other", "| a | b |", "|---|---|"])
    (tmp_path / "r.md").write_text(text)
    assert chart.rows_from_results(tmp_path / "r.md") == rows


def test_missing_competitors_parse_as_none(tmp_path):
    row = kernels.Row("SiluBackward 1M", "float16", 1, 0.5, None, None, 10.0, 0.25)
    (tmp_path / "r.md").write_text("| " + " | ".join(kernels.HEADER) + " |\n|" + "---|" * 8 + "\n| "
                                   + " | ".join(row.cells()) + " |\n")
    assert chart.rows_from_results(tmp_path / "r.md") == [row]


def test_the_machine_line_is_the_kernel_sections():
    machine = chart.machine_from_results(RESULTS)
    assert machine and re.search(r"\b2[ -]core", machine) and "onnx 1.23.2" not in machine


def png_size(path):
    data = Path(path).read_bytes()
    assert data[:8] == PNG_SIGNATURE
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_draw_writes_a_png(tmp_path):
    pytest.importorskip("matplotlib")
    rows = chart.rows_from_results(RESULTS)
    out = chart.draw(rows, tmp_path / "chart.png", dtype="float32", threads=(1, 2),
                     machine=chart.machine_from_results(RESULTS))
    width, height = png_size(out)
    assert width >= 800 and height > 0


def test_draw_with_one_thread_count_and_a_missing_competitor(tmp_path):
    pytest.importorskip("matplotlib")
    rows = [row for row in chart.rows_from_results(RESULTS) if row.dtype == "bfloat16" and row.threads == 1]
    rows[0].aten = None
    width, _ = png_size(chart.draw(rows, tmp_path / "one.png", dtype="bfloat16"))
    assert width >= 800
    with pytest.raises(ValueError):
        chart.draw(rows, tmp_path / "none.png", dtype="float32")


def test_main_writes_the_chart(tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "c.png"
    assert chart.main(["--results", str(RESULTS), "--out", str(out), "--dtype", "bfloat16"]) == 0
    assert png_size(out)[0] >= 800
    assert str(out) in capsys.readouterr().out


def test_main_without_matplotlib_exits_2_with_the_install_hint(tmp_path, monkeypatch, capsys):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    assert chart.main(["--results", str(RESULTS), "--out", str(tmp_path / "c.png")]) == 2
    err = capsys.readouterr().err
    assert 'pip install "ascend-grad[chart]"' in err and err.count("\n") == 1
    assert not (tmp_path / "c.png").exists()


def test_case_labels_break_before_the_shape():
    assert chart._display_case("GroupNormSwish (2, 320, 64, 64) G=32") == "GroupNormSwish\n2×320×64×64, G=32"
    assert chart._display_case("GroupNormSwishGrad NHWC (2, 64, 64, 320) G=32") == "GroupNormSwishGrad NHWC\n2×64×64×320, G=32"
    assert chart._display_case("SiluBackward 16M") == "SiluBackward 16M"
