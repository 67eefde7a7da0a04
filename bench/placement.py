"""Placement benchmark: the stock kube-scheduler against the same scheduler steered by kube-steer
(scorer + admission webhook + scheduler profiles), on the same pod traces, on a real
kube-apiserver + kube-scheduler + kube-controller-manager v1.36.2 and a real Prometheus.

    .venv/bin/python bench/placement.py                       # seeds 1-3, stock and steered, ~6 min
    .venv/bin/python bench/placement.py --seeds 1-5           # the scoreboard: 5 seeds, ~10 min
    .venv/bin/python bench/placement.py --scenario dra --seeds 1-5
    .venv/bin/python bench/placement.py --admission policy --seeds 1-5
    .venv/bin/python bench/placement.py --exporters older --seeds 1-5   # DCGM Hostname, Kepler 0.7
    .venv/bin/python bench/placement.py --modes stock,steered,audit   # and audit mode
    .venv/bin/python bench/placement.py --seeds 7 --modes steered --rate 8
    .venv/bin/python bench/placement.py --scenario energy     # energy at equal work, ~5 min
    .venv/bin/python bench/placement.py --scenario mixed-energy --seeds 1-5
    .venv/bin/python bench/placement.py --scenario mixed-energy --history none   # first hour

Not a test: it asserts nothing, it measures, and it reports what it measures. The scoreboard is
printed as markdown on stdout (one row per run with its seed, then per mode the median and the
worst run of every column, a line per mode saying whether every goal held in every run, then
each audit run's audit report), progress goes to stderr, and everything (per-node detail, labels
at trace start, scheduler messages of pods left Pending, audit reports, every seed's trace) is
written to bench/results/placement-<UTC timestamp>.json (or --json PATH).

Seeds
-----
Each run replays the trace of its own seed: `--seeds 1-5` (or `1,4,9`) runs one pair per seed,
`--runs N` the seeds `--seed` .. `--seed` + N - 1 (default: 3 runs from seed 1). The modes of one
run replay the same seed (stock and steered of a pair place the same arrivals); the seed
decides the order of the arrivals, their gaps and the services' sizes, and (steered and audit)
where in the trace the scorer's next cycle falls, so the runs of an invocation differ in order
and timing as a cluster's days do. A goal is held only if it holds
in every run: the summary gives the worst run beside the median.

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
  share (1 when allocated to a pod; the external utilisation, 0.95, on the two hot nodes). Nodes
  carry `node.kubernetes.io/instance-type` (`cpu-16`, `cpu-32`, `gpu-8x`); the example policy's
  `energy.powerModel` lists no figures (left for the operator), so the scorer ranks nodes by
  what Kepler measures.
- **Exporter** (kits.simulated_cluster, steered and audit modes only): lists nodes and pods
  every 1 s and serves DCGM (GPUs given to bound pods: 85 % util, 60,000 MiB used), Kepler
  >= 0.10's node CPU watts and joules (the CPU meter reads the power model's draw without the GPUs', as RAPL does)
  split into active = total x usage ratio (requested cores / allocatable) and idle = the rest,
  kube-state-metrics allocatable and per-container requests/limits with the `node` label, and blackbox `probe_success{job="node-health"}`. A
  fresh real Prometheus scrapes it every 1 s (honor_labels). Before the trace, every query of the policy
  is run and must return a value for the nodes it should cover (GPU dimensions: 6 nodes; power,
  idle-power and health: 16; overcommit: the 9 nodes with pods; core-power, the slope of watts
  over usage in the last hour: none in a Prometheus minutes old, every node with `--history
  hour`).
- **The trace** (one per seed; the same for every mode of a run): arrivals at `--rate` per
  second (exponential gaps, default 4/s), 106 arrivals = 122 pods in ~22-30 s, i.e. inside one
  30 s scoring interval. Every pod sets cpu and memory requests and limits.
  * 38 CPU services in `team-a` (labels `tenant=dept-a, kube-steer.github.io/enabled=true`, budget 5 %),
    burstable: limit = floor(1.05 x request), the most the validating webhook admits;
  * 36 CPU services in `team-b` (`tenant=dept-b`, budget 0 %), Guaranteed (limit = request);
  * 12 CPU services in `shop` (`kube-steer.github.io/enabled=true`, NO tenant label: steered,
    promised no budget), two thirds Guaranteed, a third burstable (limits 1.5 x requests). The
    three tenants' services are shuffled together, so shop pods arrive among dept-a's bursting
    pods and dept-b's 0 % pods: where those fill a node's budget pool, dept-a's burst leaves
    the node's cpu *requests* below its limits, and a shop pod that fits the requests but asks
    nothing of the pool breaks dept-b's 0 % (issue 41; `B>0%`, `B@bind` stay 0 only if every
    steered pod counts against the room a budget keeps).
    Service sizes are drawn per pod: 0.5/1/2/4/8 cores with 2 GiB per core, weights
    25/30/25/15/5 %;
  * a burst of 16 one-GPU jobs in `team-a` (1 GPU, 4 cores, 32 GiB; burstable 1.05): 16 of 19
    consecutive arrivals (3 services among them), under 5 s, starting at 10-30 % of the trace;
    then 2 whole-node jobs in `team-b` (8 GPUs, 32 cores, 256 GiB, Guaranteed) in the last
    third. Both fit, away from the hot nodes and within the budgets, only if the burst is
    packed: two cool GPU nodes for the 16 one-GPU jobs, the other two whole for the
    whole-node jobs. Spread (as the stock scheduler's LeastAllocated spreads them), the burst
    strands GPUs (`strand`) and a whole-node job waits (`8G pend`);
  * two business chains, each a Deployment whose pods carry `order-chain: <name>` (so the
    policy's zone and hostname spread rules apply; the pods carry `pod-template-hash`) and
    whose pods the controller manager creates: `checkout` in `team-a`, 12 replicas (1 core,
    2 GiB, Guaranteed), created at 25-35 % of the trace, and `cart` in `shop`, 6 replicas
    (500m/500m, 1 GiB, Guaranteed: issue 41's order-chain replica of no tenant), created at
    55-65 %, when nodes have filled up.

Scenario `dra` (`--scenario dra`): the default scenario's nodes, pre-existing pods, trace and
goals, with GPUs through Dynamic Resource Allocation (kits.dra) on a mixed cluster, as one moving
to DRA is, partly used, as a cluster is mid-day, and two more cool GPU nodes, `gpu-7` (zone-a)
and `gpu-8` (zone-b), both DRA: `gpu-1..3`, `gpu-7`, `gpu-8` and the hot `gpu-5` advertise no
`nvidia.com/gpu`; each lists its 8 GPUs as devices `gpu-0..7` of the driver `gpu.nvidia.com` in
a ResourceSlice (NVIDIA-like attributes: `type`, `uuid`, `index`, `productName`, ...; capacity
`memory`). `gpu-4` and the hot `gpu-6` keep the device plugin's `nvidia.com/gpu: 8`. A
DeviceClass `gpu.nvidia.com` selects the devices and maps `nvidia.com/gpu` to them
(`extendedResourceName`), and every bench namespace has the ResourceClaimTemplates `one-gpu`,
`two-gpus`, `four-gpus` and `eight-gpus` (counts 1, 2, 4, 8).

- **GPU jobs from earlier** (EARLIER_GPU_JOBS): dept-a's `a-earlier-gpu-1` (template
  `four-gpus`), `a-earlier-gpu-2` and `a-earlier-gpu-3` (`two-gpus`), 2 cores and 16 GiB per
  GPU, Guaranteed, so gpu-1..3 have 4, 6 and 6 devices free: the burst's 16 exactly. They are
  created in team-a after the mode's admission is up (steered in the steering modes, as dept-a's
  pods are: the webhook gives them their device-counter units and pool requests, and they bind
  once the scorer's first cycle has published those; stock: right after reset) and placed by
  the scheduler, each on its node by a required node affinity on `metadata.name`: a pod naming
  its node skips the scheduler, and nothing would allocate its claim. Where they bound is in the
  JSON (`earlier_jobs`; steered and audit: `priming.earlier_jobs`).
- **CPU work on the whole DRA nodes** (DRA_PREEXISTING: the default's pre-existing pods and
  two more in `legacy`, bound by name): gpu-7 24 cores / 192 GiB (limits 28 / 224 GiB), gpu-8
  20 cores / 160 GiB (limits 24 / 192 GiB), each leaving a whole-node job room within dept-b's
  0 %. So cpu and memory point away from GPU use: the nodes whose cores and memory are the most
  requested (gpu-7 38 %, gpu-8 31 %) hold no GPU, the partly used GPU nodes 25 % at most.

The trace is the default's, arrival for arrival; in the burst, the odd one-GPU jobs (01, 03,
..., 15) name the `one-gpu` template, the even ones request `nvidia.com/gpu: 1` (served from a
DRA node's devices through a claim the scheduler makes, or from gpu-4's device plugin), and both
whole-node jobs name `eight-gpus`, so only a cool DRA node can take them. The goals stand, and
need the burst packed into the devices the earlier jobs left free: then gpu-7 and gpu-8 stay
whole for the whole-node jobs (gpu-4 is spare). One burst job on gpu-7 or gpu-8 leaves one whole
DRA node for two whole-node jobs, and free GPUs stranded on gpu-1..3 (`strand`, `8G pend`).
Nothing in the 1.36 scheduler scores a claim's devices (it scores the mapped `nvidia.com/gpu`
by the devices of the class on the node), so MostAllocated on cpu and memory alone (steer-binpack
before the device counter, commit a17c787) takes claim jobs to gpu-7: issue 41's held-out run,
whose partly used GPU nodes spread a burst 8/6/2. Every GPU count (`GPU@hot`, `whole`, `strand`,
GPUs per node) is read from the claims' allocations for DRA pods (the devices the scheduler
allocated, on the node of their pool; the earlier jobs' too, shown per node as "(N before the
trace)") and from `nvidia.com/gpu` requests for the others; `GPU@hot` and `CPU@GPU` count trace
pods only, and a pod naming a claim counts as a GPU pod for `CPU@GPU`. The exporter reports each
DRA device as a GPU (its `uuid` in `UUID`, its `index` in `gpu`), busy while an allocated claim
holds it. Reset also deletes the bench namespaces' claims (waiting until they are gone) and
republishes the slices. JSON per run: `gpu_forms`, how the bound GPU pods got their GPUs
(`claim`, `extended-dra`: a plain request served by DRA, `device-plugin`). The webhook and the
scorer run the example policy as shipped: its `gpu` pod class names the DeviceClass
`gpu.nvidia.com`, so a pod naming a claim template is a GPU pod as one requesting
`nvidia.com/gpu` is. On `--admission policy` the mutating policy leaves claim pods to a webhook
there is none of, so the earlier jobs and the claim jobs are unsteered and request no counter.

Scenario `energy` (`--scenario energy`): energy at equal work. 24 CPU nodes of 16 cores /
64 GiB, 8 per zone, no GPUs, no pre-existing pods: `eff-1..12` (`cpu-efficient`: 120 W idle,
5 W per busy core) and `leg-1..12` (`cpu-legacy`: 220 W idle, 11 W per busy core), interleaved
over the zones. The trace is the same generator without GPU jobs and without the shop: 30 dept-a
and 30 dept-b services and the 12-replica checkout chain, 72 pods, ~128 cores (127.5 with seed
1): the work fits on 8 of the 24 nodes,
so both modes bind every pod and differ only in where. Its columns that count are `dyn W/core`
and `empty` (the issue's goal: steered ≤ 0.8 x stock's dynamic watts per placed core, at least
12 nodes empty), with every other goal of the table still held. Each steered run's Prometheus
starts with an hour of Kepler history (`--history`, below).

Scenario `mixed-energy` (`--scenario mixed-energy`): energy off a pure CPU cluster. 24 nodes in
3 zones: `gpu-1..4` (64 cores, 512 GiB, 8 GPUs, `gpu-8x`: 800 W idle, 8 W per busy core of its
host CPUs; gpu-3 and gpu-4 hot through external load, so CPU pods may go there and GPU jobs
may not), `eff-1..10` and `leg-1..10` (16 cores / 64 GiB, the energy scenario's two kinds),
interleaved over the zones. Work from before the trace (MIXED_PREEXISTING, namespace legacy):
leg-1 (4 cores), leg-4 and leg-8 (2), eff-2 (2) and gpu-1 (8), so three power-hungry nodes are
already active. The trace: 24 dept-a, 24 dept-b and 8 shop services, both chains (checkout 12,
cart 6), a burst of 8 one-GPU jobs and one whole-node job: ~120 cores of CPU work, which fits
on the 160 efficient cores, and 64 cores of GPU jobs. `dyn W/core` counts every placed trace
pod (the GPU jobs' cores at the GPU nodes' 8 W in both modes); the goal is steered ≤ 0.8 x
stock, with every other goal of the table held.

Kepler history (`--history`, default `scenario`: `hour` for energy and mixed-energy, `none`
for default and dra): with `hour`, each steered run's Prometheus is backfilled (promtool tsdb
create-blocks-from openmetrics, before it starts) with the hour before the run of every node's
Kepler >= 0.10 gauges and kube-state-metrics cpu allocatable (bench/benchkit/kepler_history.py:
each node's usage moved between 5 % and 60 % and its watts followed the power model), as a
cluster scraped for an hour holds, so the example's core-power (a subquery over the last hour)
has every node's watts per core at the scorer's first cycle. With `none` it starts empty: the
first hour of an install, where core-power has a node only once its load has moved. Not under
`--exporters older` (Kepler 0.7 measures what a core costs from its counters).

Modes (`--modes`, default stock,steered; alternated run by run in the order given: stock,
steered, stock, steered, ...):

- `stock`: kube-scheduler with its default configuration, no admission webhook configurations,
  no scorer; pods keep `schedulerName: default-scheduler`.
- `steered`: kube-scheduler with manifests/scheduler/profiles.yaml, the admission webhook
  registered (the project's manifests/webhook/admission.yaml, by URL; with `--admission policy`
  no webhook at all, see below), and the scorer (one
  replica, `--no-leader-election`) on a copy of examples/policy.yaml pointing at the fresh
  Prometheus, with the policy's own 30 s interval. The trace starts once every node carries a
  composite label and both hot nodes carry the `gpu-hot` taint (setAfterCycles: 2, so the scorer
  has run two cycles, 30 s apart: in production it runs all the time), after a wait that puts
  the scorer's next cycle at a point of the trace drawn per seed (uniform over the trace's span,
  `scorer_cycle_in_trace_s` in the JSON): a cycle among the arrivals republishes labels the
  later pods read, as in a cluster where the trace's phase against the scorer is arbitrary
  (issue 41: labels a cycle old inside a burst). Between cycles only the scorer's hot-node
  penalty (pods bound in the last 60 s) rewrites composites, and the pools are republished on
  pod events.
- `audit`: everything `steered` runs, with the policy copies (the webhook's and the scorer's) in
  `spec.mode: audit` (Spec.mode_for; a webhook of its own, started with the one for
  `steered`). The webhook patches only each pod's trace annotation (`"mode": "audit"`), so the
  pods keep `schedulerName: default-scheduler` and are placed by the profile that is the stock
  scheduler: the figures should look like `stock`'s. The scorer labels the hot nodes `gpu-hot`
  but taints none, so the trace starts once every node is scored and both hot nodes carry the
  label. Once binding settles, the scorer's audit report (`GET /explain/audit`: every bound
  audited pod judged as enforce mode would have steered it, pods on a node a rule excludes, per
  rule, and the chosen node's rank among the allowed ones) is saved as the run's `audit` and
  printed as `steer audit report` prints it.

Admission (`--admission`, default webhook), for `steered` and `audit`:

- `webhook`: the webhook process and its configurations, as above (the default install);
- `policy`: NO webhook process and no webhook configuration (components/admission-policy):
  every object `steer policy admission-policy --mutating -f POLICY` prints for the mode's
  policy is applied, the MutatingAdmissionPolicy `steer-mutation` (the apiserver steers each
  pod itself) and the ValidatingAdmissionPolicies (budget currency, security taints, the
  scorer's Node writes). The goals are the same. Pods the mutating policy leaves to the webhook
  (DRA claim pods: `--scenario dra`) are created unsteered on this path.

Exporters (`--exporters`, default current), for `steered` and `audit`: what the synthetic
exporters write, the example policy reading each unmodified (`form` of its queries, recorded
as the run's `priming.query_forms` and printed under the scoreboard):

- `current`: dcgm-exporter with `hostname` (4.8.3 on), Kepler >= 0.10;
- `older`: dcgm-exporter before 4.8.3 (`Hostname`) and Kepler 0.7 (joule counters by `mode`,
  the node in `instance`): what GPU operator bundles through mid-2026 ship. Kepler 0.7 reads no
  backfilled Kepler >= 0.10 history, so run it on a scenario that starts with none.

Reset before every run: admission configurations and the project's admission policies removed, the Deployments and every pod of the
bench namespaces deleted (grace 0) and gone, every Node deleted and recreated (so no steer
label, taint or annotation survives), pre-existing pods recreated, the scheduler restarted with
the mode's configuration; a steered or audit run also gets a fresh exporter state, Prometheus
and scorer.

Metrics
-------
All placement metrics come from ONE list of nodes and ONE list of pods taken when binding has
settled: every trace pod bound, or no new binding for --quiet seconds (5) after the last
arrival, or --settle-timeout (30 s) after it. "Trace pods" are the 122 pods above (shop pods
included); "all pods" adds the pre-existing ones. A pod counts as bound when `spec.nodeName`
is set.

- `bound`, `pending`: trace pods bound / not bound (rejected ones are neither; `rejected`
  counts trace pods the apiserver refused, e.g. a webhook denial). `shop pend`: of the
  pending, the shop's (no tenant): a budget may not be kept by leaving them out.
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
- `skew`: per chain, its bound replicas per zone (`checkout`, then `cart`, each a/b/c), and the
  largest max - min over the 3 zones of any chain.
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
- `dyn W/core`: dynamic CPU watts per placed core: sum over the bound trace pods of their CPU
  requests times the watts per busy core of their node's kind, over the cores they request
  (idle draw and GPUs left out: this is what placing the same work elsewhere changes). `empty`:
  nodes with no bound pod (any) and no external GPU load, the nodes that could be powered down.
- `c→b s`: wall time from the first create request of the trace to the last binding of a
  trace pod (bindings seen by a watch in this process).

JSON only, per run: schedulerName counts, how many trace pods the webhook steered (`mutated`:
their trace annotation says what it applied; all of them when steered, none otherwise) and how
many it only audited (`audited`: their trace says `"mode": "audit"`; all of them in audit mode),
per node the final state and
the steer labels/taints at trace start, the scheduler's message for each Pending pod, the
query coverage check, the audit report (audit runs), and the timings: reset, priming (steered
and audit: exporter, Prometheus, two scorer cycles), trace, settle. Runs are noisy on a 2-core
machine shared with other work; the scheduler breaks ties at random, hence several runs.

Summary and goals
-----------------
Per mode, two rows: the median over the runs and the worst run of each column (the largest for
the goals and the other counts of harm, the fewest for `bound`, `cores`, `whole`, `empty`; the
range for `active`, `kW`, `idleW`). Then one line per mode: whether every goal held in every
run, else which goal was missed, in which seeds and by how much at worst. The goals: `A>5%`,
`B>0%`, `GPU@hot`, `8G pend`, `strand` 0 and `skew` <= 1. The results file keeps each run's
`seed`, `seeds`, every seed's trace (`traces`; `trace` is the first seed's), per mode and
column min / median / max and `worst` (`summary`), and per mode `goals` (held in every run, and
the seeds of the runs that missed each goal).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import requests
import yaml
from kubernetes import client

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.benchkit.kepler_history import backfill_kepler_history  # noqa: E402
from bench.benchkit.placement_admission import (  # noqa: E402
    ADMISSION_PATHS,
    apply_compiled,
    compiled_policies,
    remove_compiled,
)
from bench.benchkit.placement_exporters import EXPORTERS  # noqa: E402
from bench.benchkit.placement_measure import (  # noqa: E402
    BindRecorder,
    WebhookEffect,
    measure,
    snapshot,
    steer_labels,
    webhook_effect,
)
from bench.benchkit.placement_modes import MODES, Mode  # noqa: E402
from bench.benchkit.placement_report import (  # noqa: E402
    audit_section,
    goals,
    node_table,
    summary,
    table,
)
from bench.benchkit.placement_scenario import (  # noqa: E402
    HOT_UTIL,
    IMAGE,
    NAMESPACES,
    NS_A,
    NS_LEGACY,
    NS_SHOP,
    PREFIX,
    SCRAPE_INTERVAL_S,
    Arrival,
    deployment_body,
    pod_body,
    scenarios,
    trace_pods,
)
from bench.benchkit.placement_seeds import SeedError, cycle_in_trace, run_seeds  # noqa: E402
from bench.benchkit.progress import log  # noqa: E402
from bench.benchkit.results import (  # noqa: E402
    recorded_args,
    results_file,
    run_workdir,
    utc_stamp,
    write_results,
)
from kits.control_plane import ControlPlane  # noqa: E402
from kits.dra import DraKit  # noqa: E402
from kits.prometheus_server import PrometheusServer  # noqa: E402
from kits.service_processes import (  # noqa: E402
    RunningScorer,
    RunningWebhook,
    register_admission,
    running_scorer,
    running_webhook,
    unregister_admission,
)
from kits.simulated_cluster import INSTANCE_TYPE_LABEL, ApiPoller, SimCluster  # noqa: E402
from kits.synthetic_exporter import SyntheticExporter  # noqa: E402
from kits.waiting import wait_until  # noqa: E402
from steer.adapters.kube import make_api_client  # noqa: E402
from steer.adapters.kubejson import KubeJson  # noqa: E402

PROFILES = ROOT / "manifests" / "scheduler" / "profiles.yaml"
EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
DEFAULT_MODES = "stock,steered"


# -- running -------------------------------------------------------------------------------------


class Bench:
    def __init__(self, plane: ControlPlane, workdir: Path, args: argparse.Namespace) -> None:
        self.plane = plane
        self.workdir = workdir
        self.args = args
        self.core = client.CoreV1Api(plane.api_client())
        self.apps = client.AppsV1Api(plane.api_client())
        self.scenario = scenarios()[args.scenario]
        self.specs = list(self.scenario.nodes)
        self.traces: dict[int, list[Arrival]] = {}  # by seed
        self.policy_doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
        self.dra = DraKit(KubeJson(plane.api_client()))
        self.webhooks: dict[str, RunningWebhook] = {}  # by mode: each serves its mode's policy

    def history_s(self) -> float:
        """Seconds of Kepler history a steered run's Prometheus starts with (--history): Kepler
        >= 0.10's gauges, so none under `--exporters older` (Kepler 0.7 measures what a core
        costs from its counters, with no history)."""
        if "0.10" not in EXPORTERS[self.args.exporters]["kepler_styles"]:
            return 0.0
        if self.args.history == "scenario":
            return self.scenario.kepler_history_s
        return 3600.0 if self.args.history == "hour" else 0.0

    def trace(self, seed: int) -> list[Arrival]:
        """The trace of `seed` (made once: every mode of a pair replays the same one)."""
        if seed not in self.traces:
            self.traces[seed] = self.scenario.trace(seed, self.args.rate)
        return self.traces[seed]

    # -- state ------------------------------------------------------------------------------------
    def setup(self) -> None:
        for name, labels in NAMESPACES.items():
            self.plane.ensure_namespace(name, labels)
            for template, count in self.scenario.claim_templates.items():
                self.dra.ensure_claim_template(name, template, count)
        if self.scenario.dra:
            self.dra.ensure_device_class()

    def reset(self) -> None:
        unregister_admission(self.plane)
        remove_compiled(self.plane.api_client())
        for ns in (NS_A, NS_SHOP):  # the namespaces of the order chains
            with contextlib.suppress(client.ApiException):
                self.apps.delete_collection_namespaced_deployment(ns)
            with contextlib.suppress(client.ApiException):
                self.apps.delete_collection_namespaced_replica_set(ns)

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
        if self.scenario.dra:
            # A claim outlives its pod until the controller manager releases it; one left
            # allocated would hold its device in the pool the new slice reuses.
            def claims_left() -> bool:
                left = 0
                for ns in NAMESPACES:
                    if self.dra.claims(ns):
                        left += 1
                        self.dra.delete_claims(ns)
                return left == 0

            wait_until("bench claims deleted", claims_left, timeout=60, interval=0.5)
            self.dra.delete_slices()
        for node in self.core.list_node().items:
            with contextlib.suppress(client.ApiException):
                self.core.delete_node(node.metadata.name)
        wait_until(
            "nodes deleted", lambda: not self.core.list_node().items, timeout=60, interval=0.5
        )
        for s in self.specs:
            labels = {"bench.kube-steer.github.io/pool": "gpu" if s.gpus else "cpu"}
            if s.instance_type:
                labels[INSTANCE_TYPE_LABEL] = s.instance_type
            self.plane.add_node(
                s.name,
                cpu=str(s.cpu),
                memory=f"{s.memory_gi}Gi",
                gpus=0 if s.dra else s.gpus,
                zone=s.zone,
                labels=labels,
            )
            if s.dra:
                self.dra.publish_gpus(s.name, s.gpus)
        preexisting = self.scenario.preexisting
        for i, (node, cpu, cpu_limit, mem, mem_limit) in enumerate(preexisting, start=1):
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

    def place_earlier(self) -> dict[str, Any]:
        """The scenario's GPU jobs from earlier: created now, through the mode's admission (so
        steered in a steering mode, as the tenant's pods are), and placed by the scheduler on
        their required nodes; returns where each bound and how long it took."""
        jobs = self.scenario.earlier_jobs
        if not jobs:
            return {}
        t0 = time.monotonic()
        for job in jobs:
            self.core.create_namespaced_pod(NS_A, job.body())

        def nodes() -> dict[str, str | None]:
            return {
                job.name: self.core.read_namespaced_pod(job.name, NS_A).spec.node_name
                for job in jobs
            }

        # Steered, they request the budget pool and the device counter: bound once the
        # scorer's first cycle has published them.
        bound = wait_until(
            "the earlier GPU jobs bound",
            nodes,
            timeout=120,
            interval=0.5,
            until=lambda found: all(found.values()),
        )
        return {"bound_on": bound, "bound_s": round(time.monotonic() - t0, 1)}

    def webhook_probe(self) -> WebhookEffect:
        """What admission (the webhook or the mutating policy) does to a dept-a pod now (a
        dry-run create)."""
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
        made: Any = self.core.create_namespaced_pod(
            NS_A, probe, dry_run="All", _preload_content=False
        )
        return webhook_effect(json.loads(made.data))

    def wait_webhook(self, mode: Mode) -> None:
        # Compiled policies reach the apiserver by its watch, each on its own: for a moment the
        # budget's ValidatingAdmissionPolicy may be in force before the mutating one that
        # satisfies it, and refuses the probe (403), as it would any pod then.
        wait_until(
            f"webhook effect {mode.webhook_effect!r}",
            lambda: self.webhook_probe() == mode.webhook_effect,
            timeout=30,
            interval=0.5,
            ignoring=(client.ApiException,),
        )

    # -- priming (steered, audit) ------------------------------------------------------------------
    def prime(
        self, stack: contextlib.ExitStack, run_dir: Path, mode: Mode
    ) -> tuple[dict[str, Any], RunningScorer]:
        info: dict[str, Any] = {}
        t0 = time.monotonic()
        if self.args.admission == "webhook":
            register_admission(self.plane, self.webhooks[mode.name])
        else:
            compiled_file = run_dir / "compiled-policy.yaml"
            compiled_file.write_text(yaml.safe_dump(mode.policy(self.policy_doc), sort_keys=False))
            info["admission_objects"] = apply_compiled(
                self.plane.api_client(), compiled_policies(compiled_file)
            )
        self.wait_webhook(mode)
        sim = SimCluster(
            self.scenario.power,
            external_gpu_util={s.name: HOT_UTIL for s in self.specs if s.hot},
            **EXPORTERS[self.args.exporters],
        )
        stack.enter_context(ApiPoller(make_api_client(str(self.plane.kubeconfig)), sim))
        exporter = stack.enter_context(SyntheticExporter(sim))
        prom = PrometheusServer([exporter.target], scrape_interval_s=SCRAPE_INTERVAL_S)
        history_s = self.history_s()
        if history_s:
            info["kepler_history"] = backfill_kepler_history(
                prom, self.specs, self.scenario.power, exporter.target, history_s
            )
        prom = stack.enter_context(prom)
        gpu_nodes = sum(1 for s in self.specs if s.gpus)
        with_pods = len({p[0] for p in self.scenario.preexisting})
        expect = {
            "gpu-util": gpu_nodes,
            "gpu-free": gpu_nodes,
            "gpu-frag": gpu_nodes,
            # The slope of watts over usage in the last hour: every node's from the backfilled
            # hour of Kepler history, none in a Prometheus that starts empty (minutes old).
            "core-power": len(self.specs) if history_s else 0,
            "idle-power": len(self.specs),
            "power": len(self.specs),
            "overcommit-pct": with_pods,
            "health": len(self.specs),
        }
        coverage, forms = {}, {}
        for dim in self.policy_doc["spec"]["dimensions"]:
            want = expect[dim["name"]]
            result = prom.wait_for(
                dim["query"],
                lambda r, want=want, label=dim["nodeLabel"]: len(r.values_by(label)) >= want,
                timeout_s=60,
            )
            coverage[dim["name"]] = len(result.values_by(dim["nodeLabel"]))
            forms[dim["name"]] = sorted(
                {s.labels["form"] for s in result.samples if "form" in s.labels}
            )
        info["query_coverage"] = coverage
        info["query_forms"] = {name: found for name, found in forms.items() if found}
        info["prometheus_s"] = round(time.monotonic() - t0, 1)
        doc = mode.policy(self.policy_doc)
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
        if self.scenario.earlier_jobs:
            info["earlier_jobs"] = self.place_earlier()
        hot = [s.name for s in self.specs if s.hot]
        gpu_hot = f"{PREFIX}gpu-hot"

        def flagged(node: Any) -> bool:
            # Audit mode sets no taint (it would act on every pod), only the condition's label.
            if mode.writes_taints:
                return any(t.key == gpu_hot for t in node.spec.taints or ())
            return gpu_hot in (node.metadata.labels or {})

        def primed() -> bool:
            nodes = self.core.list_node().items
            scored = all(f"{PREFIX}score" in (n.metadata.labels or {}) for n in nodes)
            return scored and set(hot) <= {n.metadata.name for n in nodes if flagged(n)}

        waited_from = time.monotonic()
        wait_until(
            f"scorer labels and gpu-hot {'taints' if mode.writes_taints else 'labels'}",
            primed,
            timeout=120,
            interval=0.5,
        )
        info["scorer_wait_s"] = round(time.monotonic() - waited_from, 1)
        # The scorer's second cycle set the taints just now (polled every 0.5 s).
        info["primed_at"] = time.monotonic()
        info["labels_at_start"] = {
            n["metadata"]["name"]: steer_labels(n) for n in snapshot(self.core).nodes
        }
        info["explain_at_start"] = scorer.get("/explain/nodes")
        info["scorer_log"] = str(run_dir / "scorer.log")
        return info, scorer

    def watch_after(self, scorer: RunningScorer) -> dict[str, Any]:
        """What the scorer reads once the trace's load has been in Prometheus for
        --watch-after seconds: per node its core-power (watts per busy core, None where its
        load has not moved in the last hour) and its composite label. Shows what the first
        hour of an install does (--history none): nodes gain a core-power as load moves."""
        time.sleep(self.args.watch_after)
        view = scorer.get("/explain/nodes")
        nodes = {
            n["node"]: {
                "core_power": n["raw"].get("core-power"),
                "score": n["labels"].get(f"{PREFIX}score"),
            }
            for n in view.get("nodes", ())
        }
        measured = sorted(name for name, n in nodes.items() if n["core_power"] is not None)
        log(f"after {self.args.watch_after:.0f} s: core-power on {len(measured)} nodes {measured}")
        return {"after_s": self.args.watch_after, "nodes": nodes, "core_power_on": measured}

    def audit_report(self, scorer: RunningScorer) -> dict[str, Any]:
        """The scorer's `/explain/audit` answer, or why it could not be read. Each audited pod
        is one explanation over every node, hence a longer timeout than `scorer.get`'s."""
        try:
            with requests.Session() as session:
                session.trust_env = False  # this machine sets proxies and REQUESTS_CA_BUNDLE
                resp = session.get(f"{scorer.url}/explain/audit", timeout=60)
            resp.raise_for_status()
            body: dict[str, Any] = resp.json()
        except (requests.RequestException, ValueError) as exc:
            return {"error": repr(exc)}
        return body

    # -- the trace ----------------------------------------------------------------------------------
    def play(self, recorder: BindRecorder, trace: Sequence[Arrival]) -> dict[str, Any]:
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
            for a in trace:
                delay = start + a.at - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    late = max(late, -delay)
                pool.submit(create, a)
        created_s = time.monotonic() - start
        expected = trace_pods(trace) - sum(
            a.replicas for a in trace if f"{a.namespace}/{a.name}" in rejected
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
    def run(self, mode: Mode, index: int, seed: int) -> dict[str, Any]:
        trace = self.trace(seed)
        log(f"run {index} {mode.name} (seed {seed}): reset")
        t0 = time.monotonic()
        run_dir = self.workdir / f"run-{index}-{mode.name}"
        run_dir.mkdir(parents=True, exist_ok=True)
        self.reset()
        self.plane.restart_scheduler(PROFILES if mode.steers else None)
        result: dict[str, Any] = {
            "mode": mode.name,
            "run": index,
            "seed": seed,
            "admission": self.args.admission if mode.steers else None,
            "reset_s": round(time.monotonic() - t0, 1),
        }
        with contextlib.ExitStack() as stack:
            t1 = time.monotonic()
            scorer = None
            if mode.steers:
                log(
                    f"run {index} {mode.name}: priming "
                    "(exporter, Prometheus, scorer: two 30 s cycles)"
                )
                result["priming"], scorer = self.prime(stack, run_dir, mode)
            else:
                self.wait_webhook(mode)
                if self.scenario.earlier_jobs:
                    result["earlier_jobs"] = self.place_earlier()
            recorder = stack.enter_context(BindRecorder(self.plane.kubeconfig))
            if mode.steers:
                # The scorer's next cycle falls at the seed's point of the trace.
                interval = float(self.policy_doc["spec"]["scoring"]["intervalSeconds"])
                cycle_at = cycle_in_trace(seed, trace[-1].at, interval)
                primed_at = result["priming"].pop("primed_at")
                time.sleep(max(0.0, interval - cycle_at - (time.monotonic() - primed_at)))
                result["scorer_cycle_in_trace_s"] = round(
                    interval - (time.monotonic() - primed_at), 1
                )
            result["prime_s"] = round(time.monotonic() - t1, 1)
            log(
                f"run {index} {mode.name}: trace of seed {seed}, {len(trace)} arrivals, "
                f"{trace_pods(trace)} pods over {trace[-1].at:.1f} s"
                + (
                    f", the scorer's next cycle ~{result['scorer_cycle_in_trace_s']} s in"
                    if mode.steers
                    else ""
                )
            )
            result.update(self.play(recorder, trace))
            snap = snapshot(self.core)
            bind_times = recorder.bind_times()
            if scorer is not None and self.args.watch_after:
                result["after_trace"] = self.watch_after(scorer)
            if scorer is not None and not mode.writes_taints:
                t2 = time.monotonic()
                result["audit"] = self.audit_report(scorer)
                result["audit_s"] = round(time.monotonic() - t2, 1)
        result.update(measure(snap, self.specs, bind_times, self.scenario.power))
        result["scenario"] = self.scenario.name
        result["rejected_count"] = len(result["rejected"])
        result["total_s"] = round(time.monotonic() - t0, 1)
        log(
            f"run {index} {mode.name} (seed {seed}): bound {result['bound']}, "
            f"pending {result['pending']} (shop {result['pending_shop']}), "
            f"A>5% {result['over_budget_team-a']}, B>0% {result['over_budget_team-b']}, "
            f"GPU@hot {result['gpu_on_hot']}, chains {result['chains']}, "
            f"8G pending {result['gpu8_pending']}, strand {result['stranded_gpus']}, CPU@GPU {result['cpu_pods_on_gpu_nodes']}, "
            f"GPU forms {result['gpu_forms']}, "
            f"mutated {result['mutated']}, audited {result['audited']}, "
            f"schedulers {result['scheduler_names']} "
            f"({result['total_s']} s)"
        )
        return result


# -- main ----------------------------------------------------------------------------------------


@contextlib.contextmanager
def mode_webhook(bench: Bench, mode: Mode, workdir: Path) -> Iterator[RunningWebhook]:
    """One webhook per steering mode, for the whole benchmark: its policy is the mode's."""
    hook_dir = workdir / f"webhook-{mode.name}"
    hook_dir.mkdir(parents=True, exist_ok=True)
    policy_file = hook_dir / "policy.yaml"
    if mode.policy_mode is None and not bench.scenario.dra:
        policy_file.write_text(EXAMPLE_POLICY.read_text())
    else:
        policy_file.write_text(yaml.safe_dump(mode.policy(bench.policy_doc), sort_keys=False))
    with running_webhook(bench.plane, policy_file, hook_dir) as hook:
        yield hook


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--runs",
        type=int,
        help="runs per mode, with the seeds --seed, --seed + 1, ... (default 3; or --seeds)",
    )
    parser.add_argument(
        "--seeds",
        help="the trace seed of each run, e.g. 1-5 or 1,4,9: one run per seed and mode, the "
        "modes of a run on the same seed (default: --runs from --seed)",
    )
    parser.add_argument(
        "--scenario",
        choices=sorted(scenarios()),
        default="default",
        help="default: 16 nodes with GPUs, budgets and pre-existing pods; dra: the same and 2 "
        "more GPU nodes, the GPUs of 6 of the 8 through DRA, GPU jobs from earlier; energy: "
        "24 CPU nodes, half "
        "power-hungry, work that fits on 8; mixed-energy: 4 GPU nodes (2 hot) and 20 CPU "
        "nodes, half power-hungry, tenants, both chains, GPU jobs and work from before "
        "(default: default)",
    )
    parser.add_argument(
        "--history",
        choices=("scenario", "hour", "none"),
        default="scenario",
        help="Kepler history in each steered run's Prometheus when it starts: hour (an hour "
        "backfilled, bench/benchkit/kepler_history.py), none (it starts empty), scenario "
        "(energy and mixed-energy: hour; default, dra: none) (default scenario)",
    )
    parser.add_argument(
        "--exporters",
        choices=sorted(EXPORTERS),
        default="current",
        help="what the exporters write, the example policy reading either unmodified: current "
        "(dcgm-exporter hostname, Kepler >= 0.10) or older (dcgm-exporter Hostname, as before "
        "4.8.3, and Kepler 0.7) (default current)",
    )
    parser.add_argument(
        "--seed", type=int, default=1, help="the first run's trace seed, with --runs (default 1)"
    )
    parser.add_argument("--rate", type=float, default=4.0, help="arrivals per second (default 4)")
    parser.add_argument(
        "--modes",
        default=DEFAULT_MODES,
        help=f"comma-separated, from {','.join(MODES)} (default {DEFAULT_MODES})",
    )
    parser.add_argument(
        "--json", type=Path, help="results file (default bench/results/placement-<ts>.json)"
    )
    parser.add_argument(
        "--admission",
        choices=ADMISSION_PATHS,
        default="webhook",
        help="how steering runs admit pods: webhook (the webhook and its configurations) or "
        "policy (no webhook: the MutatingAdmissionPolicy and the ValidatingAdmissionPolicies "
        "`steer policy admission-policy --mutating` prints) (default webhook)",
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
    parser.add_argument(
        "--watch-after",
        type=float,
        default=0.0,
        help="steered and audit: this many s after the trace settles, record each node's "
        "core-power and composite label as the scorer reads them (results: after_trace), "
        "e.g. 120 with --history none to see the first hour fill in (default 0: not)",
    )
    parser.add_argument("--workdir", type=Path, help="keep logs here (default: a temporary folder)")
    args = parser.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = set(modes) - set(MODES)
    if unknown or not modes:
        parser.error(f"--modes: unknown {sorted(unknown)}; choose from {', '.join(MODES)}")
    if len(set(modes)) < len(modes):
        parser.error(f"--modes: {args.modes!r} names a mode twice")
    try:
        seeds = run_seeds(args.seeds, args.runs, args.seed)
    except SeedError as exc:
        parser.error(str(exc))
    stamp = utc_stamp()
    out_file = results_file(args.json, "placement", stamp)
    began = time.monotonic()
    results: list[dict[str, Any]] = []
    failures: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        workdir = run_workdir(stack, args.workdir, "steer-placement-")
        log("starting the control plane (etcd, apiserver, scheduler, controller manager)")
        plane = stack.enter_context(
            ControlPlane.start(workdir / "control-plane", controller_manager=True)
        )
        bench = Bench(plane, workdir, args)
        bench.setup()
        for name in modes:
            if MODES[name].steers and args.admission == "webhook":
                bench.webhooks[name] = stack.enter_context(
                    mode_webhook(bench, MODES[name], workdir)
                )
        log(f"admission: {args.admission}")
        log(f"scenario {bench.scenario.name}: seeds {seeds}, {args.rate} arrivals/s")
        for run, seed in enumerate(seeds, start=1):
            for mode in modes:
                try:
                    results.append(bench.run(MODES[mode], run, seed))
                except Exception as exc:
                    failures.append({"mode": mode, "run": run, "seed": seed, "error": repr(exc)})
                    log(f"run {run} {mode} FAILED: {exc!r}")
                    if not args.keep_going:
                        raise
    elapsed = time.monotonic() - began
    print(table(results, modes))
    print()
    read = next((r["priming"]["query_forms"] for r in results if "priming" in r), None)
    if read:
        by_forms: dict[str, list[str]] = {}
        for dimension, found in read.items():
            by_forms.setdefault(", ".join(found), []).append(dimension)
        listed = "; ".join(f"{f}: {', '.join(dims)}" for f, dims in by_forms.items())
        print(f"Exporters {args.exporters}, forms the example policy read: {listed}")
        print()
    for mode in modes:
        first = next((r for r in results if r["mode"] == mode), None)
        if first is not None:
            print(node_table(first))
            print()
    for r in results:
        if "audit" in r:
            print(audit_section(r))
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
    write_results(
        out_file,
        {
            "started": stamp,
            "runtime_s": round(elapsed, 1),
            "args": recorded_args(args),
            "seeds": seeds,
            # The first seed's trace, as before seeds varied; every seed's in `traces`.
            "trace": [a.__dict__ for a in bench.trace(seeds[0])],
            "traces": {str(seed): [a.__dict__ for a in bench.trace(seed)] for seed in seeds},
            "nodes": [s.__dict__ for s in bench.specs],
            "scenario": bench.scenario.name,
            "preexisting": bench.scenario.preexisting,
            "power_model": dataclasses.asdict(bench.scenario.power),
            "summary": summary(results, modes),
            "goals": goals(results, modes),
            "runs": results,
            "failures": failures,
        },
    )
    log(f"results written to {out_file}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
