"""What every benchmark records with its numbers: the machine, and its section of bench/results.md."""

from __future__ import annotations

import datetime
import os
import platform
import re
from pathlib import Path


# aarch64 Linux names no model in /proc/cpuinfo, only the implementer and part numbers
ARM_PARTS = {("0x48", "0xd01"): "HiSilicon Kunpeng 920 (TaiShan v110)", ("0x41", "0xd0c"): "Arm Neoverse N1",
             ("0x41", "0xd40"): "Arm Neoverse V1", ("0x41", "0xd49"): "Arm Neoverse N2", ("0x41", "0xd4f"): "Arm Neoverse V2"}


def cpu_model(cpuinfo: str | None = None) -> str:
    """The CPU's model name from /proc/cpuinfo (or `cpuinfo`, its text): it differs from one machine
    to the next (Intel Xeon or AMD EPYC; on aarch64, e.g. "HiSilicon Kunpeng 920 (TaiShan v110), CPU
    implementer 0x48 part 0xd01")."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            cpuinfo = ""
    found = re.search(r"^model name\s*:\s*(.*)$", cpuinfo, re.M)
    if found:
        return found.group(1).strip()
    implementer = re.search(r"^CPU implementer\s*:\s*(\S+)", cpuinfo, re.M)
    part = re.search(r"^CPU part\s*:\s*(\S+)", cpuinfo, re.M)
    if implementer and part:
        ids = (implementer.group(1).lower(), part.group(1).lower())
        return f"{ARM_PARTS.get(ids, platform.machine())}, CPU implementer {ids[0]} part {ids[1]}"
    return platform.processor() or platform.machine()


def cpu_caches() -> str:
    """The data caches of CPU 0, from sysfs: "L1d 32K, L2 512K, L3 32768K (shared by 0-1)"."""
    parts = []
    for index in sorted(Path("/sys/devices/system/cpu/cpu0/cache").glob("index*")):
        try:
            level, kind, size, shared = ((index / name).read_text().strip() for name in
                                         ("level", "type", "size", "shared_cpu_list"))
        except OSError:
            continue
        if kind != "Instruction":
            parts.append(f"L{level}{'d' if kind == 'Data' else ''} {size}" + (f" (shared by {shared})" if "-" in shared or "," in shared else ""))
    return ", ".join(parts) or "unknown"


def kernel_isa() -> str:
    """The instruction set the kernel library picks on this CPU (its ASCEND_GRAD_VERBOSE line, from a
    child process: the choice is made once, when a process first loads the library)."""
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ASCEND_GRAD_ISA"}
    env["ASCEND_GRAD_VERBOSE"] = "1"
    done = subprocess.run([sys.executable, "-c", "from ascend_grad import runtime_ext; runtime_ext.session_options()"],
                          capture_output=True, text=True, env=env)
    found = re.search(r"ascend-grad: (\w+) kernels", done.stderr)
    return found.group(1) if found else "unknown"


def machine(torch=None) -> str:
    """One line: CPU, cores, Python, onnxruntime, torch, today."""
    import onnxruntime as ort

    return (f"Machine: {cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"onnxruntime {ort.__version__}, torch {torch.__version__ if torch else 'absent'}; {datetime.date.today()}.")


def write_section(results: Path, section: str, body: str) -> None:
    """Replace the section `section` ("## Name") of the results file with `section` + body, or append it."""
    block = f"{section}\n\n{body.strip()}\n"
    text = results.read_text() if results.exists() else ""
    start = text.find(section + "\n")
    if start < 0:
        text = text.rstrip("\n") + "\n\n" + block
    else:
        end = text.find("\n## ", start + len(section))
        text = text[:start] + block + (text[end:] if end >= 0 else "")
    results.write_text(text)


class Tee:
    """A stream that writes to several: the console and the table a benchmark files in results.md."""

    def __init__(self, *streams):
        self.streams = streams

    def write(self, s):
        for stream in self.streams:
            stream.write(s)

    def flush(self):
        for stream in self.streams:
            stream.flush()
