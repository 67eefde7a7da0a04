"""Bound pods shaped like a Deployment's, in opted-in, tenant and plain namespaces: their
templates, the plan of which pod goes where, creation, a kubelet-like status, deletion."""

from __future__ import annotations

import math
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch
import orjson

from steer.core.budget import pod_usage
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.policy import Policy

from .api import Api
from .nodes import GPU, FakeNode, digest, rfc3339
from .progress import Progress, in_parallel

GPU_POD_SHARE = 0.05
BOUND_LONG_AGO_S = 3600.0  # PodScheduled this long before the bench started


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
                "checksum/config": digest(app + "config"),
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
        hashed = digest(self.name)
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
    hashed = digest(spec.name)

    def container(name: str, image: str) -> dict[str, Any]:
        return {
            "name": name,
            "image": image,
            "imageID": f"{image.split(':')[0]}@sha256:{digest(image)}",
            "containerID": f"containerd://{digest(hashed + name)}",
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
