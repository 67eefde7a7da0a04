"""Which permission each of the scorer's endpoints needs: asked of the apiserver for the caller
as a SubjectAccessReview, so RBAC (or whatever authorizer the cluster runs) decides.

A pod's explanation holds the pod and how the nodes bear on it: `get pods` in its namespace.
A node's view holds that node's data: `get` on that node. A list needs what reading every item
needs (`list nodes`; `/explain/audit` also `list pods` in every namespace). `/metrics` needs
`get` on the non-resource URL `/metrics`, as kube-rbac-proxy and the Kubernetes components
authorise their own metrics, so Prometheus's usual ClusterRole already grants it. The page's
own files hold no data but are served to authenticated callers only (each view it shows then
asks for its own permission). `/healthz` and `/readyz` answer anyone and hold no pod or node
data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ResourceNeed:
    """`verb` on `resource` (API group `group`) in `namespace` ("" for a cluster-scoped
    resource, or every namespace), of the object `name` ("" for any)."""

    verb: str
    resource: str
    namespace: str = ""
    name: str = ""
    group: str = ""

    def attributes(self) -> dict[str, Any]:
        attrs = {"verb": self.verb, "group": self.group, "resource": self.resource}
        if self.namespace:
            attrs["namespace"] = self.namespace
        if self.name:
            attrs["name"] = self.name
        return {"resourceAttributes": attrs}

    def describe(self) -> str:
        what = f"{self.verb} {self.resource}" + (f".{self.group}" if self.group else "")
        if self.name:
            what += f" {self.name!r}"
        if self.namespace:
            return f"{what} in namespace {self.namespace!r}"
        return what if self.resource == "nodes" else f"{what} in every namespace"


@dataclass(frozen=True)
class NonResourceNeed:
    """`verb` on the non-resource URL `path` (as RBAC's `nonResourceURLs`)."""

    verb: str
    path: str

    def attributes(self) -> dict[str, Any]:
        return {"nonResourceAttributes": {"verb": self.verb, "path": self.path}}

    def describe(self) -> str:
        return f"{self.verb} on the non-resource URL {self.path}"


Need = ResourceNeed | NonResourceNeed


@dataclass(frozen=True)
class Requirement:
    """What a request must show. `public`: nothing (the probes). Otherwise an authenticated
    caller, allowed every one of `needs`; `by_handler`: the handler adds the needs it learns
    from the body (a posted pod's namespace)."""

    public: bool = False
    needs: tuple[Need, ...] = ()
    by_handler: bool = False


PUBLIC = Requirement(public=True)
AUTHENTICATED = Requirement()
METRICS = NonResourceNeed("get", "/metrics")
LIST_NODES = ResourceNeed("list", "nodes")
LIST_PODS = ResourceNeed("list", "pods")


def pod_needs(namespace: str | None, name: str = "") -> tuple[Need, ...]:
    """Explaining a pod of `namespace` (None: a posted pod of no namespace, judged as no
    tenant's, which only a reader of every namespace's pods may ask)."""
    return (ResourceNeed("get", "pods", namespace or "", name),)


def requirement(method: str, path: str) -> Requirement:
    """What the request `method path` must show. A path not listed here (a 404) still needs
    an authenticated caller: nothing but the probes answers anyone."""
    if path in ("/healthz", "/readyz"):
        return PUBLIC
    if path == "/metrics":
        return Requirement(needs=(METRICS,))
    if path == "/" or path.startswith("/ui/"):
        return AUTHENTICATED
    parts = path.split("/")[1:]  # "/explain/node/x" -> ["explain", "node", "x"]
    if len(parts) < 2 or parts[0] != "explain":
        return AUTHENTICATED
    view = parts[1]
    if view in ("nodes", "cluster") and len(parts) == 2:
        return Requirement(needs=(LIST_NODES,))
    if view == "audit" and len(parts) == 2:
        return Requirement(needs=(LIST_PODS, LIST_NODES))
    if view == "node" and len(parts) == 3 and parts[2]:
        return Requirement(needs=(ResourceNeed("get", "nodes", name=parts[2]),))
    if view == "pod" and len(parts) == 4 and parts[2] and parts[3]:
        return Requirement(needs=pod_needs(parts[2], parts[3]))
    if view == "pod" and len(parts) == 2 and method == "POST":
        return Requirement(by_handler=True)
    return AUTHENTICATED


@dataclass(frozen=True)
class Caller:
    """Who the apiserver says a token belongs to (a TokenReview's `status.user`)."""

    user: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    # Sorted (key, values) pairs: hashable, so a caller keys the decision cache.
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())

    @classmethod
    def from_review(cls, user: Mapping[str, Any]) -> Caller:
        extra = user.get("extra") or {}
        return cls(
            user=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in vs)) for k, vs in extra.items())),
        )

    def subject(self) -> dict[str, Any]:
        """The caller as a SubjectAccessReview's spec names it."""
        spec: dict[str, Any] = {"user": self.user, "groups": list(self.groups)}
        if self.uid:
            spec["uid"] = self.uid
        if self.extra:
            spec["extra"] = {k: list(vs) for k, vs in self.extra}
        return spec
