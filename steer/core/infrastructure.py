"""Infrastructure pods: never steered, never refused.

DaemonSet pods must run on every node they target (node-exporter, CNI, CSI, GPU operator), and
mirror pods stand for static pods a kubelet runs whatever the API says. kube-steer leaves both
alone: the webhooks skip them (in code, and before that in their `matchConditions`, so the
apiserver does not even call), and the admission policies the apiserver evaluates itself skip
them too. One definition, two renderings: `exempt_reason` for a request in hand and
`exempt_cel` for the objects the apiserver evaluates.

Who asks decides, not what the pod says: anyone who may create pods can write a DaemonSet
owner reference or the mirror annotation into one, but only the DaemonSet controller
authenticates as its creator (`spec.infrastructure.daemonSetCreators`) and only a kubelet as
`system:nodes`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from steer.core.policy import Policy

MIRROR_ANNOTATION = "kubernetes.io/config.mirror"
NODES_GROUP = "system:nodes"

Exemption = Literal["daemonset", "mirror-pod"]


def _field(obj: Any, key: str) -> Any:
    """`obj[key]` when obj is an object, else None: the request may be malformed."""
    return obj.get(key) if type(obj) is dict or isinstance(obj, Mapping) else None


def _controller_kind(pod: Mapping[str, Any]) -> str | None:
    """The kind of the pod's controller (its ownerReference with `controller: true`), or None."""
    owners = _field(_field(pod, "metadata"), "ownerReferences")
    if not isinstance(owners, list):
        return None
    for o in owners:
        if isinstance(o, Mapping) and o.get("controller") is True:
            kind = o.get("kind")
            return kind if isinstance(kind, str) else None
    return None


def _is_daemonset_pod(pod: Mapping[str, Any]) -> bool:
    return _controller_kind(pod) == "DaemonSet"


def has_controller(pod: Mapping[str, Any]) -> bool:
    """Something (a ReplicaSet, a Job, a StatefulSet...) makes the pod again if it is evicted."""
    return _controller_kind(pod) is not None


def runs_where_put(pod: Mapping[str, Any]) -> bool:
    """A bound pod its node keeps whatever the scheduler would choose: a DaemonSet's (by its
    controller reference) or a static pod's mirror. For counting only, never for exempting: the
    pod already passed admission."""
    annotations = _field(_field(pod, "metadata"), "annotations")
    mirror = isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations
    return mirror or _is_daemonset_pod(pod)


def exempt_reason(
    policy: Policy, pod: Mapping[str, Any], user_info: Mapping[str, Any] | None
) -> Exemption | None:
    """Why this pod creation is infrastructure ("daemonset", "mirror-pod"), or None."""
    username = _field(user_info, "username")
    groups = _field(user_info, "groups")
    if username in policy.spec.infrastructure.daemon_set_creators and _is_daemonset_pod(pod):
        return "daemonset"
    annotations = _field(_field(pod, "metadata"), "annotations")
    if (
        isinstance(groups, list)
        and NODES_GROUP in groups
        and isinstance(annotations, Mapping)
        and MIRROR_ANNOTATION in annotations
    ):
        return "mirror-pod"
    return None


def presumed_requester(policy: Policy, pod: Mapping[str, Any]) -> dict[str, Any] | None:
    """Who created a pod read back from the API, as far as the pod tells (the API keeps no
    creator): a DaemonSet's pod its controller (the first of `daemonSetCreators`), a mirror pod
    its node's kubelet; None (a user) for any other. For explaining a live pod as it was
    admitted, never for exempting a request: `exempt_reason` asks who did ask."""
    creators = policy.spec.infrastructure.daemon_set_creators
    if _is_daemonset_pod(pod) and creators:
        return {"username": creators[0], "groups": []}
    annotations = _field(_field(pod, "metadata"), "annotations")
    if isinstance(annotations, Mapping) and MIRROR_ANNOTATION in annotations:
        node = _field(_field(pod, "spec"), "nodeName")
        return {"username": f"system:node:{node or ''}", "groups": [NODES_GROUP]}
    return None


def _cel_string(text: str) -> str:
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def exempt_cel(policy: Policy) -> str:
    """A CEL expression, true for the pods `exempt_reason` exempts (variables `object` and
    `request`, as in matchConditions and ValidatingAdmissionPolicy)."""
    creators = ", ".join(_cel_string(u) for u in policy.spec.infrastructure.daemon_set_creators)
    daemonset = (
        f"(request.userInfo.username in [{creators}] && "
        "has(object.metadata.ownerReferences) && object.metadata.ownerReferences.exists(o, "
        "o.kind == 'DaemonSet' && has(o.controller) && o.controller == true))"
    )
    mirror = (
        f"(has(request.userInfo.groups) && {_cel_string(NODES_GROUP)} in request.userInfo.groups"
        " && has(object.metadata.annotations) && "
        f"{_cel_string(MIRROR_ANNOTATION)} in object.metadata.annotations)"
    )
    return f"{daemonset} || {mirror}"
