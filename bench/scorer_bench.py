"""Scorer benchmark: cycle time, queries and writes for 100 / 1,000 / 5,000 synthetic GPU nodes.

For each size the synthetic cluster (8 GPUs per node, DCGM + Kepler >= 0.10 +
kube-state-metrics + blackbox series, ±2 % noise on every gauge at every sample) is rendered over
a few minutes of history, backfilled into a real Prometheus with promtool, and scored cycle by
cycle at those sample times (`Scorer.run_cycle(at=...)`) against the Kubernetes API stand-in,
which runs in a separate process so the CPU measured here is the scorer's own.

Reported per size: Prometheus' own count of instant queries per cycle, node list / query /
compute / write times, the scorer process CPU per cycle, and nodes written per cycle (the
first cycle labels every node; the second sets debounced taints; after that is steady state).

    .venv/bin/python bench/scorer_bench.py                # 100, 1000, 5000 nodes
    .venv/bin/python bench/scorer_bench.py --nodes 1000 --cycles 6

Not a test: it asserts nothing, it measures. Results also go to bench/results/scorer.json.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import requests
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kits.demo.environment import demo_policy_text  # noqa: E402
from kits.prometheus_server import PrometheusServer  # noqa: E402
from kits.synthetic_exporter import GIB, SyntheticCluster  # noqa: E402
from scorer.cycle.service import Scorer  # noqa: E402
from scorer.cycle.writer import NodeApi  # noqa: E402
from steer.adapters.kube import make_api_client  # noqa: E402
from steer.adapters.kubejson import KubeJson  # noqa: E402
from steer.core.policy import parse_policy  # noqa: E402

STEP_S = 30.0  # one scoring cycle per sample time, as with intervalSeconds: 30
NOISE_PCT = 2.0


@dataclass
class CycleRow:
    cycle: int
    queries: int
    list_s: float
    query_s: float
    compute_s: float
    compute_cpu_s: float
    write_s: float
    cpu_s: float
    nodes_written: int


@dataclass
class SizeResult:
    nodes: int
    series: int
    backfill_s: float
    cycles: list[CycleRow]

    def steady(self) -> list[CycleRow]:
        return self.cycles[2:]


def shaped_cluster(nodes: int, seed: int) -> SyntheticCluster:
    """Every node different: GPU load, memory use, power, limits, a few failing probes."""
    rng = random.Random(seed)
    cluster = SyntheticCluster(nodes=nodes, gpus_per_node=8, seed=seed, noise_pct=NOISE_PCT)
    for i, name in enumerate(cluster.node_names):
        base = rng.uniform(0, 100)
        for gpu in range(8):
            cluster.set_gpu_util(name, min(100.0, max(0.0, base + rng.uniform(-10, 10))), gpu=gpu)
            cluster.set_gpu_memory(name, rng.choice([0, 0, 2048, 40000, 81920]), gpu=gpu)
        # Kepler >= 0.10's CPU meter (the example policy's power queries) reads package_watts.
        cluster.set_power(name, package_watts=rng.uniform(250, 700))
        cluster.add_container(
            name,
            "team",
            f"app-{i}",
            requests={"cpu": 8},
            limits={"cpu": rng.uniform(20, 80), "memory": 64 * GIB},
        )
        if rng.random() < 0.03:
            cluster.set_probe(name, False)
    return cluster


def serve_stub(nodes: int, kubeconfig: str, ready: Any, stop: Any) -> None:
    """Runs in a child process: the API stand-in with node-1..N."""
    from kits.apistub import ApiStub
    from kits.apistub.synthetic import synthetic_node

    stub = ApiStub.start()
    for i in range(1, nodes + 1):
        stub.add_node(synthetic_node(f"node-{i}", zone=f"zone-{i % 3}", gpus=8))
    stub.kubeconfig(kubeconfig)
    ready.set()
    stop.wait()
    stub.stop()


def prometheus_queries(prom: PrometheusServer) -> float:
    session = requests.Session()
    session.trust_env = False
    text = session.get(f"{prom.url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line
    )


def run_size(nodes: int, cycles: int, workdir: Path) -> SizeResult:
    print(
        f"== {nodes} nodes: rendering {cycles + 1} samples per series ...",
        file=sys.stderr,
        flush=True,
    )
    cluster = shaped_cluster(nodes, seed=nodes)
    now = time.time()
    times = [now - STEP_S * (cycles - i) for i in range(cycles + 1)]  # one extra: rate() needs two
    data = workdir / f"cluster-{nodes}.om"
    with data.open("w") as out:
        cluster.write_openmetrics(out, times)
    series = sum(1 for line in data.open() if line.endswith(f" {times[0]:.3f}\n"))
    kubeconfig = str(workdir / f"kubeconfig-{nodes}")
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    stub = ctx.Process(target=serve_stub, args=(nodes, kubeconfig, ready, stop), daemon=True)
    stub.start()
    prom = PrometheusServer([])
    t0 = time.perf_counter()
    prom.backfill_file(data)
    backfill_s = time.perf_counter() - t0
    data.unlink()
    rows = []
    try:
        prom.start()
        if not ready.wait(300):
            raise RuntimeError("the API stand-in did not come up")
        doc = yaml.safe_load(demo_policy_text(prom.url))
        # Writes are what is measured, not the client-side limiter.
        doc["spec"]["scoring"].update(writeQps=1000, writeBurst=1000)
        policy = parse_policy(yaml.safe_dump(doc))
        scorer = Scorer(
            lambda: policy, NodeApi(KubeJson(make_api_client(kubeconfig), timeout_s=60))
        )
        for i, at in enumerate(times[1:], start=1):
            before = prometheus_queries(prom)
            cpu0 = time.process_time()
            result = scorer.run_cycle(at=at)
            cpu = time.process_time() - cpu0
            rows.append(
                CycleRow(
                    cycle=i,
                    queries=round(prometheus_queries(prom) - before),
                    list_s=result.list_s,
                    query_s=result.query_s,
                    compute_s=result.compute_s,
                    compute_cpu_s=result.compute_cpu_s,
                    write_s=result.write_s,
                    cpu_s=cpu,
                    nodes_written=result.report.nodes_written if result.report else 0,
                )
            )
            r = rows[-1]
            print(
                f"   cycle {i}: {r.queries} queries, list {r.list_s:.2f}s, query {r.query_s:.2f}s, "
                f"compute {r.compute_s:.3f}s ({r.compute_cpu_s:.3f}s CPU), write {r.write_s:.2f}s, cpu {r.cpu_s:.2f}s, "
                f"{r.nodes_written} nodes written",
                file=sys.stderr,
                flush=True,
            )
        scorer.close()
    finally:
        prom.stop()
        stop.set()
        stub.join(30)
    return SizeResult(nodes, series, backfill_s, rows)


def table(results: Sequence[SizeResult]) -> str:
    head = (
        "| nodes (x8 GPUs) | series | queries/cycle | node list | queries | compute (no I/O), CPU | "
        "scorer CPU/cycle, all threads | writes, 1st cycle | steady writes/cycle (max) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    )
    lines = [head]
    for res in results:
        steady = res.steady() or res.cycles[-1:]
        med = statistics.median
        worst = max(r.nodes_written for r in steady)
        lines.append(
            f"| {res.nodes:,} | {res.series:,} | {max(r.queries for r in res.cycles)} | "
            f"{med(r.list_s for r in steady):.2f} s | {med(r.query_s for r in steady):.2f} s | "
            f"{med(r.compute_cpu_s for r in steady):.3f} s | {med(r.cpu_s for r in steady):.2f} s | "
            f"{res.cycles[0].nodes_written:,} | {worst} ({100 * worst / res.nodes:.2f} %) |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--nodes", type=int, nargs="+", default=[100, 1000, 5000])
    parser.add_argument("--cycles", type=int, default=6, help="cycles per size (>= 3; default 6)")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory(prefix="steer-bench-") as tmp:
        for nodes in args.nodes:
            results.append(run_size(nodes, max(3, args.cycles), Path(tmp)))
    print(table(results))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "scorer.json").write_text(json.dumps([asdict(r) for r in results], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
