"""The demo's cluster: a synthetic exporter, a real Prometheus scraping it, and the Kubernetes
API stand-in holding matching Node objects and the demo's namespaces (kits/demo/pods.py), with
the example policy pointed at that Prometheus."""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.demo.pods import DEMO_NAMESPACES
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.synthetic_exporter import GIB, SyntheticCluster
from scorer.presets import example_policy_text
from steer.core.policy import Policy, parse_policy

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


def demo_cluster(nodes: int = DEMO_NODES) -> SyntheticCluster:
    """Six GPU nodes that differ in every dimension: a hot one, a fragmented one, a hungry one,
    an over-committed one and one failing its health probe."""
    cluster = SyntheticCluster(nodes=nodes, gpus_per_node=8, seed=7)
    utils = [15, 40, 95, 60, 5, 30]
    watts = [310, 420, 650, 380, 280, 500]
    for i, name in enumerate(cluster.node_names):
        cluster.set_gpu_util(name, utils[i % len(utils)])
        cluster.set_power(name, platform_watts=watts[i % len(watts)])
        # every node runs a pod; its limits set the node's overcommit
        limit_cores = [48, 66, 64, 70, 32, 60][i % 6]
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


@contextlib.contextmanager
def demo_environment(
    nodes: int = DEMO_NODES, *, interval_seconds: float = 30
) -> Iterator[DemoEnvironment]:
    """Yields once Prometheus holds two scrapes of every node; removes everything on exit."""
    cluster = demo_cluster(nodes)
    with (
        tempfile.TemporaryDirectory(prefix="steer-demo-") as tmp,
        scraped_cluster(cluster, scrape_interval_s=1.0) as (_exporter, prom),
        ApiStub.start() as stub,
    ):
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
        # rate() over the energy counters needs two scrapes of every node
        prom.wait_for(
            'sum by (node_name) (kepler_node_cpu_watts{zone=~"package|dram"})',
            lambda r: len(r.samples) == nodes,
            timeout_s=30,
        )
        policy_file = Path(tmp) / "policy.yaml"
        policy_file.write_text(demo_policy_text(prom.url, interval_seconds=interval_seconds))
        kubeconfig = stub.kubeconfig(Path(tmp) / "kubeconfig")
        yield DemoEnvironment(cluster, prom, kubeconfig, policy_file, stub)
