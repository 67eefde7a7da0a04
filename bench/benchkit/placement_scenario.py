"""The placement bench's scenarios (bench/placement.py describes them): `default`, 16 fake
nodes in 3 zones with GPUs, budgets and pods there before the trace; `dra`, the same with the
GPUs of gpu-1..3, the hot gpu-5 and two more cool nodes, gpu-7 and gpu-8, as DRA devices, GPU
jobs from earlier holding part of gpu-1..3's devices, CPU work on gpu-7 and gpu-8, and the GPU
jobs asking for them by claims; `energy`, 24 CPU nodes, half of them power-hungry, and CPU work
that fits on far fewer; `mixed-energy`, the two kinds of CPU node beside GPU nodes, two of them
hot, with tenants, both order chains, GPU jobs and CPU work there before the trace. Each has its
nodes, the pods there before the trace (bound by name, and
under `dra` the earlier GPU jobs, which the scheduler places), the power model and the pod
trace, one per seed, that both modes of a pair replay.
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
NS_A, NS_B, NS_SHOP, NS_LEGACY = "team-a", "team-b", "shop", "legacy"
NAMESPACES = {
    NS_A: {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"},
    NS_B: {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"},
    # Opted in, of no tenant: its pods are steered and promised no budget, and they land beside
    # the tenants' pods, so every budget must hold whatever they add.
    NS_SHOP: {"kube-steer.github.io/enabled": "true"},
    NS_LEGACY: {},
}
BUDGET = {NS_A: 5.0, NS_B: 0.0}
CHAIN = "checkout"  # the order chain of team-a
SHOP_CHAIN = "cart"  # the order chain of the shop, 500m/500m replicas as in issue 41
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
# Scenario `mixed-energy`: the same two kinds of CPU node, and GPU servers whose host CPUs
# draw more per busy core than the efficient kind (and idle far higher).
MIXED_POWER = PowerModel(
    per_gpu_w=300,
    types={
        "cpu-efficient": NodePower(idle_w=120, per_core_w=5),
        "cpu-legacy": NodePower(idle_w=220, per_core_w=11),
        "gpu-8x": NodePower(idle_w=800, per_core_w=8),
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


# Scenario `dra`: mixed, as a cluster moving to DRA is, and partly used, as a cluster is
# mid-day. Five cool DRA nodes: gpu-1..3 run GPU jobs from earlier (EARLIER_GPU_JOBS: 4, 2 and
# 2 of their 8 devices, little cpu and memory), so exactly the burst of 16 one-GPU jobs fits in
# their free devices; gpu-7 and gpu-8 hold no GPU but run CPU work (DRA_PREEXISTING: 24 and 20
# cores), and stay whole for the two whole-node jobs, which only a DRA node can serve (they ask
# by a claim template). The device-plugin gpu-4 is spare, and there is one hot node of each
# kind. cpu and memory point the other way from GPU use: MostAllocated on cpu and memory alone
# sends claim jobs to gpu-7, whose cores are the most used, and one burst job there leaves one
# whole DRA node for two whole-node jobs and GPUs stranded on gpu-1..3.
DRA_NODES = frozenset({"gpu-1", "gpu-2", "gpu-3", "gpu-5", "gpu-7", "gpu-8"})
# The claim templates of every bench namespace: name -> GPUs (class gpu.nvidia.com).
CLAIM_TEMPLATES = {"one-gpu": 1, "two-gpus": 2, "four-gpus": 4, "eight-gpus": 8}


def dra_nodes() -> list[NodeSpec]:
    """The default's nodes, the GPUs of DRA_NODES as devices, and gpu-7 (zone-a) and gpu-8
    (zone-b), cool DRA nodes."""
    nodes = cluster_nodes()
    more = [
        NodeSpec(f"gpu-{i}", ZONES[(i - 1) % 3], 64, 512, gpus=8, instance_type="gpu-8x")
        for i in (7, 8)
    ]
    at = max(i for i, s in enumerate(nodes) if s.gpus) + 1
    nodes[at:at] = more
    return [dataclasses.replace(s, dra=s.name in DRA_NODES) for s in nodes]


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


def mixed_energy_nodes() -> list[NodeSpec]:
    """24 nodes in 3 zones: `gpu-1..4` (64 cores, 512 GiB, 8 GPUs; gpu-3 and gpu-4 hot),
    `eff-1..10` and `leg-1..10` (16 cores / 64 GiB, efficient and power-hungry, interleaved
    over the zones)."""
    nodes = [
        NodeSpec(
            f"gpu-{i}", ZONES[(i - 1) % 3], 64, 512, gpus=8, hot=i in (3, 4), instance_type="gpu-8x"
        )
        for i in range(1, 5)
    ]
    for i in range(1, 11):
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
# Scenario `dra`: the default's, and CPU work on the cool DRA nodes that hold no GPU. Each
# leaves a whole-node job (32 cores, 256 GiB, dept-b: 0 %) room within its node's limits.
DRA_PREEXISTING = (
    *PREEXISTING,
    ("gpu-7", "24", "28", "192Gi", "224Gi"),
    ("gpu-8", "20", "24", "160Gi", "192Gi"),
)

# Scenario `mixed-energy`: a cluster mid-day, whose power-hungry nodes already run some work
# (so they are active, and consolidation alone would fill them first), one efficient node and
# a cool GPU node too.
MIXED_PREEXISTING = (
    ("leg-1", "4", "4", "8Gi", "8Gi"),
    ("leg-4", "2", "3", "4Gi", "6Gi"),
    ("leg-8", "2", "2", "4Gi", "4Gi"),
    ("eff-2", "2", "2", "4Gi", "4Gi"),
    ("gpu-1", "8", "16", "32Gi", "64Gi"),
)

EARLIER_KIND = "earlier-gpu"  # KIND_LABEL of the earlier GPU jobs (no TRACE_LABEL)


@dataclass(frozen=True)
class EarlierJob:
    """A GPU job of dept-a running since before the trace: created in team-a through admission
    (steered in the steering modes, as dept-a's GPU jobs are) and placed by the scheduler, its
    node required by node affinity, its GPUs from a claim template (a pod naming its node would
    skip the scheduler, and nothing would allocate its claim). 2 cores and 16 GiB per GPU,
    Guaranteed."""

    node: str
    template: str  # a CLAIM_TEMPLATES name
    gpus: int
    cpu_per_gpu_m: int = 2000
    mem_per_gpu_mi: int = 16384

    @property
    def name(self) -> str:
        return f"a-earlier-{self.node}"

    def body(self) -> dict[str, Any]:
        size = {
            "cpu": f"{self.gpus * self.cpu_per_gpu_m}m",
            "memory": f"{self.gpus * self.mem_per_gpu_mi}Mi",
        }
        spec = {
            "terminationGracePeriodSeconds": 0,
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchFields": [
                                    {
                                        "key": "metadata.name",
                                        "operator": "In",
                                        "values": [self.node],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "resources": {"requests": dict(size), "limits": dict(size)},
                }
            ],
        }
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": NS_A,
                "labels": {KIND_LABEL: EARLIER_KIND},
            },
            "spec": claim_pod_spec(spec, self.template),
        }


# 4 + 2 + 2 of 24 devices held: 4 + 6 + 6 = 16 free, the burst exactly.
EARLIER_GPU_JOBS = (
    EarlierJob("gpu-1", "four-gpus", 4),
    EarlierJob("gpu-2", "two-gpus", 2),
    EarlierJob("gpu-3", "two-gpus", 2),
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
    # GPU jobs the scheduler places before the trace (after the mode's admission is up)
    earlier_jobs: tuple[EarlierJob, ...] = ()
    # Seconds of Kepler history backfilled into each steered run's Prometheus before it
    # starts (bench/benchkit/kepler_history.py); 0: it starts empty.
    kepler_history_s: float = 0.0

    @property
    def dra(self) -> bool:
        """Whether GPUs are DRA devices on some node (the DRA objects to make and reset)."""
        return any(s.dra for s in self.nodes)

    def trace(self, seed: int, rate: float) -> list[Arrival]:
        return build_trace(seed, rate, **self.trace_args)


def scenarios() -> dict[str, Scenario]:
    return {
        "default": Scenario("default", tuple(cluster_nodes()), PREEXISTING, POWER, {}),
        # The default's nodes (and the cool DRA gpu-7 and gpu-8), trace and goals, with GPU
        # jobs from earlier on gpu-1..3 and CPU work on gpu-7 and gpu-8; the one-GPU jobs
        # alternate between a claim template and a plain nvidia.com/gpu request, the
        # whole-node jobs use a template.
        "dra": Scenario(
            "dra",
            tuple(dra_nodes()),
            DRA_PREEXISTING,
            POWER,
            {"dra_claims": 1},
            CLAIM_TEMPLATES,
            EARLIER_GPU_JOBS,
        ),
        # 60 CPU services (~116 cores) and the 12-replica chain: ~128 of 384 cores, so the work
        # fits on 8 of the 24 nodes, and on the 12 efficient ones with room to spare.
        "energy": Scenario(
            "energy",
            tuple(energy_nodes()),
            (),
            ENERGY_POWER,
            {
                "services_a": 30,
                "services_b": 30,
                "services_shop": 0,
                "gpu1_jobs": 0,
                "gpu8_jobs": 0,
                "shop_chain_replicas": 0,
            },
            kepler_history_s=3600.0,
        ),
        # Both kinds of CPU node beside GPU nodes (two hot, which CPU pods may use), work there
        # before the trace, dept-a, dept-b and the shop, both chains, a burst of 8 one-GPU jobs
        # and a whole-node job: ~120 cores of CPU work and 64 of GPU jobs' cores, on 160
        # efficient cores.
        "mixed-energy": Scenario(
            "mixed-energy",
            tuple(mixed_energy_nodes()),
            MIXED_PREEXISTING,
            MIXED_POWER,
            {
                "services_a": 24,
                "services_b": 24,
                "services_shop": 8,
                "gpu1_jobs": 8,
                "gpu8_jobs": 1,
            },
            kepler_history_s=3600.0,
        ),
    }


@dataclass(frozen=True)
class Arrival:
    at: float  # seconds after the first arrival
    kind: str  # svc-a | svc-b | svc-shop | gpu-1 | gpu-8 | chain
    namespace: str
    name: str
    cpu_m: int
    cpu_limit_m: int
    mem_mi: int
    mem_limit_mi: int
    gpus: int = 0
    replicas: int = 1  # > 1 only for a chain's Deployment
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
# The one-GPU jobs arrive as one burst: these many services are interleaved with them, so the
# burst of 16 takes ~19 arrivals, under 5 s at 4 arrivals/s.
BURST_GAPS = 3
# A third of the shop's services are burstable: limits 1.5 x requests (no budget caps them).
SHOP_BURSTABLE = 1 / 3


def burst(amount: int) -> int:
    """The largest integer limit within dept-a's 5 % budget (the webhook admits ratio <= 1.05)."""
    return amount * 105 // 100


def free_slots(slots: Sequence[str | None], start: float, stop: float) -> list[int]:
    """The unassigned slots between the fractions `start` and `stop` of the trace."""
    return [i for i in range(int(len(slots) * start), int(len(slots) * stop)) if slots[i] is None]


def build_trace(
    seed: int,
    rate: float,
    *,
    services_a: int = 38,
    services_b: int = 36,
    services_shop: int = 12,
    gpu1_jobs: int = 16,
    gpu8_jobs: int = 2,
    chain_replicas: int = 12,
    shop_chain_replicas: int = 6,
    dra_claims: int = 0,
) -> list[Arrival]:
    """The trace of one seed: the seed decides the order of the arrivals, their gaps
    (exponential, `rate` per second) and the services' sizes.

    The tenants' and the shop's services are shuffled together; team-a's chain arrives at
    25-35 % of the trace, the shop's at 55-65 % (when nodes have filled up); the one-GPU jobs
    arrive as one burst (BURST_GAPS services among them) starting at 10-30 %, the whole-node
    jobs in the last third. `dra_claims`: the odd one-GPU jobs and every whole-node job ask by
    a claim template, the even one-GPU jobs by `nvidia.com/gpu` (the same arrivals and sizes)."""
    rng = random.Random(seed)
    chains = 1 + (1 if shop_chain_replicas else 0)
    total = services_a + services_b + services_shop + gpu1_jobs + gpu8_jobs + chains
    slots: list[str | None] = [None] * total
    slots[rng.choice(free_slots(slots, 0.25, 0.35))] = "chain"
    if shop_chain_replicas:
        slots[rng.choice(free_slots(slots, 0.55, 0.65))] = "chain-shop"
    if gpu1_jobs:
        free = [i for i, slot in enumerate(slots) if slot is None]
        first = rng.choice([n for n, i in enumerate(free) if 0.1 * total <= i < 0.3 * total])
        window = free[first : first + gpu1_jobs + BURST_GAPS]
        for i in rng.sample(window, gpu1_jobs):
            slots[i] = "gpu-1"
    for i in rng.sample(free_slots(slots, 0.67, 1.0), gpu8_jobs):
        slots[i] = "gpu-8"
    services = ["svc-a"] * services_a + ["svc-b"] * services_b + ["svc-shop"] * services_shop
    rng.shuffle(services)
    it = iter(services)
    kinds = [slot if slot is not None else next(it) for slot in slots]
    counters: Counter[str] = Counter()
    out: list[Arrival] = []
    at = 0.0
    for kind in kinds:
        counters[kind] += 1
        n = counters[kind]
        if kind.startswith("svc-"):
            cpu = rng.choices([s for s, _ in SIZES], weights=[w for _, w in SIZES])[0]
            mem = 2 * cpu * 1024 // 1000  # 2 GiB per core, in MiB
            if kind == "svc-a":
                arrival = Arrival(
                    at, kind, NS_A, f"a-svc-{n:03d}", cpu, burst(cpu), mem, burst(mem)
                )
            elif kind == "svc-b":
                arrival = Arrival(at, kind, NS_B, f"b-svc-{n:03d}", cpu, cpu, mem, mem)
            else:
                # Guaranteed (500m/500m-style) or burstable, the draw made either way so the
                # sizes do not depend on it.
                stretch = 3 if rng.random() < SHOP_BURSTABLE else 2
                arrival = Arrival(
                    at,
                    kind,
                    NS_SHOP,
                    f"s-svc-{n:03d}",
                    cpu,
                    cpu * stretch // 2,
                    mem,
                    mem * stretch // 2,
                )
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
        elif kind == "chain":
            arrival = Arrival(
                at, kind, NS_A, CHAIN, 1000, 1000, 2048, 2048, replicas=chain_replicas
            )
        else:
            arrival = Arrival(
                at, "chain", NS_SHOP, SHOP_CHAIN, 500, 500, 1024, 1024, replicas=shop_chain_replicas
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
