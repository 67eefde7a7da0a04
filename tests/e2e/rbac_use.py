"""RBAC equals use: each rule the install grants a kube-steer ServiceAccount, and the audit event
of that account that used it.

The install's control plane (`loopback_plane`) has the apiserver write an audit log of every
request of the group `system:serviceaccounts:kube-steer` (kits/control_plane.py,
`audit_groups`: Metadata level, the user, verb, object and response code of each request).
After a walk-through of normal operation, `uses()` pairs each rule of each Role and ClusterRole
bound to a kube-steer ServiceAccount with the first request of that account the rule
authorised, and `refused()` lists that account's 403s.

A rule is split into grants, one per (apiGroup, resource[/subresource], verb, resourceName),
and a grant is used by a request of its account with the same verb, group, resource,
subresource, the name when the rule lists names, the Role's namespace for a Role, answered
with anything but 401 or 403 (a 404 to a `get` was authorised too). A `create` is also used by
a server-side apply or an update that created the object (`patch`/`update` answered 201): the
apiserver authorises that as `create` of the named object, which is how a `create` limited by
resourceNames is ever used. Roles bound from outside the install (`system:auth-delegator`) are
read from the cluster and count the same way.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

RBAC = "rbac.authorization.k8s.io"
DENIED = (401, 403)


@dataclass(frozen=True)
class Grant:
    """One verb on one resource (or name) that a role gives one ServiceAccount."""

    account: str
    role: str  # Kind/name, as the binding refers to it
    group: str
    resource: str  # resource or resource/subresource; a non-resource URL starts with /
    verb: str
    name: str | None = None
    namespace: str | None = None  # a Role's

    def __str__(self) -> str:
        group = f"{self.group}/" if self.group else ""
        named = f" {self.name}" if self.name else ""
        where = f" in {self.namespace}" if self.namespace else ""
        return f"{self.verb} {group}{self.resource}{named}{where}"


def grants(
    documents: Iterable[Mapping[str, Any]],
    namespace: str,
    cluster_role: Callable[[str], Mapping[str, Any]],
) -> list[Grant]:
    """Every grant of every (Cluster)Role that a (Cluster)RoleBinding of `documents` binds to a
    ServiceAccount of `namespace`; a ClusterRole the documents do not hold is read with
    `cluster_role(name)` (e.g. from the cluster)."""
    docs = list(documents)
    roles = {
        (d["kind"], d["metadata"].get("namespace"), d["metadata"]["name"]): d
        for d in docs
        if d.get("kind") in ("Role", "ClusterRole")
    }
    found: list[Grant] = []
    for binding in docs:
        if binding.get("kind") not in ("RoleBinding", "ClusterRoleBinding"):
            continue
        ref = binding["roleRef"]
        where = binding["metadata"].get("namespace") if binding["kind"] == "RoleBinding" else None
        if ref["kind"] == "Role":
            role = roles[("Role", where, ref["name"])]
        else:
            role = roles.get(("ClusterRole", None, ref["name"])) or cluster_role(ref["name"])
        accounts = [
            s["name"]
            for s in binding.get("subjects") or ()
            if s["kind"] == "ServiceAccount" and s.get("namespace") == namespace
        ]
        for account in accounts:
            for rule in role.get("rules") or ():
                found += _rule_grants(account, f"{ref['kind']}/{ref['name']}", rule, where)
    return sorted(set(found), key=lambda g: (g.account, g.role, g.group, g.resource, g.verb))


def _rule_grants(
    account: str, role: str, rule: Mapping[str, Any], namespace: str | None
) -> list[Grant]:
    names: Sequence[str | None] = rule.get("resourceNames") or [None]
    if rule.get("nonResourceURLs"):
        return [
            Grant(account, role, "", url, verb)
            for url in rule["nonResourceURLs"]
            for verb in rule["verbs"]
        ]
    return [
        Grant(account, role, group, resource, verb, name, namespace)
        for group in rule.get("apiGroups") or [""]
        for resource in rule["resources"]
        for verb in rule["verbs"]
        for name in names
    ]


def user(namespace: str, account: str) -> str:
    return f"system:serviceaccount:{namespace}:{account}"


def code(event: Mapping[str, Any]) -> int:
    return int((event.get("responseStatus") or {}).get("code", 0))


def authorises(grant: Grant, event: Mapping[str, Any]) -> bool:
    """Whether `event` (a request of the grant's account) was allowed by this grant."""
    if code(event) in DENIED or code(event) == 0:
        return False
    verb = event["verb"]
    if grant.resource.startswith("/"):
        path = event["requestURI"].split("?")[0]
        prefix = grant.resource.removesuffix("*")
        exact = path == grant.resource
        return (
            "objectRef" not in event
            and _any(grant.verb, verb)
            and (exact or (grant.resource.endswith("*") and path.startswith(prefix)))
        )
    ref = event.get("objectRef")
    if not ref:
        return False
    created = grant.verb == "create" and verb in ("patch", "update") and code(event) == 201
    if not (_any(grant.verb, verb) or created):
        return False
    resource, _, sub = grant.resource.partition("/")
    return (
        _any(grant.group, ref.get("apiGroup", ""))
        and _any(resource, ref.get("resource", ""))
        and (sub == ref.get("subresource", "") or sub == "*")
        and (grant.name is None or grant.name == ref.get("name"))
        and (grant.namespace is None or grant.namespace == ref.get("namespace"))
    )


def _any(granted: str, asked: str) -> bool:
    return granted in ("*", asked)


def uses(
    found: Sequence[Grant], events: Sequence[Mapping[str, Any]], namespace: str
) -> dict[Grant, Mapping[str, Any] | None]:
    """Each grant and the first event of its account that it authorised (None: unused)."""
    by_user: dict[str, list[Mapping[str, Any]]] = {}
    for event in events:
        by_user.setdefault(event["user"]["username"], []).append(event)
    return {
        grant: next(
            (e for e in by_user.get(user(namespace, grant.account), ()) if authorises(grant, e)),
            None,
        )
        for grant in found
    }


def streamed_instead(
    grant: Grant, events: Sequence[Mapping[str, Any]], namespace: str
) -> Mapping[str, Any] | None:
    """For a `list` grant: the first streaming list (a `watch` with `sendInitialEvents=true`,
    KEP-3157) of the grant's account on the same resource, which the apiserver served instead.
    A streaming list is authorised as `watch` alone (measured on the v1.36.2 apiserver), so
    the `list` grant is then what the paginated fallback needs on an apiserver that refuses
    streaming lists (the WatchList feature off: v1.33's default)."""
    if grant.verb != "list":
        return None
    as_watch = dataclasses.replace(grant, verb="watch")
    return next(
        (
            e
            for e in events
            if e["user"]["username"] == user(namespace, grant.account)
            and "sendInitialEvents=true" in str(e.get("requestURI", ""))
            and authorises(as_watch, e)
        ),
        None,
    )


def refused(events: Sequence[Mapping[str, Any]], namespace: str) -> list[Mapping[str, Any]]:
    """The requests of the namespace's ServiceAccounts that the apiserver answered 403."""
    prefix = user(namespace, "")
    return [e for e in events if e["user"]["username"].startswith(prefix) and code(e) == 403]


def describe(event: Mapping[str, Any]) -> str:
    """An audit event in one line: verb, object (or URL), response code."""
    ref = event.get("objectRef")
    if not ref:
        return f"{event['verb']} {event['requestURI']} -> {code(event)}"
    what = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
    group = f"{ref['apiGroup']}/" if ref.get("apiGroup") else ""
    named = f" {ref['name']}" if ref.get("name") else ""
    where = f" -n {ref['namespace']}" if ref.get("namespace") else ""
    return f"{event['verb']} {group}{what}{named}{where} -> {code(event)}"


def table(
    used: Mapping[Grant, Mapping[str, Any] | None],
    streamed: Mapping[Grant, Mapping[str, Any]] | None = None,
) -> str:
    """One line per grant: account, role, grant, and the first request it authorised (or the
    streaming list served instead of its `list`, or UNUSED)."""

    def why(grant: Grant, event: Mapping[str, Any] | None) -> str:
        if event is not None:
            return describe(event)
        instead = (streamed or {}).get(grant)
        if instead is not None:
            return "fallback of the streaming list " + describe(instead)
        return "UNUSED"

    rows = [(g.account, g.role, str(g), why(g, e)) for g, e in used.items()]
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
        for row in rows
    )
