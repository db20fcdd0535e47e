"""Executed instructions per element of every CPU kernel, for each instruction set: what can be
counted where the aarch64 paths cannot be timed (they run here only under emulation).

Method: bench/instruction_counts.cc runs one kernel of one table over n elements, built per
instruction set with the library's flags (-O3 -ffp-contract=off, the table's -m flags), static;
qemu-user runs it one instruction per translation block (-singlestep) and logs each instruction
executed inside the kernel library's own functions (-d exec,nochain, -dfilter: the address ranges
of every ascend_grad:: function, from nm), for two sizes: (count(n2) - count(n1)) / (n2 - n1) is
the count per element, start-up, dispatch and the tails cancelling out. NEON and generic aarch64:
qemu-aarch64 (Debian's cross compiler); AVX2 and generic x86-64: qemu-x86_64 -cpu max (qemu 7.2
emulates AVX2, FMA and F16C). qemu 7.2 has no AVX-512 and this VM no hardware counters (perf) or
valgrind AVX-512: the AVX-512 tables are counted statically instead, their step loops' instructions
in the disassembly per element (elementwise ops only), a method checked against the dynamic counts
of AVX2 and NEON printed beside it. Instructions are not cycles: a NEON vector holds 4 floats, an
AVX2 one 8, an AVX-512 one 16, and the divide, FMA and load throughputs differ by core.

    python bench/instruction_counts.py [--write]    (from a checkout: needs the C++ sources,
                                                    g++, g++-aarch64-linux-gnu, qemu-user-static)
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "bench" / "instruction_counts.cc"
FLAGS = ["-O3", "-std=c++17", "-ffp-contract=off", "-fno-math-errno", "-static"]
SCHEDULE = ["-fschedule-insns", "-fsched-pressure"]  # (the x86 tables' own, runtime_ext/library/CMakeLists.txt)
# table -> (compiler, its flags, emulator or None: counted statically)
PATHS = {
    "neon": ("aarch64-linux-gnu-g++", ["-DASCEND_GRAD_NEON=1"], "qemu-aarch64-static"),
    "generic (aarch64)": ("aarch64-linux-gnu-g++", [], "qemu-aarch64-static"),
    "avx2": ("g++", ["-mavx2", "-mfma", "-mf16c", *SCHEDULE], "qemu-x86_64-static"),
    "generic (x86-64)": ("g++", [], "qemu-x86_64-static"),
    "avx512": ("g++", ["-mavx512f", "-mavx512bw", "-mavx512dq", "-mavx512vl", "-mfma", "-mf16c", "-Wno-maybe-uninitialized", *SCHEDULE], None),
}
OPS = {"silu": "SiluBackward", "mish": "MishBackward", "gn": "GroupNormSwish", "gn_grad": "GroupNormSwishGrad"}
DTYPES = ["float", "float16", "bfloat16"]
SIZES = (4096, 8192)  # elements (the GroupNorm ops: (1, 32, 128) and (1, 32, 256))
# the elementwise loop the program runs (forward, through the cache, no broadcast input), by op
LOOP = "void ascend_grad::{isa}::ElementwiseLoop<ascend_grad::{isa}::{op}, {T}, {T}, {T}, false, false, false, false>"
GRAD = {"silu": "SiluGrad", "mish": "MishGrad"}
CPP_TYPE = {"float": "float", "float16": "ascend_grad::Float16", "bfloat16": "ascend_grad::BFloat16"}
LANES = {"avx512": 16, "avx2": 8, "neon": 4}
STEPS = 4  # kSteps of simd.h


def _headers() -> Path:
    found = sorted(REPO.glob("build/*/onnxruntime-headers/onnxruntime_c_api.h"))
    if not found:
        raise SystemExit("no onnxruntime headers under build/ (pip install . once from this checkout)")
    return found[0].parent


def build(path: str, folder: Path) -> Path:
    compiler, flags, _ = PATHS[path]
    isa = path.split()[0]
    binary = folder / re.sub(r"\W+", "_", path)
    subprocess.run([compiler, *FLAGS, *flags, f"-DASCEND_GRAD_ISA={isa}", f"-I{REPO / 'runtime_ext'}", f"-I{_headers()}",
                    "-o", str(binary), str(SOURCE)], check=True)
    return binary


def kernel_ranges(binary: Path, nm: str) -> str:
    """qemu's -dfilter for every function of namespace ascend_grad in the binary."""
    listing = subprocess.run([nm, "-C", "--defined-only", "-S", str(binary)], capture_output=True, text=True, check=True).stdout
    ranges = []
    for line in listing.splitlines():
        parts = line.split(maxsplit=3)
        if len(parts) == 4 and parts[2] in "tTwW" and "ascend_grad::" in parts[3]:
            ranges.append(f"0x{parts[0]}+0x{parts[1]}")
    return ",".join(ranges)


def executed(binary: Path, emulator: str, ranges: str, op: str, dtype: str, n: int) -> int:
    """Instructions executed inside the ascend_grad:: functions for one run."""
    with tempfile.NamedTemporaryFile(suffix=".log") as log:
        extra = ["-cpu", "max"] if emulator.startswith("qemu-x86_64") else []
        subprocess.run([emulator, *extra, "-singlestep", "-d", "exec,nochain", "-dfilter", ranges, "-D", log.name,
                        str(binary), op, dtype, str(n)], check=True, capture_output=True)
        with open(log.name, "rb") as f:
            return sum(1 for line in f if line.startswith(b"Trace"))


def dynamic(path: str, binary: Path) -> dict:
    """{(op, dtype): instructions per element} by the two-size difference under qemu."""
    emulator = PATHS[path][2]
    nm = "aarch64-linux-gnu-nm" if "aarch64" in emulator else "nm"
    ranges = kernel_ranges(binary, nm)
    n1, n2 = SIZES
    return {(op, dtype): (executed(binary, emulator, ranges, op, dtype, n2) - executed(binary, emulator, ranges, op, dtype, n1)) / (n2 - n1)
            for op in OPS for dtype in DTYPES}


def _disassembly(binary: Path, objdump: str) -> dict:
    """{function label: [(address, mnemonic, operand)]} of the whole binary."""
    listing = subprocess.run([objdump, "-d", "-C", "--no-show-raw-insn", str(binary)], capture_output=True, text=True, check=True).stdout
    functions, current = {}, None
    for line in listing.splitlines():
        label = re.match(r"^([0-9a-f]+) <(.*)>:$", line)
        if label:
            current = functions.setdefault(label.group(2), [])
            continue
        match = re.match(r"\s*([0-9a-f]+):\s+(\S+)\s*(\S*)", line)
        if match and current is not None:
            current.append((int(match.group(1), 16), match.group(2), match.group(3).split(",")[-1]))
    return functions


def _is_branch(mnemonic: str) -> bool:
    return mnemonic.startswith(("j", "b.", "cb", "tb")) or mnemonic in ("b", "ret")


def step_loop(functions: dict, function: str) -> int | None:
    """Instructions executed by one pass of the largest loop of `function` (a conditional backward
    branch and the code it jumps back over): an elementwise loop's step of kSteps vectors. None unless that
    loop is straight-line (no other branch in it), as the steps' math is; a call in it counts its
    callee's instructions, if the callee is straight-line too, else None."""
    name = next((n for n in functions if n.startswith(function + "(")), None)
    if name is None:
        raise SystemExit(f"{function} is not in the binary")
    by_address = {code[0][0]: code for code in functions.values() if code}
    code = functions[name]
    loops = []  # (first index, last index) of each conditional backward branch
    for end, (address, mnemonic, operand) in enumerate(code):
        conditional = _is_branch(mnemonic) and mnemonic not in ("b", "jmp", "ret")
        if conditional and re.fullmatch(r"[0-9a-f]+", operand) and int(operand, 16) <= address:
            loops.append((next(k for k, (a, _, _) in enumerate(code) if a >= int(operand, 16)), end))
    start, end = max(loops, key=lambda loop: loop[1] - loop[0])
    if any(_is_branch(code[k][1]) for k in range(start, end)):
        return None
    count = end - start + 1
    for _, mnemonic, callee in code[start:end]:
        if mnemonic in ("call", "bl"):
            body = by_address.get(int(callee, 16), [])
            ret = next((k for k, (_, m, _) in enumerate(body) if m == "ret"), None)
            if ret is None or any(_is_branch(m) for _, m, _ in body[:ret]):
                return None
            count += ret + 1
    return count


def static(path: str, binary: Path) -> dict:
    """{(op, dtype): instructions per element} of the elementwise ops' step loops."""
    functions = _disassembly(binary, "aarch64-linux-gnu-objdump" if path == "neon" else "objdump")
    isa = path.split()[0]
    out = {}
    for op in GRAD:
        for dtype in DTYPES:
            count = step_loop(functions, LOOP.format(isa=isa, op=GRAD[op], T=CPP_TYPE[dtype]))
            out[(op, dtype)] = None if count is None else count / (STEPS * LANES[isa])
    return out


def table(counts: dict, checks: dict) -> str:
    paths = list(counts)
    lines = ["| op | dtype | " + " | ".join(paths) + " |", "|---|---|" + "---:|" * len(paths)]
    for op, name in OPS.items():
        for dtype in DTYPES:
            cells = [f"{counts[path][(op, dtype)]:.2f}" if counts[path].get((op, dtype)) is not None else "-" for path in paths]
            lines.append(f"| {name} | {dtype} | " + " | ".join(cells) + " |")
    lines += ["", "The step loops counted in the disassembly (instructions of one step of kSteps vectors, callees included, / its elements):"]
    for path, values in checks.items():
        dynamic = PATHS[path][2] is not None
        cells = [f"{OPS[op]} {dtype} " + ("-" if value is None else f"{value:.2f}") + (f" (qemu {counts[path][(op, dtype)]:.2f})" if dynamic else "")
                 for (op, dtype), value in values.items()]
        lines.append(f"- {path}: " + ", ".join(cells))
    return "\n".join(lines)


SECTION = "## Executed instructions per element"
NOTES = """Counted, not timed: the aarch64 paths run here only under emulation. Method (bench/instruction_counts.py):
bench/instruction_counts.cc runs one kernel of one table once, built per table with the library's flags
(-O3 -ffp-contract=off, the table's -m flags; GCC 12.2, g++-aarch64-linux-gnu 12.2), static; Debian's
qemu-user 7.2 runs it one instruction per translation block (-singlestep) and logs every instruction
executed inside the ascend_grad:: functions (-d exec,nochain, -dfilter: their address ranges from nm)
at 4096 and 8192 elements (the GroupNorm ops: (1, 32, 128) and (1, 32, 256), G = 8, NCHW); the
difference over 4096 elements is the count per element, start-up, dispatch and tails cancelling out.
Inputs x in [-8, 8], both sides of sigmoid's branch. NEON and generic aarch64 under qemu-aarch64 (its
default CPU); AVX2 and generic x86-64 under qemu-x86_64 -cpu max. qemu 7.2 has no AVX-512, and this
VM neither hardware counters (perf: not supported) nor a valgrind with AVX-512: the avx512 column is
the step loop of the elementwise kernels counted in the disassembly (its instructions, callees
included, / its 64 elements), the same count that matches the dynamic one within 0.25 for NEON and
0.03 for AVX2 (listed below the table); its bfloat16 loops store each vector through an out-of-line
call inside an inner loop (not one straight pass: not counted), and its GroupNorm kernels have no
single step loop (not counted). Instructions are not time: a NEON vector holds 4 floats, AVX2 8,
AVX-512 16, and divides, FMAs and loads cost differently on each core: a Kunpeng 920 user gets real
times from `ascend-grad bench kernels`."""


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help=f"put the table in bench/results.md, section '{SECTION}'")
    args = parser.parse_args(argv)
    if not SOURCE.is_file():
        raise SystemExit(f"{SOURCE} is not here: run this from a checkout of the repository (the wheel has no C++)")
    for tool in ("g++", "aarch64-linux-gnu-g++", "qemu-aarch64-static", "qemu-x86_64-static"):
        if shutil.which(tool) is None:
            raise SystemExit(f"needs {tool} (apt-get install g++ g++-aarch64-linux-gnu qemu-user-static)")
    counts, checks = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in PATHS:
            binary = build(path, Path(tmp))
            if PATHS[path][2] is not None:
                counts[path] = dynamic(path, binary)
            if path.split()[0] in LANES:
                checks[path] = static(path, binary)
                if PATHS[path][2] is None:  # (the GroupNorm ops' loops are not one step: not counted)
                    counts[path] = checks[path]
            print(f"counted {path}", flush=True)
    body = table(counts, checks)
    print(body)
    if args.write:
        from ascend_grad.bench.report import write_section

        write_section(REPO / "bench" / "results.md", SECTION, f"Command: `python bench/instruction_counts.py --write`\n\n{NOTES}\n\n{body}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
