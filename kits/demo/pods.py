"""The pods the whole-loop demo (`python -m kits.demo`) sends through admission, and the
namespaces they live in, as a cluster running the example policy (examples/policy.yaml) would
have them.

Pure data: each pod is the object the apiserver hands the mutating webhook, after its own
defaulting (`schedulerName: default-scheduler`), and the user who created it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

OPTED_IN = {"kube-steer.github.io/enabled": "true"}
# Namespace → labels. The tenants' selectors match `tenant`; steering needs the opt-in label.
DEMO_NAMESPACES: Mapping[str, Mapping[str, str]] = {
    "team-a": {"tenant": "dept-a", **OPTED_IN},  # dept-a: 5 % overcommit budget
    "team-b": {"tenant": "dept-b", **OPTED_IN},  # dept-b: no overcommit at all
    "ml": dict(OPTED_IN),  # GPU jobs, no tenant
}

USER = {"username": "alice@example.com", "groups": ["developers", "system:authenticated"]}
REPLICASET_CONTROLLER = {
    "username": "system:serviceaccount:kube-system:replicaset-controller",
    "groups": ["system:serviceaccounts", "system:serviceaccounts:kube-system"],
}
CHAIN_HASH = "7d9f8b6c5"  # the ReplicaSet's pod-template-hash


@dataclass(frozen=True)
class DemoPod:
    """One pod to admit, and what it is there to show."""

    shows: str
    pod: Mapping[str, Any]
    user: Mapping[str, Any] = field(default_factory=lambda: USER)

    @property
    def namespace(self) -> str:
        return str(self.pod["metadata"]["namespace"])

    @property
    def name(self) -> str:
        return str(self.pod["metadata"]["name"])


def _resources(requests: Mapping[str, str], limits: Mapping[str, str]) -> dict[str, Any]:
    return {"requests": dict(requests), "limits": dict(limits)}


def _pod(
    namespace: str,
    name: str,
    resources: Mapping[str, Any],
    *,
    labels: Mapping[str, str] | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace, "labels": dict(labels or {})}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": owner,
                "uid": f"00000000-0000-4000-8000-{CHAIN_HASH:0>12}",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            "containers": [
                {"name": "app", "image": "registry.k8s.io/pause:3.10", "resources": resources}
            ],
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",  # the apiserver's default, before admission
        },
    }


def demo_pods() -> tuple[DemoPod, ...]:
    """A GPU job, three replicas of the order chain, a dept-a and a dept-b service, and a dept-b
    pod whose limit exceeds its request (dept-b's budget is 0 %: denied)."""
    gpu = {"cpu": "2", "memory": "4Gi", "nvidia.com/gpu": "2"}
    chain = _resources({"cpu": "250m", "memory": "256Mi"}, {"cpu": "250m", "memory": "256Mi"})
    replicas = tuple(
        DemoPod(
            f"order-chain replica {i + 1} of 3: spread over zones and hosts",
            _pod(
                "team-a",
                f"checkout-{CHAIN_HASH}-{suffix}",
                chain,
                labels={
                    "app": "checkout",
                    "order-chain": "checkout",
                    "pod-template-hash": CHAIN_HASH,
                },
                owner=f"checkout-{CHAIN_HASH}",
            ),
            REPLICASET_CONTROLLER,
        )
        for i, suffix in enumerate(("x7k2p", "m4q9z", "r8t3w"))
    )
    return (
        DemoPod(
            "GPU job: bin-packed, ranked by the gpu class's score, kept off hot GPUs",
            _pod("ml", "train-resnet", _resources(gpu, {"nvidia.com/gpu": "2"})),
        ),
        *replicas,
        DemoPod(
            "dept-a service bursting 5 %: its limits drawn from the budget pool",
            _pod(
                "team-a",
                "web",
                _resources({"cpu": "1", "memory": "1Gi"}, {"cpu": "1050m", "memory": "1Gi"}),
                labels={"app": "web"},
            ),
        ),
        DemoPod(
            "dept-b service, limits = requests: its budget's gate and pool",
            _pod(
                "team-b",
                "api",
                _resources({"cpu": "500m", "memory": "512Mi"}, {"cpu": "500m", "memory": "512Mi"}),
                labels={"app": "api"},
            ),
        ),
        DemoPod(
            "dept-b pod with cpu limit 2x its request: over dept-b's 0 % budget",
            _pod(
                "team-b",
                "batch-burst",
                _resources({"cpu": "500m", "memory": "512Mi"}, {"cpu": "1", "memory": "512Mi"}),
                labels={"app": "batch"},
            ),
        ),
    )


def admission_review(demo: DemoPod, pod: Mapping[str, Any], uid: str) -> dict[str, Any]:
    """The AdmissionReview v1 the apiserver sends for creating `demo`'s pod, as `pod` (the
    mutating webhook sees the pod as created, the validating one the pod as mutated)."""
    pods = {"group": "", "version": "v1", "resource": "pods"}
    kind = {"group": "", "version": "v1", "kind": "Pod"}
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": kind,
            "resource": pods,
            "requestKind": kind,
            "requestResource": pods,
            "name": demo.name,
            "namespace": demo.namespace,
            "operation": "CREATE",
            "userInfo": dict(demo.user),
            "object": dict(pod),
            "oldObject": None,
            "dryRun": False,
            "options": {"kind": "CreateOptions", "apiVersion": "meta.k8s.io/v1"},
        },
    }
