"""Request semantics: which store operation an apiserver URL, verb and query mean.

Knows paths, verbs and query parameters but no sockets, so the HTTP layer stays a thin shell.
"""

from __future__ import annotations

import copy
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from kits.apistub import status
from kits.apistub.faults import Faults
from kits.apistub.patching import APPLY_PATCH, PATCH_TYPES, apply_patch, parse_body
from kits.apistub.selectors import Matcher, field_matcher, label_matcher
from kits.apistub.status import JsonObject
from kits.apistub.store import PODS, RESOURCES, ResourceType, Store, now_rfc3339

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
# The apiserver ends a watch without timeoutSeconds after --min-request-timeout (1800 s).
DEFAULT_WATCH_SECONDS = 1800.0
SERVER_VERSION = {
    "major": "1",
    "minor": "36",
    "gitVersion": "v1.36.2",
    "gitCommit": "",
    "buildDate": "",
    "gitTreeState": "clean",
    "goVersion": "go1.25",
    "compiler": "gc",
    "platform": "linux/amd64",
}


_BINDINGS = re.compile(r"/api/v1/namespaces/([^/]+)/bindings/?")


@dataclass(frozen=True)
class Route:
    """A resource URL taken apart: `/api/v1/namespaces/NS/pods/NAME/binding`."""

    rt: ResourceType
    namespace: str
    name: str
    subresource: str


@dataclass(frozen=True)
class Reply:
    code: int
    body: Any


@dataclass(frozen=True)
class WatchReply:
    events: Iterator[tuple[str, JsonObject]]


def parse_route(path: str) -> Route | None:
    parts = [p for p in path.split("/") if p]
    if parts[:2] == ["api", "v1"]:
        group, rest = "", parts[2:]
    elif len(parts) >= 3 and parts[0] == "apis":
        group, rest = parts[1], parts[3:]
    else:
        return None
    served = {rt.plural: rt for rt in RESOURCES if rt.group == group}
    namespace = ""
    if len(rest) >= 3 and rest[0] == "namespaces" and rest[2] in served:
        namespace, rest = rest[1], rest[2:]
    if not rest or rest[0] not in served or len(rest) > 3:
        return None
    rt = served[rest[0]]
    if (namespace and not rt.namespaced) or (not namespace and rt.namespaced and len(rest) > 1):
        return None
    name, subresource = [*rest[1:], "", ""][:2]
    return Route(rt, namespace, name, subresource)


def _discovery(path: str, address: str) -> Any:
    def resources(group: str) -> list[JsonObject]:
        verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
        out: list[JsonObject] = []
        for rt in (rt for rt in RESOURCES if rt.group == group):
            entry = {"name": rt.plural, "namespaced": rt.namespaced, "kind": rt.kind}
            out.append({**entry, "singularName": rt.kind.lower(), "verbs": verbs})
            if rt.has_status:
                status_verbs = ["get", "patch", "update"]
                out.append({**entry, "name": f"{rt.plural}/status", "verbs": status_verbs})
        return out

    coordination = {
        "name": "coordination.k8s.io",
        "versions": [{"groupVersion": "coordination.k8s.io/v1", "version": "v1"}],
        "preferredVersion": {"groupVersion": "coordination.k8s.io/v1", "version": "v1"},
    }
    return {
        "/version": SERVER_VERSION,
        "/api": {
            "kind": "APIVersions",
            "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": address}],
        },
        "/api/v1": {"kind": "APIResourceList", "groupVersion": "v1", "resources": resources("")},
        "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": [coordination]},
        "/apis/coordination.k8s.io": {"kind": "APIGroup", "apiVersion": "v1", **coordination},
        "/apis/coordination.k8s.io/v1": {
            "kind": "APIResourceList",
            "groupVersion": "coordination.k8s.io/v1",
            "resources": resources("coordination.k8s.io"),
        },
    }.get(path.rstrip("/") or "/")


class Api:
    """Maps one HTTP request to a store operation; knows verbs and query parameters, not sockets."""

    def __init__(self, store: Store, faults: Faults, address: str) -> None:
        self.store = store
        self.faults = faults
        self.address = address

    def handle(
        self, method: str, path: str, query: dict[str, str], content_type: str, raw: bytes
    ) -> Reply | WatchReply:
        if method == "GET" and path.rstrip("/") in ("/healthz", "/livez", "/readyz"):
            return Reply(200, "ok")
        if method == "GET" and (doc := _discovery(path, self.address)) is not None:
            return Reply(200, doc)
        body = parse_body(raw, content_type) if method in ("POST", "PUT", "PATCH") else None
        route: Route | None
        if method == "POST" and (m := _BINDINGS.fullmatch(path)):
            # The collection form the client's create_namespaced_binding uses.
            name = ((body or {}).get("metadata") or {}).get("name", "")
            path, route = f"{path}/{name}", Route(PODS, m.group(1), name, "binding")
        else:
            route = parse_route(path)
        if route is None:
            raise status.resource_not_found()
        if method in WRITE_METHODS and (code := self.faults.take_write_fault(path)) is not None:
            name = route.name or ((body or {}).get("metadata") or {}).get("name", "")
            raise status.injected(code, route.rt.resource, name)
        rt, ns, name, sub = route.rt, route.namespace, route.name, route.subresource
        if not name:
            if method == "GET":
                return (
                    self._watch(route, query)
                    if _truthy(query.get("watch"))
                    else self._list(route, query)
                )
            if method == "POST" and (ns or not rt.namespaced):
                return Reply(201, self.store.create(rt, ns, body))
            raise status.method_not_allowed()
        if sub == "binding" and rt is PODS and method == "POST":
            self.store.bind(ns, name, body)
            return Reply(201, status.success(201))
        if sub not in ("", "status") or (sub == "status" and not rt.has_status):
            raise status.resource_not_found()
        if method == "GET":
            return Reply(200, self.store.get(rt, ns, name))
        if method == "PUT":
            return Reply(200, self._put(route, body))
        if method == "PATCH":
            return self._patch(route, query, content_type, body)
        if method == "DELETE" and not sub:
            deleted = self.store.delete(rt, ns, name)
            if rt is PODS:  # pods answer with the deleted object, other kinds with a Status
                return Reply(200, deleted)
            details = {**rt.resource.details(name), "uid": deleted["metadata"]["uid"]}
            return Reply(200, status.success(None, details))
        raise status.method_not_allowed()

    def _list(self, route: Route, query: dict[str, str]) -> Reply:
        page = self.store.list_page(
            route.rt,
            route.namespace,
            _selection(query),
            limit=_int_param(query, "limit", 0),
            continue_token=query.get("continue", ""),
            has_label_selector=bool(query.get("labelSelector")),
        )
        meta: JsonObject = {"resourceVersion": str(page.resource_version)}
        if page.continue_token:
            meta["continue"] = page.continue_token
        if page.remaining is not None:
            meta["remainingItemCount"] = page.remaining
        body = {
            "kind": f"{route.rt.kind}List",
            "apiVersion": route.rt.api_version,
            "metadata": meta,
            "items": page.items,
        }
        return Reply(200, body)

    def _watch(self, route: Route, query: dict[str, str]) -> WatchReply:
        since = _int_param(query, "resourceVersion", 0) or None
        seconds = _int_param(query, "timeoutSeconds", 0) or DEFAULT_WATCH_SECONDS
        deadline = time.monotonic() + seconds
        # A streaming list (sendInitialEvents=true): the current state, then a bookmark marking
        # its end, as the apiserver sends it (it serves the state at `since` or newer: here, now).
        initial_events = _truthy(query.get("sendInitialEvents"))
        if initial_events:
            if query.get("resourceVersionMatch") != "NotOlderThan":
                raise status.bad_request(
                    "resourceVersionMatch: must be NotOlderThan with sendInitialEvents"
                )
            since = None
        events = self.store.watch(
            route.rt,
            route.namespace,
            since,
            _selection(query),
            deadline,
            initial_events_end=initial_events,
        )
        return WatchReply(events)

    def _put(self, route: Route, body: Any) -> JsonObject:
        if not isinstance(body, dict):
            raise status.bad_request(f"the body must be a {route.rt.kind} object")
        body_name = (body.get("metadata") or {}).get("name")
        if body_name and body_name != route.name:
            raise status.bad_request(
                f"the name of the object ({body_name}) does not match the name on the URL "
                f"({route.name})"
            )
        obj, _ = self.store.update(
            route.rt,
            route.namespace,
            route.name,
            lambda _live: copy.deepcopy(body),
            route.subresource,
        )
        return obj

    def _patch(self, route: Route, query: dict[str, str], content_type: str, body: Any) -> Reply:
        if content_type not in PATCH_TYPES:
            raise status.unsupported_media_type(content_type)
        manager = query.get("fieldManager")
        obj, created = self.store.update(
            route.rt,
            route.namespace,
            route.name,
            lambda live: apply_patch(live, content_type, body, manager, now_rfc3339()),
            route.subresource,
            create_missing=content_type == APPLY_PATCH,
        )
        return Reply(201 if created else 200, obj)


def _selection(query: dict[str, str]) -> Matcher:
    match_labels = label_matcher(query.get("labelSelector"))
    match_fields = field_matcher(query.get("fieldSelector"))
    return lambda obj: match_labels(obj) and match_fields(obj)


def _truthy(value: str | None) -> bool:
    return (value or "").lower() in ("1", "true")


def _int_param(query: dict[str, str], name: str, default: int) -> int:
    raw = query.get(name)
    if raw in (None, ""):
        return default
    try:
        return int(raw)
    except ValueError:
        raise status.bad_request(f"{name}: must be an integer, got {raw!r}") from None
