"""Scale benchmarks on a real kube-apiserver and kube-scheduler v1.36.2 with fake nodes.

    .venv/bin/python bench/scale.py scheduler --nodes 1000,5000 --pods 3000 --rounds 3  # 45 min
    .venv/bin/python bench/scale.py scheduler --quick     # 200 nodes, 300 pods, 1 round: smoke
    .venv/bin/python bench/scale.py scheduler --nodes 1000 --shapes b-guaranteed,a-gpu
    .venv/bin/python bench/scale.py scheduler --report bench/results/scale-<ts>.json
    .venv/bin/python bench/scale.py scorer --nodes 5000 --pods 100000   # bench/scale_scorer.py, 20 min
    .venv/bin/python bench/scale.py webhook                              # bench/webhook_bench.py, 5 min

The full run took 17 min at 1,000 nodes and 30 min at 5,000 on the 2-core machine with other
work running (the slow steered shapes dominate: 40 pods/s is 75 s a run); --pods 2000 or
--rounds 2 shortens it.

Not a test: it asserts nothing, it measures, and it reports what it measures (as
bench/placement.py). The scoreboard is printed as markdown on stdout, progress goes to stderr,
and everything (every run, the scheduler's metrics per run, the messages of pods left Pending)
is written to bench/results/scale-<UTC timestamp>.json (or --json PATH). One subcommand per
section; the helpers before the first section (control plane, raw API client, fake nodes, the
real scorer on recorded readings) are shared by all sections.

Section `scheduler`: scheduling throughput per steered pod shape
-----------------------------------------------------------------
What does steering cost the stock scheduler? Goal: every steered shape binds at >= 0.8x the
rate of the same pod unsteered at 5,000 nodes.

Cluster, built afresh for each --nodes size: etcd, kube-apiserver (--max-requests-inflight
3000, --max-mutating-requests-inflight 1000, --delete-collection-workers 8) and kube-scheduler
with manifests/scheduler/profiles.yaml (percentageOfNodesToScore left at its default) and
clientConnection qps = burst = 5000, so neither the apiserver's inflight limits nor the
scheduler's client rate limit cap the bindings. No webhook runs: the pods are mutated here.

- **N fake nodes** (one POST each, status included: Ready, capacity = allocatable): 64 cores,
  256 GiB, 110 pods, zones a/b/c round robin, `kubernetes.io/hostname`. Every 4th node has
  `nvidia.com/gpu`: 8, or more when --pods GPU pods would need more than half of them (the
  header says how many).
- **What the product's scorer writes**, written by the real scorer: `scorer.service.Scorer`
  on examples/policy.yaml (writeQps/Burst and resourceWriteQps/Burst raised to 1000 for the
  setup), its Prometheus source replaced by seeded random readings (SCORER_READINGS) and a
  synced, empty pod ledger, run for two cycles (the taints have setAfterCycles: 2). Nodes
  then carry the score labels (`score`, `score-class-gpu`, `score-<dimension>`),
  `overcommit-pct`, `reserved-for-gpu`, the `unhealthy` (NoSchedule) and `gpu-hot`
  (PreferNoSchedule) taints, and the resources it publishes in node status (budget pools,
  gates), as in production; the header counts them.

**Pod shapes** (--shapes). Each is a base pod in a namespace labelled as the example policy
expects (opt-in `kube-steer.github.io/enabled=true`; tenants `tenant=dept-a`/`dept-b`),
mutated by the webhook's own `steer.core.mutation.mutate_pod` (`MutationPlan.from_policy` of
examples/policy.yaml, tenant from the namespace labels) and the patch applied with jsonpatch,
so the bench follows the mechanism as it changes. Requests are small: every pod fits anywhere.

- `no-tenant`: opted-in namespace of no tenant; 100m / 128Mi, limits = requests.
- `a-burstable`: dept-a (budget 5 %), limits = floor(1.05 x requests) (100m / 128Mi ->
  105m / 134Mi), the most the validating webhook admits.
- `b-guaranteed`: dept-b (budget 0 %), 100m / 128Mi, limits = requests.
- `a-gpu`: dept-a, 1 `nvidia.com/gpu` + 100m / 128Mi, cpu and memory limits 1.05x (the GPU
  class: steer-binpack, avoid gpu-hot).
- `a-chain`: dept-a, Guaranteed 100m / 128Mi, labels `order-chain: x` and
  `pod-template-hash` (a Deployment's pod: the policy's zone and hostname spread rules).

The **unsteered twin** of a shape is its base pod without the mutation but with the
schedulerName the mutated pod ends up with (steer-spread or steer-binpack): a difference
between profiles (NodeAffinity weight 50, MostAllocated scoring) is not counted, only what
the mutation adds to the pod. The ratio is steered pods/s over twin pods/s.

Method, one run = one shape, steered or twin: the scheduler is stopped; --pods pods are
created (parallel POSTs) while the previous run's pods are being deleted (grace 0), and that
deletion is awaited; a watch on the run's pods starts from the current resourceVersion; the
scheduler is started; the run ends when every pod is bound, or when none was bound for
--stall s. Throughput = (bound - 1) / (last bind - first bind), from the times this process
received the watch events. Then the scheduler's /metrics are read (it was started for this
run, so they cover this run alone), the scheduler is stopped, and the messages of pods left
Pending are kept. The 1-minute load average before and after each run is in the JSON: other
work on the machine shows there.

Order: per round, each shape is a pair of adjacent runs, twin and steered; the order within
a pair alternates by round and the shape order reverses every other round, so slow drift
(etcd growth, a neighbour's load) falls on both halves of a pair. A shape's ratio in a round
is steered/twin of its pair; the table gives min / median / max over rounds. Noise on a
2-core machine shared with other work is large (+-25 % between identical runs happened):
that is why pairs are adjacent and several rounds run.

Where the time goes, from the scheduler's /metrics (median over rounds, twin → steered):
- per pod, `scheduler_scheduling_algorithm_duration_seconds` (filter + score, the part of a
  scheduling cycle that depends on the pod's shape) and
  `scheduler_framework_extension_point_duration_seconds` per extension point, divided by the
  scheduling attempts. Every cycle records these. Wall time: the scheduler's 16 filter/score
  workers share 2 cores with the apiserver and etcd. Bind runs asynchronously and waits on
  the apiserver: its time is latency, overlapping between pods, not scheduler work;
- per plugin call, the mean of `scheduler_plugin_execution_duration_seconds` (per node
  evaluated for Filter and Score). Only ~10 % of cycles record it, and the scheduler keeps at
  most 1,000 observations a second (a buffer flushed every second; the rest is dropped), so
  sums and counts are truncated (a sampled cycle's Filter calls fill the buffer, Score calls
  are mostly lost) while the mean per call is not. Plugins whose PreFilter returns Skip have
  no Filter call.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import jsonpatch
import orjson
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kits.control_plane import ControlPlane  # noqa: E402
from scorer.kubeapi import KubeJson  # noqa: E402
from scorer.ledger import PodLedger  # noqa: E402
from scorer.model import NodeState  # noqa: E402
from scorer.observe import NodeIndex, read_dimension  # noqa: E402
from scorer.service import Scorer  # noqa: E402
from scorer.sources import Readings  # noqa: E402
from scorer.writer import NodeApi  # noqa: E402
from steer.adapters.prometheus import Sample  # noqa: E402
from steer.core.mutation import MutationPlan, mutate_pod  # noqa: E402
from steer.core.policy import Dimension, Policy, parse_policy  # noqa: E402

PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
RESULTS = ROOT / "bench" / "results"
ZONES = ("zone-a", "zone-b", "zone-c")
GPU = "nvidia.com/gpu"
IMAGE = "registry.k8s.io/pause:3.10"
RUN_LABEL = "bench.kube-steer.github.io/run"
APISERVER_ARGS = (
    "--max-requests-inflight=3000",
    "--max-mutating-requests-inflight=1000",
    "--delete-collection-workers=8",  # default 1: deleting 3,000 pods took 12 s
)
SCHEDULER_QPS = 5000
SCORER_WRITE_QPS = 1000  # the policy's maximum; the example's 20 would take minutes
WORKERS = 16  # parallel requests when creating nodes and pods

T = TypeVar("T")
R = TypeVar("R")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


# -- shared: the API, nodes, the scorer ------------------------------------------------------


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class RawApi:
    """JSON over HTTPS with the admin certificate, one requests.Session per thread. The
    kubernetes client's model (de)serialisation costs more CPU than the apiserver's own work
    on this 2-core machine, and the client shares those cores with what it measures."""

    def __init__(self, plane: ControlPlane) -> None:
        self.base = plane.url
        self._cert = (str(plane.pki_dir / "admin.crt"), str(plane.pki_dir / "admin.key"))
        self._ca = str(plane.ca_file)
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._lock = threading.Lock()

    def new_session(self) -> requests.Session:
        """A session of its own (the caller closes it), e.g. for a long watch."""
        session = requests.Session()
        session.trust_env = False  # this machine sets REQUESTS_CA_BUNDLE
        session.verify = self._ca
        session.cert = self._cert
        return session

    def session(self) -> requests.Session:
        """This thread's session, closed by `close()`."""
        session: requests.Session | None = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = self.new_session()
            with self._lock:
                self._sessions.append(session)
        return session

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        params: Mapping[str, str] | None = None,
    ) -> dict[str, Any]:
        resp = self.session().request(
            method,
            self.base + path,
            data=orjson.dumps(body) if body is not None else None,
            headers={"Content-Type": "application/json"},
            params=params,
            timeout=120,
        )
        if resp.status_code >= 300:
            raise ApiError(method, path, resp.status_code, resp.text)
        result: dict[str, Any] = orjson.loads(resp.content) if resp.content else {}
        return result

    def list(self, path: str, **params: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = []
        query = {"limit": "2000", **params}
        while True:
            page = self.request("GET", path, params=query)
            items += page.get("items") or []
            token = (page.get("metadata") or {}).get("continue")
            if not token:
                return items
            query["continue"] = token

    def close(self) -> None:
        with self._lock:
            for session in self._sessions:
                session.close()
            self._sessions.clear()


def source_version() -> str:
    """The commit measured, `-dirty` when the working tree differs from it (the mutated pods
    themselves are in the results too)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def in_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = WORKERS) -> list[R]:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench") as pool:
        return list(pool.map(fn, items))


@contextlib.contextmanager
def bench_plane(workdir: Path) -> Iterator[tuple[ControlPlane, RawApi]]:
    """etcd + kube-apiserver with raised inflight limits, no scheduler yet, and a raw client."""
    plane = ControlPlane.start(workdir, scheduler=False, apiserver_args=list(APISERVER_ARGS))
    raw = RawApi(plane)
    try:
        yield plane, raw
    finally:
        raw.close()
        plane.stop()


@dataclass(frozen=True)
class FakeNode:
    name: str
    zone: str
    gpus: int = 0
    cpu: str = "64"
    memory: str = "256Gi"
    pods: int = 110

    def body(self) -> dict[str, Any]:
        """A Node with its status: a Node's status may be set on create (there is no kubelet
        to report it), which halves the requests of `ControlPlane.add_node`."""
        capacity = {"cpu": self.cpu, "memory": self.memory, "pods": str(self.pods)}
        if self.gpus:
            capacity[GPU] = str(self.gpus)
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": {
                    "kubernetes.io/hostname": self.name,
                    "kubernetes.io/os": "linux",
                    "topology.kubernetes.io/zone": self.zone,
                },
            },
            "status": {
                "capacity": capacity,
                "allocatable": capacity,
                "conditions": [
                    {
                        "type": "Ready",
                        "status": "True",
                        "reason": "KubeletReady",
                        "message": "fake node",
                        "lastHeartbeatTime": now,
                        "lastTransitionTime": now,
                    }
                ],
                "addresses": [{"type": "Hostname", "address": self.name}],
            },
        }


def fake_nodes(count: int, gpus_per_node: int, gpu_every: int = 4) -> list[FakeNode]:
    return [
        FakeNode(
            name=f"node-{i:05d}",
            zone=ZONES[i % len(ZONES)],
            gpus=gpus_per_node if i % gpu_every == 0 else 0,
        )
        for i in range(count)
    ]


def create_nodes(raw: RawApi, nodes: Sequence[FakeNode]) -> None:
    made = [raw.request("POST", "/api/v1/nodes", n.body()) for n in nodes[:1]]
    if not made[0].get("status", {}).get("conditions"):
        raise RuntimeError("the apiserver dropped the status of a created Node")
    in_parallel(lambda n: raw.request("POST", "/api/v1/nodes", n.body()), nodes[1:])


class RecordedSource:
    """Fixed readings, `values[dimension][node]`, answered as the Prometheus source answers a
    cycle (each node identified by its name in the dimension's nodeLabel)."""

    def __init__(self, values: Mapping[str, Mapping[str, float]]) -> None:
        self.values = values

    def read(
        self,
        policy: Policy,
        dimensions: Sequence[Dimension],
        nodes: Sequence[NodeState],
        index: NodeIndex,
        at: float | None,
    ) -> Readings:
        observed_at = time.time() if at is None else at
        out = Readings()
        for dim in dimensions:
            samples = [
                Sample({dim.node_label: node}, value)
                for node, value in self.values.get(dim.name, {}).items()
            ]
            out.readings[dim.name] = read_dimension(
                dim, samples, observed_at=observed_at, index=index
            )
        return out

    def close(self) -> None:
        pass


def bench_policy_text(write_qps: int = SCORER_WRITE_QPS) -> str:
    """examples/policy.yaml with the scorer's write rates raised (labels, and the status
    resources written first at their own rate), nothing else changed."""
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    scoring = doc["spec"]["scoring"]
    for key in ("writeQps", "writeBurst", "resourceWriteQps", "resourceWriteBurst"):
        scoring[key] = write_qps
    return yaml.safe_dump(doc, sort_keys=False)


def score_nodes(
    plane: ControlPlane,
    policy: Policy,
    values: Mapping[str, Mapping[str, float]],
    cycles: int = 2,
) -> list[dict[str, Any]]:
    """Run the real scorer `cycles` times on recorded readings and no pods (a synced, empty
    ledger, so the budget pools are published); its write reports, one per cycle."""
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: policy,
        NodeApi(KubeJson(plane.api_client())),
        ledger=ledger,
        sources={"prometheus": RecordedSource(values)},
    )
    reports = []
    try:
        for _ in range(cycles):
            result = scorer.run_cycle(at=time.time())
            report = result.report
            if report is None or report.errors:
                errors = report.errors[:3] if report else "nothing written"
                raise RuntimeError(f"scorer cycle failed: {errors}")
            reports.append(
                {
                    "nodes_written": report.nodes_written,
                    "requests": report.requests,
                    "list_s": round(result.list_s, 2),
                    "compute_s": round(result.compute_s, 2),
                    "write_s": round(result.write_s, 2),
                }
            )
    finally:
        scorer.close()
    return reports


# Seeded readings for the scorer: spread so the score buckets vary, some nodes over each
# tenant's budget, a few unhealthy ones, a few GPU nodes hot.
UNHEALTHY_SHARE = 0.05
HOT_SHARE = 0.10
OVERCOMMIT_SHARE = 0.8  # nodes with a reading at all: the others carry no overcommit-pct


def scorer_readings(nodes: Sequence[FakeNode], seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    gpu = [n.name for n in nodes if n.gpus]
    names = [n.name for n in nodes]
    return {
        "gpu-util": {
            n: 97.0 if rng.random() < HOT_SHARE else float(rng.randint(0, 85)) for n in gpu
        },
        "gpu-free": {n: float(rng.randint(0, 8)) for n in gpu},
        "gpu-frag": {n: rng.random() for n in gpu},
        "power": {n: float(rng.randint(100, 900)) for n in names},
        "overcommit-pct": {
            n: float(rng.randint(-30, 15)) for n in names if rng.random() < OVERCOMMIT_SHARE
        },
        "health": {n: 0.0 if rng.random() < UNHEALTHY_SHARE else 1.0 for n in names},
    }


SCORER_READINGS = (
    f"power 100-900 W and health 1 on every node ({UNHEALTHY_SHARE:.0%} at 0), overcommit-pct "
    f"-30..15 on {OVERCOMMIT_SHARE:.0%}, GPU nodes gpu-util 0..85 ({HOT_SHARE:.0%} at 97), "
    "gpu-free 0..8, gpu-frag 0..1"
)


def node_summary(policy: Policy, nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many nodes carry each of the scorer's labels, taints and resources (pools, gates)."""
    prefix = policy.spec.label_prefix
    # Resources may live under their own prefix (one with `kubernetes.io/` in it).
    resource_prefix: str = getattr(policy.spec, "resource_prefix", prefix)
    counts: Counter[str] = Counter()
    for node in nodes:
        for key in node["metadata"].get("labels") or {}:
            if key.startswith(prefix):
                counts["label " + key.removeprefix(prefix)] += 1
        for taint in node.get("spec", {}).get("taints") or ():
            if taint["key"].startswith(prefix):
                counts[f"taint {taint['key'].removeprefix(prefix)}:{taint['effect']}"] += 1
        for resource in node.get("status", {}).get("allocatable") or {}:
            if resource.startswith((prefix, resource_prefix)):
                counts["resource " + resource] += 1
    return dict(sorted(counts.items()))


# -- the scheduler's /metrics ------------------------------------------------------------------

PLUGIN_METRIC = "scheduler_plugin_execution_duration_seconds"
POINT_METRIC = "scheduler_framework_extension_point_duration_seconds"
ALGORITHM_METRIC = "scheduler_scheduling_algorithm_duration_seconds"
ATTEMPTS_METRIC = "scheduler_schedule_attempts"  # counters lose "_total" in the parser
BATCH_METRIC = "scheduler_batch_attempts"
# The scheduling pipeline in order. Bind (and PreBind, PostBind) run asynchronously and wait on
# the apiserver: their wall time is latency, overlapping between pods, not scheduler work.
POINTS = (
    "PreEnqueue",
    "Sign",
    "PreFilter",
    "Filter",
    "PostFilter",
    "PreScore",
    "Score",
    "Reserve",
    "Permit",
    "PreBind",
    "Bind",
)
CPU_POINTS = frozenset(POINTS[:8])
# The scheduler buffers plugin observations (1,000 at most) and flushes them every second.
METRICS_FLUSH_S = 1.5


def metric_sums(text: str, name: str, key: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of histogram or counter `name` per value of label `key` (others summed;
    a counter's count is 0)."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            slot = out.setdefault(sample.labels.get(key, ""), [0.0, 0.0])
            slot[1 if sample.name.endswith("_count") else 0] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def plugin_means(text: str) -> dict[str, tuple[float, int]]:
    """`Point/Plugin` -> (mean µs per call, calls kept). Only ~10 % of cycles record plugin
    times, Filter and Score once per node, and the scheduler drops what exceeds its buffer of
    1,000 per second: sums and counts are truncated, the mean per call is not."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != PLUGIN_METRIC:
            continue
        for sample in family.samples:
            if not sample.name.endswith(("_sum", "_count")):
                continue
            key = f"{sample.labels['extension_point']}/{sample.labels['plugin']}"
            slot = out.setdefault(key, [0.0, 0.0])
            slot[1 if sample.name.endswith("_count") else 0] += sample.value
    return {k: (round(v[0] / v[1] * 1e6, 2), int(v[1])) for k, v in out.items() if v[1]}


def scheduler_time(text: str) -> dict[str, Any]:
    """Where a run's scheduling time went, from the scheduler's /metrics: per pod, the
    algorithm (filter + score) and each extension point in µs (every cycle records these);
    per plugin call, the mean µs; attempts and batching results by result."""
    attempts = {k: int(v[0]) for k, v in metric_sums(text, ATTEMPTS_METRIC, "result").items()}
    tried = sum(attempts.values()) or 1
    points = metric_sums(text, POINT_METRIC, "extension_point")
    algorithm = metric_sums(text, ALGORITHM_METRIC, "")
    algorithm_s = sum(s for s, _ in algorithm.values())
    return {
        "attempts": attempts,
        "batch": {k: int(v[0]) for k, v in metric_sums(text, BATCH_METRIC, "result").items()},
        "algorithm_us": round(algorithm_s / tried * 1e6, 1),
        "extension_point_us": {
            p: round(points[p][0] / tried * 1e6, 1) for p in POINTS if p in points
        },
        "plugin_us_per_call": {k: v[0] for k, v in plugin_means(text).items()},
        "plugin_calls_kept": {k: v[1] for k, v in plugin_means(text).items()},
    }


# -- section: scheduler ------------------------------------------------------------------------


@dataclass(frozen=True)
class Shape:
    name: str
    namespace: str
    namespace_labels: Mapping[str, str]
    cpu_m: int = 100
    memory_mi: int = 128
    burst: bool = False  # limits = floor(1.05 x requests) for cpu and memory
    gpus: int = 0
    labels: Mapping[str, str] | None = None

    def base_pod(self) -> dict[str, Any]:
        requests_ = {"cpu": f"{self.cpu_m}m", "memory": f"{self.memory_mi}Mi"}
        limits = dict(requests_)
        if self.burst:
            limits = {
                "cpu": f"{math.floor(self.cpu_m * 1.05)}m",
                "memory": f"{math.floor(self.memory_mi * 1.05)}Mi",
            }
        if self.gpus:
            requests_[GPU] = limits[GPU] = str(self.gpus)
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "namespace": self.namespace,
                "labels": {"app": f"scale-{self.name}", **(self.labels or {})},
            },
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {
                        "name": "main",
                        "image": IMAGE,
                        "resources": {"requests": requests_, "limits": limits},
                    }
                ],
            },
        }


OPT_IN = {"kube-steer.github.io/enabled": "true"}
NS_NONE = {**OPT_IN}
NS_A = {"tenant": "dept-a", **OPT_IN}
NS_B = {"tenant": "dept-b", **OPT_IN}
SHAPES = (
    Shape("no-tenant", "scale-none", NS_NONE),
    Shape("a-burstable", "scale-a", NS_A, burst=True),
    Shape("b-guaranteed", "scale-b", NS_B),
    Shape("a-gpu", "scale-a", NS_A, burst=True, gpus=1),
    Shape(
        "a-chain",
        "scale-a",
        NS_A,
        labels={"order-chain": "x", "pod-template-hash": "6d4b8c7f9"},
    ),
)
VARIANTS = ("twin", "steered")


@dataclass(frozen=True)
class ShapePods:
    """A shape's two pods (names left out) and what the mutation did."""

    shape: Shape
    steered: dict[str, Any]
    twin: dict[str, Any]
    rules: tuple[str, ...]
    patch_ops: int

    def pod(self, variant: str) -> dict[str, Any]:
        return self.steered if variant == "steered" else self.twin


def shape_pods(plan: MutationPlan, shape: Shape) -> ShapePods:
    """The base pod mutated by the webhook's own code, and its unsteered twin: the base pod
    with the schedulerName the mutation ends with."""
    base = shape.base_pod()
    if not plan.opted_in(shape.namespace, shape.namespace_labels):
        raise RuntimeError(f"{shape.name}: namespace {shape.namespace} is not opted in")
    mutation = mutate_pod(plan, base, plan.tenant(shape.namespace_labels))
    steered = jsonpatch.apply_patch(base, list(mutation.ops))
    twin = copy.deepcopy(base)
    scheduler = steered["spec"].get("schedulerName")
    if scheduler:
        twin["spec"]["schedulerName"] = scheduler
    return ShapePods(shape, steered, twin, mutation.in_effect, len(mutation.ops))


def gpus_per_node(nodes: int, pods: int, gpu_every: int = 4) -> int:
    """8, or enough that the GPU pods of one run take at most half of all GPUs (some GPU
    nodes are hot, over dept-a's budget or unhealthy, so not every GPU is usable)."""
    gpu_nodes = max(1, math.ceil(nodes / gpu_every))
    return max(8, math.ceil(2 * pods / gpu_nodes))


class BindWatch:
    """Watches the pods of one run from a resourceVersion and notes when this process first
    received each of them bound (spec.nodeName set), on the monotonic clock."""

    def __init__(self, raw: RawApi, selector: str, resource_version: str) -> None:
        self.raw = raw
        self.selector = selector
        self.resource_version = resource_version
        self.bound: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: requests.Response | None = None
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)

    def _run(self) -> None:
        session = self.raw.new_session()
        # A short server-side timeout: the thread ends within that time of `__exit__`.
        params = {"watch": "1", "labelSelector": self.selector, "timeoutSeconds": "5"}
        try:
            while not self._stop.is_set():
                params["resourceVersion"] = self.resource_version
                try:
                    with session.get(
                        f"{self.raw.base}/api/v1/pods", params=params, stream=True, timeout=60
                    ) as resp:
                        self._response = resp
                        for line in resp.iter_lines(chunk_size=None):
                            if line:
                                self._event(orjson.loads(line), time.monotonic())
                            if self._stop.is_set():
                                return
                except (requests.RequestException, AttributeError, ValueError):
                    if not self._stop.is_set():
                        time.sleep(0.1)
        finally:
            session.close()

    def _event(self, event: Mapping[str, Any], now: float) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise ValueError(f"watch error: {obj.get('message')}")  # restart from the last RV
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        if event.get("type") in ("ADDED", "MODIFIED") and (obj.get("spec") or {}).get("nodeName"):
            with self._lock:
                self.bound.setdefault(obj["metadata"]["name"], now)

    def times(self) -> list[float]:
        with self._lock:
            return sorted(self.bound.values())

    def __enter__(self) -> BindWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            if self._response is not None:
                self._response.close()
        self._thread.join(timeout=15)


class SchedulerBench:
    def __init__(
        self, plane: ControlPlane, raw: RawApi, args: argparse.Namespace, workdir: Path
    ) -> None:
        self.plane = plane
        self.workdir = workdir
        self.raw = raw
        self.args = args
        self.run_index = 0
        # A run's pods are deleted while the next run's are created (the scheduler is stopped
        # then); the next run waits for the deletion before it starts the scheduler.
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delete")
        self._deleting: tuple[Future[float], dict[str, Any]] | None = None

    def settle_deletion(self) -> None:
        """Wait until the previous run's pods are gone; note how long deleting them took."""
        if self._deleting is not None:
            future, result = self._deleting
            self._deleting = None
            result["delete_s"] = round(future.result(), 1)

    def close(self) -> None:
        try:
            self.settle_deletion()
        finally:
            self._deleter.shutdown()

    def start_scheduler(self) -> None:
        self.plane.restart_scheduler(PROFILES, client_qps=SCHEDULER_QPS)

    def create_pods(self, pods: ShapePods, variant: str, run_id: str) -> float:
        body = pods.pod(variant)
        namespace = body["metadata"]["namespace"]
        path = f"/api/v1/namespaces/{namespace}/pods"

        def create(i: int) -> None:
            pod = copy.deepcopy(body)
            pod["metadata"]["name"] = f"{run_id}-{i:05d}"
            pod["metadata"]["labels"][RUN_LABEL] = run_id
            self.raw.request("POST", path, pod)

        t0 = time.monotonic()
        in_parallel(create, range(self.args.pods))
        return time.monotonic() - t0

    def wait_bound(self, watch: BindWatch, started: float) -> None:
        while True:
            times = watch.times()
            if len(times) >= self.args.pods:
                return
            last = times[-1] if times else started
            if time.monotonic() - last >= self.args.stall:
                return
            time.sleep(0.2)

    def pending_reasons(self, selector: str) -> dict[str, int]:
        reasons: Counter[str] = Counter()
        pods = self.raw.list("/api/v1/pods", labelSelector=selector, fieldSelector="spec.nodeName=")
        for pod in pods:
            conditions = (pod.get("status") or {}).get("conditions") or ()
            message = next(
                (
                    f"{c.get('reason')}: {c.get('message')}"
                    for c in conditions
                    if c.get("type") == "PodScheduled"
                ),
                "not tried (no PodScheduled condition)",
            )
            reasons[message[:400]] += 1
        return dict(reasons.most_common())

    def delete_pods(self, namespace: str, selector: str) -> float:
        t0 = time.monotonic()
        self.raw.request(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            params={"labelSelector": selector},
        )
        deadline = t0 + 300
        params = {"labelSelector": selector, "limit": "1"}
        while self.raw.request("GET", "/api/v1/pods", params=params).get("items"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"pods {selector} not deleted within 300 s")
            time.sleep(0.5)
        return time.monotonic() - t0

    def run(self, pods: ShapePods, variant: str, round_: int, nodes: int) -> dict[str, Any]:
        self.run_index += 1
        run_id = f"r{self.run_index:03d}-{variant[0]}"
        selector = f"{RUN_LABEL}={run_id}"
        namespace = pods.shape.namespace
        self.plane.stop_scheduler()
        load_before = round(os.getloadavg()[0], 2)
        create_s = self.create_pods(pods, variant, run_id)
        self.settle_deletion()
        version = self.raw.request("GET", "/api/v1/pods", params={"limit": "1"})["metadata"][
            "resourceVersion"
        ]
        with BindWatch(self.raw, selector, version) as watch:
            t0 = time.monotonic()
            self.start_scheduler()
            ready_s = time.monotonic() - t0
            self.wait_bound(watch, t0)
            times = watch.times()
        time.sleep(METRICS_FLUSH_S)
        text = self.plane.scheduler_metrics()
        (self.workdir / f"scheduler-metrics-{nodes}-{run_id}.txt").write_text(text)
        metrics = scheduler_time(text)
        self.plane.stop_scheduler()
        pending = self.pending_reasons(selector) if len(times) < self.args.pods else {}
        span = times[-1] - times[0] if len(times) > 1 else 0.0
        load = os.getloadavg()[0]
        result = {
            "nodes": nodes,
            "shape": pods.shape.name,
            "variant": variant,
            "round": round_,
            "run": self.run_index,
            "pods": self.args.pods,
            "bound": len(times),
            "pods_per_s": round((len(times) - 1) / span, 1) if span > 0 else 0.0,
            "first_to_last_s": round(span, 2),
            "start_to_first_bind_s": round(times[0] - t0, 2) if times else None,
            "scheduler_ready_s": round(ready_s, 2),
            "create_s": round(create_s, 1),
            "delete_s": None,  # set once the deletion, overlapping the next run, is done
            "load_1m_before": load_before,
            "load_1m_after": round(load, 2),
            "pending_reasons": pending,
            "scheduler": metrics,
        }
        log(
            f"  {nodes} nodes, round {round_}, {pods.shape.name} {variant}: "
            f"{result['bound']}/{self.args.pods} bound, {result['pods_per_s']} pods/s "
            f"(create {create_s:.1f} s, first bind +{result['start_to_first_bind_s']} s)"
        )
        for message, count in list(pending.items())[:3]:
            log(f"    pending {count} x {message[:200]}")
        self._deleting = (self._deleter.submit(self.delete_pods, namespace, selector), result)
        return result

    def run_all(
        self, pods: Mapping[str, ShapePods], shapes: Sequence[Shape], nodes: int
    ) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = []
        try:
            for round_, shape, variant in schedule(shapes, self.args.rounds):
                try:
                    runs.append(self.run(pods[shape.name], variant, round_, nodes))
                except Exception as exc:
                    log(f"  {shape.name} {variant} round {round_} FAILED: {exc!r}")
                    if not self.args.keep_going:
                        raise
                    failed = {"shape": shape.name, "variant": variant, "round": round_}
                    runs.append({"nodes": nodes, **failed, "error": repr(exc)})
        finally:
            self.close()
        return runs


def schedule(shapes: Sequence[Shape], rounds: int) -> list[tuple[int, Shape, str]]:
    """(round, shape, variant) in run order: adjacent twin/steered pairs, the pair order
    alternating by round, the shape order reversed every other round."""
    order = []
    for r in range(1, rounds + 1):
        ordered = list(shapes) if r % 2 else list(reversed(shapes))
        variants = VARIANTS if r % 2 else tuple(reversed(VARIANTS))
        for shape in ordered:
            order += [(r, shape, v) for v in variants]
    return order


def measure_size(
    nodes: int, shapes: Sequence[Shape], args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": nodes}
    t_size = time.monotonic()
    gpus = gpus_per_node(nodes, args.pods)
    fleet = fake_nodes(nodes, gpus)
    out["gpus_per_gpu_node"] = gpus
    out["gpu_nodes"] = sum(1 for n in fleet if n.gpus)
    log(f"{nodes} nodes: control plane")
    with bench_plane(workdir / f"plane-{nodes}") as (plane, raw):
        for shape in shapes:
            plane.ensure_namespace(shape.namespace, shape.namespace_labels)
        t0 = time.monotonic()
        create_nodes(raw, fleet)
        out["create_nodes_s"] = round(time.monotonic() - t0, 1)
        log(f"{nodes} nodes created in {out['create_nodes_s']} s ({gpus} GPUs on every 4th)")
        scorer_policy = parse_policy(bench_policy_text())
        t0 = time.monotonic()
        out["scorer_cycles"] = score_nodes(plane, scorer_policy, scorer_readings(fleet, args.seed))
        out["score_nodes_s"] = round(time.monotonic() - t0, 1)
        out["node_summary"] = node_summary(scorer_policy, raw.list("/api/v1/nodes"))
        log(f"scorer: 2 cycles in {out['score_nodes_s']} s; nodes carry {out['node_summary']}")
        plan = MutationPlan.from_policy(parse_policy(EXAMPLE_POLICY.read_text()))
        pods = {s.name: shape_pods(plan, s) for s in shapes}
        out["pods"] = {
            name: {"rules": list(p.rules), "patch_ops": p.patch_ops, "steered": p.steered}
            for name, p in pods.items()
        }
        out["runs"] = SchedulerBench(plane, raw, args, workdir).run_all(pods, shapes, nodes)
    out["runtime_s"] = round(time.monotonic() - t_size, 1)
    log(f"{nodes} nodes done in {out['runtime_s'] / 60:.1f} min")
    return out


# -- reporting ---------------------------------------------------------------------------------


def trio(values: Sequence[float], fmt: str = "{:.2f}") -> str:
    if not values:
        return "-"
    if len(values) == 1:
        return fmt.format(values[0])
    return " / ".join(fmt.format(v) for v in (min(values), statistics.median(values), max(values)))


def shape_summary(size: Mapping[str, Any], shape: str) -> dict[str, Any]:
    runs = [r for r in size["runs"] if r["shape"] == shape and "error" not in r]
    by_round: dict[int, dict[str, dict[str, Any]]] = {}
    for r in runs:
        by_round.setdefault(r["round"], {})[r["variant"]] = r
    ratios = [
        pair["steered"]["pods_per_s"] / pair["twin"]["pods_per_s"]
        for pair in by_round.values()
        if "steered" in pair and "twin" in pair and pair["twin"]["pods_per_s"] > 0
    ]
    return {
        "steered_pods_per_s": [r["pods_per_s"] for r in runs if r["variant"] == "steered"],
        "twin_pods_per_s": [r["pods_per_s"] for r in runs if r["variant"] == "twin"],
        "ratios": [round(x, 3) for x in ratios],
        "ratio_min": round(min(ratios), 3) if ratios else None,
        "ratio_median": round(statistics.median(ratios), 3) if ratios else None,
        "unbound": sum(r["pods"] - r["bound"] for r in runs),
    }


def throughput_table(size: Mapping[str, Any], shapes: Sequence[Shape], goal: float) -> str:
    lines = [
        f"Scheduling throughput at {size['nodes']} nodes, pods/s (min / median / max over "
        "rounds); ratio = steered / twin of the same round.",
        "",
        "| shape | scheduler | injected | twin pods/s | steered pods/s | ratio | "
        f"≥ {goal}x | algorithm µs/pod | unbound |",
        "|---|---|---|---:|---:|---:|:-:|---:|---:|",
    ]
    runs = [r for r in size["runs"] if "scheduler" in r]
    for shape in shapes:
        s = shape_summary(size, shape.name)
        pod = size["pods"][shape.name]
        resources = pod["steered"]["spec"]["containers"][0]["resources"]["requests"]
        extended = sum(1 for k in resources if "/" in k and k != GPU)
        affinity = pod["steered"]["spec"].get("affinity") or {}
        preferred = len(
            (affinity.get("nodeAffinity") or {}).get(
                "preferredDuringSchedulingIgnoredDuringExecution"
            )
            or ()
        )
        required = (affinity.get("nodeAffinity") or {}).get(
            "requiredDuringSchedulingIgnoredDuringExecution"
        )
        terms = len(required["nodeSelectorTerms"]) if required else 0
        anti = len(
            (affinity.get("podAntiAffinity") or {}).get(
                "requiredDuringSchedulingIgnoredDuringExecution"
            )
            or ()
        )
        spread = len(pod["steered"]["spec"].get("topologySpreadConstraints") or ())
        tolerations = len(pod["steered"]["spec"].get("tolerations") or ())
        injected = f"{preferred} pref, {terms} req terms, {extended} resources"
        if anti:
            injected += f", {anti} anti-aff"
        if spread:
            injected += f", {spread} spread"
        if tolerations:
            injected += f", {tolerations} tol"
        median = s["ratio_median"]
        verdict = "-" if median is None else ("yes" if median >= goal else "**no**")
        lines.append(
            f"| {shape.name} | {pod['steered']['spec'].get('schedulerName', 'default')} | "
            f"{injected} | {trio(s['twin_pods_per_s'], '{:.0f}')} | "
            f"{trio(s['steered_pods_per_s'], '{:.0f}')} | {trio(s['ratios'])} | {verdict} | "
            f"{pair_cells(runs, [shape], metric('algorithm_us'))[0]} | {s['unbound']} |"
        )
    return "\n".join(lines)


def metric(part: str, key: str | None = None) -> Callable[[Mapping[str, Any]], Any]:
    """A getter of one value of a run's scheduler metrics: `part`, or `part[key]` (or None)."""
    if key is None:
        return lambda m: m[part]
    return lambda m: m[part].get(key)


def median_of(runs: Sequence[Mapping[str, Any]], get: Callable[[Any], Any]) -> float | None:
    values = [get(r["scheduler"]) for r in runs if "scheduler" in r]
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


def pair_cells(
    runs: Sequence[Mapping[str, Any]],
    shapes: Sequence[Shape],
    get: Callable[[Any], Any],
    fmt: str = "{:.0f}",
) -> list[str]:
    """Per shape, "twin → steered" of the median of `get(run metrics)` over rounds."""
    cells = []
    for shape in shapes:
        pair = []
        for variant in VARIANTS:
            chosen = [r for r in runs if r["shape"] == shape.name and r["variant"] == variant]
            value = median_of(chosen, get)
            pair.append("·" if value is None else fmt.format(value))
        cells.append(" → ".join(pair))
    return cells


def point_table(size: Mapping[str, Any], shapes: Sequence[Shape]) -> str:
    runs = [r for r in size["runs"] if "scheduler" in r]
    lines = [
        f"Where the time goes at {size['nodes']} nodes: µs per pod, twin → steered (median over "
        "rounds). The algorithm is filter + score; extension points are wall time, every "
        "cycle; Bind waits on the apiserver, asynchronously.",
        "",
        "| µs per pod | " + " | ".join(s.name for s in shapes) + " |",
        "|---|" + "---:|" * len(shapes),
        "| **algorithm** | " + " | ".join(pair_cells(runs, shapes, metric("algorithm_us"))) + " |",
    ]
    for point in POINTS:
        if not any(point in r["scheduler"]["extension_point_us"] for r in runs):
            continue
        cells = pair_cells(runs, shapes, metric("extension_point_us", point))
        label = point if point in CPU_POINTS else f"{point} (async)"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


MIN_PLUGIN_CALLS = 20  # fewer kept calls: the mean is one descheduled goroutine or two


def plugin_mean(key: str) -> Callable[[Mapping[str, Any]], Any]:
    """A getter of a plugin's mean µs per call in a run's metrics, None on too few calls."""

    def get(m: Mapping[str, Any]) -> Any:
        if m["plugin_calls_kept"].get(key, 0) < MIN_PLUGIN_CALLS:
            return None
        return m["plugin_us_per_call"].get(key)

    return get


def plugin_table(size: Mapping[str, Any], shapes: Sequence[Shape], top: int) -> str:
    """The `top` plugins by time kept over all runs (scheduling points only), mean µs per
    call: per node for Filter and Score, per pod elsewhere."""
    runs = [r for r in size["runs"] if "scheduler" in r]
    kept: Counter[str] = Counter()
    for r in runs:
        means = r["scheduler"]["plugin_us_per_call"]
        for key, calls in r["scheduler"]["plugin_calls_kept"].items():
            if key.split("/")[0] in CPU_POINTS:
                kept[key] += means[key] * calls
    lines = [
        f"Plugins at {size['nodes']} nodes: mean µs per call (Filter, Score: per node "
        "evaluated), twin → steered; sampled cycles only, top by time recorded; · where fewer "
        f"than {MIN_PLUGIN_CALLS} calls were kept.",
        "",
        "| µs per call | " + " | ".join(s.name for s in shapes) + " |",
        "|---|" + "---:|" * len(shapes),
    ]
    for key, _ in kept.most_common(top):
        cells = pair_cells(runs, shapes, plugin_mean(key), "{:.1f}")
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def pending_report(size: Mapping[str, Any]) -> list[str]:
    lines = []
    for r in size["runs"]:
        for message, count in (r.get("pending_reasons") or {}).items():
            lines.append(
                f"- {size['nodes']} nodes, {r['shape']} {r['variant']} round {r['round']}: "
                f"{count} x {message[:300]}"
            )
    return lines


def print_report(doc: Mapping[str, Any], goal: float, top_plugins: int) -> None:
    """The markdown scoreboard of a results document (a run just made, or --report FILE)."""
    known = {s.name: s for s in SHAPES}
    shapes = [known.get(n) or Shape(n, "?", {}) for n in doc["shapes"]]
    args = doc["args"]
    print(
        f"Source {doc['source']}; kube-scheduler v1.36.2 with manifests/scheduler/"
        f"profiles.yaml, client qps/burst {doc['scheduler_qps']}; {args['pods']} pods per run, "
        f"{args['rounds']} round(s); twin = the base pod unmutated but with the mutated pod's "
        f"schedulerName (profile differences not counted). Scorer readings: "
        f"{doc['scorer_readings']}."
    )
    print()
    for size in doc["sizes"]:
        print(
            f"{size['nodes']} nodes ({size['gpu_nodes']} with {size['gpus_per_gpu_node']} GPUs), "
            f"setup: nodes {size['create_nodes_s']} s, scorer {size['score_nodes_s']} s; "
            f"scorer wrote: {size['node_summary']}; size runtime {size['runtime_s'] / 60:.1f} min."
        )
        print()
        print(throughput_table(size, shapes, goal))
        print()
        print(point_table(size, shapes))
        print()
        print(plugin_table(size, shapes, top_plugins))
        print()
        pending = pending_report(size)
        if pending:
            print("Pods left Pending (scheduler message):")
            print("\n".join(pending))
            print()
    print(f"Total runtime {doc['runtime_s'] / 60:.1f} min.")


def run_scheduler(args: argparse.Namespace) -> int:
    if args.report:
        print_report(json.loads(args.report.read_text()), args.goal, args.top_plugins)
        return 0
    if args.quick:
        args.nodes, args.pods, args.rounds = "200", 300, 1
        args.stall = min(args.stall, 10.0)
    sizes = [int(n) for n in str(args.nodes).split(",") if n.strip()]
    wanted = [s.strip() for s in args.shapes.split(",") if s.strip()] if args.shapes else None
    known = {s.name: s for s in SHAPES}
    if wanted is not None:
        unknown = sorted(set(wanted) - set(known))
        if unknown or not wanted:
            raise SystemExit(f"--shapes: unknown {unknown}; choose from {', '.join(known)}")
    shapes = [known[n] for n in wanted] if wanted else list(SHAPES)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    source = source_version()  # now: others may commit while it runs
    out_file = args.json or RESULTS / f"scale-{stamp}.json"
    began = time.monotonic()
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = args.workdir
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="steer-scale-")))
        for nodes in sizes:
            results.append(measure_size(nodes, shapes, args, workdir))
    elapsed = time.monotonic() - began
    doc = {
        "section": "scheduler",
        "started": stamp,
        "source": source,
        "runtime_s": round(elapsed, 1),
        "args": {
            k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "func"
        },
        "scheduler_qps": SCHEDULER_QPS,
        "apiserver_args": list(APISERVER_ARGS),
        "scorer_readings": SCORER_READINGS,
        "shapes": [s.name for s in shapes],
        "summary": {
            str(size["nodes"]): {s.name: shape_summary(size, s.name) for s in shapes}
            for size in results
        },
        "sizes": results,
    }
    out_file.parent.mkdir(parents=True, exist_ok=True)
    out_file.write_text(json.dumps(doc, indent=1, default=str))
    print_report(doc, args.goal, args.top_plugins)
    log(f"results written to {out_file}")
    failed = any("error" in r for size in results for r in size["runs"])
    return 1 if failed else 0


# -- main --------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sections = parser.add_subparsers(dest="section", required=True)
    sched = sections.add_parser(
        "scheduler",
        help="scheduling throughput per steered pod shape vs the same pod unsteered",
        description="See the module docstring (bench/scale.py --help).",
    )
    sched.add_argument(
        "--nodes", default="1000,5000", help="comma-separated node counts (default 1000,5000)"
    )
    sched.add_argument("--pods", type=int, default=3000, help="pods per run (default 3000)")
    sched.add_argument("--rounds", type=int, default=3, help="rounds of every pair (default 3)")
    sched.add_argument(
        "--shapes", help=f"comma-separated, from {','.join(s.name for s in SHAPES)} (default all)"
    )
    sched.add_argument("--quick", action="store_true", help="200 nodes, 300 pods, 1 round")
    sched.add_argument(
        "--stall", type=float, default=15.0, help="a run ends after this many s without a bind"
    )
    sched.add_argument("--seed", type=int, default=1, help="scorer readings seed (default 1)")
    sched.add_argument("--goal", type=float, default=0.8, help="ratio goal (default 0.8)")
    sched.add_argument("--top-plugins", type=int, default=12, help="plugin rows (default 12)")
    sched.add_argument("--keep-going", action="store_true", help="log a failed run and go on")
    sched.add_argument(
        "--report", type=Path, metavar="JSON", help="print the tables of a results file, no run"
    )
    sched.add_argument(
        "--json", type=Path, help="results file (default bench/results/scale-<ts>.json)"
    )
    sched.add_argument("--workdir", type=Path, help="keep logs here (default: a temporary folder)")
    sched.set_defaults(func=run_scheduler)

    # The other two sections live in their own modules (bench/ is on sys.path as the script's
    # folder); imported here so `scale.py scheduler` needs neither.
    import scale_scorer
    import webhook_bench

    scorer = sections.add_parser(
        "scorer",
        help="the scorer service at 5,000 nodes and 100,000 bound pods (bench/scale_scorer.py)",
        description=scale_scorer.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    scale_scorer.add_arguments(scorer)
    scorer.set_defaults(func=scale_scorer.run)
    sections.add_parser(
        "webhook",
        help="webhook latency at fixed rates and throughput against a bare app on the same "
        "stack (bench/webhook_bench.py: its flags follow)",
        add_help=False,
    )
    words = list(sys.argv[1:] if argv is None else argv)
    if words[:1] == ["webhook"]:
        result_code: int = webhook_bench.main(words[1:])
        return result_code
    args = parser.parse_args(words)
    result: int = args.func(args)
    return result


if __name__ == "__main__":
    sys.exit(main())
