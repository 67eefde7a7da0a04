"""The no-cluster demo: the scorer on a synthetic cluster, nothing outside this machine.

    python -m kits.demo scorer once --dry-run            # `make demo`: print the plan
    python -m kits.demo scorer run --listen 127.0.0.1:8080

It starts the synthetic exporter (DCGM, Kepler, kube-state-metrics, blackbox series), a real
Prometheus scraping it, and the Kubernetes API stand-in holding matching Node objects, then runs
the given `steer scorer once|run` command line with `--policy`, `--prometheus` and
`--kubeconfig` pointing at them. It lives in the kits, not in the product CLI: the wheel and
the image carry no stand-in to run it on.
"""

from __future__ import annotations

import contextlib
import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.prometheus_server import scraped_cluster
from kits.synthetic_exporter import GIB, SyntheticCluster
from scorer.presets import example_policy_text
from steer.cli import main as steer_main
from steer.core.policy import Policy, parse_policy

DEMO_NODES = 6
# What `python -m kits.demo` runs when given no command line.
DEFAULT_COMMAND = ("scorer", "once", "--dry-run")
USAGE = """\
usage: python -m kits.demo [scorer once|run [FLAG ...]]

Run a `steer scorer once` or `steer scorer run` command line on a synthetic 6-node GPU cluster:
a synthetic exporter, a real Prometheus and the Kubernetes API stand-in (no external services).
--policy, --prometheus and --kubeconfig are the demo's; every other flag is the command's
(`steer scorer once --help`). Default: scorer once --dry-run."""


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
    prometheus_url: str
    kubeconfig: Path
    policy_file: Path
    stub: ApiStub


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
        for tenant in ("dept-a", "dept-b"):
            stub.add_namespace(tenant, {"tenant": tenant, "kube-steer.github.io/enabled": "true"})
        # rate() over the energy counters needs two scrapes of every node
        prom.wait_for(
            "sum by (instance) (irate(kepler_node_platform_joules_total[5m]))",
            lambda r: len(r.samples) == nodes,
            timeout_s=30,
        )
        policy_file = Path(tmp) / "policy.yaml"
        policy_file.write_text(demo_policy_text(prom.url, interval_seconds=interval_seconds))
        kubeconfig = stub.kubeconfig(Path(tmp) / "kubeconfig")
        yield DemoEnvironment(cluster, prom.url, kubeconfig, policy_file, stub)


def demo_command(command: Sequence[str], env: DemoEnvironment) -> list[str]:
    """The `steer` command line that runs `command` (`scorer once|run ...`) on `env`."""
    args = [*command, "--policy", str(env.policy_file), "--prometheus", env.prometheus_url]
    args += ["--kubeconfig", str(env.kubeconfig)]
    if command[1] == "once" and "--cycles" not in command:
        args += ["--cycles", "2"]  # the second cycle sets the debounced taints
    if command[1] == "run" and "--lease-namespace" not in command:
        # the stand-in has no project namespace; the Lease goes where a pod would put it
        args += ["--lease-namespace", os.environ.get("POD_NAMESPACE", "default")]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv) or list(DEFAULT_COMMAND)
    if command[0] in ("-h", "--help"):
        print(USAGE)
        return 0
    if command[:2] not in (["scorer", "once"], ["scorer", "run"]):
        print(USAGE, file=sys.stderr)
        return 2
    print(
        "starting the demo: synthetic exporter, Prometheus, Kubernetes API stand-in ...",
        file=sys.stderr,
    )
    with demo_environment() as env:
        return steer_main(demo_command(command, env))


if __name__ == "__main__":
    sys.exit(main())
