"""The stand-in's object store: the apiserver's registry rules without HTTP.

Objects are plain JSON dicts keyed by (plural, namespace, name) behind one lock. Every write
bumps one cluster-wide resourceVersion and appends to a bounded event log that watches replay
from; a watch asking for a version that fell out of the log gets the apiserver's 410 Expired,
which is the path a controller's re-list logic must survive.
"""

from __future__ import annotations

import base64
import binascii
import copy
import json
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kits.apistub import status
from kits.apistub.selectors import Matcher
from kits.apistub.status import ApiError, GroupResource, JsonObject
from kits.apistub.validation import invalid, invalid_error, object_errors

NAMESPACE_NAME_LABEL = "kubernetes.io/metadata.name"


@dataclass(frozen=True)
class ResourceType:
    """One served resource. `has_status`: writes to the object keep its status, and writes to
    its `/status` subresource change only the status, as the apiserver's strategies do."""

    plural: str
    kind: str
    group: str
    version: str
    namespaced: bool
    has_status: bool

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def resource(self) -> GroupResource:
        return GroupResource(self.group, self.plural)


NODES = ResourceType("nodes", "Node", "", "v1", namespaced=False, has_status=True)
NAMESPACES = ResourceType("namespaces", "Namespace", "", "v1", namespaced=False, has_status=True)
PODS = ResourceType("pods", "Pod", "", "v1", namespaced=True, has_status=True)
LEASES = ResourceType(
    "leases", "Lease", "coordination.k8s.io", "v1", namespaced=True, has_status=False
)
# core/v1 Events, plain objects: the scorer lists one pod's FailedScheduling events.
EVENTS = ResourceType("events", "Event", "", "v1", namespaced=True, has_status=False)
RESOURCES = (NODES, NAMESPACES, PODS, LEASES, EVENTS)


def resource_type(name: str) -> ResourceType:
    """Look a resource up by plural or kind, any case (`nodes`, `Node`, `lease`)."""
    wanted = name.lower()
    for rt in RESOURCES:
        if wanted in (rt.plural, rt.kind.lower()):
            return rt
    known = ", ".join(rt.plural for rt in RESOURCES)
    raise KeyError(f"unknown resource {name!r}: the stand-in serves {known}")


def now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Event:
    rv: int
    type: str  # ADDED, MODIFIED, DELETED
    plural: str
    namespace: str
    obj: JsonObject
    old: JsonObject | None


@dataclass(frozen=True)
class ListPage:
    items: list[JsonObject]
    resource_version: int
    continue_token: str
    remaining: int | None


Key = tuple[str, str, str]
_GENERATE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # the apiserver's, free of vowels


def _sort_key(namespace: str, name: str) -> str:
    """Where the object would sit in etcd under its resource prefix; list order and paging."""
    return f"/{namespace}/{name}" if namespace else f"/{name}"


def _meta(obj: JsonObject) -> JsonObject:
    meta = obj.setdefault("metadata", {})
    if not isinstance(meta, dict):
        raise status.bad_request("metadata: must be an object")
    return meta


class Store:
    def __init__(self, watch_window: int = 1000) -> None:
        self.cond = threading.Condition()
        self._objects: dict[Key, JsonObject] = {}
        self._rv = 1
        self._events: deque[Event] = deque(maxlen=watch_window)
        self._floor = 0  # a watch may resume from any rv >= floor: later events are all kept
        self._watch_epoch = 0
        self._closed = False

    # ------------------------------------------------------------------ reads

    @property
    def resource_version(self) -> int:
        with self.cond:
            return self._rv

    def get(self, rt: ResourceType, namespace: str, name: str) -> JsonObject:
        with self.cond:
            obj = self._objects.get((rt.plural, namespace, name))
            if obj is None:
                raise status.not_found(rt.resource, name)
            return copy.deepcopy(obj)

    def list_page(
        self,
        rt: ResourceType,
        namespace: str,
        matches: Matcher,
        limit: int = 0,
        continue_token: str = "",
        has_label_selector: bool = False,
    ) -> ListPage:
        """A page in key order. Like the apiserver, items carry no kind/apiVersion and
        `remainingItemCount` is only known when no label selector filters the list."""
        start = _decode_continue(continue_token) if continue_token else ""
        with self.cond:
            keyed = sorted(
                (_sort_key(ns, name), obj)
                for (plural, ns, name), obj in self._objects.items()
                if plural == rt.plural and (not namespace or ns == namespace)
            )
            rv = self._rv
            selected = [obj for key, obj in keyed if key >= start and matches(obj)]
            page = selected[:limit] if limit > 0 else selected
            items = [copy.deepcopy(o) for o in page]
        for item in items:
            item.pop("kind", None)
            item.pop("apiVersion", None)
        more = len(selected) - len(page)
        if more <= 0:
            return ListPage(items, rv, "", None)
        last = page[-1]["metadata"]
        token = _encode_continue(rv, _sort_key(last.get("namespace", ""), last["name"]) + "\x00")
        return ListPage(items, rv, token, None if has_label_selector else more)

    # ----------------------------------------------------------------- writes

    def create(self, rt: ResourceType, namespace: str, obj: Any) -> JsonObject:
        if not isinstance(obj, dict):
            raise status.bad_request(f"the body must be a {rt.kind} object")
        obj = copy.deepcopy(obj)
        meta = _meta(obj)
        if rt.namespaced:
            if meta.get("namespace", namespace) != namespace:
                raise status.bad_request(
                    "the namespace of the provided object does not match the namespace sent on "
                    "the request"
                )
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            suffix = "".join(random.choices(_GENERATE_ALPHABET, k=5))
            meta["name"] = f"{meta['generateName']}{suffix}"
        obj["kind"], obj["apiVersion"] = rt.kind, rt.api_version
        for field in ("resourceVersion", "uid", "creationTimestamp", "deletionTimestamp"):
            meta.pop(field, None)
        _apply_defaults(rt, obj, creating=True)
        name = meta.get("name", "")
        if errors := object_errors(rt.kind, obj):
            raise invalid_error(rt.kind, rt.group, name, errors)
        with self.cond:
            if rt.namespaced and (NAMESPACES.plural, "", namespace) not in self._objects:
                raise status.not_found(NAMESPACES.resource, namespace)
            key = (rt.plural, meta.get("namespace", ""), name)
            if key in self._objects:
                raise status.already_exists(rt.resource, name)
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = now_rfc3339()
            return self._commit(rt, key, "ADDED", obj, None)

    def update(
        self,
        rt: ResourceType,
        namespace: str,
        name: str,
        change: Callable[[JsonObject], JsonObject],
        subresource: str = "",
        create_missing: bool = False,
    ) -> tuple[JsonObject, bool]:
        """Apply `change` to the live object under the lock; returns (object, created).

        A `metadata.resourceVersion` in the result that is not the live one is a stale write
        (409). A change that leaves the object as it was is not a write: no new version, no event.
        """
        key = (rt.plural, namespace, name)
        with self.cond:
            old = self._objects.get(key)
            if old is None:
                if not create_missing:
                    raise status.not_found(rt.resource, name)
                blank: JsonObject = {"apiVersion": rt.api_version, "kind": rt.kind}
                blank["metadata"] = {"name": name} | ({"namespace": namespace} if namespace else {})
                return self.create(rt, namespace, change(blank)), True
            new = change(copy.deepcopy(old))
            if not isinstance(new, dict):
                raise status.bad_request(f"the result must be a {rt.kind} object")
            meta = _meta(new)
            live_rv = old["metadata"]["resourceVersion"]
            if meta.get("resourceVersion") not in (None, "", live_rv):
                raise status.conflict(rt.resource, name)
            if meta.get("name", name) != name:
                err = invalid("metadata.name", meta.get("name"), "field is immutable")
                raise invalid_error(rt.kind, rt.group, name, [err])
            for field in ("name", "namespace", "uid", "creationTimestamp", "resourceVersion"):
                if field in old["metadata"]:
                    meta[field] = old["metadata"][field]
            new["kind"], new["apiVersion"] = rt.kind, rt.api_version
            if rt.has_status:
                if subresource == "status":
                    new = {**copy.deepcopy(old), "status": new.get("status", {})}
                elif "status" in old:
                    new["status"] = copy.deepcopy(old["status"])
                else:
                    new.pop("status", None)
            _apply_defaults(rt, new, creating=False)
            if errors := object_errors(rt.kind, new):
                raise invalid_error(rt.kind, rt.group, name, errors)
            if new == old:
                return copy.deepcopy(old), False
            return self._commit(rt, key, "MODIFIED", new, old), False

    def delete(self, rt: ResourceType, namespace: str, name: str) -> JsonObject:
        key = (rt.plural, namespace, name)
        with self.cond:
            old = self._objects.get(key)
            if old is None:
                raise status.not_found(rt.resource, name)
            return self._commit(rt, key, "DELETED", copy.deepcopy(old), old)

    def bind(self, namespace: str, name: str, binding: Any) -> None:
        """POST pods/NAME/binding: what the scheduler does to place a pod."""
        target = binding.get("target") if isinstance(binding, dict) else None
        node = target.get("name") if isinstance(target, dict) else None
        if not node:
            raise invalid_error("Binding", "", name, [invalid("target.name", "", "required")])

        def place(pod: JsonObject) -> JsonObject:
            current = (pod.get("spec") or {}).get("nodeName")
            if current:
                raise status.conflict(
                    GroupResource("", "pods/binding"),
                    name,
                    f'pod {name} is already assigned to node "{current}"',
                )
            pod.setdefault("spec", {})["nodeName"] = node
            return pod

        self.update(PODS, namespace, name, place)
        self.update(PODS, namespace, name, _scheduled, subresource="status")

    def _commit(
        self, rt: ResourceType, key: Key, kind: str, obj: JsonObject, old: JsonObject | None
    ) -> JsonObject:
        """Store (or drop) `obj` at a new resourceVersion and tell the watchers. Lock held."""
        self._rv += 1
        obj["metadata"]["resourceVersion"] = str(self._rv)
        obj = _in_apiserver_order(obj)
        if kind == "DELETED":
            self._objects.pop(key, None)
        else:
            self._objects[key] = obj
        if len(self._events) == self._events.maxlen:
            self._floor = self._events[0].rv
        self._events.append(Event(self._rv, kind, rt.plural, key[1], obj, old))
        self.cond.notify_all()
        return copy.deepcopy(obj)

    # ---------------------------------------------------------------- watches

    def expire_history(self) -> None:
        """Forget every past event: a watch from any older resourceVersion now gets 410."""
        with self.cond:
            self._events.clear()
            self._floor = self._rv

    def drop_watches(self) -> None:
        with self.cond:
            self._watch_epoch += 1
            self.cond.notify_all()

    def close(self) -> None:
        with self.cond:
            self._closed = True
            self.cond.notify_all()

    def watch(
        self,
        rt: ResourceType,
        namespace: str,
        since: int | None,
        matches: Matcher,
        deadline: float,
        *,
        initial_events_end: bool = False,
    ) -> Iterator[tuple[str, JsonObject]]:
        """(type, object) pairs until the deadline, `drop_watches` or `close`.

        `since` None or 0 starts with a synthetic ADDED for every current object, as the
        apiserver does for a watch without a resourceVersion; otherwise the log is replayed from
        `since`, or a single ERROR 410 is sent when the log no longer reaches back that far.
        The starting point is fixed now, not at the first `next()`: a `drop_watches` that
        follows this call ends this watch too.
        """
        initial: list[tuple[str, JsonObject]] = []
        with self.cond:
            epoch = self._watch_epoch
            if since:
                cursor = since
            else:
                cursor = self._rv
                initial = [
                    ("ADDED", copy.deepcopy(obj))
                    for (plural, ns, _), obj in sorted(self._objects.items())
                    if plural == rt.plural and (not namespace or ns == namespace) and matches(obj)
                ]
        if initial_events_end:  # a streaming list: a bookmark closes the initial events
            initial.append(
                (
                    "BOOKMARK",
                    {
                        "kind": rt.kind,
                        "apiVersion": rt.api_version,
                        "metadata": {
                            "resourceVersion": str(cursor),
                            "annotations": {"k8s.io/initial-events-end": "true"},
                        },
                    },
                )
            )
        return self._follow(rt, namespace, matches, deadline, epoch, cursor, initial)

    def _follow(
        self,
        rt: ResourceType,
        namespace: str,
        matches: Matcher,
        deadline: float,
        epoch: int,
        cursor: int,
        initial: list[tuple[str, JsonObject]],
    ) -> Iterator[tuple[str, JsonObject]]:
        yield from initial
        while True:
            gone: JsonObject | None = None
            with self.cond:
                while True:
                    if self._closed or self._watch_epoch != epoch:
                        return
                    if cursor < self._floor:
                        gone = status.expired(cursor, self._floor + 1)
                        break
                    pending = self._events_after(cursor)
                    remaining = deadline - time.monotonic()
                    if pending or remaining <= 0:
                        break
                    self.cond.wait(remaining)
            if gone is not None:
                yield "ERROR", gone
                return
            if not pending:
                return
            cursor = pending[-1].rv
            for event in pending:
                if event.plural != rt.plural or (namespace and event.namespace != namespace):
                    continue
                if out := _as_seen_through(event, matches):
                    yield out

    def _events_after(self, cursor: int) -> list[Event]:
        newer: list[Event] = []
        for event in reversed(self._events):
            if event.rv <= cursor:
                break
            newer.append(event)
        newer.reverse()
        return newer


def _as_seen_through(event: Event, matches: Matcher) -> tuple[str, JsonObject] | None:
    """A selector-filtered watch sees an object leave the selection as DELETED and enter it as
    ADDED, as the apiserver reports it."""
    now_in = matches(event.obj)
    was_in = event.old is not None and matches(event.old)
    if event.type == "MODIFIED":
        if now_in and was_in:
            return "MODIFIED", copy.deepcopy(event.obj)
        if now_in or was_in:
            return ("ADDED" if now_in else "DELETED"), copy.deepcopy(event.obj)
        return None
    return (event.type, copy.deepcopy(event.obj)) if now_in else None


_TOP_ORDER = ("kind", "apiVersion", "metadata", "spec", "status")
_META_ORDER = (
    "name",
    "generateName",
    "namespace",
    "uid",
    "resourceVersion",
    "creationTimestamp",
    "deletionTimestamp",
    "labels",
    "annotations",
    "ownerReferences",
    "finalizers",
    "managedFields",
)


def _ordered(obj: JsonObject, order: tuple[str, ...]) -> JsonObject:
    rank = {key: i for i, key in enumerate(order)}
    return dict(sorted(obj.items(), key=lambda item: rank.get(item[0], len(order))))


def _in_apiserver_order(obj: JsonObject) -> JsonObject:
    """Key order as the apiserver serialises (Go struct order), so bodies read like real ones."""
    out = _ordered(obj, _TOP_ORDER)
    meta = out["metadata"] = _ordered(out["metadata"], _META_ORDER)
    for field in ("labels", "annotations"):  # Go marshals maps with sorted keys
        if isinstance(meta.get(field), dict):
            meta[field] = dict(sorted(meta[field].items()))
    return out


def _scheduled(pod: JsonObject) -> JsonObject:
    conditions = [
        c
        for c in pod.setdefault("status", {}).get("conditions", [])
        if c.get("type") != "PodScheduled"
    ]
    when = now_rfc3339()
    conditions.append({"type": "PodScheduled", "status": "True", "lastTransitionTime": when})
    pod["status"]["conditions"] = conditions
    return pod


_NODE_INFO_FIELDS = (
    "machineID",
    "systemUUID",
    "bootID",
    "kernelVersion",
    "osImage",
    "containerRuntimeVersion",
    "kubeletVersion",
    "kubeProxyVersion",
)


def _apply_defaults(rt: ResourceType, obj: JsonObject, creating: bool) -> None:
    """The few defaults the apiserver sets that kube-steer's code reads."""
    meta = obj["metadata"]
    if rt is NAMESPACES and meta.get("name"):
        # Set by the apiserver on every namespace write, so selectors can match by name.
        meta.setdefault("labels", {})[NAMESPACE_NAME_LABEL] = meta["name"]
        if creating:
            obj.setdefault("spec", {}).setdefault("finalizers", ["kubernetes"])
            obj["status"] = {"phase": "Active"}
    elif rt is NODES and isinstance((status_ := obj.get("status")), dict):
        # Go serialises these without omitempty, and the typed client insists on them.
        info = status_.setdefault("nodeInfo", {})
        for field in _NODE_INFO_FIELDS:
            info.setdefault(field, "")
        info.setdefault("operatingSystem", "linux")
        info.setdefault("architecture", "amd64")
    elif rt is PODS and creating:
        obj.setdefault("spec", {}).setdefault("schedulerName", "default-scheduler")
        obj["status"] = {"phase": "Pending"}


def _encode_continue(rv: int, start: str) -> str:
    """The apiserver's token: unpadded URL-safe base64 of {v, rv, start}."""
    raw = json.dumps({"v": "meta.k8s.io/v1", "rv": rv, "start": start}, separators=(",", ":"))
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


def _decode_continue(token: str) -> str:
    try:
        decoded = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        start = decoded["start"]
    except (ValueError, KeyError, TypeError, binascii.Error) as exc:
        raise status.bad_request(f"continue key is not valid: {exc}") from exc
    if not isinstance(start, str):
        raise status.bad_request("continue key is not valid: start must be a string")
    return start


__all__ = ["RESOURCES", "ApiError", "Event", "ListPage", "ResourceType", "Store", "resource_type"]
