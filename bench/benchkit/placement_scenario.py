"""The placement bench's scenarios (bench/placement.py describes them): `default`, 16 fake
nodes in 3 zones with GPUs, budgets and pods there before the trace; `dra`, the same with the
GPUs of gpu-1..3 and the hot gpu-5 as DRA devices and the GPU jobs asking for them by claims;
`energy`, 24 CPU nodes, half of them power-hungry, and CPU work that fits on far fewer. Each
has its nodes, the pods there before the trace, the power model and the seeded pod trace both
modes replay.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kits.dra import claim_pod_spec
from kits.simulated_cluster import NodePower, PowerModel

ZONES = ("zone-a", "zone-b", "zone-c")
PREFIX = "kube-steer.github.io/"
GPU = "nvidia.com/gpu"
TRACE_LABEL = "bench.kube-steer.github.io/trace"
KIND_LABEL = "bench.kube-steer.github.io/kind"
NS_A, NS_B, NS_LEGACY = "team-a", "team-b", "legacy"
NAMESPACES = {
    NS_A: {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"},
    NS_B: {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"},
    NS_LEGACY: {},
}
BUDGET = {NS_A: 5.0, NS_B: 0.0}
CHAIN = "checkout"
IMAGE = "registry.k8s.io/pause:3.10"
HOT_UTIL = 95.0
POWER = PowerModel(cpu_node_idle_w=150, gpu_node_idle_w=800, per_core_w=6, per_gpu_w=300)
# The energy scenario's two kinds of CPU node, as the example policy's powerModel lists them:
# the legacy kind idles higher and draws about twice the watts per busy core.
ENERGY_POWER = PowerModel(
    per_gpu_w=300,
    types={
        "cpu-efficient": NodePower(idle_w=120, per_core_w=5),
        "cpu-legacy": NodePower(idle_w=220, per_core_w=11),
    },
)
SCRAPE_INTERVAL_S = 1.0


@dataclass(frozen=True)
class NodeSpec:
    name: str
    zone: str
    cpu: int
    memory_gi: int
    gpus: int = 0
    hot: bool = False
    # node.kubernetes.io/instance-type: the example policy's powerModel covers it
    instance_type: str | None = None
    # The GPUs are DRA devices in a ResourceSlice (kits.dra), not `nvidia.com/gpu` allocatable
    dra: bool = False


def cluster_nodes() -> list[NodeSpec]:
    nodes = [
        NodeSpec(
            f"gpu-{i}", ZONES[(i - 1) % 3], 64, 512, gpus=8, hot=i in (5, 6), instance_type="gpu-8x"
        )
        for i in range(1, 7)
    ]
    nodes += [
        NodeSpec(
            f"cpu-{i}",
            ZONES[(i - 1) % 3],
            16 if i <= 6 else 32,
            64 if i <= 6 else 128,
            instance_type="cpu-16" if i <= 6 else "cpu-32",
        )
        for i in range(1, 11)
    ]
    return nodes


# Scenario `dra`: mixed, as a cluster moving to DRA is. Three cool DRA nodes (one for the
# one-GPU jobs, two for the whole-node jobs, which only a DRA node can serve: they ask by a claim
# template), the device-plugin gpu-4 to spare, and one hot node of each kind.
DRA_NODES = frozenset({"gpu-1", "gpu-2", "gpu-3", "gpu-5"})
# The claim templates of every bench namespace: name -> GPUs (class gpu.nvidia.com).
CLAIM_TEMPLATES = {"one-gpu": 1, "eight-gpus": 8}


def dra_nodes() -> list[NodeSpec]:
    return [dataclasses.replace(s, dra=s.name in DRA_NODES) for s in cluster_nodes()]


def energy_nodes() -> list[NodeSpec]:
    """24 CPU nodes of 16 cores / 64 GiB, 8 per zone: `eff-1..12` efficient, `leg-1..12`
    power-hungry, interleaved over the zones."""
    nodes = []
    for i in range(1, 13):
        nodes.append(
            NodeSpec(f"eff-{i}", ZONES[(i - 1) % 3], 16, 64, instance_type="cpu-efficient")
        )
        nodes.append(NodeSpec(f"leg-{i}", ZONES[(i - 1) % 3], 16, 64, instance_type="cpu-legacy"))
    return nodes


# (node, cpu request, cpu limit, memory request, memory limit): one pod each, namespace legacy.
PREEXISTING = (
    ("cpu-1", "4", "24", "16Gi", "48Gi"),  # cpu limits 150 % of allocatable
    ("cpu-2", "8", "15500m", "24Gi", "60Gi"),  # cpu 96.9 %: full, not over
    ("cpu-3", "4", "16500m", "16Gi", "32Gi"),  # cpu 103.1 %: dept-a may, dept-b may not
    ("cpu-4", "2", "4", "4Gi", "8Gi"),
    ("cpu-5", "6", "12", "16Gi", "63Gi"),  # memory 98.4 %: full, not over
    ("cpu-8", "10", "20", "64Gi", "150Gi"),  # memory 117 %
    ("cpu-9", "2", "4", "4Gi", "8Gi"),
    ("gpu-1", "8", "24", "64Gi", "192Gi"),
    ("gpu-2", "8", "16", "32Gi", "64Gi"),
)


@dataclass(frozen=True)
class Scenario:
    """What one run of the bench starts from and replays."""

    name: str
    nodes: tuple[NodeSpec, ...]
    preexisting: tuple[tuple[str, str, str, str, str], ...]
    power: PowerModel
    trace_args: dict[str, int]
    claim_templates: Mapping[str, int] = field(default_factory=dict)

    @property
    def dra(self) -> bool:
        """Whether GPUs are DRA devices on some node (the DRA objects to make and reset)."""
        return any(s.dra for s in self.nodes)

    def trace(self, seed: int, rate: float) -> list[Arrival]:
        return build_trace(seed, rate, **self.trace_args)


def scenarios() -> dict[str, Scenario]:
    return {
        "default": Scenario("default", tuple(cluster_nodes()), PREEXISTING, POWER, {}),
        # The default's nodes, trace and goals; the one-GPU jobs alternate between a claim
        # template and a plain nvidia.com/gpu request, the whole-node jobs use a template.
        "dra": Scenario(
            "dra",
            tuple(dra_nodes()),
            PREEXISTING,
            POWER,
            {"dra_claims": 1},
            CLAIM_TEMPLATES,
        ),
        # 60 CPU services (~116 cores) and the 12-replica chain: ~128 of 384 cores, so the work
        # fits on 8 of the 24 nodes, and on the 12 efficient ones with room to spare.
        "energy": Scenario(
            "energy",
            tuple(energy_nodes()),
            (),
            ENERGY_POWER,
            {"services_a": 30, "services_b": 30, "gpu1_jobs": 0, "gpu8_jobs": 0},
        ),
    }


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the first arrival
    kind: str  # svc-a | svc-b | gpu-1 | gpu-8 | chain
    namespace: str
    name: str
    cpu_m: int
    cpu_limit_m: int
    mem_mi: int
    mem_limit_mi: int
    gpus: int = 0
    replicas: int = 1  # > 1 only for the chain's Deployment
    # The GPUs come from a claim made from this template (CLAIM_TEMPLATES), not from a
    # `nvidia.com/gpu` request
    claim_template: str | None = None

    def resources(self) -> dict[str, dict[str, str]]:
        requests = {"cpu": f"{self.cpu_m}m", "memory": f"{self.mem_mi}Mi"}
        limits = {"cpu": f"{self.cpu_limit_m}m", "memory": f"{self.mem_limit_mi}Mi"}
        if self.gpus and self.claim_template is None:
            requests[GPU] = limits[GPU] = str(self.gpus)
        return {"requests": requests, "limits": limits}

    def pod_spec(self) -> dict[str, Any]:
        spec = {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": IMAGE, "resources": self.resources()}],
        }
        return spec if self.claim_template is None else claim_pod_spec(spec, self.claim_template)


SIZES = ((500, 25), (1000, 30), (2000, 25), (4000, 15), (8000, 5))  # (millicores, weight %)


def burst(amount: int) -> int:
    """The largest integer limit within dept-a's 5 % budget (the webhook admits ratio <= 1.05)."""
    return amount * 105 // 100


def build_trace(
    seed: int,
    rate: float,
    *,
    services_a: int = 38,
    services_b: int = 36,
    gpu1_jobs: int = 8,
    gpu8_jobs: int = 2,
    chain_replicas: int = 12,
    dra_claims: int = 0,
) -> list[Arrival]:
    """The seeded trace. `dra_claims`: the odd one-GPU jobs and every whole-node job ask by a
    claim template, the even one-GPU jobs by `nvidia.com/gpu` (the same arrivals and sizes)."""
    rng = random.Random(seed)
    total = services_a + services_b + gpu1_jobs + gpu8_jobs + 1
    slots: list[str | None] = [None] * total
    chain_at = rng.randrange(int(total * 0.25), int(total * 0.35))
    slots[chain_at] = "chain"
    early = [i for i in range(int(total * 0.5)) if slots[i] is None]
    for i in rng.sample(early, gpu1_jobs):
        slots[i] = "gpu-1"
    late = [i for i in range(int(total * 0.67), total) if slots[i] is None]
    for i in rng.sample(late, gpu8_jobs):
        slots[i] = "gpu-8"
    services = ["svc-a"] * services_a + ["svc-b"] * services_b
    rng.shuffle(services)
    it = iter(services)
    kinds = [slot if slot is not None else next(it) for slot in slots]
    counters: Counter[str] = Counter()
    out: list[Arrival] = []
    at = 0.0
    for kind in kinds:
        counters[kind] += 1
        n = counters[kind]
        if kind in ("svc-a", "svc-b"):
            cpu = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES])[0]
            mem = 2 * cpu * 1024 // 1000  # 2 GiB per core, in MiB
            if kind == "svc-a":
                arrival = Arrival(
                    at, kind, NS_A, f"a-svc-{n:03d}", cpu, burst(cpu), mem, burst(mem)
                )
            else:
                arrival = Arrival(at, kind, NS_B, f"b-svc-{n:03d}", cpu, cpu, mem, mem)
        elif kind == "gpu-1":
            arrival = Arrival(
                at, kind, NS_A, f"a-train-1g-{n:02d}", 4000, 4200, 32768, burst(32768), gpus=1
            )
            if dra_claims and n % 2 == 1:
                arrival = dataclasses.replace(arrival, claim_template="one-gpu")
        elif kind == "gpu-8":
            arrival = Arrival(
                at, kind, NS_B, f"b-train-8g-{n:02d}", 32000, 32000, 262144, 262144, 8
            )
            if dra_claims:
                arrival = dataclasses.replace(arrival, claim_template="eight-gpus")
        else:
            arrival = Arrival(
                at, kind, NS_A, CHAIN, 1000, 1000, 2048, 2048, replicas=chain_replicas
            )
        out.append(arrival)
        at += rng.expovariate(rate)
    return out


def trace_pods(trace: Sequence[Arrival]) -> int:
    return sum(a.replicas for a in trace)


def deployment_body(a: Arrival) -> dict[str, Any]:
    labels = {"order-chain": a.name, "app": a.name, TRACE_LABEL: "1", KIND_LABEL: a.kind}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": a.name, "namespace": a.namespace},
        "spec": {
            "replicas": a.replicas,
            "selector": {"matchLabels": {"order-chain": a.name}},
            "template": {"metadata": {"labels": labels}, "spec": a.pod_spec()},
        },
    }


def pod_body(a: Arrival) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": a.name,
            "namespace": a.namespace,
            "labels": {TRACE_LABEL: "1", KIND_LABEL: a.kind},
        },
        "spec": a.pod_spec(),
    }
