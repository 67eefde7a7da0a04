"""The demo's cluster: a synthetic exporter, a real Prometheus scraping it, and the Kubernetes
API stand-in holding matching Node objects and the demo's namespaces (kits/demo/pods.py), with
the example policy pointed at that Prometheus."""

from __future__ import annotations

import contextlib
import copy
import io
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import yaml

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.demo.pods import DEMO_NAMESPACES
from kits.prometheus_server import JOB_NAME, PrometheusServer
from kits.synthetic_exporter import GIB, SyntheticCluster, SyntheticExporter
from steer.core.policy import Policy, parse_policy
from steer.presets import example_policy_text

DEMO_NODES = 6


def demo_policy_text(
    prometheus_url: str = "http://127.0.0.1:9090", *, interval_seconds: float = 30
) -> str:
    """The example policy, pointed at a local Prometheus and renamed `demo`."""
    doc = yaml.safe_load(example_policy_text())
    doc["metadata"]["name"] = "demo"
    doc["spec"]["prometheus"]["url"] = prometheus_url
    doc["spec"]["scoring"]["intervalSeconds"] = interval_seconds
    return yaml.safe_dump(doc, sort_keys=False)


def demo_policy(
    prometheus_url: str = "http://127.0.0.1:9090", *, interval_seconds: float = 30
) -> Policy:
    return parse_policy(demo_policy_text(prometheus_url, interval_seconds=interval_seconds))


@dataclass(frozen=True)
class DemoEnvironment:
    cluster: SyntheticCluster
    prometheus: PrometheusServer
    kubeconfig: Path
    policy_file: Path
    stub: ApiStub

    @property
    def prometheus_url(self) -> str:
        return self.prometheus.url

    @property
    def policy(self) -> Policy:
        return parse_policy(self.policy_file.read_text())


# Per demo node: CPU watts now, watts one more busy core adds, and the CPU limits of its pod
# (which requests half of them, on 64 cores).
WATTS = (310, 420, 650, 380, 280, 500)
PER_CORE_W = (5, 6, 7, 2, 9, 4)
LIMIT_CORES = (48, 66, 64, 70, 32, 60)
CORES = 64
# The hour before the demo: 10-minute phases in which each node ran this share of today's load,
# so the example's core-power (the slope of watts over usage) has a slope to measure.
HISTORY_SHARES = (0.25, 0.5, 1.0, 0.75, 1.0)
PHASE_S, HISTORY_STEP_S = 600, 30


def demo_cluster(nodes: int = DEMO_NODES) -> SyntheticCluster:
    """Six GPU nodes that differ in every dimension: a hot one, a fragmented one, a hungry one,
    an over-committed one and one failing its health probe."""
    cluster = SyntheticCluster(nodes=nodes, gpus_per_node=8, seed=7)
    utils = [15, 40, 95, 60, 5, 30]
    for i, name in enumerate(cluster.node_names):
        cluster.set_gpu_util(name, utils[i % len(utils)])
        cluster.set_power(name, package_watts=WATTS[i % len(WATTS)])
        # every node runs a pod; its limits set the node's overcommit
        limit_cores = LIMIT_CORES[i % len(LIMIT_CORES)]
        cluster.add_container(
            name,
            "team-a",
            f"app-{i + 1}",
            requests={"cpu": limit_cores / 2, "memory": 64 * GIB},
            limits={"cpu": limit_cores, "memory": 128 * GIB},
        )
    # node-2: four GPUs each holding a little memory (fragmented); node-4: two GPUs fully used
    for gpu in range(4):
        cluster.set_gpu_memory("node-2", 4096, gpu=gpu)
    for gpu in range(2):
        cluster.set_gpu_memory("node-4", 81920, gpu=gpu)
    cluster.set_probe(cluster.node_names[-1], False)
    return cluster


def demo_history(cluster: SyntheticCluster, end: float, target: Mapping[str, str]) -> list[str]:
    """OpenMetrics texts (one per phase, for promtool) of the hour before `end`: the cluster as
    it is, but each node running `HISTORY_SHARES` of its load and drawing its idle watts plus
    `PER_CORE_W` per busy core (the last phase is today's load and draw)."""
    texts = []
    for k, share in enumerate(HISTORY_SHARES):
        phase = copy.deepcopy(cluster)
        for i, name in enumerate(phase.node_names):
            busy_now = LIMIT_CORES[i % len(LIMIT_CORES)] / 2
            per_core = PER_CORE_W[i % len(PER_CORE_W)]
            idle = WATTS[i % len(WATTS)] - per_core * busy_now
            phase.set_cpu_usage(name, busy_now * share / CORES)
            phase.set_power(name, package_watts=idle + per_core * busy_now * share)
        start = end - (len(HISTORY_SHARES) - k) * PHASE_S
        text = io.StringIO()
        phase.write_openmetrics(
            text, [start + j * HISTORY_STEP_S for j in range(PHASE_S // HISTORY_STEP_S)], target
        )
        texts.append(text.getvalue())
    return texts


@contextlib.contextmanager
def demo_environment(
    nodes: int = DEMO_NODES, *, interval_seconds: float = 30
) -> Iterator[DemoEnvironment]:
    """Yields once Prometheus holds the hour before (backfilled) and a scrape of every node;
    removes everything on exit."""
    cluster = demo_cluster(nodes)
    with (
        contextlib.ExitStack() as stack,
        tempfile.TemporaryDirectory(prefix="steer-demo-") as tmp,
        SyntheticExporter(cluster) as exporter,
        ApiStub.start() as stub,
    ):
        prom = PrometheusServer([exporter.target], scrape_interval_s=1.0)
        scrape = {"job": JOB_NAME, "instance": exporter.target}
        for text in demo_history(cluster, time.time() - 5, scrape):
            prom.backfill(text)
        stack.enter_context(prom)  # stopped (and its data removed) when the demo ends
        for i, name in enumerate(cluster.node_names):
            node = synthetic_node(name, zone=("zone-a", "zone-b", "zone-c")[i % 3], gpus=8)
            if i == 0:
                # Someone else's label and taint: the scorer must leave them exactly as they are.
                node["metadata"]["labels"]["team.example.com/owner"] = "ml-platform"
                node["spec"]["taints"] = [
                    {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}
                ]
            stub.add_node(node)
        for namespace, labels in DEMO_NAMESPACES.items():
            stub.add_namespace(namespace, dict(labels))
        prom.wait_for(f'up{{job="{JOB_NAME}"}} == 1', timeout_s=30)  # the first scrape
        policy_file = Path(tmp) / "policy.yaml"
        policy_file.write_text(demo_policy_text(prom.url, interval_seconds=interval_seconds))
        kubeconfig = stub.kubeconfig(Path(tmp) / "kubeconfig")
        yield DemoEnvironment(cluster, prom, kubeconfig, policy_file, stub)
