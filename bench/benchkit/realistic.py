"""The scheduler bench's realistic pods: a shape's base pod as users create it, a Deployment's
pod, and the Deployment, ReplicaSet and Service that make it one.

Pure: the bench (bench/scale.py) creates the objects and passes the ReplicaSet's uid back.

What of it the scheduler reads: the owner and the Service make the default topology spreading
apply (upstream pkg/scheduler/framework/plugins/helper/spread.go, DefaultSelector: the
selectors of the Services matching the pod, plus the selector of the ReplicaSet that is its
controller owner); the second container's requests count; the size of the object costs the
informer, the queue and every copy. Env, probes, volumes of configMaps and secrets are not
scheduled on (the ConfigMap and Secret are never created: only a kubelet would read them), but
they are what a user's pod carries.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import orjson

if TYPE_CHECKING:
    from .shapes import Shape

# A Deployment's pod as users create them is 5-8 KiB of JSON (compact, as POSTed, before the
# apiserver's defaults and the ServiceAccount admission's token volume are added).
REALISTIC_BYTES = (5 * 1024, 8 * 1024)
INSTANCE = "bench"  # app.kubernetes.io/instance: the Helm release
VERSION = "1.42.3"
SIDECAR_IMAGE = "cr.fluentbit.io/fluent/fluent-bit:3.1.9"
SIDECAR_CPU_M = 50
SIDECAR_MEMORY_MI = 64
# Pods built without a cluster (tests, --report) name their ReplicaSet by this uid.
UNCREATED_UID = "00000000-0000-0000-0000-000000000000"
_HASH_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the ReplicaSet controller's safe encoding


def pod_bytes(pod: Mapping[str, Any]) -> int:
    """Size of a pod as compact JSON, as the bench POSTs it."""
    return len(orjson.dumps(pod))


def template_hash(shape: Shape) -> str:
    """The pod-template-hash of the shape's ReplicaSet: the shape's own if its labels carry
    one (a-chain), else one derived from its name, spelt as the controller spells them."""
    own = (shape.labels or {}).get("pod-template-hash")
    if own:
        return own
    digest = hashlib.sha256(shape.name.encode()).digest()
    return "".join(_HASH_ALPHABET[b % len(_HASH_ALPHABET)] for b in digest[:10])


def app_name(shape: Shape) -> str:
    return f"scale-{shape.name}"


def selector(shape: Shape) -> dict[str, str]:
    """The Deployment's selector, and its Service's (a Helm chart's usual pair)."""
    return {"app.kubernetes.io/name": app_name(shape), "app.kubernetes.io/instance": INSTANCE}


def replica_set_name(shape: Shape) -> str:
    return f"{app_name(shape)}-{template_hash(shape)}"


def pod_labels(shape: Shape) -> dict[str, str]:
    """A Deployment's pod labels: the chart's, the shape's own (a-chain's order-chain) and
    the ReplicaSet's pod-template-hash."""
    return {
        "app": app_name(shape),
        **selector(shape),
        "app.kubernetes.io/version": VERSION,
        "app.kubernetes.io/component": "api",
        "app.kubernetes.io/part-of": "scale-bench",
        "app.kubernetes.io/managed-by": "Helm",
        "helm.sh/chart": "scale-app-0.7.1",
        **(shape.labels or {}),
        "pod-template-hash": template_hash(shape),
    }


def _checksum(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def pod_annotations(shape: Shape) -> dict[str, str]:
    return {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "9090",
        "prometheus.io/path": "/metrics",
        "checksum/config": _checksum(f"{shape.name} config"),
        "checksum/secret": _checksum(f"{shape.name} secret"),
        "kubectl.kubernetes.io/default-container": "main",
        "kubectl.kubernetes.io/restartedAt": "2026-11-30T09:12:44Z",
        "fluentbit.io/parser": "json",
    }


def _main_container(shape: Shape, base: Mapping[str, Any]) -> dict[str, Any]:
    app = app_name(shape)
    field = [("POD_NAME", "metadata.name"), ("POD_NAMESPACE", "metadata.namespace")]
    field += [("POD_IP", "status.podIP"), ("NODE_NAME", "spec.nodeName")]
    env: list[dict[str, Any]] = [
        {"name": name, "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": path}}}
        for name, path in field
    ]
    env += [
        {"name": "LOG_LEVEL", "value": "info"},
        {"name": "HTTP_PORT", "value": "8080"},
        {"name": "METRICS_PORT", "value": "9090"},
        {"name": "OTEL_EXPORTER_OTLP_ENDPOINT", "value": "http://otel-collector.monitoring:4317"},
        {"name": "OTEL_SERVICE_NAME", "value": app},
        {"name": "OTEL_RESOURCE_ATTRIBUTES", "value": f"service.version={VERSION},team=shop"},
        {
            "name": "KAFKA_BROKERS",
            "value": ",".join(f"kafka-{i}.kafka.data:9092" for i in range(3)),
        },
        {"name": "REDIS_URL", "value": "redis://redis-master.data.svc:6379/0"},
        {"name": "CACHE_TTL_SECONDS", "value": "300"},
        {"name": "TZ", "value": "UTC"},
        {
            "name": "GOMAXPROCS",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu", "divisor": "1"}},
        },
        {
            "name": "GOMEMLIMIT",
            "valueFrom": {"resourceFieldRef": {"resource": "limits.memory", "divisor": "1"}},
        },
        {
            "name": "DATABASE_PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": f"{app}-db", "key": "password"}},
        },
        {
            "name": "SENTRY_DSN",
            "valueFrom": {
                "secretKeyRef": {"name": f"{app}-sentry", "key": "dsn", "optional": True}
            },
        },
        {
            "name": "FEATURE_FLAGS",
            "valueFrom": {"configMapKeyRef": {"name": f"{app}-config", "key": "features"}},
        },
    ]
    probe = {"timeoutSeconds": 2, "periodSeconds": 10, "successThreshold": 1}
    return {
        **base,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--config=/etc/app/config.yaml", "--listen=:8080"],
        "ports": [
            {"name": "http", "containerPort": 8080, "protocol": "TCP"},
            {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
        ],
        "env": env,
        "envFrom": [
            {"configMapRef": {"name": f"{app}-env"}},
            {"secretRef": {"name": f"{app}-env", "optional": True}},
        ],
        "volumeMounts": [
            {"name": "config", "mountPath": "/etc/app", "readOnly": True},
            {"name": "tls", "mountPath": "/etc/tls", "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
            {"name": "vault-token", "mountPath": "/var/run/secrets/vault", "readOnly": True},
        ],
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
            "initialDelaySeconds": 10,
            "failureThreshold": 3,
            **probe,
        },
        "readinessProbe": {
            "httpGet": {"path": "/readyz", "port": "http", "scheme": "HTTP"},
            "initialDelaySeconds": 2,
            "failureThreshold": 2,
            **probe,
        },
        "startupProbe": {
            "httpGet": {"path": "/healthz", "port": "http", "scheme": "HTTP"},
            "failureThreshold": 30,
            **probe,
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }


def _sidecar(shape: Shape) -> dict[str, Any]:
    return {
        "name": "log-shipper",
        "image": SIDECAR_IMAGE,
        "imagePullPolicy": "IfNotPresent",
        "args": ["--config=/fluent-bit/etc/fluent-bit.yaml"],
        "ports": [{"name": "fb-metrics", "containerPort": 2020, "protocol": "TCP"}],
        "env": [
            {"name": "FLUENT_HOST", "value": "logs.monitoring.svc"},
            {"name": "FLUENT_PORT", "value": "24224"},
        ],
        # No GPU: the sidecar requests cpu and memory alone, by the shape's limits rule.
        "resources": shape.resources(SIDECAR_CPU_M, SIDECAR_MEMORY_MI, gpus=0),
        "volumeMounts": [
            {"name": "tmp", "mountPath": "/var/log/app", "readOnly": True},
            {"name": "config", "mountPath": "/fluent-bit/etc", "subPath": "fluent-bit"},
        ],
        "livenessProbe": {"tcpSocket": {"port": 2020}, "periodSeconds": 30},
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }


def _volumes(shape: Shape) -> list[dict[str, Any]]:
    app = app_name(shape)
    return [
        {"name": "config", "configMap": {"name": f"{app}-config", "defaultMode": 0o444}},
        {"name": "tls", "secret": {"secretName": f"{app}-tls", "defaultMode": 0o400}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}},
        {
            "name": "vault-token",
            "projected": {
                "defaultMode": 0o420,
                "sources": [
                    {
                        "serviceAccountToken": {
                            "audience": "vault",
                            "expirationSeconds": 3600,
                            "path": "token",
                        }
                    },
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "path": "namespace",
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                }
                            ]
                        }
                    },
                ],
            },
        },
    ]


def realistic_pod(shape: Shape, replica_set_uid: str = UNCREATED_UID) -> dict[str, Any]:
    """The shape's base pod as a Deployment makes it (name left out): owned by the shape's
    ReplicaSet, labelled and annotated as a chart's, a second container, env, probes, volumes
    and securityContext; no schedulerName. Raises ValueError if it is not 5-8 KiB of JSON."""
    base = shape.base_pod()
    main = _main_container(shape, base["spec"]["containers"][0])
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{replica_set_name(shape)}-",
            "namespace": shape.namespace,
            "labels": pod_labels(shape),
            "annotations": pod_annotations(shape),
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": replica_set_name(shape),
                    "uid": replica_set_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            **base["spec"],  # terminationGracePeriodSeconds 0 kept: runs are deleted at once
            "containers": [main, _sidecar(shape)],
            "volumes": _volumes(shape),
            "serviceAccountName": "default",
            "restartPolicy": "Always",
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": False,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": 10001,
                "runAsGroup": 10001,
                "fsGroup": 10001,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
        },
    }
    size = pod_bytes(pod)
    low, high = REALISTIC_BYTES
    if not low <= size <= high:
        raise ValueError(
            f"{shape.name}: the realistic pod is {size} bytes of JSON, outside {low}..{high}: "
            "adjust bench/benchkit/realistic.py"
        )
    return pod


# -- the objects that make it a Deployment's pod ---------------------------------------------
#
# No kube-controller-manager runs in the bench's plane (bench/scale.py bench_plane), so neither
# the Deployment nor the ReplicaSet is acted on; replicas 0, so that with one running, no pod
# would be created for them either (a ReplicaSet controller would delete the bench's pods).


def _template(shape: Shape, labels: Mapping[str, str]) -> dict[str, Any]:
    pod = realistic_pod(shape)
    metadata = {"labels": dict(labels), "annotations": pod["metadata"]["annotations"]}
    return {"metadata": metadata, "spec": pod["spec"]}


def deployment(shape: Shape) -> dict[str, Any]:
    labels = {k: v for k, v in pod_labels(shape).items() if k != "pod-template-hash"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": app_name(shape), "namespace": shape.namespace, "labels": labels},
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": selector(shape)},
            "template": _template(shape, labels),
        },
    }


def replica_set(shape: Shape, deployment_uid: str) -> dict[str, Any]:
    labels = pod_labels(shape)
    match = {**selector(shape), "pod-template-hash": template_hash(shape)}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": replica_set_name(shape),
            "namespace": shape.namespace,
            "labels": labels,
            "annotations": {"deployment.kubernetes.io/revision": "1"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": app_name(shape),
                    "uid": deployment_uid,
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": match},
            "template": _template(shape, labels),
        },
    }


def service(shape: Shape) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": app_name(shape), "namespace": shape.namespace},
        "spec": {
            "selector": selector(shape),
            "ports": [{"name": "http", "port": 80, "targetPort": "http"}],
        },
    }
