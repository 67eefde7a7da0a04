"""A watch of every Node: when each one was first published, and every later change classified."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from steer.core.budget import pool_resource
from steer.core.policy import Policy
from steer.core.steering import composite_key

from .api import Api
from .progress import log


@dataclass
class NodeSeen:
    pool_at: float | None = None
    label_at: float | None = None
    resources: dict[str, str] = field(default_factory=dict)
    owned_meta: str = ""


@dataclass(frozen=True)
class NodeEvent:
    at: float
    node: str
    status: bool  # an owned resource in status.allocatable changed
    metadata: bool  # owned labels, annotations or taints changed


class NodeWatch:
    """List every Node, then watch: when each first carries its pool and its composite label,
    and every later change classified (status / metadata). Times are monotonic seconds."""

    def __init__(self, api: Api, policy: Policy) -> None:
        self.api = api
        self.pool_key = pool_resource(policy, "cpu")
        self.label_key = composite_key(policy, None)
        self.label_prefix = policy.spec.label_prefix
        self.resource_prefix = policy.spec.resource_prefix
        self.nodes: dict[str, NodeSeen] = {}
        self.events: list[NodeEvent] = []
        self.last_event = 0.0
        self.restarts = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._session = api.new_session()
        self._thread: threading.Thread | None = None
        self._rv = ""
        self.list_s = 0.0

    def start(self) -> None:
        t0 = time.monotonic()
        items, self._rv = self.api.pages("/api/v1/nodes")
        self.list_s = time.monotonic() - t0
        for obj in items:
            self._see(obj, t0, initial=True)
        self._thread = threading.Thread(target=self._run, name="node-watch", daemon=True)
        self._thread.start()

    def _owned(self, obj: Mapping[str, Any]) -> tuple[dict[str, str], str]:
        meta = obj.get("metadata") or {}
        status = obj.get("status") or {}
        resources = {
            k: str(v)
            for k, v in (status.get("allocatable") or {}).items()
            if k.startswith(self.resource_prefix)
        }
        owned = {
            "labels": {
                k: v
                for k, v in (meta.get("labels") or {}).items()
                if k.startswith(self.label_prefix)
            },
            "annotations": {
                k: v
                for k, v in (meta.get("annotations") or {}).items()
                if k.startswith(self.label_prefix)
            },
            "taints": (obj.get("spec") or {}).get("taints") or [],
        }
        return resources, orjson.dumps(owned, option=orjson.OPT_SORT_KEYS).decode()

    def _see(self, obj: Mapping[str, Any], now: float, initial: bool = False) -> None:
        name = str((obj.get("metadata") or {}).get("name"))
        resources, owned = self._owned(obj)
        labels = (obj.get("metadata") or {}).get("labels") or {}
        with self._lock:
            seen = self.nodes.get(name)
            if seen is None:
                seen = self.nodes[name] = NodeSeen(resources=resources, owned_meta=owned)
                changed_status = changed_meta = False
            else:
                changed_status = resources != seen.resources
                changed_meta = owned != seen.owned_meta
                seen.resources, seen.owned_meta = resources, owned
            if seen.pool_at is None and self.pool_key in resources:
                seen.pool_at = now
            if seen.label_at is None and self.label_key in labels:
                seen.label_at = now
            if not initial:
                self.events.append(NodeEvent(now, name, changed_status, changed_meta))
                self.last_event = now

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                resp = self._session.get(
                    self.api.base + "/api/v1/nodes",
                    params={
                        "watch": "true",
                        "resourceVersion": self._rv,
                        "allowWatchBookmarks": "true",
                        "timeoutSeconds": "3600",
                    },
                    stream=True,
                    timeout=(10, 120),
                )
                if resp.status_code == 410:
                    raise RuntimeError("node watch: 410 Gone")
                resp.raise_for_status()
                for line in resp.iter_lines(chunk_size=65536):
                    if self._stop.is_set():
                        return
                    if not line:
                        continue
                    event = orjson.loads(line)
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion")
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._see(obj, time.monotonic())
                    elif event.get("type") == "ERROR":
                        raise RuntimeError(f"node watch error: {obj}")
                    if rv:
                        self._rv = str(rv)
            except Exception as exc:  # a dropped watch resumes from the last version seen
                if self._stop.is_set():
                    return
                self.restarts += 1
                log(f"   node watch ended ({exc}); resuming")
                time.sleep(0.5)

    def stop(self) -> None:
        self._stop.set()
        self._session.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def counts(self) -> tuple[int, int]:
        with self._lock:
            pools = sum(1 for s in self.nodes.values() if s.pool_at is not None)
            labels = sum(1 for s in self.nodes.values() if s.label_at is not None)
        return pools, labels

    def times(self) -> tuple[list[float], list[float]]:
        with self._lock:
            return (
                [s.pool_at for s in self.nodes.values() if s.pool_at is not None],
                [s.label_at for s in self.nodes.values() if s.label_at is not None],
            )

    def events_between(self, start: float, end: float) -> list[NodeEvent]:
        with self._lock:
            return [e for e in self.events if start <= e.at <= end]
