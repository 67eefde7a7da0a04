"""HTTP(S) front of the stand-in: serves `Api` replies and streams watches; `ApiStub` runs it.

The `kubernetes` client reaches it through an ordinary kubeconfig, so code under test runs the
same client calls it makes against a real cluster.
"""

from __future__ import annotations

import base64
import json
import logging
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import yaml

from kits.apistub import status
from kits.apistub.api import WRITE_METHODS, Api, Reply, WatchReply
from kits.apistub.faults import Faults, RequestRecord
from kits.apistub.status import ApiError, JsonObject
from kits.apistub.store import Store, resource_type

log = logging.getLogger(__name__)

DEFAULT_NAMESPACES = ("kube-system", "kube-public", "default", "kube-node-lease")


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in separate writes; with Nagle on, the body waits for the
    # client's delayed ACK (about 40 ms per request on loopback).
    disable_nagle_algorithm = True
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
        if method in WRITE_METHODS and (pause := api.faults.take_write_delay(url.path)):
            time.sleep(pause)
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
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
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

    def delay_next_writes(self, n: int, seconds: float, path_contains: str | None = None) -> None:
        """The next `n` writes (optionally only to paths containing `path_contains`) are applied
        `seconds` late: a client that times out first retries a write that lands anyway."""
        self._faults.delay_next_writes(n, seconds, path_contains)

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
