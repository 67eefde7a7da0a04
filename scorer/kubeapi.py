"""API paths the scorer calls, and the raw-JSON client it calls them with
(`steer.adapters.kubejson`, re-exported here)."""

from __future__ import annotations

from urllib.parse import quote

from steer.adapters.kubejson import JSON, MERGE_PATCH, KubeApiError, KubeJson, WatchStream

__all__ = [
    "BOUND_PODS",
    "JSON",
    "MERGE_PATCH",
    "NAMESPACES_PATH",
    "PLACEMENT_SCORE_API",
    "PODS_PATH",
    "KubeApiError",
    "KubeJson",
    "WatchStream",
    "events_path",
    "failed_scheduling_selector",
    "namespace_path",
    "node_path",
    "node_status_path",
    "placement_score_path",
    "pod_path",
]


def node_path(name: str = "") -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}" if name else "/api/v1/nodes"


def node_status_path(name: str) -> str:
    return f"{node_path(name)}/status"


PODS_PATH = "/api/v1/pods"
NAMESPACES_PATH = "/api/v1/namespaces"
BOUND_PODS = "spec.nodeName!="  # the field selector of pods bound to a node


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def events_path(namespace: str) -> str:
    """The core/v1 Events of a namespace (the scheduler's, written through events.k8s.io, are
    served here too)."""
    return f"{namespace_path(namespace)}/events"


def failed_scheduling_selector(namespace: str, name: str) -> str:
    """The fieldSelector of one pod's `FailedScheduling` events (fields the apiserver indexes
    for core/v1 Events)."""
    return (
        f"involvedObject.kind=Pod,involvedObject.namespace={namespace},"
        f"involvedObject.name={name},reason=FailedScheduling"
    )


def namespace_path(name: str) -> str:
    return f"/api/v1/namespaces/{quote(name, safe='')}"


PLACEMENT_SCORE_API = "/apis/cluster.open-cluster-management.io/v1alpha1"


def placement_score_path(namespace: str, name: str = "") -> str:
    """An Open Cluster Management AddOnPlacementScore (namespaced in the cluster's namespace
    on the hub), or the collection of one namespace."""
    base = f"{PLACEMENT_SCORE_API}/namespaces/{quote(namespace, safe='')}/addonplacementscores"
    return f"{base}/{quote(name, safe='')}" if name else base
