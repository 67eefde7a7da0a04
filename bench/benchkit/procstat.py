"""A process's CPU time and memory read from /proc."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcSample:
    at: float  # monotonic seconds
    cpu_s: float
    rss_mib: float
    hwm_mib: float
    threads: int


def read_proc(pid: int) -> ProcSample:
    now = time.monotonic()
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICK
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.strip()

    def kib(key: str) -> float:
        return int(status.get(key, "0 kB").split()[0]) / 1024

    return ProcSample(now, cpu, kib("VmRSS"), kib("VmHWM"), int(status.get("Threads", "0")))
