"""What a node label value that names no node most likely is, and which relabelling carries the
node instead.

Exporters in a DaemonSet see their own pod, not the node: DCGM exporter's `Hostname` is its host
name, which is the pod's name unless it runs on the host network (a public setup guide prints
`Hostname="dcgm-exporter-cmhft"`); Prometheus' `instance` is the scrape target, a pod's
`IP:port`. The node then comes only from service discovery: `__meta_kubernetes_pod_node_name`
(pod and endpoints roles) relabelled into a label of its own.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable
from enum import StrEnum

# A DaemonSet pod: `<daemonset>-<5 characters>` (the apiserver's generateName suffix).
_POD_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?-[bcdfghjklmnpqrstvwxz2456789]{5}$")

RELABEL_FIX = (
    "carry the node in a label of its own with a relabelling in the scrape config "
    "(ServiceMonitor/PodMonitor `relabelings`: sourceLabels [__meta_kubernetes_pod_node_name], "
    "targetLabel node), then set nodeLabel: node and group the query by node"
)


class IdentityKind(StrEnum):
    POD_NAME = "pod name"
    ADDRESS = "scrape address"
    OTHER = "other"


def classify(identity: str) -> IdentityKind:
    if _POD_NAME.match(identity):
        return IdentityKind.POD_NAME
    if _is_address(identity):
        return IdentityKind.ADDRESS
    return IdentityKind.OTHER


def describe(label: str, examples: Iterable[str]) -> tuple[str, str]:
    """(what the values are, the fix) for values of `label` that name no node."""
    shown = list(examples)[:3]
    kinds = {classify(e) for e in shown}
    sample = ", ".join(shown)
    if kinds == {IdentityKind.POD_NAME}:
        return (
            f"values of {label} are pod names, not node names (e.g. {sample}): the exporter "
            "reports its own host name, which is its pod's unless it runs on the host network",
            f"{RELABEL_FIX}; or run the exporter with hostNetwork: true",
        )
    if kinds == {IdentityKind.ADDRESS}:
        return (
            f"values of {label} are addresses of no node (e.g. {sample}): the scrape target is "
            "the exporter's pod, not its node",
            RELABEL_FIX,
        )
    return (
        f"values of {label} name no node of the cluster (e.g. {sample})",
        f"point nodeLabel at the label that holds node names or addresses; else {RELABEL_FIX}",
    )


def _is_address(identity: str) -> bool:
    host = identity
    if identity.startswith("["):
        host = identity[1 : identity.find("]")] if "]" in identity else identity
    elif identity.count(":") == 1:
        host = identity.split(":", 1)[0]
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True
