"""What the Prometheus faults share: a proxy that makes a real Prometheus slow, partial or
absent for the scorer behind it, a recorder of every change to what the scorer owns on the
nodes (a node watch of the test's own), and the count of the scorer's node writes from the
apiserver's audit log.

The proxy sits between `steer scorer run` and the Prometheus that scrapes the synthetic
exporter; the exporter keeps every node's data constant, so any change the recorder sees that
the fault does not explain (a TTL withdrawal, a recovery) is a flap on unchanged data.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from http.client import HTTPConnection
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from kits.control_plane import ControlPlane
from kits.net import free_port
from steer.adapters.kubejson import KubeApiError, KubeJson

PREFIX = "kube-steer.github.io/"
WRITE_VERBS = frozenset({"create", "update", "patch", "delete"})


# ------------------------------------------------------------------------------ the proxy


@dataclass
class Partial:
    """Answers to instant queries whose PromQL is `query` lose the series whose `label` is one of
    `drop` (a dimension answering with part of its series)."""

    query: str
    label: str
    drop: frozenset[str]


@dataclass
class ProxyStats:
    forwarded: int = 0
    delayed: int = 0
    filtered: int = 0  # answers that lost series
    series_dropped: int = 0
    client_gone: int = 0  # the scorer had given up before the (delayed) answer


class FaultProxy:
    """A threaded HTTP proxy on 127.0.0.1 in front of `upstream` (a Prometheus base URL).

    `heal()` passes everything through; `delay(s)` holds every answer `s` seconds after
    Prometheus gave it; `lag(query, s)` passes one query on `s` seconds late; `partial(...)`
    filters one query's result vector; `refuse()` closes the listening socket, so connections
    are refused as when Prometheus is down, until `heal()` listens again on the same port."""

    def __init__(self, upstream: str) -> None:
        parsed = urllib.parse.urlsplit(upstream)
        self.upstream = (parsed.hostname or "127.0.0.1", parsed.port or 80)
        self.port = free_port()
        self.stats = ProxyStats()
        self._lock = threading.Lock()
        self._delay_s = 0.0
        self._partial: Partial | None = None
        self._lag: tuple[str, float] | None = None
        self._closing = threading.Event()
        # PromQL → when its last query was passed on (a moment before Prometheus evaluated it)
        self.asked_at: dict[str, float] = {}
        self._asked: list[tuple[float, str]] = []  # every query passed on, oldest first
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- faults ----------------------------------------------------------------------------

    def heal(self) -> None:
        with self._lock:
            self._delay_s, self._partial, self._lag = 0.0, None, None
        self._listen()

    def lag(self, query: str, seconds: float) -> None:
        """Pass `query` on `seconds` late, so Prometheus evaluates it that much after the
        cycle's other queries (as when a query waits for one of the scorer's 8 connections)."""
        with self._lock:
            self._lag = (query, seconds)
        self._listen()

    def delay(self, seconds: float) -> None:
        with self._lock:
            self._delay_s, self._partial = seconds, None
        self._listen()

    def partial(self, query: str, label: str, drop: Sequence[str]) -> None:
        with self._lock:
            self._delay_s, self._partial = 0.0, Partial(query, label, frozenset(drop))
        self._listen()

    def refuse(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None

    def asked_since(self, at: float, query: str) -> int:
        """How many times `query` was passed on to Prometheus from `at` on: with one query per
        dimension a cycle, the scoring cycles that read since then."""
        with self._lock:
            return sum(1 for t, q in self._asked if t >= at and q == query)

    def start(self) -> FaultProxy:
        self.heal()
        return self

    def stop(self) -> None:
        self._closing.set()  # delayed answers are let go at once
        self.refuse()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _listen(self) -> None:
        if self._server is not None:
            return
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # One request per connection: a kept-alive connection would outlive `refuse()`.
            protocol_version = "HTTP/1.0"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                proxy._forward(self, b"")

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                proxy._forward(self, self.rfile.read(length) if length else b"")

        server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        server.daemon_threads = True
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()

    # -- forwarding --------------------------------------------------------------------------

    def _forward(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        with self._lock:
            delay_s, partial, lag = self._delay_s, self._partial, self._lag
            self.stats.forwarded += 1
        headers = {
            k: v
            for k, v in handler.headers.items()
            if k.lower() in ("content-type", "accept", "authorization")
        }
        query = _query_of(handler.path, body)
        if lag is not None and query == lag[0]:
            self._closing.wait(lag[1])
        if query is not None:
            with self._lock:
                self.asked_at[query] = now = time.time()
                self._asked.append((now, query))
        conn = HTTPConnection(*self.upstream, timeout=60)
        try:
            conn.request(handler.command, handler.path, body=body or None, headers=headers)
            resp = conn.getresponse()
            status, content_type, data = (
                resp.status,
                resp.getheader("Content-Type") or "application/json",
                resp.read(),
            )
        finally:
            conn.close()
        if partial is not None and query == partial.query:
            data = self._filtered(data, partial)
        if delay_s:
            with self._lock:
                self.stats.delayed += 1
            self._closing.wait(delay_s)
        try:
            handler.send_response(status)
            handler.send_header("Content-Type", content_type)
            handler.send_header("Content-Length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        except OSError:  # the scorer gave up on a delayed answer (its query timeout)
            with self._lock:
                self.stats.client_gone += 1
            handler.close_connection = True

    def _filtered(self, data: bytes, partial: Partial) -> bytes:
        doc = json.loads(data)
        result = (doc.get("data") or {}).get("result")
        if not isinstance(result, list):
            return data
        kept = [s for s in result if s.get("metric", {}).get(partial.label) not in partial.drop]
        with self._lock:
            self.stats.filtered += 1
            self.stats.series_dropped += len(result) - len(kept)
        doc["data"]["result"] = kept
        return json.dumps(doc).encode()


def _query_of(path: str, body: bytes) -> str | None:
    """The PromQL of an instant query (GET parameters or a POST form), None for other calls."""
    split = urllib.parse.urlsplit(path)
    if split.path != "/api/v1/query":
        return None
    params = urllib.parse.parse_qs(split.query)
    if body:
        params.update(urllib.parse.parse_qs(body.decode()))
    found = params.get("query")
    return found[0] if found else None


# ------------------------------------------------------------------- what the scorer owns


def owned_view(node: Mapping[str, Any]) -> dict[str, Any]:
    """The labels, taints, annotations and pools a node carries under the project's prefix: all
    a scorer write can change."""
    meta = node.get("metadata") or {}
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k.startswith(PREFIX)}
    annotations = {k: v for k, v in (meta.get("annotations") or {}).items() if k.startswith(PREFIX)}
    taints = sorted(
        (t["key"], t.get("value", ""), t["effect"])
        for t in (node.get("spec") or {}).get("taints") or ()
        if t["key"].startswith(PREFIX)
    )
    pools = {
        k: v
        for k, v in ((node.get("status") or {}).get("allocatable") or {}).items()
        if k.startswith(PREFIX)
    }
    return {"labels": labels, "annotations": annotations, "taints": taints, "pools": pools}


@dataclass(frozen=True)
class Change:
    """One change to what the scorer owns on a node, as the test's node watch saw it."""

    at: float  # unix seconds when the watch delivered it
    node: str
    labels: Mapping[str, tuple[str | None, str | None]]  # key → (before, after)
    taints: tuple[tuple[Any, ...], tuple[Any, ...]] | None
    pools: Mapping[str, tuple[str | None, str | None]]
    annotations_only: bool


def _diff(before: Mapping[str, str], after: Mapping[str, str]) -> dict[str, tuple[Any, Any]]:
    return {
        k: (before.get(k), after.get(k))
        for k in sorted(set(before) | set(after))
        if before.get(k) != after.get(k)
    }


@dataclass
class NodeRecorder:
    """Watches the nodes named in `names` (the test's admin client) and keeps every change to
    their owned view, and their current views."""

    kube: KubeJson
    names: frozenset[str]
    views: dict[str, dict[str, Any]] = field(default_factory=dict)
    changes: list[Change] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _stream: Any = None

    def start(self) -> NodeRecorder:
        items, rv = self.kube.list_snapshot("/api/v1/nodes")
        for item in items:
            if item["metadata"]["name"] in self.names:
                self.views[item["metadata"]["name"]] = owned_view(item)
        self._thread = threading.Thread(target=self._run, args=(rv,), daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._stream is not None:
            self._stream.close()
        if self._thread is not None:
            self._thread.join(timeout=10)

    def _run(self, rv: str) -> None:
        while not self._stop.is_set():
            try:
                self._stream = self.kube.watch("/api/v1/nodes", resource_version=rv, timeout_s=60)
                for event in self._stream:
                    obj = event.get("object") or {}
                    rv = (obj.get("metadata") or {}).get("resourceVersion") or rv
                    if event.get("type") in ("ADDED", "MODIFIED"):
                        self._seen(obj)
            except KubeApiError:
                if self._stop.wait(0.5):
                    return
            except Exception:  # a closed stream at stop, a reset connection: watch again
                if self._stop.wait(0.2):
                    return

    def _seen(self, node: Mapping[str, Any]) -> None:
        name = node["metadata"]["name"]
        if name not in self.names:
            return
        view = owned_view(node)
        with self._lock:
            before = self.views.get(name)
            self.views[name] = view
            if before is None or before == view:
                return
            labels = _diff(before["labels"], view["labels"])
            pools = _diff(before["pools"], view["pools"])
            taints = (
                None
                if before["taints"] == view["taints"]
                else (tuple(before["taints"]), tuple(view["taints"]))
            )
            self.changes.append(
                Change(
                    at=time.time(),
                    node=name,
                    labels=labels,
                    taints=taints,
                    pools=pools,
                    annotations_only=not (labels or pools or taints),
                )
            )

    def snapshot(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {k: json.loads(json.dumps(v)) for k, v in self.views.items()}

    def since(self, at: float) -> list[Change]:
        with self._lock:
            return [c for c in self.changes if c.at >= at]


# ------------------------------------------------------------------------- the audit log


@dataclass(frozen=True)
class NodeWrite:
    at: str  # the audit event's stageTimestamp
    node: str
    verb: str
    subresource: str
    code: int


def node_writes(plane: ControlPlane, since: int, user: str) -> list[NodeWrite]:
    """Every request of `user` that wrote a Node (its status included) logged after byte
    `since` of the audit log (`plane.audit_offset()`)."""
    out = []
    for event in plane.audit_events(since=since):
        ref = event.get("objectRef") or {}
        if (
            event.get("stage") == "ResponseComplete"
            and (event.get("user") or {}).get("username") == user
            and ref.get("resource") == "nodes"
            and event.get("verb") in WRITE_VERBS
        ):
            out.append(
                NodeWrite(
                    at=str(event.get("stageTimestamp")),
                    node=str(ref.get("name")),
                    verb=str(event["verb"]),
                    subresource=str(ref.get("subresource") or ""),
                    code=int((event.get("responseStatus") or {}).get("code") or 0),
                )
            )
    return out
