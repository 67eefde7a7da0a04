"""Placement benchmark: the stock kube-scheduler against the same scheduler steered by kube-steer
(scorer + admission webhook + scheduler profiles), on the same pod trace, on a real
kube-apiserver + kube-scheduler + kube-controller-manager v1.36.2 and a real Prometheus.

    .venv/bin/python bench/placement.py                       # 3 runs of each mode, ~8-10 min
    .venv/bin/python bench/placement.py --runs 1 --modes steered --seed 7 --rate 8

Not a test: it asserts nothing, it measures, and it reports what it measures. The scoreboard is
printed as markdown on stdout (one row per run, then min / median / max per mode), progress goes
to stderr, and everything (per-node detail, labels at trace start, scheduler messages of pods
left Pending) is written to bench/results/placement-<UTC timestamp>.json (or --json PATH).

Scenario
--------
One control plane for the whole benchmark (kits.control_plane). Each run starts from the
same state, rebuilt from scratch:

- **16 fake nodes in 3 zones** (Node objects with a Ready condition, capacity = allocatable):
  `gpu-1..6` (64 cores, 512 GiB, 8 `nvidia.com/gpu`; zones a, b, c, a, b, c) and `cpu-1..10`
  (cpu-1..6: 16 cores / 64 GiB, cpu-7..10: 32 cores / 128 GiB; zones a, b, c, a, ...).
  `gpu-5` (zone-b) and `gpu-6` (zone-c) are **busy through external load**: no pods, but every
  GPU reports 95 % utilisation and 16 GiB framebuffer used in DCGM, so the example policy's
  `gpu-hot` taint (util > 90) fires on them; Kubernetes still sees 8 free GPUs there.
- **Pre-existing pods** (namespace `legacy`, not opted in, bound directly with `spec.nodeName`
  before anything else; requests < limits): cpu-1 (cpu limits 150 % of allocatable), cpu-3
  (103 %: inside dept-a's 5 % budget, outside dept-b's 0 %), cpu-8 (memory 117 %), nodes near
  full but not over (cpu-2 cpu 97 %, cpu-5 memory 98 %), and smaller pods on cpu-4, cpu-9,
  gpu-1 and gpu-2 (no GPU node is over budget, so every tenant may use all four cool ones).
  See PREEXISTING.
- **Power model** (kits.simulated_cluster.PowerModel): a node draws idle watts (CPU nodes 150,
  GPU nodes 800) + 6 W per requested CPU core of its bound pods + 300 W per GPU times its busy
  share (1 when allocated to a pod; the external utilisation, 0.95, on the two hot nodes).
- **Exporter** (kits.simulated_cluster, steered mode only): lists nodes and pods every 1 s and
  serves DCGM (GPUs given to bound pods: 85 % util, 60,000 MiB used), Kepler 0.7 platform joules
  integrating the power model, kube-state-metrics allocatable and per-container requests/limits
  with the `node` label, and blackbox `probe_success{job="node-health"}`. A fresh real
  Prometheus scrapes it every 1 s (honor_labels). Before the trace, every query of the policy
  is run and must return a value for the nodes it should cover (GPU dimensions: 6 nodes; power
  and health: 16; overcommit: the 9 nodes with pods).
- **The trace** (seeded; the same for both modes): arrivals at `--rate` per second (exponential
  gaps, default 4/s), ~85 arrivals = 96 pods in ~21 s, i.e. well inside one 30 s scoring
  interval. Every pod sets cpu and memory requests and limits.
  * 38 CPU services in `team-a` (labels `tenant=dept-a, kube-steer.github.io/enabled=true`, budget 5 %),
    burstable: limit = floor(1.05 x request), the most the validating webhook admits;
  * 36 CPU services in `team-b` (`tenant=dept-b`, budget 0 %), Guaranteed (limit = request).
    Service sizes are drawn per pod: 0.5/1/2/4/8 cores with 2 GiB per core, weights
    25/30/25/15/5 %;
  * 8 one-GPU jobs in `team-a` (1 GPU, 4 cores, 32 GiB; burstable 1.05) in the first half of
    the trace, then 2 whole-node jobs in `team-b` (8 GPUs, 32 cores, 256 GiB, Guaranteed) in
    the last third. Both fit in principle, away from the hot nodes and within the budgets: one
    cool GPU node for the 8 one-GPU jobs, two for the whole-node jobs, one to spare;
  * one business chain: Deployment `checkout` in `team-a`, 12 replicas (1 core, 2 GiB,
    Guaranteed), pod label `order-chain: checkout` (so the policy's zone and hostname spread
    rules apply; the pods carry `pod-template-hash`), created at ~30 % of the trace; the
    controller manager creates its pods.

Modes (alternated run by run: stock, steered, stock, steered, ...):

- `stock`: kube-scheduler with its default configuration, no admission webhook configurations,
  no scorer; pods keep `schedulerName: default-scheduler`.
- `steered`: kube-scheduler with manifests/scheduler/profiles.yaml, the admission webhook
  registered (the project's manifests/webhook/admission.yaml, by URL), and the scorer (one
  replica, `--no-leader-election`) on a copy of examples/policy.yaml pointing at the fresh
  Prometheus, with the policy's own 30 s interval. The trace starts once every node carries a
  composite label and both hot nodes carry the `gpu-hot` taint (setAfterCycles: 2, so the scorer
  has run two cycles, 30 s apart: in production it runs all the time). The next cycle therefore
  comes ~30 s later, after the last arrival; between cycles only the scorer's hot-node penalty
  (pods bound in the last 60 s) rewrites composites.

Reset before every run: admission configurations removed, the Deployment and every pod of the
bench namespaces deleted (grace 0) and gone, every Node deleted and recreated (so no steer
label, taint or annotation survives), pre-existing pods recreated, the scheduler restarted with
the mode's configuration; a steered run also gets a fresh exporter state, Prometheus and scorer.

Metrics
-------
All placement metrics come from ONE list of nodes and ONE list of pods taken when binding has
settled: every trace pod bound, or no new binding for --quiet seconds (5) after the last
arrival, or --settle-timeout (30 s) after it. "Trace pods" are the 96 pods above; "all pods"
adds the pre-existing ones. A pod counts as bound when `spec.nodeName` is set.

- `bound`, `pending`: trace pods bound / not bound (rejected ones are neither; `rejected`
  counts trace pods the apiserver refused, e.g. a webhook denial).
- `cores`: CPU cores requested by bound trace pods (placed work).
- `A>5%`, `B>0%`: trace pods of dept-a (team-a) / dept-b (team-b) bound to a node whose
  overcommit exceeds the tenant's budget. Node overcommit = max over cpu and memory of
  (sum of the limits of ALL pods bound to the node / allocatable - 1), in %, exactly the
  policy's `overcommit-pct` query, evaluated on the final state (so a pod that pushed its own
  node over the budget counts too: the budget is a property of the node the pod runs on).
  Shown as count/of-bound-tenant-pods.
- `A@bind`, `B@bind`: of those, the pods whose node was ALREADY over the budget when the pod
  was bound, counting only the pods bound there before it (pre-existing pods, then trace pods
  in the order the watch saw them bound). The rest were within budget at bind time and were
  pushed over by their own limits or by later pods: no label can prevent that, while an
  at-bind violation is a node the steering should have excluded (a stale or missing
  `overcommit-pct` label, or an unsteered pod).
- `GPU@hot`: bound trace GPU pods on the two externally loaded GPU nodes.
- `chain a/b/c`, `skew`: bound `checkout` replicas per zone, and max - min over the 3 zones.
- `8G pend`: whole-node (8-GPU) jobs not bound.
- `whole`: GPU nodes that are neither hot nor hold any allocated GPU (room for a whole-node
  job). `strand`: free GPUs on GPU nodes with 1-7 GPUs allocated (any node, hot ones too).
- `CPU@GPU`, `CPU@GPU cores`: bound trace pods that request no GPU, on GPU nodes, and the
  CPU cores they request.
- `active`, `kW`: nodes that hold at least one bound pod (any) or external GPU load, and the sum
  of their watts under the power model; nodes with nothing could be powered down. `W/core` =
  kW x 1000 / CPU cores requested by all bound pods (placed work normalises the comparison;
  GPUs add 300 W each whatever the placement). `idleW`: the idle part of `kW`, i.e. the only
  part of the linear model that the placement itself decides. Caveat: a GPU job placed on a
  hot node takes a GPU that external load already keeps 95 % busy, so its 300 W barely adds
  (the busy share is capped at 1): placing GPU jobs on hot nodes looks cheaper in kW while, in
  reality, both loads would share the GPU.
- `c→b s`: wall time from the first create request of the trace to the last binding of a
  trace pod (bindings seen by a watch in this process).

JSON only, per run: schedulerName counts and how many trace pods carry the webhook's trace
annotation (`mutated`: all of them when steered, none when stock), per node the final state and
the steer labels/taints at trace start, the scheduler's message for each Pending pod, the
query coverage check, and the timings: reset, priming (steered: exporter, Prometheus, two
scorer cycles), trace, settle. Runs are noisy on a 2-core machine shared with other work; the scheduler breaks ties at
random, hence several runs and the min / median / max summary.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import random
import statistics
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from fractions import Fraction
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, watch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kits.control_plane import ControlPlane  # noqa: E402
from kits.prometheus_server import PrometheusServer  # noqa: E402
from kits.service_processes import (  # noqa: E402
    RunningWebhook,
    register_admission,
    running_scorer,
    running_webhook,
    unregister_admission,
)
from kits.simulated_cluster import ApiPoller, PowerModel, SimCluster  # noqa: E402
from kits.synthetic_exporter import SyntheticExporter  # noqa: E402
from kits.waiting import wait_until  # noqa: E402
from steer.adapters.kube import make_api_client  # noqa: E402
from steer.core import scheduling  # noqa: E402
from steer.core.quantity import parse_quantity  # noqa: E402

PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
RESULTS = ROOT / "bench" / "results"
MODES = ("stock", "steered")
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
SCRAPE_INTERVAL_S = 1.0


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- the cluster ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class NodeSpec:
    name: str
    zone: str
    cpu: int
    memory_gi: int
    gpus: int = 0
    hot: bool = False


def cluster_nodes() -> list[NodeSpec]:
    nodes = [
        NodeSpec(f"gpu-{i}", ZONES[(i - 1) % 3], 64, 512, gpus=8, hot=i in (5, 6))
        for i in range(1, 7)
    ]
    nodes += [
        NodeSpec(f"cpu-{i}", ZONES[(i - 1) % 3], 16 if i <= 6 else 32, 64 if i <= 6 else 128)
        for i in range(1, 11)
    ]
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


# -- the trace -----------------------------------------------------------------------------------


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

    def resources(self) -> dict[str, dict[str, str]]:
        requests = {"cpu": f"{self.cpu_m}m", "memory": f"{self.mem_mi}Mi"}
        limits = {"cpu": f"{self.cpu_limit_m}m", "memory": f"{self.mem_limit_mi}Mi"}
        if self.gpus:
            requests[GPU] = limits[GPU] = str(self.gpus)
        return {"requests": requests, "limits": limits}

    def pod_spec(self) -> dict[str, Any]:
        return {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": IMAGE, "resources": self.resources()}],
        }


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
) -> list[Arrival]:
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
        elif kind == "gpu-8":
            arrival = Arrival(
                at, kind, NS_B, f"b-train-8g-{n:02d}", 32000, 32000, 262144, 262144, 8
            )
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


# -- measuring -----------------------------------------------------------------------------------


def _q(value: Any) -> Fraction:
    return parse_quantity(value) if value is not None else Fraction(0)


def pod_amount(pod: Mapping[str, Any], part: str, resource: str) -> Fraction:
    """What the pod requests (or limits) of `resource`, as the scheduler and the budget rule sum
    it (steer/core/scheduling.py)."""
    return scheduling.pod_amount(pod["spec"], part, resource)


def node_overcommit_pct(node: Mapping[str, Any], pods: Sequence[Mapping[str, Any]]) -> float:
    """max over cpu/memory of sum(limits of the node's pods) / allocatable - 1, in %."""
    alloc = node["status"]["allocatable"]
    worst = None
    for resource in ("cpu", "memory"):
        total = sum((pod_amount(p, "limits", resource) for p in pods), Fraction(0))
        ratio = total / _q(alloc[resource]) - 1
        worst = ratio if worst is None else max(worst, ratio)
    return float(100 * (worst or 0))


class BindRecorder:
    """Watches trace pods (label TRACE_LABEL) and notes when each is first seen, and first seen
    bound, on this process' monotonic clock."""

    def __init__(self, kubeconfig: Path) -> None:
        self.api = make_api_client(str(kubeconfig))
        self.seen: dict[str, float] = {}
        self.bound: dict[str, float] = {}
        self.last_change = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="bind-recorder", daemon=True)

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(
                    core.list_pod_for_all_namespaces,
                    label_selector=TRACE_LABEL,
                    timeout_seconds=3,
                    _request_timeout=10,
                ):
                    pod = event["object"]
                    key = f"{pod.metadata.namespace}/{pod.metadata.name}"
                    now = time.monotonic()
                    with self._lock:
                        if event["type"] != "DELETED":
                            self.seen.setdefault(key, now)
                            if pod.spec.node_name and key not in self.bound:
                                self.bound[key] = now
                                self.last_change = now
                    if self._stop.is_set():
                        w.stop()
                        break
            except Exception:  # a dropped watch: start a new one
                time.sleep(0.2)

    def bind_times(self) -> dict[str, float]:
        with self._lock:
            return dict(self.bound)

    def counts(self) -> tuple[int, int, float]:
        with self._lock:
            return len(self.seen), len(self.bound), self.last_change

    def __enter__(self) -> BindRecorder:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)
        self.api.close()


@dataclass
class Snapshot:
    nodes: list[dict[str, Any]]
    pods: list[dict[str, Any]]


def snapshot(core: client.CoreV1Api) -> Snapshot:
    nodes: Any = core.list_node(_preload_content=False)
    pods: Any = core.list_pod_for_all_namespaces(_preload_content=False)
    return Snapshot(json.loads(nodes.data)["items"], json.loads(pods.data)["items"])


def natural(name: str) -> tuple[str, int]:
    stem, _, num = name.rpartition("-")
    return (stem, int(num)) if num.isdigit() else (name, 0)


def measure(
    snap: Snapshot, specs: Sequence[NodeSpec], bind_times: Mapping[str, float] | None = None
) -> dict[str, Any]:
    """The scoreboard of one run, from one snapshot (see the module docstring). `bind_times`
    (namespace/name → when first seen bound) orders the bindings for the at-bind attribution."""
    spec_of = {s.name: s for s in specs}
    hot = {s.name for s in specs if s.hot}
    by_node: dict[str, list[dict[str, Any]]] = {n["metadata"]["name"]: [] for n in snap.nodes}
    for pod in snap.pods:
        node = pod["spec"].get("nodeName")
        if node in by_node and pod["metadata"].get("deletionTimestamp") is None:
            by_node[node].append(pod)
    over = {
        n["metadata"]["name"]: node_overcommit_pct(n, by_node[n["metadata"]["name"]])
        for n in snap.nodes
    }
    trace = [p for p in snap.pods if (p["metadata"].get("labels") or {}).get(TRACE_LABEL) == "1"]

    def kind(p: Mapping[str, Any]) -> str:
        return str(p["metadata"]["labels"].get(KIND_LABEL))

    bound = [p for p in trace if p["spec"].get("nodeName")]
    pending = [p for p in trace if not p["spec"].get("nodeName")]
    gpus_of = {id(p): int(pod_amount(p, "requests", GPU)) for p in snap.pods}
    out: dict[str, Any] = {
        "trace_pods_seen": len(trace),
        "bound": len(bound),
        "pending": len(pending),
        "cores": float(sum((pod_amount(p, "requests", "cpu") for p in bound), Fraction(0))),
    }
    times = bind_times or {}

    def key(p: Mapping[str, Any]) -> str:
        return f"{p['metadata']['namespace']}/{p['metadata']['name']}"

    def over_before(p: Mapping[str, Any]) -> float:
        """The node's overcommit from the pods bound to it before `p` (pre-existing ones first)."""
        mine = times.get(key(p), float("inf"))
        node = p["spec"]["nodeName"]
        earlier = [
            q for q in by_node[node] if q is not p and times.get(key(q), float("-inf")) < mine
        ]
        return node_overcommit_pct(node_by_name[node], earlier)

    node_by_name = {n["metadata"]["name"]: n for n in snap.nodes}
    violations = []
    for ns, budget in BUDGET.items():
        tenant = [p for p in bound if p["metadata"]["namespace"] == ns]
        before = {key(p): over_before(p) for p in tenant}
        out[f"over_budget_{ns}"] = sum(1 for p in tenant if over[p["spec"]["nodeName"]] > budget)
        out[f"over_budget_at_bind_{ns}"] = sum(1 for p in tenant if before[key(p)] > budget)
        out[f"bound_{ns}"] = len(tenant)
        violations += [
            {
                "pod": key(p),
                "node": p["spec"]["nodeName"],
                "budget_pct": budget,
                "overcommit_before_bind_pct": round(before[key(p)], 1),
                "overcommit_end_pct": round(over[p["spec"]["nodeName"]], 1),
                "node_label_end": (node_by_name[p["spec"]["nodeName"]]["metadata"]["labels"]).get(
                    f"{PREFIX}overcommit-pct"
                ),
            }
            for p in tenant
            if over[p["spec"]["nodeName"]] > budget
        ]
    out["budget_violations"] = violations
    out["gpu_on_hot"] = sum(1 for p in bound if gpus_of[id(p)] and p["spec"]["nodeName"] in hot)
    zones = Counter(spec_of[p["spec"]["nodeName"]].zone for p in bound if kind(p) == "chain")
    out["chain_per_zone"] = [zones.get(z, 0) for z in ZONES]
    out["chain_skew"] = max(out["chain_per_zone"]) - min(out["chain_per_zone"])
    out["gpu8_pending"] = sum(1 for p in pending if kind(p) == "gpu-8")
    allocated = {name: sum(gpus_of[id(p)] for p in pods) for name, pods in by_node.items()}
    gpu_nodes = [s for s in specs if s.gpus]
    out["whole_gpu_nodes"] = sum(1 for s in gpu_nodes if not s.hot and allocated[s.name] == 0)
    out["stranded_gpus"] = sum(
        s.gpus - allocated[s.name] for s in gpu_nodes if 0 < allocated[s.name] < s.gpus
    )
    cpu_on_gpu = [p for p in bound if not gpus_of[id(p)] and spec_of[p["spec"]["nodeName"]].gpus]
    out["cpu_pods_on_gpu_nodes"] = len(cpu_on_gpu)
    out["cpu_cores_on_gpu_nodes"] = float(
        sum((pod_amount(p, "requests", "cpu") for p in cpu_on_gpu), Fraction(0))
    )
    out["scheduler_names"] = dict(Counter(p["spec"].get("schedulerName", "") for p in trace))
    out["mutated"] = sum(
        1 for p in trace if f"{PREFIX}trace" in (p["metadata"].get("annotations") or {})
    )
    sim = SimCluster(POWER, external_gpu_util={s.name: HOT_UTIL for s in specs if s.hot})
    sim.update(snap.nodes, snap.pods, now=0.0)
    watts = sim.node_watts()
    active = [name for name, pods in by_node.items() if pods or name in hot]
    all_cores = float(
        sum(
            (pod_amount(p, "requests", "cpu") for pods in by_node.values() for p in pods),
            Fraction(0),
        )
    )
    out["active_nodes"] = len(active)
    out["active_kw"] = sum(watts[n] for n in active) / 1000
    out["w_per_core"] = 1000 * out["active_kw"] / all_cores if all_cores else 0.0
    out["idle_w"] = sum(POWER.idle_watts(spec_of[n].gpus > 0) for n in active)
    reasons: Counter[str] = Counter()
    for p in pending:
        message = next(
            (
                c.get("message", "")
                for c in (p.get("status") or {}).get("conditions") or ()
                if c.get("type") == "PodScheduled"
            ),
            "(no PodScheduled condition yet)",
        )
        reasons[f"{kind(p)}: {message}"] += 1
    out["pending_reasons"] = dict(reasons)
    out["nodes"] = {
        name: {
            "zone": spec_of[name].zone,
            "hot": name in hot,
            "overcommit_pct": round(over[name], 2),
            "watts": round(watts[name], 1),
            "gpus_allocated": allocated[name],
            "cores_requested": float(
                sum((pod_amount(p, "requests", "cpu") for p in pods), Fraction(0))
            ),
            "trace_pods": dict(
                Counter(kind(p) for p in pods if p["metadata"].get("labels", {}).get(TRACE_LABEL))
            ),
            "labels": steer_labels(next(n for n in snap.nodes if n["metadata"]["name"] == name)),
        }
        for name, pods in sorted(by_node.items(), key=lambda item: natural(item[0]))
    }
    return out


def steer_labels(node: Mapping[str, Any]) -> dict[str, str]:
    labels = {
        k.removeprefix(PREFIX): v
        for k, v in (node["metadata"].get("labels") or {}).items()
        if k.startswith(PREFIX)
    }
    for taint in node.get("spec", {}).get("taints") or ():
        if taint["key"].startswith(PREFIX):
            labels[f"taint:{taint['key'].removeprefix(PREFIX)}"] = taint["effect"]
    return labels


# -- running -------------------------------------------------------------------------------------


class Bench:
    def __init__(self, plane: ControlPlane, workdir: Path, args: argparse.Namespace) -> None:
        self.plane = plane
        self.workdir = workdir
        self.args = args
        self.core = client.CoreV1Api(plane.api_client())
        self.apps = client.AppsV1Api(plane.api_client())
        self.specs = cluster_nodes()
        self.trace = build_trace(args.seed, args.rate)
        self.policy_doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
        self.webhook: RunningWebhook | None = None

    # -- state ------------------------------------------------------------------------------------
    def setup(self) -> None:
        for name, labels in NAMESPACES.items():
            self.plane.ensure_namespace(name, labels)

    def reset(self) -> None:
        unregister_admission(self.plane)
        with contextlib.suppress(client.ApiException):
            self.apps.delete_collection_namespaced_deployment(NS_A)
        with contextlib.suppress(client.ApiException):
            self.apps.delete_collection_namespaced_replica_set(NS_A)

        def pods_left() -> bool:
            left = 0
            for ns in NAMESPACES:
                items = self.core.list_namespaced_pod(ns).items
                if items:
                    left += len(items)
                    with contextlib.suppress(client.ApiException):
                        self.core.delete_collection_namespaced_pod(ns, grace_period_seconds=0)
            return left == 0

        wait_until("bench pods deleted", pods_left, timeout=120, interval=1.0)
        for node in self.core.list_node().items:
            with contextlib.suppress(client.ApiException):
                self.core.delete_node(node.metadata.name)
        wait_until(
            "nodes deleted", lambda: not self.core.list_node().items, timeout=60, interval=0.5
        )
        for s in self.specs:
            self.plane.add_node(
                s.name,
                cpu=str(s.cpu),
                memory=f"{s.memory_gi}Gi",
                gpus=s.gpus,
                zone=s.zone,
                labels={"bench.kube-steer.github.io/pool": "gpu" if s.gpus else "cpu"},
            )
        for i, (node, cpu, cpu_limit, mem, mem_limit) in enumerate(PREEXISTING, start=1):
            self.core.create_namespaced_pod(
                NS_LEGACY,
                {
                    "metadata": {"name": f"legacy-{i:02d}-{node}"},
                    "spec": {
                        "nodeName": node,
                        "terminationGracePeriodSeconds": 0,
                        "containers": [
                            {
                                "name": "main",
                                "image": IMAGE,
                                "resources": {
                                    "requests": {"cpu": cpu, "memory": mem},
                                    "limits": {"cpu": cpu_limit, "memory": mem_limit},
                                },
                            }
                        ],
                    },
                },
            )

    def mutation_active(self) -> bool:
        probe = {
            "metadata": {"generateName": "probe-", "namespace": NS_A},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "resources": {
                            "requests": {"cpu": "100m", "memory": "64Mi"},
                            "limits": {"cpu": "100m", "memory": "64Mi"},
                        },
                    }
                ]
            },
        }
        made = self.core.create_namespaced_pod(NS_A, probe, dry_run="All")
        return made.spec.scheduler_name != "default-scheduler"

    # -- steered priming ----------------------------------------------------------------------------
    def prime_steered(self, stack: contextlib.ExitStack, run_dir: Path) -> dict[str, Any]:
        assert self.webhook is not None
        info: dict[str, Any] = {}
        t0 = time.monotonic()
        register_admission(self.plane, self.webhook)
        wait_until("webhook mutating pods", self.mutation_active, timeout=30, interval=0.5)
        sim = SimCluster(POWER, external_gpu_util={s.name: HOT_UTIL for s in self.specs if s.hot})
        stack.enter_context(ApiPoller(make_api_client(str(self.plane.kubeconfig)), sim))
        exporter = stack.enter_context(SyntheticExporter(sim))
        prom = stack.enter_context(
            PrometheusServer([exporter.target], scrape_interval_s=SCRAPE_INTERVAL_S)
        )
        expect = {
            "gpu-util": 6,
            "gpu-free": 6,
            "gpu-frag": 6,
            "power": len(self.specs),
            "overcommit-pct": len({p[0] for p in PREEXISTING}),
            "health": len(self.specs),
        }
        coverage = {}
        for dim in self.policy_doc["spec"]["dimensions"]:
            want = expect[dim["name"]]
            result = prom.wait_for(
                dim["query"],
                lambda r, want=want, label=dim["nodeLabel"]: len(r.values_by(label)) >= want,
                timeout_s=60,
            )
            coverage[dim["name"]] = len(result.values_by(dim["nodeLabel"]))
        info["query_coverage"] = coverage
        info["prometheus_s"] = round(time.monotonic() - t0, 1)
        doc = json.loads(json.dumps(self.policy_doc))
        doc["spec"]["prometheus"]["url"] = prom.url
        policy_file = run_dir / "policy.yaml"
        policy_file.write_text(yaml.safe_dump(doc, sort_keys=False))
        scorer = stack.enter_context(
            running_scorer(
                self.plane,
                policy_file,
                prom.url,
                run_dir,
                extra_args=["--no-leader-election", "--log-level", "INFO"],
            )
        )
        scorer.wait_ready(90)
        hot = [s.name for s in self.specs if s.hot]

        def primed() -> bool:
            nodes = self.core.list_node().items
            scored = all(f"{PREFIX}score" in (n.metadata.labels or {}) for n in nodes)
            tainted = {
                n.metadata.name
                for n in nodes
                for t in n.spec.taints or ()
                if t.key == f"{PREFIX}gpu-hot"
            }
            return scored and set(hot) <= tainted

        waited_from = time.monotonic()
        wait_until("scorer labels and gpu-hot taints", primed, timeout=120, interval=0.5)
        info["scorer_wait_s"] = round(time.monotonic() - waited_from, 1)
        info["labels_at_start"] = {
            n["metadata"]["name"]: steer_labels(n) for n in snapshot(self.core).nodes
        }
        info["explain_at_start"] = scorer.get("/explain/nodes")
        info["scorer_log"] = str(run_dir / "scorer.log")
        return info

    # -- the trace ----------------------------------------------------------------------------------
    def play(self, recorder: BindRecorder) -> dict[str, Any]:
        rejected: dict[str, str] = {}
        lock = threading.Lock()

        def create(a: Arrival) -> None:
            try:
                if a.kind == "chain":
                    self.apps.create_namespaced_deployment(a.namespace, deployment_body(a))
                else:
                    self.core.create_namespaced_pod(a.namespace, pod_body(a))
            except client.ApiException as exc:
                with lock:
                    rejected[f"{a.namespace}/{a.name}"] = f"{exc.status}: {exc.body or exc.reason}"[
                        :400
                    ]

        late = 0.0
        start = time.monotonic()
        with ThreadPoolExecutor(max_workers=6) as pool:
            for a in self.trace:
                delay = start + a.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    late = max(late, -delay)
                pool.submit(create, a)
        created_s = time.monotonic() - start
        expected = trace_pods(self.trace) - sum(
            a.replicas for a in self.trace if f"{a.namespace}/{a.name}" in rejected
        )
        settle_start = time.monotonic()
        while True:
            seen, bound, last = recorder.counts()
            now = time.monotonic()
            if seen >= expected and bound >= expected:
                break
            if now - max(last, settle_start) >= self.args.quiet and seen >= expected:
                break
            if now - settle_start >= self.args.settle_timeout:
                break
            time.sleep(0.25)
        settle_s = time.monotonic() - settle_start
        last_bind = max(recorder.bind_times().values(), default=start)
        return {
            "rejected": rejected,
            "create_s": round(created_s, 1),
            "max_lateness_s": round(late, 2),
            "settle_s": round(settle_s, 1),
            "create_to_last_bind_s": round(last_bind - start, 2),
        }

    # -- one run --------------------------------------------------------------------------------
    def run(self, mode: str, index: int) -> dict[str, Any]:
        log(f"run {index} {mode}: reset")
        t0 = time.monotonic()
        run_dir = self.workdir / f"run-{index}-{mode}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.reset()
        self.plane.restart_scheduler(PROFILES if mode == "steered" else None)
        result: dict[str, Any] = {
            "mode": mode,
            "run": index,
            "reset_s": round(time.monotonic() - t0, 1),
        }
        with contextlib.ExitStack() as stack:
            t1 = time.monotonic()
            if mode == "steered":
                log(f"run {index} {mode}: priming (exporter, Prometheus, scorer: two 30 s cycles)")
                result["priming"] = self.prime_steered(stack, run_dir)
            else:
                wait_until(
                    "no mutation", lambda: not self.mutation_active(), timeout=30, interval=0.5
                )
            result["prime_s"] = round(time.monotonic() - t1, 1)
            log(f"run {index} {mode}: trace of {trace_pods(self.trace)} pods")
            recorder = stack.enter_context(BindRecorder(self.plane.kubeconfig))
            result.update(self.play(recorder))
            snap = snapshot(self.core)
            bind_times = recorder.bind_times()
        result.update(measure(snap, self.specs, bind_times))
        result["rejected_count"] = len(result["rejected"])
        result["total_s"] = round(time.monotonic() - t0, 1)
        log(
            f"run {index} {mode}: bound {result['bound']}, pending {result['pending']}, "
            f"A>5% {result['over_budget_team-a']}, B>0% {result['over_budget_team-b']}, "
            f"GPU@hot {result['gpu_on_hot']}, chain {result['chain_per_zone']}, "
            f"8G pending {result['gpu8_pending']}, CPU@GPU {result['cpu_pods_on_gpu_nodes']}, "
            f"mutated {result['mutated']}, schedulers {result['scheduler_names']} "
            f"({result['total_s']} s)"
        )
        return result


# -- reporting -----------------------------------------------------------------------------------

COLUMNS: tuple[tuple[str, str, Callable[[dict[str, Any]], float], str], ...] = (
    ("bound", "bound", lambda r: r["bound"], "{:.0f}"),
    ("pending", "pend", lambda r: r["pending"], "{:.0f}"),
    ("rejected", "rej", lambda r: r["rejected_count"], "{:.0f}"),
    ("cores", "cores", lambda r: r["cores"], "{:.1f}"),
    ("a_over", "A>5%", lambda r: r["over_budget_team-a"], "{:.0f}"),
    ("a_bind", "A@bind", lambda r: r["over_budget_at_bind_team-a"], "{:.0f}"),
    ("b_over", "B>0%", lambda r: r["over_budget_team-b"], "{:.0f}"),
    ("b_bind", "B@bind", lambda r: r["over_budget_at_bind_team-b"], "{:.0f}"),
    ("gpu_hot", "GPU@hot", lambda r: r["gpu_on_hot"], "{:.0f}"),
    ("skew", "skew", lambda r: r["chain_skew"], "{:.0f}"),
    ("gpu8", "8G pend", lambda r: r["gpu8_pending"], "{:.0f}"),
    ("whole", "whole", lambda r: r["whole_gpu_nodes"], "{:.0f}"),
    ("strand", "strand", lambda r: r["stranded_gpus"], "{:.0f}"),
    ("cpu_gpu", "CPU@GPU", lambda r: r["cpu_pods_on_gpu_nodes"], "{:.0f}"),
    ("cpu_gpu_cores", "CPU@GPU cores", lambda r: r["cpu_cores_on_gpu_nodes"], "{:.1f}"),
    ("active", "active", lambda r: r["active_nodes"], "{:.0f}"),
    ("kw", "kW", lambda r: r["active_kw"], "{:.2f}"),
    ("wcore", "W/core", lambda r: r["w_per_core"], "{:.1f}"),
    ("idle", "idleW", lambda r: r["idle_w"], "{:.0f}"),
    ("c2b", "c→b s", lambda r: r["create_to_last_bind_s"], "{:.1f}"),
)


def run_row(r: dict[str, Any]) -> str:
    cells = [r["mode"], str(r["run"])]
    for key, _, get, fmt in COLUMNS:
        value = fmt.format(get(r))
        if key == "a_over":
            value += f"/{r['bound_team-a']}"
        elif key == "b_over":
            value += f"/{r['bound_team-b']}"
        elif key == "skew":
            value += " (" + "/".join(map(str, r["chain_per_zone"])) + ")"
        cells.append(value)
    return "| " + " | ".join(cells) + " |"


def table(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> str:
    head = ["mode", "run", *(title for _, title, _, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * len(COLUMNS)]
    ordered = sorted(results, key=lambda r: (modes.index(r["mode"]), r["run"]))
    lines += [run_row(r) for r in ordered]
    lines.append("")
    lines.append("Summary per mode: min / median / max over runs.")
    lines.append("")
    lines.append("| mode | runs | " + " | ".join(title for _, title, _, _ in COLUMNS) + " |")
    lines.append("|---|---:|" + "---:|" * len(COLUMNS))
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if not rows:
            continue
        cells = [mode, str(len(rows))]
        for _, _, get, fmt in COLUMNS:
            values = [float(get(r)) for r in rows]
            trio = (min(values), statistics.median(values), max(values))
            cells.append(
                " / ".join(fmt.format(v) for v in trio) if len(rows) > 1 else fmt.format(values[0])
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if rows:
            out[mode] = {
                key: {
                    "min": min(float(get(r)) for r in rows),
                    "median": statistics.median(float(get(r)) for r in rows),
                    "max": max(float(get(r)) for r in rows),
                }
                for key, _, get, _ in COLUMNS
            }
    return out


def node_table(result: dict[str, Any]) -> str:
    """Where things went in one run: per node, its labels at trace start and the final state."""
    start = (result.get("priming") or {}).get("labels_at_start") or {}
    lines = [
        f"Nodes, {result['mode']} run {result['run']}: steer labels at trace start "
        "(score / score-class-gpu / overcommit-pct, taints) and the final state.",
        "",
        "| node | zone | at start | end labels | overcommit % | cores req | GPUs alloc | trace pods |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]

    def short(labels: Mapping[str, str]) -> str:
        if not labels:
            return "-"
        parts = [
            f"{labels.get('score', '·')}/{labels.get('score-class-gpu', '·')}/"
            f"{labels.get('overcommit-pct', '·')}"
        ]
        parts += [k.removeprefix("taint:") for k in labels if k.startswith("taint:")]
        return " ".join(parts)

    for name, n in result["nodes"].items():
        pods = ", ".join(f"{k} {v}" for k, v in sorted(n["trace_pods"].items())) or "-"
        lines.append(
            f"| {name}{' (hot)' if n['hot'] else ''} | {n['zone']} | {short(start.get(name, {}))} | "
            f"{short(n['labels'])} | {n['overcommit_pct']:.1f} | {n['cores_requested']:g} | "
            f"{n['gpus_allocated']} | {pods} |"
        )
    return "\n".join(lines)


# -- main ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def maybe_webhook(bench: Bench, needed: bool, workdir: Path) -> Iterator[RunningWebhook | None]:
    if not needed:
        yield None
        return
    policy_file = workdir / "webhook-policy.yaml"
    policy_file.write_text(EXAMPLE_POLICY.read_text())
    with running_webhook(bench.plane, policy_file, workdir) as hook:
        yield hook


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=3, help="runs per mode (default 3)")
    parser.add_argument("--seed", type=int, default=1, help="trace seed (default 1)")
    parser.add_argument("--rate", type=float, default=4.0, help="arrivals per second (default 4)")
    parser.add_argument(
        "--modes",
        default="stock,steered",
        help="comma-separated, from stock,steered (default both)",
    )
    parser.add_argument(
        "--json", type=Path, help="results file (default bench/results/placement-<ts>.json)"
    )
    parser.add_argument("--keep-going", action="store_true", help="log a failed run and go on")
    parser.add_argument(
        "--quiet", type=float, default=5.0, help="settled after this many s without a binding"
    )
    parser.add_argument(
        "--settle-timeout",
        type=float,
        default=30.0,
        help="stop waiting for bindings after this (s)",
    )
    parser.add_argument("--workdir", type=Path, help="keep logs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown or not modes:
        parser.error(f"--modes: unknown {sorted(unknown)}; choose from {', '.join(MODES)}")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_file = args.json or RESULTS / f"placement-{stamp}.json"
    began = time.monotonic()
    results: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = args.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="steer-placement-"))
            )
        log("starting the control plane (etcd, apiserver, scheduler, controller manager)")
        plane = stack.enter_context(
            ControlPlane.start(workdir / "control-plane", controller_manager=True)
        )
        bench = Bench(plane, workdir, args)
        bench.setup()
        bench.webhook = stack.enter_context(maybe_webhook(bench, "steered" in modes, workdir))
        log(
            f"trace: {len(bench.trace)} arrivals, {trace_pods(bench.trace)} pods over "
            f"{bench.trace[-1].at:.1f} s (seed {args.seed}, {args.rate}/s)"
        )
        for run in range(1, args.runs + 1):
            for mode in modes:
                try:
                    results.append(bench.run(mode, run))
                except Exception as exc:
                    failures.append({"mode": mode, "run": run, "error": repr(exc)})
                    log(f"run {run} {mode} FAILED: {exc!r}")
                    if not args.keep_going:
                        raise
    elapsed = time.monotonic() - began
    print(table(results, modes))
    print()
    for mode in modes:
        first = next((r for r in results if r["mode"] == mode), None)
        if first is not None:
            print(node_table(first))
            print()
    reasons: dict[str, Counter[str]] = {}
    for r in results:
        reasons.setdefault(r["mode"], Counter()).update(r["pending_reasons"])
    for mode, counter in reasons.items():
        if counter:
            print(f"Pending pods, {mode} (all runs): scheduler message x count")
            for text, count in counter.most_common(8):
                print(f"- {count} x {text[:300]}")
            print()
    print(f"Total runtime {elapsed / 60:.1f} min.")
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(
        json.dumps(
            {
                "started": stamp,
                "runtime_s": round(elapsed, 1),
                "args": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
                "trace": [a.__dict__ for a in bench.trace],
                "nodes": [s.__dict__ for s in bench.specs],
                "preexisting": PREEXISTING,
                "power_model": POWER.__dict__,
                "summary": summary(results, modes),
                "runs": results,
                "failures": failures,
            },
            indent=1,
            default=str,
        )
    )
    log(f"results written to {out_file}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
