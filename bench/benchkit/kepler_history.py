"""An hour of Kepler >= 0.10 history for a scenario's nodes, backfilled into the run's
Prometheus before it starts: the cluster as it ran earlier in the day, so the example policy's
`core-power` (the slope of a node's watts over its CPU usage across the last hour) has a value
for every node from the scorer's first cycle, as it would where Kepler has been scraped for an
hour.

Each node's CPU usage ratio moved through the hour (a slow wave of its own phase between 5 %
and 60 %), and its CPU watts followed the scenario's power model at that usage: its idle watts
and its watts per requested core times the cores in use (Kepler's CPU meter reads RAPL, which
holds no GPU: kits.simulated_cluster). The families and labels are the live exporter's
(`kits.synthetic_exporter.Exposition.cpu_power`: `kepler_node_cpu_watts` and its active and
idle parts by RAPL zone, `kepler_node_cpu_usage_ratio`, "CPU usage ratio of a node (value
between 0.0 and 1.0)", as kepler's docs/metrics/metrics.md lists them; kube-state-metrics' cpu
allocatable and capacity), gauges only, with the scrape's `job` and `instance`, so the live scrape continues
the same series. The history stops `gap_s` before the server starts: the live samples follow
it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable, Sequence
from typing import IO

from kits.prometheus_server import JOB_NAME, PrometheusServer
from kits.simulated_cluster import PowerModel
from kits.synthetic_exporter import CpuMeter, Exposition, label_text

from .placement_scenario import NodeSpec

HOUR_S = 3600.0
STEP_S = 30.0  # one sample per 30 s, as Kepler is often scraped
WAVE_S = 1500.0  # one period of a node's load: about two and a half in the hour
USAGE_LOW, USAGE_HIGH = 0.05, 0.60


def usage_at(index: int, t: float) -> float:
    """Node `index`'s CPU usage ratio at unix time `t`: a wave between USAGE_LOW and
    USAGE_HIGH, each node at its own phase."""
    phase = 2 * math.pi * ((t / WAVE_S) + index * 0.137)
    return USAGE_LOW + (USAGE_HIGH - USAGE_LOW) * (0.5 + 0.5 * math.sin(phase))


def history_times(now: float, span_s: float = HOUR_S, gap_s: float = 60.0) -> list[float]:
    """Sample times (ascending) from `span_s` + `gap_s` before `now` to `gap_s` before it."""
    first = now - span_s - gap_s
    count = int(span_s // STEP_S) + 1
    return [first + i * STEP_S for i in range(count)]


def write_history(
    out: IO[str],
    specs: Sequence[NodeSpec],
    power: PowerModel,
    times: Iterable[float],
    instance: str,
) -> int:
    """Write the nodes' Kepler gauges at `times` as OpenMetrics (for `promtool tsdb
    create-blocks-from openmetrics`), labelled as the scrape of `instance` labels them; returns
    the number of series."""
    stamps = list(times)
    target = {"job": JOB_NAME, "instance": instance}
    series: dict[str, dict[str, list[str]]] = {}  # family -> label text -> sample lines
    kinds: dict[str, str] = {}
    for index, spec in enumerate(specs):
        for t in stamps:
            usage = usage_at(index, t)
            # RAPL's CPU and memory: no GPU watts (kits.simulated_cluster's CPU meter).
            watts = power.node_watts(
                gpu_node=spec.gpus > 0,
                cores=usage * spec.cpu,
                busy_gpus=0.0,
                instance_type=spec.instance_type,
            )
            exposition = Exposition()
            exposition.cpu_power(spec.name, watts=watts, usage_ratio=usage, meter=CpuMeter())
            # kube-state-metrics ran too: the cores the slope is counted per.
            exposition.allocatable(spec.name, {"cpu": float(spec.cpu)})
            for fam in exposition.families():
                if fam.kind != "gauge":
                    continue
                kinds[fam.name] = fam.help
                by_labels = series.setdefault(fam.name, {})
                for labels, value in fam.samples:
                    text = label_text({**target, **labels})
                    by_labels.setdefault(text, []).append(f"{value!r} {t:.3f}")
    count = 0
    for name, by_labels in series.items():
        out.write(f"# HELP {name} {kinds[name]}\n# TYPE {name} gauge\n")
        for text, samples in by_labels.items():
            count += 1
            out.writelines(f"{name}{{{text}}} {sample}\n" for sample in samples)
    out.write("# EOF\n")
    return count


def backfill_kepler_history(
    prom: PrometheusServer,
    specs: Sequence[NodeSpec],
    power: PowerModel,
    instance: str,
    span_s: float = HOUR_S,
) -> dict[str, float]:
    """Backfill `span_s` of the nodes' Kepler history into `prom`'s data directory (before it
    starts), ending a minute before now; returns what was written, for the results file."""
    times = history_times(time.time(), span_s)
    path = prom.data_dir.parent / "kepler-history.om"
    with path.open("w") as out:
        series = write_history(out, specs, power, times, instance)
    try:
        prom.backfill_file(path)
    finally:
        path.unlink(missing_ok=True)
    return {"series": series, "samples": series * len(times), "first": times[0], "last": times[-1]}
