"""HTTP(S) front of the stand-in: routes apiserver URLs to the store, streams watches.

The `kubernetes` client reaches it through an ordinary kubeconfig, so code under test runs the
same client calls it makes against a real cluster.
"""

from __future__ import annotations

import base64
import copy
import json
import logging
import re
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from steer.apistub import status
from steer.apistub.faults import Faults, RequestRecord
from steer.apistub.patching import APPLY_PATCH, PATCH_TYPES, apply_patch, parse_body
from steer.apistub.selectors import field_matcher, label_matcher
from steer.apistub.status import ApiError, JsonObject
from steer.apistub.store import (
    PODS,
    RESOURCES,
    ResourceType,
    Store,
    now_rfc3339,
    resource_type,
)

log = logging.getLogger(__name__)

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
DEFAULT_NAMESPACES = ("kube-system", "kube-public", "default", "kube-node-lease")
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
        out = []
        for rt in RESOURCES:
            if rt.group == group:
                out.append(
                    {
                        "name": rt.plural,
                        "singularName": rt.kind.lower(),
                        "namespaced": rt.namespaced,
                        "kind": rt.kind,
                        "verbs": verbs,
                    }
                )
                if rt.has_status:
                    out.append(
                        {
                            "name": f"{rt.plural}/status",
                            "singularName": "",
                            "namespaced": rt.namespaced,
                            "kind": rt.kind,
                            "verbs": ["get", "patch", "update"],
                        }
                    )
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
        labels = query.get("labelSelector", "")
        match_labels, match_fields = (
            label_matcher(labels),
            field_matcher(query.get("fieldSelector")),
        )
        page = self.store.list_page(
            route.rt,
            route.namespace,
            lambda obj: match_labels(obj) and match_fields(obj),
            limit=_int_param(query, "limit", 0),
            continue_token=query.get("continue", ""),
            has_label_selector=bool(labels),
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
        match_labels = label_matcher(query.get("labelSelector"))
        match_fields = field_matcher(query.get("fieldSelector"))
        since = _int_param(query, "resourceVersion", 0) or None
        seconds = _int_param(query, "timeoutSeconds", 0) or DEFAULT_WATCH_SECONDS
        events = self.store.watch(
            route.rt,
            route.namespace,
            since,
            lambda obj: match_labels(obj) and match_fields(obj),
            deadline=time.monotonic() + seconds,
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


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def log_message(self, format: str, *args: Any) -> None:
        log.debug("%s " + format, self.address_string(), *args)

    def _serve(self, method: str) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        content_type = self.headers.get("Content-Type", "").split(";")[0].strip()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if delay := api.faults.delay:
            time.sleep(delay)
        try:
            reply = api.handle(method, url.path, query, content_type, raw)
        except ApiError as exc:
            reply = Reply(exc.code, exc.status)
        except Exception as exc:
            log.exception("apistub: %s %s failed", method, self.path)
            reply = Reply(500, status.internal_error(f"{type(exc).__name__}: {exc}").status)
        code = 200 if isinstance(reply, WatchReply) else reply.code
        api.faults.record(RequestRecord(method, url.path, url.query, content_type, code))
        if isinstance(reply, WatchReply):
            self._stream(reply.events)
            return
        if isinstance(reply.body, str):
            data, mime = reply.body.encode(), "text/plain; charset=utf-8"
        else:
            data, mime = json.dumps(reply.body).encode(), "application/json"
        try:
            self.send_response(reply.code)
            self.send_header("Content-Type", mime)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up waiting (a timeout under test)

    def _stream(self, events: Iterator[tuple[str, JsonObject]]) -> None:
        """One JSON event per line in HTTP chunks; the stream ends by closing the connection."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            self.wfile.flush()
            for kind, obj in events:
                line = json.dumps({"type": kind, "object": obj}).encode() + b"\n"
                self.wfile.write(b"%x\r\n%s\r\n" % (len(line), line))
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError, ssl.SSLError):
            pass  # the client hung up; its watch is over either way


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    api: Api


class ApiStub:
    """A running stand-in. Start with `ApiStub.start()`, point clients at `kubeconfig()`."""

    def __init__(self, server: _Server, store: Store, faults: Faults, tls_cert: str | None) -> None:
        self._server = server
        self._store = store
        self._faults = faults
        self._tls_cert = tls_cert
        host, port = server.server_address[:2]
        self.host, self.port = str(host), int(port)
        self.url = f"{'https' if tls_cert else 'http'}://{self.host}:{self.port}"
        # A short poll interval keeps stop() quick; tests start and stop many servers.
        self._thread = threading.Thread(
            target=server.serve_forever, args=(0.05,), name=f"apistub-{self.port}", daemon=True
        )

    @classmethod
    def start(
        cls,
        host: str = "127.0.0.1",
        port: int = 0,
        tls: tuple[str, str] | None = None,
        watch_window: int = 1000,
        namespaces: tuple[str, ...] = DEFAULT_NAMESPACES,
    ) -> ApiStub:
        """Serve on `host:port` (0 picks a free port); `tls` is (cert file, key file).

        `watch_window` is how many past events a watch can resume from before it gets 410.
        The usual system namespaces exist from the start, as on a fresh cluster.
        """
        store, faults = Store(watch_window), Faults()
        server = _Server((host, port), _Handler)
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            server.socket = context.wrap_socket(server.socket, server_side=True)
        stub = cls(server, store, faults, tls[0] if tls else None)
        server.api = Api(store, faults, f"{stub.host}:{stub.port}")
        for name in namespaces:
            stub.add_namespace(name)
        stub._thread.start()
        return stub

    def stop(self) -> None:
        """Stop serving and end every open watch."""
        self._store.close()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ApiStub:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def kubeconfig(
        self, path: str | Path, namespace: str = "default", ca_file: str | None = None
    ) -> Path:
        """Write a kubeconfig for this server. With TLS, the CA is `ca_file`, or the serving
        certificate itself when that is self-signed."""
        cluster: JsonObject = {"server": self.url}
        if ca := ca_file or self._tls_cert:
            cluster["certificate-authority-data"] = base64.b64encode(Path(ca).read_bytes()).decode()
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "apistub", "cluster": cluster}],
            "users": [{"name": "apistub", "user": {"token": "apistub-token"}}],
            "contexts": [
                {
                    "name": "apistub",
                    "context": {"cluster": "apistub", "user": "apistub", "namespace": namespace},
                }
            ],
            "current-context": "apistub",
        }
        out = Path(path)
        out.write_text(yaml.safe_dump(config, sort_keys=False))
        return out

    # -------------------------------------------------------- objects, directly

    def create(self, kind: str, obj: JsonObject, namespace: str | None = None) -> JsonObject:
        """Create as a client would (validation, defaults, a watch event); returns the result."""
        rt = resource_type(kind)
        ns = (
            (namespace or (obj.get("metadata") or {}).get("namespace") or "default")
            if rt.namespaced
            else ""
        )
        return self._store.create(rt, ns, obj)

    def add_node(self, node: JsonObject) -> JsonObject:
        return self.create("nodes", node)

    def add_namespace(self, name: str, labels: dict[str, str] | None = None) -> JsonObject:
        return self.create("namespaces", {"metadata": {"name": name, "labels": dict(labels or {})}})

    def get(self, kind: str, name: str, namespace: str | None = None) -> JsonObject:
        """The stored object (a copy). Raises KeyError when it does not exist."""
        rt = resource_type(kind)
        try:
            return self._store.get(rt, (namespace or "default") if rt.namespaced else "", name)
        except ApiError as exc:
            raise KeyError(exc.status["message"]) from None

    def objects(self, kind: str, namespace: str | None = None) -> list[JsonObject]:
        """Stored objects of `kind` (all namespaces when `namespace` is None), in key order."""
        page = self._store.list_page(resource_type(kind), namespace or "", lambda _obj: True)
        return page.items

    def modify(
        self,
        kind: str,
        name: str,
        change: Callable[[JsonObject], JsonObject],
        namespace: str | None = None,
    ) -> JsonObject:
        """Change an object as another client would, e.g. to stage a concurrent writer."""
        rt = resource_type(kind)
        ns = (namespace or "default") if rt.namespaced else ""
        obj, _ = self._store.update(rt, ns, name, change)
        return obj

    def delete(self, kind: str, name: str, namespace: str | None = None) -> None:
        rt = resource_type(kind)
        self._store.delete(rt, (namespace or "default") if rt.namespaced else "", name)

    @property
    def resource_version(self) -> int:
        """The cluster-wide resourceVersion of the latest write."""
        return self._store.resource_version

    # ------------------------------------------------------------------ faults

    def fail_next_writes(self, n: int, status: int = 500, path_contains: str | None = None) -> None:
        """The next `n` writes (optionally only to paths containing `path_contains`) fail with
        `status` (409 Conflict, 500 InternalError, 429, 503, 504) and change nothing."""
        self._faults.fail_next_writes(n, status, path_contains)

    def delay(self, seconds: float) -> None:
        """Wait `seconds` before answering each request from now on; 0 turns it off."""
        self._faults.set_delay(seconds)

    def drop_watches(self) -> None:
        """End every open watch stream, as an apiserver restart or a load balancer would."""
        self._store.drop_watches()

    def expire_watch_history(self) -> None:
        """Make every earlier resourceVersion too old: the next watch from one gets 410."""
        self._store.expire_history()

    @property
    def requests(self) -> list[RequestRecord]:
        return self._faults.requests()

    def clear_requests(self) -> None:
        self._faults.clear_requests()

    def count(self, method: str | None = None, path_contains: str = "") -> int:
        """How many logged requests match, e.g. `count("PATCH", "/api/v1/nodes")`."""
        return sum(
            1
            for r in self._faults.requests()
            if (method is None or r.method == method) and path_contains in r.path
        )


__all__ = ["ApiStub", "RequestRecord"]
