"""A Prometheus backfilled with a synthetic cluster's series for the fake nodes."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kits.prometheus_server import PrometheusServer
from kits.synthetic_exporter import SyntheticCluster

from .nodes import FakeNode
from .pods import PodSpec, Template


def synthetic_cluster(
    nodes: Sequence[FakeNode], specs: Sequence[PodSpec], tmpl: Mapping[str, Template], seed: int
) -> SyntheticCluster:
    """The exporters' view of the same nodes: GPU load and memory, power, probes (3 %
    failing, 10 % of GPU nodes hot), allocatable, and per node one container whose limits are
    the sum of its pods' (what the overcommit query sums)."""
    rng = random.Random(seed)
    cluster = SyntheticCluster(nodes=0, seed=seed, noise_pct=2.0)
    sums: dict[str, list[int]] = {}
    for spec in specs:
        total = sums.setdefault(spec.node, [0, 0])
        total[0] += tmpl[spec.kind].limits_cpu_m
        total[1] += tmpl[spec.kind].limits_memory
    for node in nodes:
        cluster.add_node(node.name, gpus=node.gpus, cpu_cores=node.cpu, memory_gib=node.memory_gib)
        if node.gpus:
            hot = rng.random() < 0.10
            base = 97.0 if hot else rng.uniform(0, 85)
            for gpu in range(node.gpus):
                util = base if hot else min(100.0, max(0.0, base + rng.uniform(-10, 10)))
                cluster.set_gpu_util(node.name, util, gpu=gpu)
                cluster.set_gpu_memory(node.name, rng.choice([0, 0, 2048, 40000, 81920]), gpu=gpu)
        # Kepler >= 0.10's CPU meter (the example policy's power queries) reads package_watts.
        cluster.set_power(node.name, package_watts=rng.uniform(250, 700))
        cpu_m, memory = sums.get(node.name, [0, 0])
        if cpu_m:
            cluster.add_container(
                node.name,
                "kube-state-metrics-sum",
                f"pods-on-{node.name}",
                requests={"cpu": cpu_m / 1000 / 2, "memory": memory / 2},
                limits={"cpu": cpu_m / 1000, "memory": float(memory)},
            )
        if rng.random() < 0.03:
            cluster.set_probe(node.name, False)
    return cluster


@dataclass
class PromSetup:
    series: int
    samples: int
    render_s: float
    backfill_s: float
    first_sample: float
    last_sample: float


def backfilled_prometheus(
    cluster: SyntheticCluster,
    workdir: Path,
    step_s: float,
    horizon_s: float,
    rule_groups: Sequence[Mapping[str, Any]] = (),
) -> tuple[PrometheusServer, PromSetup]:
    """`rule_groups`: evaluated by the server from its start (over the backfilled data)."""
    now = time.time()
    first = now - 360
    count = int((horizon_s + 360) // step_s) + 1
    times = [first + i * step_s for i in range(count)]
    data = workdir / "cluster.om"
    t0 = time.monotonic()
    with data.open("w") as out:
        cluster.write_openmetrics(out, times)
    render_s = time.monotonic() - t0
    last_ts = f" {times[-1]:.3f}\n"
    series = 0
    with data.open() as lines:
        for line in lines:
            if line.endswith(last_ts):
                series += 1
    prom = PrometheusServer([], startup_timeout_s=300, rule_groups=rule_groups)
    t1 = time.monotonic()
    prom.backfill_file(data)
    backfill_s = time.monotonic() - t1
    data.unlink()
    return prom, PromSetup(series, series * count, render_s, backfill_s, times[0], times[-1])
