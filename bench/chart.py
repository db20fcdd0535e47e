"""A chart of the kernel benchmark (kernels.py): each competitor's time relative to the fused kernel.

    python -m ascend_grad.bench.chart [--results bench/results.md] [--out bench/chart.png] [--dtype float32]
    python -m ascend_grad.bench.chart --run [--out bench/chart.png] [--dtype float32]

Reads the kernel table of results.md (the table with kernels.HEADER's columns; the other sections,
"## Training step" and "## Graph pass", are ignored) or, with --run, runs the benchmark for the chosen dtype at 1 and 2
threads, and draws one PNG: per case, horizontal bars of fused, PyTorch ATen, torch.compile, the
decomposed ONNX function body in onnxruntime and the memory-bandwidth floor, as time / fused time
on a log axis (fused = 1, so 10x means ten times slower than the fused kernel), one panel per
thread count. Needs matplotlib: pip install "ascend-grad[chart]".
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import platform
import re
import sys
import textwrap
from collections.abc import Iterable
from pathlib import Path

from ascend_grad.bench.kernels import GROUP_NORM_SHAPES, GROUPS, HEADER, NHWC_SHAPE, SIZES, Row

INSTALL_HINT = 'pip install "ascend-grad[chart]"'
DEFAULT_RESULTS = Path("bench/results.md")
DEFAULT_OUT = Path("bench/chart.png")

# (Row field, legend label, colour): Okabe-Ito colours (distinguishable with every common colour-vision
# deficiency); the floor is a bound, not a competitor, so it is grey.
SERIES = [
    ("fused", "fused kernel", "#0072B2"),
    ("aten", "PyTorch ATen", "#E69F00"),
    ("compiled", "torch.compile", "#009E73"),
    ("decomposed", "decomposed graph in onnxruntime", "#CC79A7"),
    ("floor", "memory-bandwidth floor", "#A0A0A0"),
]
AXIS_STARTS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)  # where the log axis may start
FLOOR_NOTE = ("Fused: onnxruntime with the ascend-grad kernel library. Floor: bytes the op must move / streaming "
              "bandwidth measured in the same run. Medians.")


def case_labels() -> list[str]:
    """The benchmark's case labels in its order (kernels.run)."""
    labels = [f"{op} {n >> 20}M" for op in ("SiluBackward", "MishBackward") for n in SIZES]
    labels += [f"{op} {shape} G={GROUPS}" for op in ("GroupNormSwishGrad", "GroupNormSwish") for shape in GROUP_NORM_SHAPES]
    return labels + [f"{op} NHWC {NHWC_SHAPE} G={GROUPS}" for op in ("GroupNormSwishGrad", "GroupNormSwish")]


# ---------------------------------------------------------------------------------------------------
# results.md


def _cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def _ms(cell: str) -> float | None:
    """'0.601 (1.24x)' -> 0.601, '12.127' -> 12.127, 'n/a' -> None."""
    if cell.strip().lower() == "n/a":
        return None
    match = re.match(r"\s*([0-9.eE+-]+)", cell)
    if not match:
        raise ValueError(f"not a time in ms: {cell!r}")
    return float(match.group(1))


def rows_from_results(path) -> list[Row]:
    """The kernel table of results.md (the table whose header is kernels.HEADER) as kernels.Row objects."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    for start, line in enumerate(lines):
        if line.lstrip().startswith("|") and _cells(line) == HEADER:
            break
    else:
        raise ValueError(f"{path}: no kernel benchmark table (header: | {' | '.join(HEADER)} |)")
    rows = []
    for line in lines[start + 2:]:  # past the header and the |---| line
        if not line.lstrip().startswith("|"):
            break
        cells = _cells(line)
        if len(cells) != len(HEADER):
            raise ValueError(f"{path}: expected {len(HEADER)} cells: {line!r}")
        case, dtype, threads, fused, aten, compiled, decomposed, floor = cells
        rows.append(Row(case, dtype, int(threads), _ms(fused), _ms(aten), _ms(compiled), _ms(decomposed), _ms(floor)))
    return rows


def machine_from_results(path) -> str | None:
    """The 'Machine: ...' line of the kernel section (the one before the kernel table), without 'Machine: '."""
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("|") and _cells(line) == HEADER:
            return None
        if line.startswith("Machine:"):
            return line[len("Machine:"):].strip()
    return None


def machine_here() -> str:
    """This machine, in the style of results.md's Machine lines (for --run)."""
    import onnxruntime as ort

    from ascend_grad.bench.kernels import _torch

    from ascend_grad.bench.report import cpu_model

    torch = _torch()
    return (f"{cpu_model()}, {os.cpu_count()} cores, "
            f"Python {platform.python_version()}, onnxruntime {ort.__version__}, "
            f"torch {torch.__version__ if torch else 'absent'}; {datetime.date.today()}.")


# ---------------------------------------------------------------------------------------------------
# the chart


def _display_case(case: str) -> str:
    """'GroupNormSwishGrad (2, 320, 64, 64) G=32' -> two lines, shape as 2×320×64×64 (a layout
    word before the shape, 'NHWC', stays on the first line)."""
    match = re.fullmatch(r"(\w+(?: NHWC)?) \(([\d, ]+)\)(?: G=(\d+))?", case)
    if not match:
        return case
    shape = "×".join(part.strip() for part in match.group(2).split(","))
    groups = f", G={match.group(3)}" if match.group(3) else ""
    return f"{match.group(1)}\n{shape}{groups}"


def _ratio_text(ratio: float) -> str:
    if ratio >= 100:
        return f"{ratio:.0f}×"
    if ratio >= 10:
        return f"{ratio:.1f}×"
    return f"{ratio:.2f}×"


def _ticks(xmin: float, xmax: float) -> list[float]:
    """1-2-5 ticks over up to ~2.8 decades (about 0.5x to 300x), else 1-3, else decades only."""
    decades = math.log10(xmax / xmin)
    mantissas = (1, 2, 5) if decades <= 2.8 else (1, 3) if decades <= 4.2 else (1,)
    return [float(f"{m}e{e}") for e in range(math.floor(math.log10(xmin)), math.ceil(math.log10(xmax)) + 1)
            for m in mantissas]


def _order(rows: list[Row]) -> list[str]:
    """Cases in the benchmark's order, then any others in the order they appear."""
    known = case_labels()
    present = list(dict.fromkeys(row.case for row in rows))
    return [c for c in known if c in present] + [c for c in present if c not in known]


def draw(rows: Iterable[Row], out_png, dtype: str = "float32", threads: int | Iterable[int] = 1,
         machine: str | None = None) -> Path:
    """Draw rows of one dtype as a PNG at out_png; one panel per thread count in `threads` (an int or
    several, e.g. (1, 2)) that has rows. machine: a footnote (results.md's Machine line). Returns the path."""
    # A bare Figure renders with Agg and leaves pyplot's state (backend, open figures, rcParams) alone.
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    wanted = [threads] if isinstance(threads, int) else list(threads)
    rows = [row for row in rows if row.dtype == dtype]
    panels = [t for t in wanted if any(row.threads == t for row in rows)]
    if not panels:
        raise ValueError(f"no rows for dtype {dtype} and threads {wanted}")
    cases = _order([row for row in rows if row.threads in panels])
    table = {(row.case, row.threads): row for row in rows}

    ratios = [getattr(row, field) / row.fused for row in table.values() if row.threads in panels
              for field, _, _ in SERIES if getattr(row, field) is not None]
    low, high = min(min(ratios), 1.0), max(ratios)
    # A little room left of the smallest bar, and on the right for the ratio labels.
    xmin = max([x for x in AXIS_STARTS if x <= min(0.5, low / 1.3)], default=low / 1.3)
    xmax = high * 3.2

    n_series, bar, gap = len(SERIES), 1.0, 1.3
    group = n_series * bar + gap
    height = max(3.5, 0.15 * len(cases) * group + 2.1)
    fig = Figure(figsize=(10, height))
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False, gridspec_kw={"wspace": 0.06})[0]

    for ax, t in zip(axes, panels):
        for i, case in enumerate(cases):
            row = table.get((case, t))
            if row is None:
                continue
            for j, (field, _, colour) in enumerate(SERIES):
                y = i * group + j * bar
                value = getattr(row, field)
                if value is None:
                    ax.text(xmin * 1.06, y, "n/a", va="center", ha="left", fontsize=8, color="#555555")
                    continue
                ratio = value / row.fused
                ax.barh(y, ratio - xmin, left=xmin, height=bar * 0.86, color=colour, edgecolor="none", zorder=2)
                label = f"1× = {row.fused:#.3g} ms" if field == "fused" else _ratio_text(ratio)
                ax.text(ratio * 1.07, y, label, va="center", ha="left", fontsize=8.5,
                        color="#222222" if field != "floor" else "#555555", zorder=3)
        ax.set_xscale("log")
        ax.set_xlim(xmin, xmax)
        ticks = [x for x in _ticks(xmin, xmax) if xmin <= x <= xmax / 1.5]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}×"))
        ax.tick_params(axis="x", labelsize=9, length=0, pad=4)
        ax.tick_params(axis="y", length=0, labelsize=9.5)
        ax.grid(axis="x", color="#e4e4e4", linewidth=0.8, zorder=0)
        ax.axvline(1.0, color="#0072B2", linewidth=1.0, zorder=1)
        for side in ("top", "right", "left"):
            ax.spines[side].set_visible(False)
        ax.spines["bottom"].set_color("#bbbbbb")
        ax.set_title(f"{t} thread{'s' if t != 1 else ''}", fontsize=11, loc="left", pad=6)
        ax.set_xlabel("time / fused kernel time (log scale)", fontsize=9, color="#333333", labelpad=3)

    centres = [i * group + (n_series - 1) * bar / 2 for i in range(len(cases))]
    axes[0].set_yticks(centres, [_display_case(c) for c in cases])
    axes[0].set_ylim(len(cases) * group - gap + bar / 2 - 0.2, -bar / 2 - 0.3)  # first case on top

    # Layout in inches from the top and bottom edges: title, legend, panel titles; axis labels, footnote.
    handles = [Rectangle((0, 0), 1, 1, color=colour) for _, _, colour in SERIES]
    fig.suptitle(f"Fused kernels, {dtype}: time relative to the fused kernel \u2014 lower is better",
                 fontsize=13, x=0.5, y=1 - 0.12 / height, va="top")
    fig.legend(handles, [label for _, label, _ in SERIES], loc="upper center", ncol=len(SERIES), frameon=False,
               fontsize=9, bbox_to_anchor=(0.5, 1 - 0.45 / height), handlelength=1.0, handletextpad=0.5,
               columnspacing=1.4, borderaxespad=0)
    note = [FLOOR_NOTE] + ([f"Machine: {machine}"] if machine else [])
    note = "\n".join(textwrap.fill(line, 160) for line in note)
    fig.text(0.01, 0.08 / height, note, fontsize=8, color="#555555", ha="left", va="bottom", linespacing=1.35)
    fig.subplots_adjust(left=0.2, right=0.99, top=1 - 1.1 / height,
                        bottom=(0.62 + 0.135 * (note.count("\n") + 1)) / height)
    out_png = Path(out_png)
    out_png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out_png, dpi=150, facecolor="white")
    return out_png


# ---------------------------------------------------------------------------------------------------
# command line


def _have_matplotlib() -> bool:
    try:
        import matplotlib
    except ImportError:
        return False
    return matplotlib is not None


def main(argv=None, prog: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=prog or "python -m ascend_grad.bench.chart", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--results", type=Path, default=None,
                        help=f"the markdown results to chart (default {DEFAULT_RESULTS}, else the installed copy)")
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"the PNG to write (default {DEFAULT_OUT})")
    parser.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    parser.add_argument("--run", action="store_true",
                        help="run the benchmark (this dtype, 1 and 2 threads) instead of reading results")
    args = parser.parse_args(argv)
    if args.run and args.results is not None:
        parser.error("--run and --results are exclusive")
    if not _have_matplotlib():
        print(f"the chart needs matplotlib: {INSTALL_HINT}", file=sys.stderr)
        return 2

    if args.run:
        from ascend_grad.bench import kernels

        rows = kernels.run(threads=(1, 2), dtypes=(args.dtype,))
        machine = machine_here()
    else:
        results = args.results
        if results is None:
            results = DEFAULT_RESULTS if DEFAULT_RESULTS.exists() else Path(__file__).with_name("results.md")
        try:
            rows, machine = rows_from_results(results), machine_from_results(results)
        except (OSError, ValueError) as error:
            print(f"{parser.prog}: {error}", file=sys.stderr)
            return 1
    present = sorted({row.threads for row in rows if row.dtype == args.dtype})
    if not present:
        print(f"{parser.prog}: no {args.dtype} rows", file=sys.stderr)
        return 1
    out = draw(rows, args.out, dtype=args.dtype, threads=present, machine=machine)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
