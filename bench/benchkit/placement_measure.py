"""What a placement run measures: binds as they happen, then the cluster at the end (budgets,
GPU placement, chain spread, power).
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any, Literal

from kubernetes import client, watch

from kits.dra import API as DRA_API
from kits.dra import Allocation, allocations, pod_devices
from kits.simulated_cluster import PowerModel, SimCluster
from scorer.explain.audit import audit_mode_of
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core import scheduling
from steer.core.quantity import parse_quantity

from .placement_scenario import (
    BUDGET,
    CHAIN,
    GPU,
    HOT_UTIL,
    KIND_LABEL,
    NS_SHOP,
    POWER,
    PREFIX,
    TRACE_LABEL,
    ZONES,
    NodeSpec,
)

TRACE_ANNOTATION = f"{PREFIX}trace"
WebhookEffect = Literal["none", "mutated", "audited"]


def webhook_effect(pod: Mapping[str, Any]) -> WebhookEffect:
    """What the mutating webhook did to a pod: "mutated" (enforce mode: its trace says what it
    applied), "audited" (its trace says `"mode": "audit"`: nothing else changed) or "none"."""
    if TRACE_ANNOTATION not in ((pod.get("metadata") or {}).get("annotations") or {}):
        return "none"
    return "audited" if audit_mode_of(pod, TRACE_ANNOTATION) else "mutated"


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
    slices: list[dict[str, Any]] = field(default_factory=list)  # DRA ResourceSlices
    claims: list[dict[str, Any]] = field(default_factory=list)  # DRA ResourceClaims

    def allocations(self) -> list[Allocation]:
        return allocations(self.claims, self.slices)


def snapshot(core: client.CoreV1Api) -> Snapshot:
    """Nodes and pods, then the DRA objects (none where the apiserver serves no
    resource.k8s.io/v1): claims listed after the pods hold every pod's allocation."""
    nodes: Any = core.list_node(_preload_content=False)
    pods: Any = core.list_pod_for_all_namespaces(_preload_content=False)
    kube = KubeJson(core.api_client)
    try:
        slices = kube.list_all(f"{DRA_API}/resourceslices")
        claims = kube.list_all(f"{DRA_API}/resourceclaims")
    except KubeApiError as exc:
        if exc.status != 404:
            raise
        slices, claims = [], []
    return Snapshot(json.loads(nodes.data)["items"], json.loads(pods.data)["items"], slices, claims)


GpuForm = Literal["device-plugin", "extended-dra", "claim"]


def gpu_form(pod: Mapping[str, Any], held: Mapping[str, tuple[str, int]]) -> GpuForm | None:
    """How a GPU pod got (or asks for) its GPUs: a claim it names (`claim`), a plain
    `nvidia.com/gpu` request served from DRA devices by the scheduler's own claim
    (`extended-dra`), or by a device plugin; None for a pod with neither."""
    if pod["spec"].get("resourceClaims"):
        return "claim"
    if not pod_amount(pod, "requests", GPU):
        return None
    key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
    return "extended-dra" if key in held else "device-plugin"


def natural(name: str) -> tuple[str, int]:
    stem, _, num = name.rpartition("-")
    return (stem, int(num)) if num.isdigit() else (name, 0)


def measure(
    snap: Snapshot,
    specs: Sequence[NodeSpec],
    bind_times: Mapping[str, float] | None = None,
    power: PowerModel = POWER,
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
    # GPUs a pod holds: the devices its DRA claims were allocated (a claim template, or a plain
    # nvidia.com/gpu request on a DRA node), else what it requests from a device plugin.
    held = pod_devices(snap.allocations())

    def gpus(p: Mapping[str, Any]) -> int:
        found = held.get(f"{p['metadata']['namespace']}/{p['metadata']['name']}")
        return found[1] if found is not None else int(pod_amount(p, "requests", GPU))

    gpus_of = {id(p): gpus(p) for p in snap.pods}
    forms = {id(p): gpu_form(p, held) for p in snap.pods}
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
    shop = [p for p in trace if p["metadata"]["namespace"] == NS_SHOP]
    out["bound_shop"] = sum(1 for p in shop if p["spec"].get("nodeName"))
    out["pending_shop"] = len(shop) - out["bound_shop"]
    out["gpu_on_hot"] = sum(1 for p in bound if gpus_of[id(p)] and p["spec"]["nodeName"] in hot)
    # Bound replicas per zone of each order chain (by its `order-chain` label), and the worst
    # chain's skew; `chain_per_zone` is team-a's checkout, as before the shop had a chain.
    chain_zones: dict[str, Counter[str]] = {}
    for p in bound:
        if kind(p) == "chain":
            name = p["metadata"]["labels"].get("order-chain", "")
            chain_zones.setdefault(name, Counter())[spec_of[p["spec"]["nodeName"]].zone] += 1
    out["chains"] = {
        name: [zones.get(z, 0) for z in ZONES] for name, zones in sorted(chain_zones.items())
    }
    out["chain_per_zone"] = out["chains"].get(CHAIN, [0] * len(ZONES))
    out["chain_skew"] = max((max(c) - min(c) for c in out["chains"].values()), default=0)
    out["gpu8_pending"] = sum(1 for p in pending if kind(p) == "gpu-8")
    allocated = {name: sum(gpus_of[id(p)] for p in pods) for name, pods in by_node.items()}
    gpu_nodes = [s for s in specs if s.gpus]
    out["whole_gpu_nodes"] = sum(1 for s in gpu_nodes if not s.hot and allocated[s.name] == 0)
    out["stranded_gpus"] = sum(
        s.gpus - allocated[s.name] for s in gpu_nodes if 0 < allocated[s.name] < s.gpus
    )
    cpu_on_gpu = [p for p in bound if not forms[id(p)] and spec_of[p["spec"]["nodeName"]].gpus]
    out["cpu_pods_on_gpu_nodes"] = len(cpu_on_gpu)
    out["cpu_cores_on_gpu_nodes"] = float(
        sum((pod_amount(p, "requests", "cpu") for p in cpu_on_gpu), Fraction(0))
    )
    out["gpu_forms"] = dict(Counter(f for p in bound if (f := forms[id(p)]) is not None))
    out["scheduler_names"] = dict(Counter(p["spec"].get("schedulerName", "") for p in trace))
    effects = Counter(webhook_effect(p) for p in trace)
    out["mutated"] = effects["mutated"]
    out["audited"] = effects["audited"]
    sim = SimCluster(power, external_gpu_util={s.name: HOT_UTIL for s in specs if s.hot})
    sim.update(snap.nodes, snap.pods, now=0.0, slices=snap.slices, claims=snap.claims)
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
    out["idle_w"] = sum(
        power.idle_watts(spec_of[n].gpus > 0, spec_of[n].instance_type) for n in active
    )
    # Energy at equal work: the dynamic CPU watts the placed trace pods draw, per core they
    # request (what placement decides of the linear model), and the nodes nothing runs on.
    trace_cores = {name: Fraction(0) for name in by_node}
    for p in bound:
        trace_cores[p["spec"]["nodeName"]] += pod_amount(p, "requests", "cpu")
    placed = float(sum(trace_cores.values(), Fraction(0)))
    dynamic = sum(
        power.core_watts(spec_of[n].instance_type) * float(c) for n, c in trace_cores.items()
    )
    out["dyn_w_per_core"] = dynamic / placed if placed else 0.0
    out["empty_nodes"] = len(by_node) - len(active)
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
            "dra": spec_of[name].dra,
            "overcommit_pct": round(over[name], 2),
            "watts": round(watts[name], 1),
            "gpus_allocated": allocated[name],
            # of those, held by pods from before the trace (the DRA scenario's earlier jobs)
            "gpus_before_trace": sum(
                gpus_of[id(p)]
                for p in pods
                if (p["metadata"].get("labels") or {}).get(TRACE_LABEL) != "1"
            ),
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
