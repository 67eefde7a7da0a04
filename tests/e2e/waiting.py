"""Waiting on the real control plane and reading a running scorer's /metrics: what the e2e
tests share beside `kits.waiting.wait_until`."""

from __future__ import annotations

from collections.abc import Mapping

import requests
from prometheus_client.parser import text_string_to_metric_families

from kits.control_plane import ROOT, ControlPlane
from kits.service_processes import RunningScorer
from kits.waiting import wait_until
from steer.adapters.kubejson import KubeApiError, KubeJson, pod_path
from steer.core.policy.crd import CRD_NAME

# What a check against the control plane or a running scorer raises while the change it waits
# for is on its way (an object not created yet, a listener not up, a key not written): for
# `kits.waiting.wait_until(..., ignoring=NOT_YET)`, "not yet", not a failure.
NOT_YET = (KubeApiError, requests.RequestException, KeyError)


def metric(scorer: RunningScorer, name: str, labels: Mapping[str, str] | None = None) -> float:
    """A sample of the running scorer's /metrics with exactly these labels (0 when absent)."""
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(f"{scorer.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and dict(sample.labels) == dict(labels or {}):
                return float(sample.value)
    return 0.0


def install_policy_crd(control_plane: ControlPlane, admin: KubeJson) -> None:
    """The SteeringPolicy CRD (manifests/crd/) applied, and established."""
    control_plane.kubectl("apply", "-f", str(ROOT / "manifests" / "crd" / "steeringpolicies.yaml"))
    wait_until(
        "the CRD is established",
        lambda: any(
            c["type"] == "Established" and c["status"] == "True"
            for c in admin.request(
                "GET", f"/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{CRD_NAME}"
            )
            .get("status", {})
            .get("conditions")
            or ()
        ),
        timeout=30,
        ignoring=NOT_YET,
    )


def bound_node(admin: KubeJson, namespace: str, name: str) -> str | None:
    """The node the pod is bound to, None while it is not."""
    node: str | None = admin.request("GET", pod_path(namespace, name))["spec"].get("nodeName")
    return node


def unschedulable_message(admin: KubeJson, namespace: str, name: str) -> str | None:
    """The scheduler's message while the pod is unschedulable (PodScheduled False), else None."""
    pod = admin.request("GET", pod_path(namespace, name))
    for cond in pod.get("status", {}).get("conditions") or ():
        if cond["type"] == "PodScheduled" and cond["status"] == "False":
            return str(cond.get("message", ""))
    return None
