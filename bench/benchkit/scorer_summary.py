"""The scorer bench's results document: cycles, memory, steady figures, profile."""

from __future__ import annotations

import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .metrics_text import delta
from .node_watch import NodeWatch
from .procstat import ProcSample
from .scorer_process import ScorerProcess


@dataclass
class SteadyWindow:
    """Which cycles are the steady ones, and the scorer's metrics before and after them."""

    first: int = 0  # 1-based index of the first steady cycle
    last: int = 0  # of the last one measured
    metrics_start: dict[str, float] = field(default_factory=dict)
    metrics_end: dict[str, float] = field(default_factory=dict)


_LINE_NO = re.compile(r":\d+\)$")
_PLUMBING = re.compile(r"\((threading|concurrent/futures/thread|apscheduler/executors/base)\.py")


def profile_summary(path: Path, top: int = 30) -> dict[str, Any]:
    """py-spy's collapsed stacks (`frame;frame;... count`) reduced to the functions with the
    most samples, inclusive (anywhere on the stack) and self (the innermost frame)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {"error": f"no profile at {path}"}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # Per function, not per line; the thread machinery every stack starts with left out.
        frames = [
            _LINE_NO.sub(")", f.strip())
            for f in stack.split(";")
            if f.strip() and not _PLUMBING.search(f)
        ]
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        if frames:
            own[frames[-1]] += count
    return {
        "samples": total,
        "inclusive": [
            (f, n, round(100 * n / max(total, 1), 1)) for f, n in inclusive.most_common(top)
        ],
        "self": [(f, n, round(100 * n / max(total, 1), 1)) for f, n in own.most_common(top)],
    }


def timeline(watch: NodeWatch, t0: float, until: float, bin_s: float = 5.0) -> list[list[int]]:
    """Node events from the scorer's start to `until`, per `bin_s` seconds:
    [bin start s, status changes, metadata changes]."""
    bins: dict[int, list[int]] = {}
    for e in watch.events_between(t0, until):
        row = bins.setdefault(int((e.at - t0) // bin_s), [0, 0])
        row[0] += int(e.status)
        row[1] += int(e.metadata)
    return [[int(k * bin_s), *v] for k, v in sorted(bins.items())]


def summarise(
    doc: dict[str, Any], scorer: ScorerProcess, steady: SteadyWindow, final: ProcSample | None
) -> None:
    """Cycles, memory and the steady figures from whatever the run got to."""
    t0 = scorer.started
    rows: list[dict[str, Any]] = []
    prev = None
    for c in scorer.cycles:
        prom_cpu = None
        if c.prometheus is not None and prev is not None and prev.prometheus is not None:
            prom_cpu = round(c.prometheus.cpu_s - prev.prometheus.cpu_s, 2)
        rows.append(
            {
                "cycle": c.index,
                "end_s": round(c.at - t0, 2),
                "duration_s": c.duration_s,
                "nodes": c.nodes,
                "changed": c.changed,
                "written": c.written,
                "cpu_s": round(c.proc.cpu_s - (prev.proc.cpu_s if prev else 0.0), 2),
                "rss_mib": round(c.proc.rss_mib, 1),
                "hwm_mib": round(c.proc.hwm_mib, 1),
                "threads": c.proc.threads,
                # Prometheus's CPU over the same span: the cycle's queries and whatever else it
                # did then (rule evaluations, compaction).
                "prometheus_cpu_s": prom_cpu,
            }
        )
        prev = c
    doc["cycles"] = rows
    for b in doc.get("bursts") or ():
        for key in ("t0", "t_end"):
            if key in b:
                b[key] = round(b[key] - t0, 2)
    chosen = rows[steady.first - 1 : steady.last] if steady.first >= 2 else []
    window = (
        (scorer.cycles[steady.first - 2].at, scorer.cycles[steady.last - 1].at) if chosen else None
    )
    rss = [s.rss_mib for s in scorer.samples if window and window[0] <= s.at <= window[1]]
    doc["memory"] = {
        "peak_hwm_mib": round(final.hwm_mib, 1) if final else None,
        "steady_rss_median_mib": round(statistics.median(rss), 1) if rss else None,
        "steady_rss_max_mib": round(max(rss), 1) if rss else None,
        "end_rss_mib": round(final.rss_mib, 1) if final else None,
        "samples_s_mib": [
            (round(s.at - t0, 1), round(s.rss_mib, 1))
            for s in scorer.samples[:: max(1, len(scorer.samples) // 200)]
        ],
    }
    hist = delta(steady.metrics_end, steady.metrics_start)
    count = hist.get("steer_scorer_cycle_duration_seconds_count", 0.0)
    cpu = [r["cpu_s"] for r in chosen]
    prom_cpus: list[float] = [
        r["prometheus_cpu_s"] for r in chosen if r.get("prometheus_cpu_s") is not None
    ]
    doc["steady"] = {
        "cycles": [r["cycle"] for r in chosen],
        "cpu_s": cpu,
        "cpu_median_s": round(statistics.median(cpu), 2) if cpu else None,
        "cpu_max_s": max(cpu, default=None),
        "prometheus_cpu_s": prom_cpus,
        "prometheus_cpu_median_s": round(statistics.median(prom_cpus), 2) if prom_cpus else None,
        "prometheus_cpu_max_s": max(prom_cpus, default=None),
        "duration_median_s": round(statistics.median([r["duration_s"] for r in chosen]), 2)
        if chosen
        else None,
        "written_per_cycle": [r["written"] for r in chosen],
        # Over the steady cycles only (a refresh after pod events observes it too: none then).
        "histogram_cycle_duration_mean_s": round(
            hist.get("steer_scorer_cycle_duration_seconds_sum", 0.0) / count, 3
        )
        if count
        else None,
        "histogram_observations": count,
        # Where a steady cycle's wall time goes, from the scorer's own histograms: mapping and
        # planning (no I/O), and the PromQL queries (summed over dimensions; they overlap).
        "compute_mean_s": round(
            hist.get("steer_scorer_compute_duration_seconds_sum", 0.0)
            / max(hist.get("steer_scorer_compute_duration_seconds_count", 0.0), 1.0),
            3,
        ),
        "query_sum_per_cycle_s": round(
            sum(
                v
                for k, v in hist.items()
                if k.startswith("steer_scorer_query_duration_seconds_sum")
            )
            / max(count, 1.0),
            3,
        ),
        "cycles_total": {
            k: v for k, v in steady.metrics_end.items() if k.startswith("steer_scorer_cycles_total")
        },
    }
