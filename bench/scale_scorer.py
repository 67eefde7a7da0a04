"""The scorer at scale: `steer scorer run` on a real kube-apiserver with 5,000 fake nodes and
100,000 bound pods (or fewer), measured as the service it is.

    .venv/bin/python bench/scale_scorer.py --nodes 5000 --pods 100000
    .venv/bin/python bench/scale_scorer.py --nodes 1000 --pods 20000
    .venv/bin/python bench/scale_scorer.py --quick        # 200 nodes, 2,000 pods: smoke

Not a test: it asserts nothing, it measures. A markdown table (each goal, the value measured,
met or not) goes to stdout, progress to stderr, everything to
bench/results/scale-scorer-<UTC stamp>.json (or --json PATH). `run(args)` and
`add_arguments(parser)` let bench/scale.py offer it as a section.

Goals (the project's scale issue):
1. scorer RSS, peak (VmHWM) and steady (VmRSS over the steady cycles), <= 400 MiB;
2. process CPU per steady cycle (utime + stime from /proc/<pid>/stat between two cycle log
   lines: the cycle, and whatever the process did until the next one) <= 2 s;
3. time from the scorer's start until every node carries its budget pool and gates in
   `status.allocatable` <= 60 s; the time until every node carries its composite label is
   reported beside it;
4. after the steady state, bursts of pods bound to a few nodes, then to many: the scorer's
   writes (its `steer_scorer_write_requests_total`, the apiserver's node PATCHes by
   subresource, the node events a watch sees) and the node LISTs the apiserver served during
   each burst; goal: at most one status write per node per burst (labels only where the
   hot-node penalty moves a composite), and no node LIST.

The cluster (no kubelets, no scheduler, no controller manager):
- etcd (backend quota raised to 8 GiB) and kube-apiserver v1.36.2 with raised inflight limits
  (APISERVER_ARGS), from kits.control_plane.
- N Nodes created with their status (capacity = allocatable: 64 cores, 256 GiB, 110 pods; every
  4th node 8 `nvidia.com/gpu`; Ready; nodeInfo, addresses, ~35 images, cloud-style labels and
  annotations: 8-10 KB a Node, as real ones are).
- P pods created with `spec.nodeName` set (bound, no scheduler), ~7.5 KB each (a Deployment's
  pod: labels, annotations, owner reference, env, probes, volumes, a sidecar; the service
  account token volume the apiserver adds), then given a kubelet-like status (Running,
  PodScheduled an hour ago, container statuses): the scorer starts on a cluster whose pods
  were bound long ago, so the hot-node window counts none of them. The mix: ~1/3 plain pods
  in namespaces that are not opted in; ~1/3 tenant pods (`tenant=dept-a` / `dept-b` +
  `kube-steer.github.io/enabled=true`); ~28 % opted-in pods of no tenant; 5 % GPU pods
  (`nvidia.com/gpu: 1`, on GPU nodes only, most of them dept-a). Every opted-in pod carries what
  the webhook adds: `steer.core.mutation.mutate_pod(MutationPlan.from_policy(policy), pod, tenant)`
  applied with jsonpatch, so the shape follows the product. Non-GPU pods are spread evenly
  over all nodes.
- Prometheus 2.x backfilled with promtool (kits.prometheus_server, as bench/scorer_bench.py does)
  from a `SyntheticCluster` (kits.synthetic_exporter) with the same node names: DCGM series for
  the GPU nodes, Kepler 0.7, kube-state-metrics allocatable, blackbox probes (3 % failing),
  ±2 % noise on every gauge at every sample, one sample every --prom-step s from 6 minutes
  before the scorer starts to --horizon minutes after (Prometheus answers "now" from the
  backfilled blocks; nothing is scraped). kube-state-metrics' per-container limits would be
  2 series per pod; the overcommit dimension only ever sees their sum per node, so each node
  gets one container series whose limits are the sum of its pods' (the same answer to the
  same query from 1/20 of the series).

The scorer: `python -m steer.cli scorer run --policy <copy of examples/policy.yaml>
--prometheus <url> --kubeconfig <admin kubeconfig> --no-leader-election --listen
127.0.0.1:<port>`, the real service, in its own process. The policy copy differs from the
example only in `prometheus.url` (and `scoring.intervalSeconds` if --interval is given); write
rates stay at the example's (labels 20/s, gates and pools 100/s), so the first labelling of
5,000 nodes takes minutes by design.

Method: a node watch (opened before the scorer starts; its initial LIST is then done) notes
when each node first carries `<resourcePrefix>pool-cpu` in `status.allocatable` and the
composite label, and classifies every later node event as a status change (an owned resource
moved) or a metadata change (owned labels, annotations, taints). Watching instead of polling a
LIST: a LIST of 5,000 Nodes is ~50 MB for the apiserver and this process on two shared cores,
and it would be counted with the scorer's LISTs; one LIST confirms the count at the end of the
publication phase. The scorer's log is tailed for its cycle lines; at each one this process
reads the scorer's /proc/<pid>/stat and status. Cycles 1 and 2 are the initial ones (every node
labelled; the debounced taints set); steady cycles are the next --steady-cycles ones. Bursts
start right after a cycle line, so the next periodic cycle (and its node LIST) falls after the
burst; a burst ends when no node event came for --quiet s; whether a periodic cycle overlapped
anyway is checked and reported.

Creating 100,000 pods and their statuses takes several minutes on the 2-core machine (timed
and reported); other work on the machine shows in the load averages recorded in the JSON.
The scorer runs the working tree as it is when it starts (others edit the same tree): the JSON
names that commit and the product files then modified, beside the commit at the bench's start.

Diagnostics, with py-spy (not a project dependency; `--py-spy PATH` or on PATH): `--profile`
samples the thread holding the GIL over the steady cycles and puts the functions with the most
samples into the JSON; `--stack-dumps S` dumps every thread's stack every S s until every node
is published. `--report JSON` prints the tables of an earlier run.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import jsonpatch
import orjson
import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families
from requests.adapters import HTTPAdapter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kits.control_plane import ControlPlane  # noqa: E402
from kits.net import free_port  # noqa: E402
from kits.prometheus_server import PrometheusServer  # noqa: E402
from kits.synthetic_exporter import SyntheticCluster  # noqa: E402
from steer.core.budget import pod_usage, pool_resource  # noqa: E402
from steer.core.mutation import MutationPlan, mutate_pod  # noqa: E402
from steer.core.policy import Policy, parse_policy  # noqa: E402
from steer.core.steering import composite_key  # noqa: E402

EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
RESULTS = ROOT / "bench" / "results"
GPU = "nvidia.com/gpu"
ZONES = ("zone-a", "zone-b", "zone-c")
APISERVER_ARGS = (
    "--max-requests-inflight=3000",
    "--max-mutating-requests-inflight=1000",
)
ETCD_QUOTA_BYTES = 8 * 1024**3  # default 2 GiB: 100,000 pods and their status revisions near it
WORKERS = 32  # parallel requests when creating nodes and pods
GPU_EVERY = 4  # every 4th node has GPUs
GPUS_PER_NODE = 8
GPU_POD_SHARE = 0.05
BOUND_LONG_AGO_S = 3600.0  # PodScheduled this long before the bench started
MIB = 1024**2

GOAL_RSS_MIB = 400.0
GOAL_CPU_S = 2.0
GOAL_PUBLISH_S = 60.0

T = TypeVar("T")
R = TypeVar("R")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def in_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = WORKERS) -> list[R]:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench") as pool:
        return list(pool.map(fn, items))


def source_version() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def product_changes() -> list[str]:
    """Tracked product files that differ from the commit (others edit the same tree: the
    scorer runs whatever is there when it starts)."""
    done = subprocess.run(
        ["git", "-C", str(ROOT), "diff", "--name-only", "HEAD", "--", "scorer", "steer", "webhook"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.split()


def rfc3339(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def loadavg() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def quantile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


# -- the control plane and a raw client -----------------------------------------------------------


class ScalePlane(ControlPlane):
    """The test kit's control plane with etcd's backend quota raised (its default 2 GiB is
    within reach of 100,000 pods, each written twice)."""

    def _launch(self, name: str, args: list[str], ready_url: str, timeout: float) -> Any:
        if name == "etcd":
            args = [*args, f"--quota-backend-bytes={ETCD_QUOTA_BYTES}"]
        return super()._launch(name, args, ready_url, timeout)


class ApiError(RuntimeError):
    def __init__(self, method: str, path: str, status: int, body: str) -> None:
        super().__init__(f"{method} {path}: HTTP {status}: {body[:300]}")
        self.status = status


class Api:
    """JSON over HTTPS with the admin certificate: one requests.Session (no environment: this
    machine sets REQUESTS_CA_BUNDLE) with a connection pool as large as the thread count."""

    def __init__(self, plane: ControlPlane, pool: int = 2 * WORKERS) -> None:
        self.base = plane.url
        self.session = self._session(plane, pool)
        self._plane = plane
        self.retries = 0

    @staticmethod
    def _session(plane: ControlPlane, pool: int) -> requests.Session:
        session = requests.Session()
        session.trust_env = False
        session.verify = str(plane.ca_file)
        session.cert = (str(plane.pki_dir / "admin.crt"), str(plane.pki_dir / "admin.key"))
        session.mount("https://", HTTPAdapter(pool_connections=4, pool_maxsize=pool))
        return session

    def new_session(self) -> requests.Session:
        """A session of its own, for a long watch."""
        return self._session(self._plane, 2)

    def send(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        *,
        content_type: str = "application/json",
        params: Mapping[str, str] | None = None,
        ok: Sequence[int] = (),
        attempts: int = 6,
    ) -> requests.Response:
        """One request, retried on 429, 5xx and connection errors; other errors raise."""
        for attempt in range(1, attempts + 1):
            try:
                resp = self.session.request(
                    method,
                    self.base + path,
                    data=body,
                    headers={"Content-Type": content_type, "Accept": "application/json"},
                    params=params,
                    timeout=120,
                )
            except requests.ConnectionError:
                if attempt == attempts:
                    raise
                self.retries += 1
                time.sleep(0.2 * attempt)
                continue
            if resp.status_code < 300 or resp.status_code in ok:
                return resp
            if (resp.status_code == 429 or resp.status_code >= 500) and attempt < attempts:
                self.retries += 1
                time.sleep(0.2 * attempt)
                continue
            raise ApiError(method, path, resp.status_code, resp.text)
        raise AssertionError("unreachable")

    def json(self, method: str, path: str, body: Any = None, **kwargs: Any) -> dict[str, Any]:
        data = None if body is None else orjson.dumps(body)
        resp = self.send(method, path, data, **kwargs)
        result: dict[str, Any] = orjson.loads(resp.content) if resp.content else {}
        return result

    def pages(
        self, path: str, params: Mapping[str, str] | None = None, limit: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection, page by page, and the snapshot's resourceVersion."""
        items: list[dict[str, Any]] = []
        query = {"limit": str(limit), **(params or {})}
        while True:
            page = self.json("GET", path, params=query)
            items += page.get("items") or []
            meta = page.get("metadata") or {}
            if not meta.get("continue"):
                return items, str(meta.get("resourceVersion", ""))
            query["continue"] = meta["continue"]

    def metrics(self) -> str:
        return self.send("GET", "/metrics").text

    def close(self) -> None:
        self.session.close()


# -- the Nodes --------------------------------------------------------------------------------------

# Images a node of a busy cluster has pulled (kubelet reports up to 50): names and sizes.
_IMAGE_REPOS = (
    "registry.k8s.io/kube-proxy",
    "registry.k8s.io/pause",
    "docker.io/calico/node",
    "docker.io/calico/cni",
    "nvcr.io/nvidia/k8s-device-plugin",
    "nvcr.io/nvidia/k8s/dcgm-exporter",
    "quay.io/prometheus/node-exporter",
    "quay.io/sustainable_computing_io/kepler",
    "docker.io/fluent/fluent-bit",
    "registry.k8s.io/coredns/coredns",
    "registry.k8s.io/metrics-server/metrics-server",
    "docker.io/library/nginx",
    "docker.io/library/redis",
    "docker.io/library/postgres",
    "ghcr.io/example/orders-api",
    "ghcr.io/example/orders-worker",
    "ghcr.io/example/payments",
    "ghcr.io/example/catalog",
    "ghcr.io/example/search-indexer",
    "ghcr.io/example/frontend",
    "nvcr.io/nvidia/pytorch",
    "nvcr.io/nvidia/tritonserver",
    "docker.io/bitnami/kafka",
    "docker.io/grafana/promtail",
    "docker.io/istio/proxyv2",
    "docker.io/jaegertracing/jaeger-agent",
    "quay.io/jetstack/cert-manager-controller",
    "registry.k8s.io/ingress-nginx/controller",
    "docker.io/library/busybox",
    "docker.io/library/python",
    "docker.io/library/golang",
    "ghcr.io/example/ml-trainer",
    "ghcr.io/example/feature-store",
    "ghcr.io/example/recommender",
    "ghcr.io/example/notifications",
)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


IMAGES = tuple(
    {
        "names": [
            f"{repo}@sha256:{_digest(repo)}",
            f"{repo}:v{1 + i % 4}.{i % 10}.{(i * 7) % 13}",
        ],
        "sizeBytes": 5_000_000 + (int(_digest(repo)[:8], 16) % 900_000_000),
    }
    for i, repo in enumerate(_IMAGE_REPOS)
)


@dataclass(frozen=True)
class FakeNode:
    index: int
    name: str
    zone: str
    gpus: int = 0
    cpu: int = 64
    memory_gib: int = 256
    pods: int = 110

    @property
    def ip(self) -> str:
        return f"10.{(self.index >> 16) & 255}.{(self.index >> 8) & 255}.{self.index & 255}"

    def body(self) -> dict[str, Any]:
        """A Node with its status (kept on create: there is no kubelet to report it)."""
        capacity = {
            "cpu": str(self.cpu),
            "memory": f"{self.memory_gib}Gi",
            "pods": str(self.pods),
            "ephemeral-storage": "507944172Ki",
            "hugepages-1Gi": "0",
            "hugepages-2Mi": "0",
        }
        labels = {
            "beta.kubernetes.io/arch": "amd64",
            "beta.kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
            "kubernetes.io/hostname": self.name,
            "kubernetes.io/os": "linux",
            "node.kubernetes.io/instance-type": "p4d.24xlarge" if self.gpus else "m6i.16xlarge",
            "topology.kubernetes.io/region": "region-1",
            "topology.kubernetes.io/zone": self.zone,
            "failure-domain.beta.kubernetes.io/region": "region-1",
            "failure-domain.beta.kubernetes.io/zone": self.zone,
            "node-pool": "gpu" if self.gpus else "general",
        }
        if self.gpus:
            capacity[GPU] = str(self.gpus)
            labels |= {
                "nvidia.com/gpu.present": "true",
                "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB",
                "nvidia.com/gpu.count": str(self.gpus),
                "nvidia.com/gpu.memory": "81920",
                "nvidia.com/cuda.driver.major": "550",
            }
        now = rfc3339(time.time())
        conditions = [
            {
                "type": kind,
                "status": "False",
                "reason": f"KubeletHas{reason}",
                "message": f"kubelet has {message}",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
            for kind, reason, message in (
                ("MemoryPressure", "SufficientMemory", "sufficient memory available"),
                ("DiskPressure", "NoDiskPressure", "no disk pressure"),
                ("PIDPressure", "SufficientPID", "sufficient PID available"),
            )
        ]
        conditions.append(
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "kubelet is posting ready status (fake node)",
                "lastHeartbeatTime": now,
                "lastTransitionTime": now,
            }
        )
        machine = _digest(self.name)
        return {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": self.name,
                "labels": labels,
                "annotations": {
                    "node.alpha.kubernetes.io/ttl": "0",
                    "volumes.kubernetes.io/controller-managed-attach-detach": "true",
                    "alpha.kubernetes.io/provided-node-ip": self.ip,
                    "csi.volume.kubernetes.io/nodeid": json.dumps(
                        {"ebs.csi.aws.com": f"i-{machine[:17]}"}
                    ),
                },
            },
            "spec": {
                "podCIDR": f"10.{128 + (self.index >> 8) % 64}.{self.index & 255}.0/24",
                "podCIDRs": [f"10.{128 + (self.index >> 8) % 64}.{self.index & 255}.0/24"],
                "providerID": f"aws:///{self.zone}/i-{machine[:17]}",
            },
            "status": {
                "capacity": capacity,
                "allocatable": dict(capacity),
                "conditions": conditions,
                "addresses": [
                    {"type": "InternalIP", "address": self.ip},
                    {"type": "Hostname", "address": self.name},
                    {"type": "InternalDNS", "address": f"{self.name}.region-1.compute.internal"},
                ],
                "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
                "nodeInfo": {
                    "machineID": machine[:32],
                    "systemUUID": f"ec2{machine[3:11]}-{machine[11:15]}-{machine[15:19]}-"
                    f"{machine[19:23]}-{machine[23:35]}",
                    "bootID": _digest(self.name + "boot")[:32],
                    "kernelVersion": "6.1.0-28-cloud-amd64",
                    "osImage": "Debian GNU/Linux 12 (bookworm)",
                    "containerRuntimeVersion": "containerd://1.7.24",
                    "kubeletVersion": "v1.36.2",
                    "kubeProxyVersion": "",
                    "operatingSystem": "linux",
                    "architecture": "amd64",
                },
                "images": [dict(image) for image in IMAGES],
            },
        }


def fake_nodes(count: int) -> list[FakeNode]:
    return [
        FakeNode(
            index=i,
            name=f"node-{i:05d}",
            zone=ZONES[i % len(ZONES)],
            gpus=GPUS_PER_NODE if i % GPU_EVERY == 0 else 0,
        )
        for i in range(count)
    ]


def create_nodes(api: Api, nodes: Sequence[FakeNode]) -> None:
    made = api.json("POST", "/api/v1/nodes", nodes[0].body())
    if not (made.get("status") or {}).get("conditions"):
        raise RuntimeError("the apiserver dropped the status of a created Node")
    in_parallel(lambda n: api.send("POST", "/api/v1/nodes", orjson.dumps(n.body())), nodes[1:])


# -- the pods ---------------------------------------------------------------------------------------

OPT_IN = {"kube-steer.github.io/enabled": "true"}


@dataclass(frozen=True)
class Kind:
    """One kind of pod: its namespaces' labels, resources and whether it needs a GPU node."""

    name: str
    namespace_prefix: str
    namespace_labels: Mapping[str, str]
    cpu_m: int
    memory_mi: int
    limit_factor: float  # limits = floor(factor x requests) for cpu and memory
    gpus: int = 0

    def limits(self) -> tuple[int, int]:
        return math.floor(self.cpu_m * self.limit_factor), math.floor(
            self.memory_mi * self.limit_factor
        )


KINDS = {
    k.name: k
    for k in (
        Kind("plain", "team", {"team": "platform"}, 250, 512, 2.0),
        Kind("plain-gpu", "team", {"team": "platform"}, 2000, 8192, 1.0, gpus=1),
        Kind("no-tenant", "shared", {**OPT_IN}, 200, 256, 2.0),
        Kind("dept-a", "dept-a", {"tenant": "dept-a", **OPT_IN}, 500, 1024, 1.05),
        Kind("dept-b", "dept-b", {"tenant": "dept-b", **OPT_IN}, 500, 1024, 1.0),
        Kind("dept-a-gpu", "dept-a", {"tenant": "dept-a", **OPT_IN}, 2000, 8192, 1.05, gpus=1),
    )
}
NAMESPACES_PER_PREFIX = 5
SIDECAR = (50, 64, 100, 128)  # request cpu m, memory Mi; limit cpu m, memory Mi


def namespaces() -> dict[str, dict[str, str]]:
    """Every namespace the pods live in, with its labels."""
    out: dict[str, dict[str, str]] = {"kube-steer": {}}
    for kind in KINDS.values():
        for i in range(NAMESPACES_PER_PREFIX):
            out[f"{kind.namespace_prefix}-{i}"] = dict(kind.namespace_labels)
    return out


def ensure_namespaces(api: Api, wanted: Mapping[str, Mapping[str, str]]) -> None:
    """The namespaces and their `default` ServiceAccount (no controller manager makes it)."""

    def make(item: tuple[str, Mapping[str, str]]) -> None:
        name, labels = item
        api.send(
            "POST",
            "/api/v1/namespaces",
            orjson.dumps({"metadata": {"name": name, "labels": dict(labels)}}),
            ok=(409,),
        )
        api.send(
            "POST",
            f"/api/v1/namespaces/{name}/serviceaccounts",
            orjson.dumps({"metadata": {"name": "default"}}),
            ok=(409,),
        )

    in_parallel(make, wanted.items(), workers=8)


def base_pod(kind: Kind) -> dict[str, Any]:
    """A Deployment's pod as a team writes it (a main container and a log shipper); the
    apiserver adds defaults, the service account token volume and managedFields, and the
    status comes later: ~7.5 KB of JSON in all."""
    app = f"{kind.name}-svc"
    limit_cpu, limit_mem = kind.limits()
    main_requests: dict[str, str] = {"cpu": f"{kind.cpu_m}m", "memory": f"{kind.memory_mi}Mi"}
    main_limits: dict[str, str] = {"cpu": f"{limit_cpu}m", "memory": f"{limit_mem}Mi"}
    if kind.gpus:
        main_requests[GPU] = main_limits[GPU] = str(kind.gpus)
    side_rc, side_rm, side_lc, side_lm = SIDECAR
    if kind.limit_factor < 2:  # a budgeted tenant's sidecar keeps within the same factor
        side_lc = math.floor(side_rc * kind.limit_factor)
        side_lm = math.floor(side_rm * kind.limit_factor)
    env = [
        {"name": "APP_ENV", "value": "production"},
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "DB_HOST", "value": "postgres.databases.svc.cluster.local"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.obs:4317"},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "__NAME__",
            "namespace": "__NS__",
            "labels": {
                "app.kubernetes.io/name": app,
                "app.kubernetes.io/instance": f"{app}-prod",
                "app.kubernetes.io/version": "2.14.3",
                "pod-template-hash": "__HASH__",
            },
            "annotations": {
                "prometheus.io/scrape": "true",
                "checksum/config": _digest(app + "config"),
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": f"{app}-__HASH__",
                    "uid": "__OWNER__",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "nodeName": "__NODE__",
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": "main",
                    "image": f"ghcr.io/example/{app}:2.14.3",
                    "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": env,
                    "resources": {"requests": main_requests, "limits": main_limits},
                    "volumeMounts": [{"name": "config", "mountPath": "/etc/app"}],
                    "readinessProbe": {"httpGet": {"path": "/readyz", "port": "http"}},
                },
                {
                    "name": "log-shipper",
                    "image": "docker.io/fluent/fluent-bit:3.1.9",
                    "resources": {
                        "requests": {"cpu": f"{side_rc}m", "memory": f"{side_rm}Mi"},
                        "limits": {"cpu": f"{side_lc}m", "memory": f"{side_lm}Mi"},
                    },
                },
            ],
            "volumes": [{"name": "config", "configMap": {"name": f"{app}-config"}}],
        },
    }


@dataclass(frozen=True)
class Template:
    """A kind's pod as created (mutated when its namespace is opted in), as JSON text with
    placeholders, and what the webhook did to it."""

    kind: Kind
    text: bytes
    mutated: bool
    rules: tuple[str, ...]
    patch_ops: int
    limits_cpu_m: int  # the pod's limits, for the kube-state-metrics sums
    limits_memory: int


def templates(policy: Policy) -> dict[str, Template]:
    plan = MutationPlan.from_policy(policy)
    out = {}
    for kind in KINDS.values():
        pod = base_pod(kind)
        ns = f"{kind.namespace_prefix}-0"
        rules: tuple[str, ...] = ()
        ops = 0
        mutated = plan.opted_in(ns, kind.namespace_labels)
        if mutated:
            pod["metadata"]["namespace"] = ns
            mutation = mutate_pod(plan, pod, plan.tenant(kind.namespace_labels))
            pod = jsonpatch.apply_patch(pod, list(mutation.ops))
            pod["metadata"]["namespace"] = "__NS__"
            rules, ops = tuple(mutation.in_effect), len(mutation.ops)
        usage = pod_usage(pod["spec"])
        out[kind.name] = Template(
            kind,
            orjson.dumps(pod),
            mutated,
            rules,
            ops,
            usage.limit_cpu_m,
            usage.limit_memory,
        )
    return out


@dataclass(frozen=True)
class PodSpec:
    """One pod to create: where it goes and what it is."""

    name: str
    namespace: str
    node: str
    kind: str

    def body(self, template: Template) -> bytes:
        hashed = _digest(self.name)
        return (
            template.text.replace(b"__NAME__", self.name.encode())
            .replace(b"__NS__", self.namespace.encode())
            .replace(b"__NODE__", self.node.encode())
            .replace(b"__HASH__", hashed[:10].encode())
            .replace(
                b"__OWNER__",
                f"{hashed[:8]}-{hashed[8:12]}-{hashed[12:16]}-{hashed[16:20]}-{hashed[20:32]}".encode(),
            )
        )


# Of the pods that are not GPU pods: 35 % plain, 35 % tenant (half each), 30 % opted in with no
# tenant; with the GPU pods, about 1/3 plain, 1/3 tenant pods.
NON_GPU_KINDS = ("plain", "dept-a", "dept-b", "no-tenant")
NON_GPU_WEIGHTS = (0.35, 0.175, 0.175, 0.30)


def pod_plan(nodes: Sequence[FakeNode], count: int, seed: int, prefix: str = "p") -> list[PodSpec]:
    """`count` pods: GPU pods (5 %) round robin over the GPU nodes, the rest spread evenly."""
    rng = random.Random(seed)
    gpu_nodes = [n for n in nodes if n.gpus]
    out = []
    gpu_i = 0
    for i in range(count):
        r = rng.random()
        if gpu_nodes and r < GPU_POD_SHARE:
            kind = "dept-a-gpu" if rng.random() < 0.75 else "plain-gpu"
            node = gpu_nodes[gpu_i % len(gpu_nodes)]
            gpu_i += 1
        else:
            kind = rng.choices(NON_GPU_KINDS, NON_GPU_WEIGHTS)[0]
            node = nodes[(i * 7919) % len(nodes)]
        ns = f"{KINDS[kind].namespace_prefix}-{rng.randrange(NAMESPACES_PER_PREFIX)}"
        out.append(PodSpec(f"{KINDS[kind].name}-{prefix}{i:06d}", ns, node.name, kind))
    return out


def pod_status(spec: PodSpec, index: int, node_ip: str, bound_at: float) -> bytes:
    """What a kubelet would have reported for a pod running since `bound_at`."""
    at = rfc3339(bound_at)
    started = rfc3339(bound_at + 4)
    pod_ip = f"10.{128 + (index >> 16) % 64}.{(index >> 8) & 255}.{index & 255}"
    hashed = _digest(spec.name)

    def container(name: str, image: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{_digest(image)}",
            "containerID": f"containerd://{_digest(hashed + name)}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": started}},
        }

    app = f"{KINDS[spec.kind].name}-svc"
    conditions = [
        {"type": kind, "status": "True", "lastProbeTime": None, "lastTransitionTime": when}
        for kind, when in (
            ("Initialized", at),
            ("Ready", started),
            ("ContainersReady", started),
            ("PodScheduled", at),
        )
    ]
    return orjson.dumps(
        {
            "status": {
                "phase": "Running",
                "conditions": conditions,
                "hostIP": node_ip,
                "hostIPs": [{"ip": node_ip}],
                "podIP": pod_ip,
                "podIPs": [{"ip": pod_ip}],
                "startTime": at,
                "containerStatuses": [
                    container("main", f"ghcr.io/example/{app}:2.14.3"),
                    container("log-shipper", "docker.io/fluent/fluent-bit:3.1.9"),
                ],
            }
        }
    )


class Progress:
    def __init__(self, what: str, total: int) -> None:
        self.what, self.total = what, total
        self.done = 0
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._next = max(1, total // 10)

    def step(self) -> None:
        with self._lock:
            self.done += 1
            if self.done % self._next == 0 or self.done == self.total:
                elapsed = time.monotonic() - self._t0
                log(
                    f"   {self.what}: {self.done:,}/{self.total:,} in {elapsed:.0f} s "
                    f"({self.done / max(elapsed, 1e-9):.0f}/s)"
                )


def create_pods(
    api: Api,
    specs: Sequence[PodSpec],
    tmpl: Mapping[str, Template],
    what: str = "pods created",
    quiet: bool = False,
) -> float:
    progress = None if quiet else Progress(what, len(specs))

    def create(spec: PodSpec) -> None:
        api.send("POST", f"/api/v1/namespaces/{spec.namespace}/pods", spec.body(tmpl[spec.kind]))
        if progress:
            progress.step()

    t0 = time.monotonic()
    in_parallel(create, specs)
    return time.monotonic() - t0


def set_pod_statuses(
    api: Api, specs: Sequence[PodSpec], node_ips: Mapping[str, str], bound_at: float
) -> float:
    progress = Progress("pod statuses set", len(specs))

    def patch(item: tuple[int, PodSpec]) -> None:
        i, spec = item
        api.send(
            "PATCH",
            f"/api/v1/namespaces/{spec.namespace}/pods/{spec.name}/status",
            pod_status(spec, i, node_ips[spec.node], bound_at),
            content_type="application/merge-patch+json",
        )
        progress.step()

    t0 = time.monotonic()
    in_parallel(patch, list(enumerate(specs)))
    return time.monotonic() - t0


def delete_pods(api: Api, specs: Sequence[PodSpec]) -> float:
    body = orjson.dumps({"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0})

    def delete(spec: PodSpec) -> None:
        api.send("DELETE", f"/api/v1/namespaces/{spec.namespace}/pods/{spec.name}", body, ok=(404,))

    t0 = time.monotonic()
    in_parallel(delete, specs)
    return time.monotonic() - t0


# -- Prometheus -------------------------------------------------------------------------------------


def synthetic_cluster(
    nodes: Sequence[FakeNode], specs: Sequence[PodSpec], tmpl: Mapping[str, Template], seed: int
) -> SyntheticCluster:
    """The exporters' view of the same nodes: GPU load and memory, power, probes (3 %
    failing, 10 % of GPU nodes hot), allocatable, and per node one container whose limits are
    the sum of its pods' (what the overcommit query sums)."""
    rng = random.Random(seed)
    cluster = SyntheticCluster(nodes=0, seed=seed, noise_pct=2.0, kepler_styles=("0.7",))
    sums: dict[str, list[int]] = {}
    for spec in specs:
        total = sums.setdefault(spec.node, [0, 0])
        total[0] += tmpl[spec.kind].limits_cpu_m
        total[1] += tmpl[spec.kind].limits_memory
    for node in nodes:
        cluster.add_node(node.name, gpus=node.gpus, cpu_cores=node.cpu, memory_gib=node.memory_gib)
        if node.gpus:
            hot = rng.random() < 0.10
            base = 97.0 if hot else rng.uniform(0, 85)
            for gpu in range(node.gpus):
                util = base if hot else min(100.0, max(0.0, base + rng.uniform(-10, 10)))
                cluster.set_gpu_util(node.name, util, gpu=gpu)
                cluster.set_gpu_memory(node.name, rng.choice([0, 0, 2048, 40000, 81920]), gpu=gpu)
        cluster.set_power(node.name, platform_watts=rng.uniform(250, 700))
        cpu_m, memory = sums.get(node.name, [0, 0])
        if cpu_m:
            cluster.add_container(
                node.name,
                "kube-state-metrics-sum",
                f"pods-on-{node.name}",
                requests={"cpu": cpu_m / 1000 / 2, "memory": memory / 2},
                limits={"cpu": cpu_m / 1000, "memory": float(memory)},
            )
        if rng.random() < 0.03:
            cluster.set_probe(node.name, False)
    return cluster


@dataclass
class PromSetup:
    series: int
    samples: int
    render_s: float
    backfill_s: float
    first_sample: float
    last_sample: float


def backfilled_prometheus(
    cluster: SyntheticCluster, workdir: Path, step_s: float, horizon_s: float
) -> tuple[PrometheusServer, PromSetup]:
    now = time.time()
    first = now - 360
    count = int((horizon_s + 360) // step_s) + 1
    times = [first + i * step_s for i in range(count)]
    data = workdir / "cluster.om"
    t0 = time.monotonic()
    with data.open("w") as out:
        cluster.write_openmetrics(out, times)
    render_s = time.monotonic() - t0
    last_ts = f" {times[-1]:.3f}\n"
    series = 0
    with data.open() as lines:
        for line in lines:
            if line.endswith(last_ts):
                series += 1
    prom = PrometheusServer([], startup_timeout_s=300)
    t1 = time.monotonic()
    prom.backfill_file(data)
    backfill_s = time.monotonic() - t1
    data.unlink()
    return prom, PromSetup(series, series * count, render_s, backfill_s, times[0], times[-1])


# -- metrics -------------------------------------------------------------------------------------------

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def apiserver_requests(text: str) -> dict[str, float]:
    """`apiserver_request_total` for nodes and pods, summed by `resource/subresource VERB`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        head, _, value = line.rpartition(" ")
        labels = dict(_LABEL.findall(head))
        if labels.get("resource") not in ("nodes", "pods"):
            continue
        sub = labels.get("subresource") or ""
        key = f"{labels['resource']}{'/' + sub if sub else ''} {labels.get('verb', '')}"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def scorer_metrics(text: str) -> dict[str, float]:
    """The scorer's counters and histogram sums/counts, one number per series."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {
        k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v != before.get(k, 0.0)
    }


# -- the node watch -------------------------------------------------------------------------------


@dataclass
class NodeSeen:
    pool_at: float | None = None
    label_at: float | None = None
    resources: dict[str, str] = field(default_factory=dict)
    owned_meta: str = ""


@dataclass(frozen=True)
class NodeEvent:
    at: float
    node: str
    status: bool  # an owned resource in status.allocatable changed
    metadata: bool  # owned labels, annotations or taints changed


class NodeWatch:
    """List every Node, then watch: when each first carries its pool and its composite label,
    and every later change classified (status / metadata). Times are monotonic seconds."""

    def __init__(self, api: Api, policy: Policy) -> None:
        self.api = api
        self.pool_key = pool_resource(policy, "cpu")
        self.label_key = composite_key(policy, None)
        self.label_prefix = policy.spec.label_prefix
        self.resource_prefix = policy.spec.resource_prefix
        self.nodes: dict[str, NodeSeen] = {}
        self.events: list[NodeEvent] = []
        self.last_event = 0.0
        self.restarts = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._session = api.new_session()
        self._thread: threading.Thread | None = None
        self._rv = ""
        self.list_s = 0.0

    def start(self) -> None:
        t0 = time.monotonic()
        items, self._rv = self.api.pages("/api/v1/nodes")
        self.list_s = time.monotonic() - t0
        for obj in items:
            self._see(obj, t0, initial=True)
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._thread.start()

    def _owned(self, obj: Mapping[str, Any]) -> tuple[dict[str, str], str]:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        resources = {
            k: str(v)
            for k, v in (status.get("allocatable") or {}).items()
            if k.startswith(self.resource_prefix)
        }
        owned = {
            "labels": {
                k: v
                for k, v in (meta.get("labels") or {}).items()
                if k.startswith(self.label_prefix)
            },
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k.startswith(self.label_prefix)
            },
            "taints": (obj.get("spec") or {}).get("taints") or [],
        }
        return resources, orjson.dumps(owned, option=orjson.OPT_SORT_KEYS).decode()

    def _see(self, obj: Mapping[str, Any], now: float, initial: bool = False) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        resources, owned = self._owned(obj)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        with self._lock:
            seen = self.nodes.get(name)
            if seen is None:
                seen = self.nodes[name] = NodeSeen(resources=resources, owned_meta=owned)
                changed_status = changed_meta = False
            else:
                changed_status = resources != seen.resources
                changed_meta = owned != seen.owned_meta
                seen.resources, seen.owned_meta = resources, owned
            if seen.pool_at is None and self.pool_key in resources:
                seen.pool_at = now
            if seen.label_at is None and self.label_key in labels:
                seen.label_at = now
            if not initial:
                self.events.append(NodeEvent(now, name, changed_status, changed_meta))
                self.last_event = now

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                resp = self._session.get(
                    self.api.base + "/api/v1/nodes",
                    params={
                        "watch": "true",
                        "resourceVersion": self._rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": "3600",
                    },
                    stream=True,
                    timeout=(10, 120),
                )
                if resp.status_code == 410:
                    raise RuntimeError("node watch: 410 Gone")
                resp.raise_for_status()
                for line in resp.iter_lines(chunk_size=65536):
                    if self._stop.is_set():
                        return
                    if not line:
                        continue
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._see(obj, time.monotonic())
                    elif event.get("type") == "ERROR":
                        raise RuntimeError(f"node watch error: {obj}")
                    if rv:
                        self._rv = str(rv)
            except Exception as exc:  # a dropped watch resumes from the last version seen
                if self._stop.is_set():
                    return
                self.restarts += 1
                log(f"   node watch ended ({exc}); resuming")
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._session.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            pools = sum(1 for s in self.nodes.values() if s.pool_at is not None)
            labels = sum(1 for s in self.nodes.values() if s.label_at is not None)
        return pools, labels

    def times(self) -> tuple[list[float], list[float]]:
        with self._lock:
            return (
                [s.pool_at for s in self.nodes.values() if s.pool_at is not None],
                [s.label_at for s in self.nodes.values() if s.label_at is not None],
            )

    def events_between(self, start: float, end: float) -> list[NodeEvent]:
        with self._lock:
            return [e for e in self.events if start <= e.at <= end]


# -- the scorer process ---------------------------------------------------------------------------

_CYCLE = re.compile(r"cycle: (\d+) nodes, (\d+) changed, (\d+) written, ([\d.]+)s")
_POD_LIST = re.compile(r"pod list: (\d+) bound pods")
CLOCK_TICK = os.sysconf("SC_CLK_TCK")


@dataclass
class ProcSample:
    at: float  # monotonic seconds
    cpu_s: float
    rss_mib: float
    hwm_mib: float
    threads: int


def read_proc(pid: int) -> ProcSample:
    now = time.monotonic()
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    cpu = (int(fields[11]) + int(fields[12])) / CLOCK_TICK
    status = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        status[key] = value.strip()

    def kib(key: str) -> float:
        return int(status.get(key, "0 kB").split()[0]) / 1024

    return ProcSample(now, cpu, kib("VmRSS"), kib("VmHWM"), int(status.get("Threads", "0")))


@dataclass
class CycleLine:
    index: int
    at: float  # monotonic, when this process read the line
    nodes: int
    changed: int
    written: int
    duration_s: float
    proc: ProcSample

    @property
    def started(self) -> float:
        return self.at - self.duration_s


class ScorerProcess:
    """`steer scorer run` in its own process; its log tailed for cycle lines (each stamped with
    the process's CPU and memory as read then), its memory sampled every second."""

    def __init__(self, policy_file: Path, prom_url: str, kubeconfig: Path, workdir: Path) -> None:
        self.port = free_port()
        self.log_path = workdir / "scorer.log"
        self.command = [
            sys.executable,
            "-m",
            "steer.cli",
            "scorer",
            "run",
            "--policy",
            str(policy_file),
            "--prometheus",
            prom_url,
            "--kubeconfig",
            str(kubeconfig),
            "--no-leader-election",
            "--listen",
            f"127.0.0.1:{self.port}",
        ]
        self.cycles: list[CycleLine] = []
        self.samples: list[ProcSample] = []
        self.pod_list: tuple[float, int] | None = None
        self.problems: list[str] = []  # WARNING / ERROR lines and tracebacks
        self.problem_count: Counter[str] = Counter()
        self.problem_kinds: Counter[str] = Counter()  # digits blanked: one entry per message
        self.started = 0.0
        self.proc: subprocess.Popen[bytes] | None = None
        self._stop = threading.Event()
        self._cond = threading.Condition()
        self._threads: list[threading.Thread] = []
        self._session = requests.Session()
        self._session.trust_env = False
        self.last: ProcSample | None = None

    def start(self) -> None:
        env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost", "PYTHONUNBUFFERED": "1"}
        with self.log_path.open("wb") as out:
            self.started = time.monotonic()
            self.proc = subprocess.Popen(
                self.command,
                cwd=ROOT,
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,
            )
        for target, name in ((self._tail, "scorer-log"), (self._sample, "scorer-proc")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def _tail(self) -> None:
        with self.log_path.open("rb") as log_file:
            pending = b""
            while True:
                chunk = log_file.readline()
                if not chunk:
                    if self._stop.is_set():
                        return
                    time.sleep(0.05)
                    continue
                pending += chunk
                if not pending.endswith(b"\n"):
                    continue
                self._line(pending.decode(errors="replace").rstrip("\n"))
                pending = b""

    def _line(self, line: str) -> None:
        match = _CYCLE.search(line)
        if match and " scorer.loop: " in line:
            try:
                proc = read_proc(self.pid)
            except (FileNotFoundError, ProcessLookupError):
                return
            with self._cond:
                self.cycles.append(
                    CycleLine(
                        len(self.cycles) + 1,
                        proc.at,
                        int(match[1]),
                        int(match[2]),
                        int(match[3]),
                        float(match[4]),
                        proc,
                    )
                )
                self._cond.notify_all()
            return
        match = _POD_LIST.search(line)
        if match:
            self.pod_list = (time.monotonic(), int(match[1]))
        level = next((lv for lv in ("WARNING", "ERROR", "CRITICAL") if f" {lv} " in line), None)
        if level or line.startswith("Traceback") or line.startswith("  "):
            self.problem_count[level or "traceback"] += 1
            self.problem_kinds[re.sub(r"\d+", "#", line.split(" ", 2)[-1])[:200]] += 1
            if len(self.problems) < 60:
                self.problems.append(line[:400])

    def _sample(self) -> None:
        while not self._stop.wait(1.0):
            try:
                sample = read_proc(self.pid)
            except (FileNotFoundError, ProcessLookupError):
                return
            self.samples.append(sample)
            self.last = sample

    def wait_cycle(self, after: int, timeout: float) -> CycleLine | None:
        """The first cycle line with index > `after`, or None on timeout / exit."""
        deadline = time.monotonic() + timeout
        with self._cond:
            while len(self.cycles) <= after:
                left = deadline - time.monotonic()
                if left <= 0 or not self.alive():
                    return None
                self._cond.wait(min(left, 1.0))
            return self.cycles[after]

    def metrics(self) -> dict[str, float]:
        resp = self._session.get(f"http://127.0.0.1:{self.port}/metrics", timeout=30)
        resp.raise_for_status()
        return scorer_metrics(resp.text)

    def stop(self) -> int | None:
        code = None
        if self.proc is not None:
            if self.proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self.proc.pid, signal.SIGTERM)
                try:
                    code = self.proc.wait(timeout=60)
                except subprocess.TimeoutExpired:
                    os.kill(self.proc.pid, signal.SIGKILL)
                    code = self.proc.wait()
            else:
                code = self.proc.returncode
        time.sleep(0.3)
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=5)
        self._session.close()
        return code

    def log_tail(self, lines: int = 30) -> list[str]:
        try:
            return self.log_path.read_text(errors="replace").splitlines()[-lines:]
        except FileNotFoundError:
            return []


# -- phases -----------------------------------------------------------------------------------------


def stack_dump(py_spy: str, pid: int) -> str:
    """Every thread's Python stack in the scorer now (py-spy dump; needs ptrace, as root)."""
    done = subprocess.run(
        [py_spy, "dump", "--nonblocking", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (done.stdout or done.stderr)[-6000:]


def wait_publication(
    scorer: ScorerProcess,
    watch: NodeWatch,
    nodes: int,
    timeout: float,
    dumps: list[dict[str, Any]],
    py_spy: str | None = None,
    dump_every_s: float = 0.0,
) -> dict[str, Any]:
    """Until every node has its pool and its composite label (or the timeout); with py-spy,
    the scorer's stacks every `dump_every_s` meanwhile."""
    t0 = scorer.started
    deadline = time.monotonic() + timeout
    last_report = 0.0
    last_dump = t0
    while time.monotonic() < deadline and scorer.alive():
        pools, labels = watch.counts()
        now = time.monotonic()
        if py_spy and dump_every_s > 0 and now - last_dump >= dump_every_s:
            last_dump = now
            dumps.append({"t_s": round(now - t0, 1), "stacks": stack_dump(py_spy, scorer.pid)})
        if now - last_report >= 10:
            last_report = now
            rss = scorer.last.rss_mib if scorer.last else 0
            log(
                f"   t+{now - t0:.0f} s: {pools:,}/{nodes:,} nodes with pools, "
                f"{labels:,}/{nodes:,} labelled; scorer RSS {rss:.0f} MiB, "
                f"{len(scorer.cycles)} cycles done"
            )
        if pools >= nodes and labels >= nodes:
            break
        time.sleep(0.5)
    pool_times, label_times = watch.times()

    def rel(values: list[float], q: float) -> float | None:
        v = quantile(values, q) if len(values) >= nodes else None
        return None if v is None else round(v - t0, 2)

    pools, labels = watch.counts()
    out = {
        "nodes": nodes,
        "nodes_with_pool": pools,
        "nodes_labelled": labels,
        # /readyz answers 200 once the first cycle is done: its log line, not polled (each
        # poll would be a log line and CPU in the process measured).
        "first_cycle_done_s": round(scorer.cycles[0].at - t0, 2) if scorer.cycles else None,
        "ledger_synced_s": None if scorer.pod_list is None else round(scorer.pod_list[0] - t0, 2),
        "ledger_pods": None if scorer.pod_list is None else scorer.pod_list[1],
        "first_pool_s": round(min(pool_times) - t0, 2) if pool_times else None,
        "all_pools_s": rel(pool_times, 1.0),
        "pools_p50_s": rel(pool_times, 0.5),
        "pools_p90_s": rel(pool_times, 0.9),
        "first_label_s": round(min(label_times) - t0, 2) if label_times else None,
        "all_labels_s": rel(label_times, 1.0),
        "labels_p50_s": rel(label_times, 0.5),
        "labels_p90_s": rel(label_times, 0.9),
        "scorer_rss_mib": round(scorer.last.rss_mib, 1) if scorer.last else None,
        "scorer_hwm_mib": round(scorer.last.hwm_mib, 1) if scorer.last else None,
        "cycles_done": len(scorer.cycles),
    }
    # One LIST, as a client would check: every node's status.allocatable.
    items, _ = watch.api.pages("/api/v1/nodes")
    out["list_nodes_with_pool"] = sum(
        1 for n in items if watch.pool_key in ((n.get("status") or {}).get("allocatable") or {})
    )
    out["list_nodes_labelled"] = sum(
        1 for n in items if watch.label_key in ((n.get("metadata") or {}).get("labels") or {})
    )
    return out


@dataclass(frozen=True)
class BurstSpec:
    name: str
    action: str  # create | delete
    pods: tuple[PodSpec, ...]


def burst_specs(nodes: Sequence[FakeNode], seed: int) -> list[BurstSpec]:
    """50 pods on 10 nodes (5 each), 600 pods spread over up to 600 nodes, then the 50 deleted."""
    rng = random.Random(seed + 7)
    gpu = [n for n in nodes if n.gpus]
    cpu = [n for n in nodes if not n.gpus]
    few = rng.sample(gpu, min(3, len(gpu))) + rng.sample(cpu, min(10 - min(3, len(gpu)), len(cpu)))
    cycle = ("dept-a", "dept-b", "no-tenant", "plain")

    def pods(targets: Sequence[FakeNode], per_node: int, prefix: str) -> tuple[PodSpec, ...]:
        out = []
        for j in range(len(targets) * per_node):
            node = targets[j % len(targets)]
            kind = cycle[j % len(cycle)]
            if node.gpus and j % 5 == 0:
                kind = "dept-a-gpu"
            ns = f"{KINDS[kind].namespace_prefix}-{j % NAMESPACES_PER_PREFIX}"
            out.append(PodSpec(f"{KINDS[kind].name}-{prefix}{j:05d}", ns, node.name, kind))
        return tuple(out)

    spread_nodes = rng.sample(list(nodes), min(600, len(nodes)))
    per_node = max(1, math.ceil(600 / len(spread_nodes)))
    first = pods(few, 5, "burst-a")
    spread = pods(spread_nodes, per_node, "burst-b")[:600]
    return [
        BurstSpec(f"{len(first)} pods onto {len(few)} nodes", "create", first),
        BurstSpec(f"{len(spread)} pods spread over {len(spread_nodes)} nodes", "create", spread),
        BurstSpec(f"delete the {len(first)} pods of the first burst", "delete", first),
    ]


def run_burst(
    api: Api,
    scorer: ScorerProcess,
    watch: NodeWatch,
    spec: BurstSpec,
    tmpl: Mapping[str, Template],
    quiet_s: float,
    interval_s: float,
) -> dict[str, Any]:
    """Right after a cycle line: the burst, then wait until no node event came for `quiet_s`."""
    line = scorer.wait_cycle(len(scorer.cycles), timeout=interval_s * 4 + 120)
    if line is None:
        return {"name": spec.name, "error": "no scorer cycle to start after"}
    before_api = apiserver_requests(api.metrics())
    before = scorer.metrics()
    proc0 = read_proc(scorer.pid)
    t0 = time.monotonic()
    if spec.action == "create":
        action_s = create_pods(api, spec.pods, tmpl, quiet=True)
    else:
        action_s = delete_pods(api, spec.pods)
    t_done = time.monotonic()
    deadline = t_done + max(120.0, 4 * interval_s)
    while time.monotonic() < deadline:
        last = max(watch.last_event, t_done)
        if time.monotonic() - last >= quiet_s:
            break
        time.sleep(0.2)
    t_end = time.monotonic()
    after = scorer.metrics()
    after_api = apiserver_requests(api.metrics())
    proc1 = read_proc(scorer.pid)
    events = watch.events_between(t0, t_end)
    per_node = Counter(e.node for e in events)
    status_per_node = Counter(e.node for e in events if e.status)
    meta_per_node = Counter(e.node for e in events if e.metadata)
    targets = {p.node for p in spec.pods}
    api_delta = delta(after_api, before_api)
    scorer_delta = delta(after, before)
    result = {
        "name": spec.name,
        "action": spec.action,
        "pods": len(spec.pods),
        "nodes_targeted": len(targets),
        "after_cycle": line.index,
        "started_s_after_cycle": round(t0 - line.at, 2),
        "action_s": round(action_s, 2),
        "window_s": round(t_end - t0, 2),
        "last_node_event_s": round(max((e.at for e in events), default=t0) - t0, 2),
        "scorer_write_requests": scorer_delta.get("steer_scorer_write_requests_total", 0.0),
        "scorer_node_writes_ok": scorer_delta.get("steer_scorer_node_writes_total{result=ok}", 0),
        "scorer_node_writes_error": scorer_delta.get(
            "steer_scorer_node_writes_total{result=error}", 0
        ),
        "scorer_conflicts": scorer_delta.get("steer_scorer_write_conflicts_total", 0.0),
        "apiserver_node_status_patches": api_delta.get("nodes/status PATCH", 0.0),
        "apiserver_node_patches": api_delta.get("nodes PATCH", 0.0),
        "apiserver_node_lists": api_delta.get("nodes LIST", 0.0),
        "apiserver_node_gets": api_delta.get("nodes GET", 0.0),
        "apiserver_pod_lists": api_delta.get("pods LIST", 0.0),
        "node_events": len(events),
        "nodes_written": len(per_node),
        "nodes_written_outside_targets": len(set(per_node) - targets),
        "max_events_one_node": max(per_node.values(), default=0),
        "max_status_writes_one_node": max(status_per_node.values(), default=0),
        "nodes_status_written": len(status_per_node),
        "nodes_status_written_twice_or_more": sum(1 for v in status_per_node.values() if v > 1),
        "nodes_metadata_written": len(meta_per_node),
        "max_metadata_writes_one_node": max(meta_per_node.values(), default=0),
        "scorer_cpu_s": round(proc1.cpu_s - proc0.cpu_s, 2),
        "t0": t0,
        "t_end": t_end,
        "apiserver_delta": api_delta,
        "scorer_delta": {
            k: v for k, v in scorer_delta.items() if not k.startswith("steer_scorer_dimension_age")
        },
    }
    result["periodic_cycle_overlapped"] = overlapped(scorer.cycles, result)
    return result


def overlapped(cycles: Sequence[CycleLine], burst: Mapping[str, Any]) -> bool:
    """A periodic cycle (after the one the burst followed) ran during the burst's window."""
    return any(
        c.index > burst["after_cycle"] and c.at >= burst["t0"] and c.started <= burst["t_end"]
        for c in cycles
    )


# -- the run --------------------------------------------------------------------------------------


def policy_copy(prom_url: str, interval: int | None) -> tuple[str, dict[str, Any]]:
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    changes: dict[str, Any] = {"spec.prometheus.url": prom_url}
    doc["spec"]["prometheus"]["url"] = prom_url
    if interval is not None:
        doc["spec"]["scoring"]["intervalSeconds"] = interval
        changes["spec.scoring.intervalSeconds"] = interval
    return yaml.safe_dump(doc, sort_keys=False), changes


def object_sizes(api: Api, nodes: Sequence[FakeNode], specs: Sequence[PodSpec]) -> dict[str, Any]:
    """Bytes of the JSON the apiserver returns for a node and a pod of each kind."""
    out: dict[str, Any] = {}
    for node in [*nodes[:1], *[n for n in nodes if n.gpus][:1]]:
        out[f"node ({'gpu' if node.gpus else 'cpu'})"] = len(
            api.send("GET", f"/api/v1/nodes/{node.name}").content
        )
    seen: set[str] = set()
    sizes = []
    for spec in specs:
        if spec.kind in seen:
            continue
        seen.add(spec.kind)
        size = len(api.send("GET", f"/api/v1/namespaces/{spec.namespace}/pods/{spec.name}").content)
        out[f"pod {spec.kind}"] = size
        sizes.append(size)
    if sizes:
        out["pod mean of kinds"] = round(statistics.mean(sizes))
    return out


def run(args: argparse.Namespace) -> int:
    if args.report:
        print(report(json.loads(Path(args.report).read_text())))
        return 0
    if args.quick:
        args.nodes, args.pods = 200, 2000
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out_file = args.json or RESULTS / f"scale-scorer-{stamp}.json"
    source = source_version()
    began = time.monotonic()
    doc: dict[str, Any] = {
        "section": "scorer",
        "started": stamp,
        "source": source,
        "args": {
            k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items() if k != "func"
        },
        "machine": {"cpus": os.cpu_count(), "loadavg_start": loadavg()},
        "apiserver_args": list(APISERVER_ARGS),
        "etcd_quota_bytes": ETCD_QUOTA_BYTES,
    }
    log(f"scale scorer: {args.nodes:,} nodes, {args.pods:,} pods ({source})")
    with contextlib.ExitStack() as stack:
        if args.workdir:
            workdir = Path(args.workdir)
            workdir.mkdir(parents=True, exist_ok=True)
        else:
            workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="steer-sc-")))
        try:
            measure(args, workdir, doc, stack)
        except BaseException as exc:
            doc["error"] = f"{type(exc).__name__}: {exc}"
            log(f"run failed: {doc['error']}")
            if not isinstance(exc, Exception):
                raise
        finally:
            doc["runtime_s"] = round(time.monotonic() - began, 1)
            doc["machine"]["loadavg_end"] = loadavg()
            out_file.parent.mkdir(parents=True, exist_ok=True)
            out_file.write_text(json.dumps(doc, indent=1, default=str))
    print(report(doc))
    log(f"results written to {out_file}")
    return 1 if "error" in doc else 0


def measure(
    args: argparse.Namespace, workdir: Path, doc: dict[str, Any], stack: contextlib.ExitStack
) -> None:
    setup: dict[str, Any] = doc.setdefault("setup", {})
    t = time.monotonic()
    plane = ScalePlane.start(workdir / "plane", scheduler=False, apiserver_args=APISERVER_ARGS)
    stack.callback(plane.stop)
    api = Api(plane)
    stack.callback(api.close)
    setup["control_plane_s"] = round(time.monotonic() - t, 1)
    base_policy = parse_policy(EXAMPLE_POLICY.read_text())
    tmpl = templates(base_policy)
    doc["pod_kinds"] = {
        name: {
            "namespace_labels": dict(t.kind.namespace_labels),
            "mutated": t.mutated,
            "rules_in_effect": list(t.rules),
            "patch_ops": t.patch_ops,
        }
        for name, t in tmpl.items()
    }
    nodes = fake_nodes(args.nodes)
    log(f"creating {len(nodes):,} nodes ...")
    t = time.monotonic()
    create_nodes(api, nodes)
    setup["nodes_create_s"] = round(time.monotonic() - t, 1)
    log(f"   {len(nodes):,} nodes in {setup['nodes_create_s']} s")
    ensure_namespaces(api, namespaces())
    specs = pod_plan(nodes, args.pods, args.seed)
    setup["pods_by_kind"] = dict(Counter(s.kind for s in specs))
    bound_at = time.time() - BOUND_LONG_AGO_S
    log(f"creating {len(specs):,} bound pods ({WORKERS} threads) ...")
    setup["pods_create_s"] = round(create_pods(api, specs, tmpl), 1)
    log(f"setting {len(specs):,} pod statuses (Running, PodScheduled an hour ago) ...")
    node_ips = {n.name: n.ip for n in nodes}
    setup["pods_status_s"] = round(set_pod_statuses(api, specs, node_ips, bound_at), 1)
    setup["pods_per_s"] = round(len(specs) / max(setup["pods_create_s"], 1e-9), 1)
    setup["client_retries"] = api.retries
    setup["object_bytes"] = object_sizes(api, nodes, specs)
    log(f"   object sizes (bytes of JSON): {setup['object_bytes']}")

    log("rendering and backfilling Prometheus ...")
    cluster = synthetic_cluster(nodes, specs, tmpl, args.seed)
    prom, prom_setup = backfilled_prometheus(cluster, workdir, args.prom_step, args.horizon * 60.0)
    del cluster
    doc["prometheus"] = asdict(prom_setup)
    prom.start()
    stack.callback(prom.stop)
    log(
        f"   {prom_setup.series:,} series x {prom_setup.samples // max(prom_setup.series, 1)} "
        f"samples: rendered in {prom_setup.render_s:.0f} s, backfilled in "
        f"{prom_setup.backfill_s:.0f} s; data until t+{args.horizon} min"
    )
    policy_text, changes = policy_copy(prom.url, args.interval)
    policy_file = workdir / "policy.yaml"
    policy_file.write_text(policy_text)
    policy = parse_policy(policy_text)
    interval = policy.spec.scoring.interval_seconds
    doc["policy"] = {"file": "examples/policy.yaml", "changed": changes}

    watch = NodeWatch(api, policy)
    watch.start()
    stack.callback(watch.stop)
    setup["bench_node_list_s"] = round(watch.list_s, 2)
    api_at_start = apiserver_requests(api.metrics())

    scorer = ScorerProcess(policy_file, prom.url, plane.kubeconfig, workdir)
    doc["source_at_scorer_start"] = source_version()
    doc["product_files_changed_at_scorer_start"] = product_changes()
    log(f"starting the scorer ({doc['source_at_scorer_start']}): {' '.join(scorer.command[1:])}")
    scorer.start()
    stack.callback(scorer.stop)
    data_until = time.monotonic() + (prom_setup.last_sample - time.time())
    steady = SteadyWindow()
    try:
        observe(
            args, doc, api, scorer, watch, nodes, tmpl, interval, data_until, steady, api_at_start
        )
        doc["apiserver_requests_during_scorer"] = delta(
            apiserver_requests(api.metrics()), api_at_start
        )
    finally:
        final = read_proc(scorer.pid) if scorer.alive() else scorer.last
        exit_code = scorer.stop() if scorer.proc is not None else None
        doc["scorer"] = {
            "command": scorer.command[1:],
            "exit_code": exit_code,
            "problems_count": dict(scorer.problem_count),
            "problem_kinds": dict(scorer.problem_kinds.most_common(12)),
            "problems": scorer.problems,
            "log_tail": scorer.log_tail(),
        }
        summarise(doc, scorer, steady, final)


@dataclass
class SteadyWindow:
    """Which cycles are the steady ones, and the scorer's metrics before and after them."""

    first: int = 0  # 1-based index of the first steady cycle
    last: int = 0  # of the last one measured
    metrics_start: dict[str, float] = field(default_factory=dict)
    metrics_end: dict[str, float] = field(default_factory=dict)


def observe(
    args: argparse.Namespace,
    doc: dict[str, Any],
    api: Api,
    scorer: ScorerProcess,
    watch: NodeWatch,
    nodes: Sequence[FakeNode],
    tmpl: Mapping[str, Template],
    interval: float,
    data_until: float,
    steady: SteadyWindow,
    api_at_start: Mapping[str, float],
) -> None:
    """The scorer's life: first publication, steady cycles, bursts."""
    log("waiting until every node carries its pool and its composite label ...")
    dumps: list[dict[str, Any]] = []
    doc["stack_dumps"] = dumps
    py_spy = args.py_spy or shutil.which("py-spy")
    pub = wait_publication(
        scorer, watch, len(nodes), args.publish_timeout, dumps, py_spy, args.stack_dumps
    )
    doc["publication"] = pub
    doc["metrics_after_publication"] = scorer.metrics()
    doc["apiserver_requests_to_publication"] = delta(
        apiserver_requests(api.metrics()), api_at_start
    )
    log(f"   publication: {pub}")
    wait_s = interval * 4 + args.publish_timeout
    if scorer.wait_cycle(1, timeout=wait_s) is None:  # the 2nd cycle: the taints are set
        raise RuntimeError("the scorer never finished its second cycle")
    doc["initial_writes_timeline"] = timeline(watch, scorer.started, scorer.cycles[1].at)
    steady.first = len(scorer.cycles) + 1  # the next cycle is the first steady one
    steady.metrics_start = scorer.metrics()
    log(f"measuring {args.steady_cycles} steady cycles from cycle {steady.first} ...")
    profiler = None
    if args.profile and py_spy:
        # Sampled from outside (py-spy reads the process's memory; the scorer is not stopped),
        # only the thread holding the GIL: where the steady cycles' Python CPU goes.
        profile_file = Path(scorer.log_path).with_name("steady-profile.txt")
        profiler = subprocess.Popen(
            [
                py_spy,
                "record",
                "--nonblocking",
                "--gil",
                "--format",
                "raw",
                "--rate",
                "50",
                "--duration",
                str(int(interval * args.steady_cycles)),
                "--output",
                str(profile_file),
                "--pid",
                str(scorer.pid),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    while len(scorer.cycles) < steady.first - 1 + args.steady_cycles:
        got = scorer.wait_cycle(len(scorer.cycles), timeout=wait_s)
        if got is None:
            break
        log(
            f"   cycle {got.index}: {got.duration_s:.2f} s, {got.written} written, "
            f"CPU so far {got.proc.cpu_s:.1f} s, RSS {got.proc.rss_mib:.0f} MiB"
        )
    steady.last = len(scorer.cycles)
    steady.metrics_end = scorer.metrics()
    doc["metrics_after_steady"] = steady.metrics_end
    if profiler is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            profiler.wait(timeout=interval + 30)
        if profiler.poll() is None:
            profiler.terminate()
        doc["steady_profile"] = profile_summary(profile_file)
    bursts: list[dict[str, Any]] = []
    doc["bursts"] = bursts
    for spec in burst_specs(nodes, args.seed):
        if time.monotonic() > data_until - 2 * interval:
            log("   Prometheus data runs out: no more bursts (raise --horizon)")
            break
        log(f"burst: {spec.name} ...")
        result = run_burst(api, scorer, watch, spec, tmpl, args.quiet, interval)
        bursts.append(result)
        shown = (
            "window_s",
            "scorer_write_requests",
            "apiserver_node_status_patches",
            "apiserver_node_patches",
            "apiserver_node_lists",
            "nodes_written",
            "max_status_writes_one_node",
            "periodic_cycle_overlapped",
        )
        log("   " + ", ".join(f"{k}={result.get(k)}" for k in shown))
    # One more cycle line shows whether a burst overlapped a periodic cycle after all.
    scorer.wait_cycle(len(scorer.cycles), timeout=interval * 2 + 60)
    for result in bursts:
        if "error" not in result:
            result["periodic_cycle_overlapped"] = overlapped(scorer.cycles, result)
    doc["metrics_end"] = scorer.metrics()


_LINE_NO = re.compile(r":\d+\)$")
_PLUMBING = re.compile(r"\((threading|concurrent/futures/thread|apscheduler/executors/base)\.py")


def profile_summary(path: Path, top: int = 30) -> dict[str, Any]:
    """py-spy's collapsed stacks (`frame;frame;... count`) reduced to the functions with the
    most samples, inclusive (anywhere on the stack) and self (the innermost frame)."""
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    total = 0
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return {"error": f"no profile at {path}"}
    for line in lines:
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # Per function, not per line; the thread machinery every stack starts with left out.
        frames = [
            _LINE_NO.sub(")", f.strip())
            for f in stack.split(";")
            if f.strip() and not _PLUMBING.search(f)
        ]
        total += count
        for frame in set(frames):
            inclusive[frame] += count
        if frames:
            own[frames[-1]] += count
    return {
        "samples": total,
        "inclusive": [
            (f, n, round(100 * n / max(total, 1), 1)) for f, n in inclusive.most_common(top)
        ],
        "self": [(f, n, round(100 * n / max(total, 1), 1)) for f, n in own.most_common(top)],
    }


def timeline(watch: NodeWatch, t0: float, until: float, bin_s: float = 5.0) -> list[list[int]]:
    """Node events from the scorer's start to `until`, per `bin_s` seconds:
    [bin start s, status changes, metadata changes]."""
    bins: dict[int, list[int]] = {}
    for e in watch.events_between(t0, until):
        row = bins.setdefault(int((e.at - t0) // bin_s), [0, 0])
        row[0] += int(e.status)
        row[1] += int(e.metadata)
    return [[int(k * bin_s), *v] for k, v in sorted(bins.items())]


def summarise(
    doc: dict[str, Any], scorer: ScorerProcess, steady: SteadyWindow, final: ProcSample | None
) -> None:
    """Cycles, memory and the steady figures from whatever the run got to."""
    t0 = scorer.started
    rows = []
    prev = None
    for c in scorer.cycles:
        rows.append(
            {
                "cycle": c.index,
                "end_s": round(c.at - t0, 2),
                "duration_s": c.duration_s,
                "nodes": c.nodes,
                "changed": c.changed,
                "written": c.written,
                "cpu_s": round(c.proc.cpu_s - (prev.proc.cpu_s if prev else 0.0), 2),
                "rss_mib": round(c.proc.rss_mib, 1),
                "hwm_mib": round(c.proc.hwm_mib, 1),
                "threads": c.proc.threads,
            }
        )
        prev = c
    doc["cycles"] = rows
    for b in doc.get("bursts") or ():
        for key in ("t0", "t_end"):
            if key in b:
                b[key] = round(b[key] - t0, 2)
    chosen = rows[steady.first - 1 : steady.last] if steady.first >= 2 else []
    window = (
        (scorer.cycles[steady.first - 2].at, scorer.cycles[steady.last - 1].at) if chosen else None
    )
    rss = [s.rss_mib for s in scorer.samples if window and window[0] <= s.at <= window[1]]
    doc["memory"] = {
        "peak_hwm_mib": round(final.hwm_mib, 1) if final else None,
        "steady_rss_median_mib": round(statistics.median(rss), 1) if rss else None,
        "steady_rss_max_mib": round(max(rss), 1) if rss else None,
        "end_rss_mib": round(final.rss_mib, 1) if final else None,
        "samples_s_mib": [
            (round(s.at - t0, 1), round(s.rss_mib, 1))
            for s in scorer.samples[:: max(1, len(scorer.samples) // 200)]
        ],
    }
    hist = delta(steady.metrics_end, steady.metrics_start)
    count = hist.get("steer_scorer_cycle_duration_seconds_count", 0.0)
    cpu = [r["cpu_s"] for r in chosen]
    doc["steady"] = {
        "cycles": [r["cycle"] for r in chosen],
        "cpu_s": cpu,
        "cpu_median_s": round(statistics.median(cpu), 2) if cpu else None,
        "cpu_max_s": max(cpu, default=None),
        "duration_median_s": round(statistics.median([r["duration_s"] for r in chosen]), 2)
        if chosen
        else None,
        "written_per_cycle": [r["written"] for r in chosen],
        # Over the steady cycles only (a refresh after pod events observes it too: none then).
        "histogram_cycle_duration_mean_s": round(
            hist.get("steer_scorer_cycle_duration_seconds_sum", 0.0) / count, 3
        )
        if count
        else None,
        "histogram_observations": count,
        # Where a steady cycle's wall time goes, from the scorer's own histograms: mapping and
        # planning (no I/O), and the PromQL queries (summed over dimensions; they overlap).
        "compute_mean_s": round(
            hist.get("steer_scorer_compute_duration_seconds_sum", 0.0)
            / max(hist.get("steer_scorer_compute_duration_seconds_count", 0.0), 1.0),
            3,
        ),
        "query_sum_per_cycle_s": round(
            sum(
                v
                for k, v in hist.items()
                if k.startswith("steer_scorer_query_duration_seconds_sum")
            )
            / max(count, 1.0),
            3,
        ),
        "cycles_total": {
            k: v for k, v in steady.metrics_end.items() if k.startswith("steer_scorer_cycles_total")
        },
    }


# -- the report ---------------------------------------------------------------------------------------


def _met(value: float | None, goal: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= goal else "**not met**"


def report(doc: Mapping[str, Any]) -> str:
    args = doc.get("args", {})
    lines = [
        f"### Scorer at {args.get('nodes', 0):,} nodes, {args.get('pods', 0):,} bound pods "
        f"({doc.get('source')}, {doc.get('runtime_s', 0) / 60:.1f} min)",
        "",
    ]
    if "error" in doc:
        lines += [f"**Run failed:** {doc['error']}", ""]
    mem = doc.get("memory") or {}
    steady = doc.get("steady") or {}
    pub = doc.get("publication") or {}
    lines += [
        "| goal | measured | |",
        "|---|---|---|",
        f"| peak RSS (VmHWM) <= {GOAL_RSS_MIB:.0f} MiB | {mem.get('peak_hwm_mib')} MiB | "
        f"{_met(mem.get('peak_hwm_mib'), GOAL_RSS_MIB)} |",
        f"| steady RSS (VmRSS, median / max over steady cycles) <= {GOAL_RSS_MIB:.0f} MiB | "
        f"{mem.get('steady_rss_median_mib')} / {mem.get('steady_rss_max_mib')} MiB | "
        f"{_met(mem.get('steady_rss_max_mib'), GOAL_RSS_MIB)} |",
        f"| CPU per steady cycle <= {GOAL_CPU_S:.0f} s (median / max over cycles "
        f"{steady.get('cycles')}) | {steady.get('cpu_median_s')} / {steady.get('cpu_max_s')} s "
        f"| {_met(steady.get('cpu_max_s'), GOAL_CPU_S)} |",
        f"| steady cycle wall time (median, from the log; histogram mean; of which compute, "
        f"queries summed) | {steady.get('duration_median_s')} s; "
        f"{steady.get('histogram_cycle_duration_mean_s')} s; {steady.get('compute_mean_s')} s, "
        f"{steady.get('query_sum_per_cycle_s')} s | reported |",
        f"| all nodes carry pool and gates <= {GOAL_PUBLISH_S:.0f} s after start | "
        f"{pub.get('all_pools_s')} s (first {pub.get('first_pool_s')} s, p50 "
        f"{pub.get('pools_p50_s')} s; ledger synced {pub.get('ledger_synced_s')} s) "
        f"| {_met(pub.get('all_pools_s'), GOAL_PUBLISH_S)} |",
        f"| all nodes carry their composite label | {pub.get('all_labels_s')} s (p50 "
        f"{pub.get('labels_p50_s')} s) | reported |",
    ]
    for b in doc.get("bursts") or ():
        if "error" in b:
            lines.append(f"| burst {b['name']} | {b['error']} | not measured |")
            continue
        one = b["max_status_writes_one_node"] <= 1
        lists = b["apiserver_node_lists"]
        note = " (a periodic cycle overlapped)" if b["periodic_cycle_overlapped"] else ""
        lines.append(
            f"| burst: {b['name']}: <= 1 status write per node, no node LIST | "
            f"{b['scorer_write_requests']:.0f} scorer writes "
            f"({b['scorer_write_requests'] / max(b['pods'], 1):.2f} per pod; "
            f"{b['apiserver_node_status_patches']:.0f} "
            f"status, {b['apiserver_node_patches']:.0f} metadata) on {b['nodes_written']} nodes; "
            f"max {b['max_status_writes_one_node']} status / {b['max_metadata_writes_one_node']} "
            f"metadata writes on one node; {lists:.0f} node LISTs; {b['window_s']} s{note} | "
            f"{'met' if one and lists == 0 else '**not met**'} |"
        )
    setup = doc.get("setup") or {}
    prom = doc.get("prometheus") or {}
    lines += [
        "",
        f"Setup: {setup.get('nodes_create_s')} s for the nodes, {setup.get('pods_create_s')} s "
        f"to create the pods ({setup.get('pods_per_s')}/s), {setup.get('pods_status_s')} s for "
        f"their statuses; object sizes {setup.get('object_bytes')}; Prometheus "
        f"{prom.get('series', 0):,} series rendered in {prom.get('render_s', 0):.0f} s, "
        f"backfilled in {prom.get('backfill_s', 0):.0f} s. Load average "
        f"{doc.get('machine', {}).get('loadavg_start')} -> {doc.get('machine', {}).get('loadavg_end')}.",
    ]
    scorer = doc.get("scorer") or {}
    if scorer.get("problems_count"):
        lines.append(f"Scorer log problems: {scorer['problems_count']}.")
    cycles = doc.get("cycles") or []
    if cycles:
        lines += [
            "",
            "| cycle | ended (s after start) | wall | written | CPU since previous | RSS |",
            "|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {c['cycle']} | {c['end_s']:.0f} | {c['duration_s']:.2f} s | {c['written']} | "
            f"{c['cpu_s']:.2f} s | {c['rss_mib']:.0f} MiB |"
            for c in cycles
        ]
    return "\n".join(lines)


# -- CLI -----------------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nodes", type=int, default=5000, help="fake nodes (default 5000)")
    parser.add_argument("--pods", type=int, default=100000, help="bound pods (default 100000)")
    parser.add_argument("--quick", action="store_true", help="200 nodes, 2,000 pods: smoke")
    parser.add_argument(
        "--steady-cycles", type=int, default=4, help="steady cycles to measure (default 4)"
    )
    parser.add_argument(
        "--interval",
        type=int,
        help="scoring.intervalSeconds of the policy copy (default: the example's 30)",
    )
    parser.add_argument(
        "--publish-timeout",
        type=float,
        default=1200.0,
        help="give up waiting for every node's pool and label after this many s (default 1200)",
    )
    parser.add_argument(
        "--quiet",
        type=float,
        default=4.0,
        help="a burst ends after this many s without a node event (default 4)",
    )
    parser.add_argument(
        "--prom-step", type=float, default=30.0, help="s between backfilled samples (default 30)"
    )
    parser.add_argument(
        "--horizon",
        type=float,
        default=40.0,
        help="minutes of backfilled data after the scorer starts (default 40)",
    )
    parser.add_argument(
        "--stack-dumps",
        type=float,
        default=0.0,
        metavar="S",
        help="until every node is published, dump the scorer's Python stacks every S s with "
        "py-spy into the JSON (default 0: never)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="sample the scorer with py-spy over the steady cycles (the GIL holder, 50 Hz) and "
        "put the top functions into the JSON",
    )
    parser.add_argument("--py-spy", help="py-spy binary (default: on PATH)")
    parser.add_argument("--seed", type=int, default=1, help="readings and pod mix seed")
    parser.add_argument("--json", type=Path, help="results file (default bench/results/...)")
    parser.add_argument(
        "--report", type=Path, metavar="JSON", help="print the tables of a results file, no run"
    )
    parser.add_argument("--workdir", type=Path, help="keep logs and data here (default: temp)")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
