"""Scale benchmarks on a real kube-apiserver and kube-scheduler v1.36.2 with fake nodes.

    .venv/bin/python bench/scale.py scheduler --nodes 1000,5000 --pods 3000 --rounds 3  # 45 min
    .venv/bin/python bench/scale.py scheduler --quick     # 200 nodes, 300 pods, 1 round: smoke
    .venv/bin/python bench/scale.py scheduler --nodes 1000 --shapes b-guaranteed,a-gpu
    .venv/bin/python bench/scale.py scheduler --nodes 5000 --variants realistic --steer-percentage 5
    .venv/bin/python bench/scale.py scheduler --report bench/results/scale-<ts>.json
    .venv/bin/python bench/scale.py scorer --nodes 5000 --pods 100000   # bench/scale_scorer.py, 20 min
    .venv/bin/python bench/scale.py webhook                              # bench/webhook_bench.py, 5 min

With the bare pair alone (--variants bare) the full run took 17 min at 1,000 nodes and 30 min
at 5,000 on the 2-core machine with other work running (the slow steered shapes dominate:
40 pods/s is 75 s a run); both pairs (the default) take about twice that. --pods 2000,
--rounds 2 or --variants realistic shortens it.

Not a test: it asserts nothing, it measures, and it reports what it measures (as
bench/placement.py). The scoreboard is printed as markdown on stdout, progress goes to stderr,
and everything (every run, the scheduler's metrics per run, the messages of pods left Pending)
is written to bench/results/scale-<UTC timestamp>.json (or --json PATH). One subcommand per
section; what the sections share (raw API client, fake nodes, the real scorer on recorded
readings, results files) is in bench/benchkit/.

Section `scheduler`: scheduling throughput per steered pod shape
-----------------------------------------------------------------
What does steering cost the stock scheduler? Goal: every steered shape binds at >= 0.8x the
rate of its realistic twin at 5,000 nodes: the same pod as users create it, unsteered, for
default-scheduler (the realistic table). The bare table is the other baseline: what the
mutation alone adds to a minimal pod, on the same profile.

Cluster, built afresh for each --nodes size: etcd, kube-apiserver (--max-requests-inflight
3000, --max-mutating-requests-inflight 1000, --delete-collection-workers 8) and kube-scheduler
with manifests/scheduler/profiles.yaml (or --profiles PATH; its steer profiles score 5 % of the
nodes, `percentageOfNodesToScore: 5`, unless --steer-percentage says otherwise) and clientConnection qps = burst = 5000, so neither the
apiserver's inflight limits nor the scheduler's client rate limit cap the bindings. No webhook
runs: the pods are mutated here. No kube-controller-manager runs either: the Deployments and
ReplicaSets the bench creates are never acted on.

- **N fake nodes** (one POST each, status included: Ready, capacity = allocatable): 64 cores,
  256 GiB, 110 pods, zones a/b/c round robin, `kubernetes.io/hostname`. Every 4th node has
  `nvidia.com/gpu`: 8, or more when --pods GPU pods would need more than half of them (the
  header says how many).
- **What the product's scorer writes**, written by the real scorer: `scorer.cycle.service.Scorer`
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

**Variants**: four pods per shape, run as two pairs (--variants all, bare or realistic).

- Bare pair, `twin` and `steered`. The steered pod is the base pod mutated. The **unsteered
  twin** is the base pod without the mutation but with the schedulerName the mutated pod ends
  up with (steer-spread or steer-binpack): a difference between profiles (NodeAffinity weight
  50, MostAllocated scoring) is not counted, only what the mutation adds to the pod. a-chain's
  bare pods are selected by a Service, so its twin gets the scheduler's default topology
  spreading, as the same pod unsteered would in a cluster. Ratio: steered / twin.
- Realistic pair, `realistic-twin` and `realistic-steered` (bench/benchkit/realistic.py). A
  **realistic pod** is the shape's base pod (same requests, namespace and shape labels, grace
  period 0) as a Deployment makes it, 5-8 KiB of JSON (checked where it is built): a Helm
  chart's labels (app, app.kubernetes.io/name/instance/version/..., pod-template-hash) and
  annotations (Prometheus scrape, checksum/config), env and envFrom, volumes (configMap,
  secret, emptyDir, a projected service-account token) and their mounts, liveness, readiness
  and startup probes, securityContext, a log-shipper sidecar with requests of its own by the
  shape's limits rule; no imagePullSecrets. Each shape gets a Deployment and a ReplicaSet
  (replicas 0) whose pods these are (ownerReferences, controller: true, to the ReplicaSet) and
  a Service selecting them, so the scheduler's default topology spreading applies to them as
  to a Deployment's pods (upstream pkg/scheduler/framework/plugins/helper/spread.go
  DefaultSelector: the Services' selectors and the controller ReplicaSet's). a-chain's
  realistic pods keep `order-chain: x` and its pod-template-hash, so its order-chain Service
  selects them too. The **realistic twin** is that pod exactly as the user created it: no
  mutation and no schedulerName, so default-scheduler schedules it, as it would an unsteered
  pod; the profile difference is counted here. The realistic steered pod is it mutated by
  mutate_pod as the bare one is. Ratio: realistic-steered / realistic-twin, the goal's.

**--steer-percentage N** writes a copy of the profiles file into the workdir with
`percentageOfNodesToScore: N` on every profile whose schedulerName starts with `steer-` (not
default-scheduler) and starts the scheduler with it: KubeSchedulerProfile's own
percentageOfNodesToScore overrides the global one (kubescheduler.config.k8s.io/v1,
staging/src/k8s.io/kube-scheduler/config/v1/types.go). The scheduler stops filtering once it
has found that share of the nodes feasible, then scores only those (numFeasibleNodesToFind in
pkg/scheduler/schedule_one.go): at least 100 nodes; by default 50 - nodes/125 percent, at
least 5 (10 % = 500 nodes at 5,000). So at --quick's 200 nodes any N up to 50 still looks
for 100 nodes, as the default does: the lever shows at 1,000 nodes and more. It moves the bare
twin with its steered pod (same profile) and leaves the realistic twin alone. The results and
the header give the file, N, every profile's value and the feasible nodes looked for.

**Options** (--options, or by name in --shapes, e.g. `no-tenant:one-term`): pods that change
one thing of a shape's steered pods, bare and realistic (fewer or merged preferred terms, no
pool, no terms, soft or no spread; bench/benchkit/shapes.py OPTIONS), each run against the
shape's own twins: what each part of the mechanism costs, and what an alternative would buy.
Not what the webhook does. One option changes the twins instead: `a-chain:own-spread` gives
both twins the chain's spread constraints as their user's own (the pod a user who wrote them
creates; the webhook makes the same steered pod of it), so its ratio is what the rest of
steering costs a chain whose spreading the user asked for.

Method, one run = one shape and one variant: the scheduler is stopped; --pods pods are
created (parallel POSTs) while the previous run's pods are being deleted (grace 0), and that
deletion is awaited; a watch on the run's pods starts from the current resourceVersion; the
scheduler is started; the run ends when every pod is bound, or when none was bound for
--stall s. Throughput = (bound - 1) / (last bind - first bind), from the times this process
received the watch events. Then the scheduler's /metrics are read (it was started for this
run, so they cover this run alone), the scheduler is stopped, and the messages of pods left
Pending are kept. The 1-minute load average before and after each run is in the JSON: other
work on the machine shows there. So is the CPU time kube-scheduler, kube-apiserver and etcd
spent per bound pod from the scheduler's readiness to the last bind (/proc): a process waiting
for a core uses none, so the twin/steered ratio of scheduler CPU moves less with other work
than pods/s. --cpu-profile S saves the scheduler's own CPU profile of every run in --workdir.

**Placement quality** (bench/benchkit/placement_quality.py; `placement` of each run, the
Placement quality table): what a faster setting such as --steer-percentage may cost. The watch
keeps the node of each bound pod; the nodes are listed once per size after the scorer ran (its
labels do not change during the bench). Every run, twins included for reference, is judged by
its shape's steered pod: its score label (`score`, or `score-class-gpu` for a-gpu) and all its
preferred terms. Per run: the share of bound pods on a node of the best label bucket among the
nodes eligible for the run's pod, of the best two buckets (best - 10 and up), and on a node
the preferred terms score most (the label plus "not reserved for GPU pods"); the mean label
value of the bound nodes against that of the eligible nodes; and a ceiling per share, the room
those nodes have for the pod over the pods bound (a-gpu's few best GPU nodes fill up).
Eligible is approximate: allocatable covers the pod's requests (GPUs, the policy's pools and
gates) and the pod tolerates the node's NoSchedule taints (`unhealthy`); the run's own use of
the nodes, a-chain's hard zone spread and the scheduler's other scores are not counted.

Order: per round, each shape runs its pairs one after the other, each a pair of adjacent
runs (twin, steered, realistic-twin, realistic-steered); every other round that order and the
shape order are reversed, so the order within a pair alternates by round and slow drift (etcd
growth, a neighbour's load) falls on both halves of a pair. A shape's ratio in a round is
steered/twin of its pair; the tables give min / median / max over rounds. Noise on a 2-core
machine shared with other work is large (+-25 % between identical runs happened): that is why
pairs are adjacent and several rounds run. Each run records the size of its first pod as
POSTed and as stored (defaults, the ServiceAccount admission's token volume, managedFields);
the JSON summary gives each shape's ratios per pair (`summary[nodes][shape][bare|realistic]`).

Where the time goes, from the scheduler's /metrics (median over rounds, twin → steered, one
table per pair):
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
import os
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit.api import Api  # noqa: E402
from bench.benchkit.bind_watch import BindWatch  # noqa: E402
from bench.benchkit.nodes import bare_nodes, create_nodes  # noqa: E402
from bench.benchkit.placement_quality import (  # noqa: E402
    PlacementJudge,
    Yardstick,
    fleet_snapshot,
    yardstick,
)
from bench.benchkit.procstat import read_proc  # noqa: E402
from bench.benchkit.progress import in_parallel, log  # noqa: E402
from bench.benchkit.provenance import source_version  # noqa: E402
from bench.benchkit.realistic import (  # noqa: E402
    UNCREATED_UID,
    deployment,
    pod_bytes,
    replica_set,
    service,
)
from bench.benchkit.recorded_scorer import (  # noqa: E402
    SCORER_READINGS,
    bench_policy_text,
    node_summary,
    score_nodes,
    scorer_readings,
)
from bench.benchkit.results import (  # noqa: E402
    recorded_args,
    results_file,
    run_workdir,
    utc_stamp,
    write_results,
)
from bench.benchkit.scheduler_metrics import METRICS_FLUSH_S, scheduler_time  # noqa: E402
from bench.benchkit.scheduler_profiles import (  # noqa: E402
    nodes_to_find_by_profile,
    profile_percentages,
    write_profiles,
)
from bench.benchkit.scheduler_report import pairs_run, print_report, shape_summary  # noqa: E402
from bench.benchkit.shapes import (  # noqa: E402
    OPTIONS,
    PAIRS,
    REALISTIC,
    SHAPE_BY_NAME,
    SHAPES,
    Pair,
    Shape,
    ShapePods,
    base_shape,
    gpus_per_node,
    shape_pods,
)
from kits.control_plane import ControlPlane  # noqa: E402
from steer.core.mutation import MutationPlan  # noqa: E402
from steer.core.policy import parse_policy  # noqa: E402

PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
RUN_LABEL = "bench.kube-steer.github.io/run"
APISERVER_ARGS = (
    "--max-requests-inflight=3000",
    "--max-mutating-requests-inflight=1000",
    "--delete-collection-workers=8",  # default 1: deleting 3,000 pods took 12 s
)
SCHEDULER_QPS = 5000
WORKERS = 16  # parallel requests when creating nodes and pods


@contextlib.contextmanager
def bench_plane(workdir: Path) -> Iterator[tuple[ControlPlane, Api]]:
    """etcd + kube-apiserver with raised inflight limits, no scheduler yet, and a raw client."""
    plane = ControlPlane.start(workdir, scheduler=False, apiserver_args=list(APISERVER_ARGS))
    raw = Api(plane, pool=2 * WORKERS)
    try:
        yield plane, raw
    finally:
        raw.close()
        plane.stop()


# Short codes of the variants in run ids (and so in pod names).
RUN_CODES = {"twin": "t", "steered": "s", "realistic-twin": "rt", "realistic-steered": "rs"}


class SchedulerBench:
    def __init__(
        self,
        plane: ControlPlane,
        raw: Api,
        args: argparse.Namespace,
        workdir: Path,
        profiles: Path,
        judge: PlacementJudge,
        yardsticks: Mapping[str, Yardstick | None],
    ) -> None:
        self.plane = plane
        self.workdir = workdir
        self.profiles = profiles  # the KubeSchedulerConfiguration the scheduler starts with
        self.raw = raw
        self.args = args
        self.judge = judge  # placement quality, against the nodes as the scorer left them
        self.yardsticks = yardsticks  # per shape, what its runs' placements are judged by
        self.run_index = 0
        # A run's pods are deleted while the next run's are created (the scheduler is stopped
        # then); the next run waits for the deletion before it starts the scheduler.
        self._deleter = ThreadPoolExecutor(max_workers=1, thread_name_prefix="delete")
        self._deleting: tuple[Future[float], dict[str, Any]] | None = None
        self._profiling: threading.Thread | None = None  # --cpu-profile of the current run

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

    def start_scheduler(self, profile_to: Path | None = None) -> None:
        self.plane.restart_scheduler(self.profiles, client_qps=SCHEDULER_QPS)
        if profile_to is not None and self.args.cpu_profile:
            seconds = self.args.cpu_profile
            self._profiling = threading.Thread(
                target=self.save_cpu_profile, args=(profile_to, seconds), daemon=True
            )
            self._profiling.start()

    def save_cpu_profile(self, path: Path, seconds: int) -> None:
        """The scheduler's own CPU profile over `seconds`, from one second after it is ready."""
        time.sleep(1.0)
        try:
            path.write_bytes(self.plane.scheduler_cpu_profile(seconds))
        except (requests.RequestException, OSError) as exc:
            log(f"  CPU profile {path.name} not saved: {exc!r}")

    def create_pods(
        self, pods: ShapePods, variant: str, run_id: str
    ) -> tuple[float, dict[str, int]]:
        """Create the run's pods; how long it took, and the size of the first pod as POSTed and
        as stored (the apiserver's defaults, admission's token volume, managedFields)."""
        body = pods.pod(variant)
        namespace = body["metadata"]["namespace"]
        path = f"/api/v1/namespaces/{namespace}/pods"
        sizes: dict[str, int] = {}

        def create(i: int) -> None:
            pod = copy.deepcopy(body)
            pod["metadata"]["name"] = f"{run_id}-{i:05d}"
            pod["metadata"]["labels"][RUN_LABEL] = run_id
            stored = self.raw.json("POST", path, pod)
            if i == 0:
                sizes.update(posted=pod_bytes(pod), stored=pod_bytes(stored))

        t0 = time.monotonic()
        in_parallel(create, range(self.args.pods), WORKERS)
        return time.monotonic() - t0, sizes

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
        pods = self.raw.pages(
            "/api/v1/pods",
            {"labelSelector": selector, "fieldSelector": "spec.nodeName="},
            limit=2000,
        )[0]
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
        self.raw.json(
            "DELETE",
            f"/api/v1/namespaces/{namespace}/pods",
            {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            params={"labelSelector": selector},
        )
        deadline = t0 + 300
        params = {"labelSelector": selector, "limit": "1"}
        while self.raw.json("GET", "/api/v1/pods", params=params).get("items"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"pods {selector} not deleted within 300 s")
            time.sleep(0.5)
        return time.monotonic() - t0

    def run(self, pods: ShapePods, variant: str, round_: int, nodes: int) -> dict[str, Any]:
        self.run_index += 1
        run_id = f"r{self.run_index:03d}-{RUN_CODES[variant]}"
        selector = f"{RUN_LABEL}={run_id}"
        namespace = pods.shape.namespace
        self.plane.stop_scheduler()
        load_before = round(os.getloadavg()[0], 2)
        create_s, sizes = self.create_pods(pods, variant, run_id)
        self.settle_deletion()
        version = self.raw.json("GET", "/api/v1/pods", params={"limit": "1"})["metadata"][
            "resourceVersion"
        ]
        with BindWatch(self.raw, selector, version) as watch:
            t0 = time.monotonic()
            self.start_scheduler(
                self.workdir / f"scheduler-cpu-{nodes}-{run_id}-{pods.shape.name}.pb.gz"
            )
            ready_s = time.monotonic() - t0
            cpu_ready = cpu_seconds(self.plane)
            self.wait_bound(watch, t0)
            times = watch.times()
            bound_to = watch.nodes()
            cpu_end = cpu_seconds(self.plane)
        if self._profiling is not None:  # the profile ends before the scheduler does
            self._profiling.join(timeout=self.args.cpu_profile + 30)
            self._profiling = None
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
            "pod_bytes": sizes.get("posted"),
            "stored_pod_bytes": sizes.get("stored"),
            "delete_s": None,  # set once the deletion, overlapping the next run, is done
            "load_1m_before": load_before,
            "load_1m_after": round(load, 2),
            "pending_reasons": pending,
            # CPU per bound pod from the scheduler's readiness to the last bind: less moved by
            # other work on the machine than pods/s (a process waiting for a core uses none).
            "cpu_ms_per_pod": {
                name: round((cpu_end[name] - cpu_ready[name]) * 1000 / max(len(times), 1), 3)
                for name in cpu_end
                if name in cpu_ready
            },
            "scheduler": metrics,
            "placement": self.placement(pods, variant, bound_to),
        }
        quality = result["placement"]
        judged = (
            f"; best bucket {quality['best_share']:.0%} (ceiling {quality['best_ceiling']:.0%})"
            if quality and "error" not in quality
            else ""
        )
        log(
            f"  {nodes} nodes, round {round_}, {pods.shape.name} {variant}: "
            f"{result['bound']}/{self.args.pods} bound, {result['pods_per_s']} pods/s "
            f"(create {create_s:.1f} s, first bind +{result['start_to_first_bind_s']} s){judged}"
        )
        for message, count in list(pending.items())[:3]:
            log(f"    pending {count} x {message[:200]}")
        self._deleting = (self._deleter.submit(self.delete_pods, namespace, selector), result)
        return result

    def placement(
        self, pods: ShapePods, variant: str, bound_to: Sequence[str]
    ) -> dict[str, Any] | None:
        """The run's placement quality by its shape's yardstick (bench/benchkit/
        placement_quality.py); None when the shape's steered pod prefers no score label or
        nothing was bound."""
        stick = self.yardsticks.get(pods.shape.name)
        if stick is None:
            return None
        try:
            quality = self.judge.judge(stick, pods.pod(variant), bound_to)
        except (ValueError, KeyError, TypeError) as exc:  # a side measure: keep the run
            log(f"  placement quality not measured: {exc!r}")
            return {"error": repr(exc)}
        return None if quality is None else quality.to_json()

    def run_all(
        self, pods: Mapping[str, ShapePods], shapes: Sequence[Shape], nodes: int
    ) -> list[dict[str, Any]]:
        runs: list[dict[str, Any]] = []
        try:
            pairs = chosen_pairs(self.args.variants)
            for round_, shape, variant in schedule(shapes, self.args.rounds, pairs):
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


CPU_COMPONENTS = ("kube-scheduler", "kube-apiserver", "etcd")


def cpu_seconds(plane: ControlPlane) -> dict[str, float]:
    """CPU time (user + system) each control-plane process has used so far."""
    out = {}
    for name in CPU_COMPONENTS:
        component = plane.components.get(name)
        if component is None or component.process is None:
            continue
        with contextlib.suppress(OSError):
            out[name] = read_proc(component.process.pid).cpu_s
    return out


def schedule(
    shapes: Sequence[Shape], rounds: int, pairs: Sequence[Pair] = PAIRS
) -> list[tuple[int, Shape, str]]:
    """(round, shape, variant) in run order: per shape, each pair's twin and steered runs
    adjacent; every other round the shape order and each shape's run order are reversed (so
    the order within each pair alternates, and pairs stay adjacent)."""
    in_order = tuple(v for pair in pairs for v in pair.variants)
    order = []
    for r in range(1, rounds + 1):
        ordered = list(shapes) if r % 2 else list(reversed(shapes))
        variants = in_order if r % 2 else tuple(reversed(in_order))
        for shape in ordered:
            order += [(r, shape, v) for v in variants]
    return order


def ensure_service(raw: Api, namespace: str, selector: Mapping[str, str]) -> None:
    """A Service selecting a shape's bare pods, as a ReplicaSet selects a Deployment's: the
    scheduler's default topology spreading then applies to the unsteered twin."""
    name = "scale-" + "-".join(v for v in selector.values())
    body = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"selector": dict(selector), "ports": [{"port": 80}]},
    }
    raw.json("POST", f"/api/v1/namespaces/{namespace}/services", body)


def create_workload(raw: Api, shape: Shape) -> str:
    """The Service, Deployment and ReplicaSet (replicas 0) of a shape's realistic pods; the
    ReplicaSet's uid, which the pods name as their controller owner."""
    namespace = shape.namespace
    raw.json("POST", f"/api/v1/namespaces/{namespace}/services", service(shape))
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    owner = raw.json("POST", f"{apps}/deployments", deployment(shape))
    created = raw.json("POST", f"{apps}/replicasets", replica_set(shape, owner["metadata"]["uid"]))
    uid: str = created["metadata"]["uid"]
    return uid


def measure_size(
    nodes: int,
    shapes: Sequence[Shape],
    args: argparse.Namespace,
    workdir: Path,
    profiles: Path,
) -> dict[str, Any]:
    out: dict[str, Any] = {"nodes": nodes}
    t_size = time.monotonic()
    gpus = gpus_per_node(nodes, args.pods)
    fleet = bare_nodes(nodes, gpus)
    out["gpus_per_gpu_node"] = gpus
    out["gpu_nodes"] = sum(1 for n in fleet if n.gpus)
    log(f"{nodes} nodes: control plane")
    with bench_plane(workdir / f"plane-{nodes}") as (plane, raw):
        for shape in shapes:
            plane.ensure_namespace(shape.namespace, shape.namespace_labels)
        for namespace, selector in sorted(
            {
                (s.namespace, tuple(sorted(s.service_selector.items())))
                for s in shapes
                if s.service_selector
            }
        ):
            ensure_service(raw, namespace, dict(selector))
        # Realistic pods are owned by a ReplicaSet of their shape (an option's are its shape's).
        owners: dict[str, str] = {}
        if REALISTIC in chosen_pairs(args.variants):
            for name in dict.fromkeys(base_shape(s).name for s in shapes):
                owners[name] = create_workload(raw, SHAPE_BY_NAME[name])
        t0 = time.monotonic()
        create_nodes(raw, fleet, WORKERS)
        out["create_nodes_s"] = round(time.monotonic() - t0, 1)
        log(f"{nodes} nodes created in {out['create_nodes_s']} s ({gpus} GPUs on every 4th)")
        scorer_policy = parse_policy(bench_policy_text() + native_names(args.native_names))
        t0 = time.monotonic()
        out["scorer_cycles"] = score_nodes(plane, scorer_policy, scorer_readings(fleet, args.seed))
        out["score_nodes_s"] = round(time.monotonic() - t0, 1)
        listed = raw.pages("/api/v1/nodes", limit=2000)[0]
        out["node_summary"] = node_summary(scorer_policy, listed)
        log(f"scorer: 2 cycles in {out['score_nodes_s']} s; nodes carry {out['node_summary']}")
        plan = MutationPlan.from_policy(
            parse_policy(EXAMPLE_POLICY.read_text() + native_names(args.native_names))
        )
        pods = {
            s.name: shape_pods(plan, s, owners.get(base_shape(s).name, UNCREATED_UID))
            for s in shapes
        }
        out["pods"] = {name: p.summary() for name, p in pods.items()}
        out["nodes_to_find"] = nodes_to_find_by_profile(profiles, nodes)
        # Placement quality: an option's pods are judged by their shape's steered pod (what
        # the webhook prefers); the labels do not change during the bench: one snapshot serves.
        prefix = plan.policy.spec.label_prefix
        sticks = {
            s.name: yardstick(
                (pods.get(base_shape(s).name) or shape_pods(plan, base_shape(s))).steered, prefix
            )
            for s in shapes
        }
        out["score_keys"] = {name: stick and stick.key for name, stick in sticks.items()}
        read = set().union(*(stick.label_keys() for stick in sticks.values() if stick))
        judge = PlacementJudge(fleet_snapshot(listed, read))
        del listed  # thousands of nodes: keep the compact snapshot only
        bench = SchedulerBench(plane, raw, args, workdir, profiles, judge, sticks)
        out["runs"] = bench.run_all(pods, shapes, nodes)
    out["runtime_s"] = round(time.monotonic() - t_size, 1)
    log(f"{nodes} nodes done in {out['runtime_s'] / 60:.1f} min")
    return out


def native_names(on: bool) -> str:
    """The policy lines of the native-names opt-in (appended under `spec:`), or nothing."""
    if not on:
        return ""
    return (
        "  resourcePrefix: kube-steer.kubernetes.io/\n"
        "  nativeResourceNames: true\n"
        "  formerResourcePrefixes: []\n"
    )


def run_scheduler(args: argparse.Namespace) -> int:
    if args.report:
        print_report(json.loads(args.report.read_text()), args.goal, args.top_plugins)
        return 0
    if args.quick:
        args.nodes, args.pods, args.rounds = "200", 300, 1
        args.stall = min(args.stall, 10.0)
    sizes = [int(n) for n in str(args.nodes).split(",") if n.strip()]
    wanted = [s.strip() for s in args.shapes.split(",") if s.strip()] if args.shapes else None
    known = {s.name: s for s in (*SHAPES, *OPTIONS)}
    if wanted is not None:
        unknown = sorted(set(wanted) - set(known))
        if unknown or not wanted:
            raise SystemExit(f"--shapes: unknown {unknown}; choose from {', '.join(known)}")
    shapes = [known[n] for n in wanted] if wanted else list(SHAPES)
    if args.options:
        shapes += [o for o in OPTIONS if o not in shapes]
    pairs = chosen_pairs(args.variants)
    stamp = utc_stamp()
    source = source_version()  # now: others may commit while it runs
    out_file = results_file(args.json, "scale", stamp)
    began = time.monotonic()
    results: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        workdir = run_workdir(stack, args.workdir, "steer-scale-")
        try:
            profiles = write_profiles(args.profiles, args.steer_percentage, workdir)
        except ValueError as exc:
            raise SystemExit(f"--steer-percentage: {args.profiles}: {exc}") from None
        percentages = profile_percentages(profiles)
        for nodes in sizes:
            results.append(measure_size(nodes, shapes, args, workdir, profiles))
    elapsed = time.monotonic() - began
    doc = {
        "section": "scheduler",
        "started": stamp,
        "source": source,
        "runtime_s": round(elapsed, 1),
        "args": recorded_args(args),
        "variants": [p.name for p in pairs],
        "profiles": display_path(args.profiles),
        # percentageOfNodesToScore set on the steer-* profiles of a copy of --profiles (None:
        # the file as it is); per profile, what the scheduler ran with ("": the global value).
        "steer_percentage": args.steer_percentage,
        "native_names": args.native_names,
        "percentage_of_nodes_to_score": percentages,
        "scheduler_qps": SCHEDULER_QPS,
        "apiserver_args": list(APISERVER_ARGS),
        "scorer_readings": SCORER_READINGS,
        "shapes": [s.name for s in shapes],
        # Per size, shape and pair run (bare, realistic): steered/twin ratios per round.
        "summary": {
            str(size["nodes"]): {
                s.name: {p.name: shape_summary(size, s.name, p) for p in pairs_run(size)}
                for s in shapes
            }
            for size in results
        },
        "sizes": results,
    }
    write_results(out_file, doc)
    print_report(doc, args.goal, args.top_plugins)
    log(f"results written to {out_file}")
    failed = any("error" in r for size in results for r in size["runs"])
    return 1 if failed else 0


def chosen_pairs(text: str) -> tuple[Pair, ...]:
    """--variants: `all`, or comma-separated pair names (bare, realistic), in PAIRS order."""
    names = [p.name for p in PAIRS]
    wanted = {w.strip() for w in text.split(",") if w.strip()}
    if "all" in wanted:
        wanted = set(names)
    unknown = sorted(wanted - set(names))
    if unknown or not wanted:
        raise SystemExit(f"--variants: unknown {unknown}; choose all or from {', '.join(names)}")
    return tuple(p for p in PAIRS if p.name in wanted)


def display_path(path: Path) -> str:
    """A path relative to the checkout when inside it."""
    resolved = path.resolve()
    return str(resolved.relative_to(ROOT)) if resolved.is_relative_to(ROOT) else str(resolved)


def percentage(text: str) -> int:
    value = int(text)
    if not 0 <= value <= 100:
        raise argparse.ArgumentTypeError(f"must be 0..100 (0: the adaptive default), got {value}")
    return value


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
        "--shapes",
        help=f"comma-separated, from {','.join(s.name for s in SHAPES)} (default all) or the "
        "options (--options lists them in its results)",
    )
    sched.add_argument(
        "--options",
        action="store_true",
        help="also run every option (another mechanism's steered pod, bench/benchkit/shapes.py)",
    )
    sched.add_argument(
        "--variants",
        default="all",
        help="pairs to run: all (default), bare (twin, steered) or realistic (realistic-twin, "
        "realistic-steered), comma-separated",
    )
    sched.add_argument(
        "--steer-percentage",
        type=percentage,
        metavar="N",
        help="set percentageOfNodesToScore: N on every steer-* profile (a copy of --profiles in "
        "the workdir; default-scheduler untouched); default: the profiles as they are",
    )
    sched.add_argument(
        "--native-names",
        action="store_true",
        help="the policy's pools and gates under kube-steer.kubernetes.io/ with "
        "nativeResourceNames: true (the opt-in), instead of the default extended resources",
    )
    sched.add_argument(
        "--profiles",
        type=Path,
        default=PROFILES,
        help="KubeSchedulerConfiguration to start the scheduler with "
        "(default manifests/scheduler/profiles.yaml)",
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
    sched.add_argument(
        "--cpu-profile",
        type=int,
        metavar="S",
        default=0,
        help="save the scheduler's CPU profile over S seconds of every run in --workdir "
        "(scheduler-cpu-<nodes>-<run>-<shape>.pb.gz; `go tool pprof -top FILE`)",
    )
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
