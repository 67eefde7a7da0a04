"""An HTTP server keeping Kubernetes objects by path, for the in-cluster certificate renewal's
tests: GET (an object, or a collection filtered by labelSelector), POST (create; 409 when the
name is taken), PUT (409 unless the body carries the current resourceVersion) and JSON PATCH
(422 when a `test` fails), with the apiserver's Status bodies. Enough of the apiserver for
Secrets, webhook configurations, Services and EndpointSlices, over real HTTP and the
`kubernetes` client, so the code under test is the code that runs in the cluster.
"""

from __future__ import annotations

import contextlib
import copy
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol
from urllib.parse import parse_qs, urlsplit

import jsonpatch
from kubernetes import client

# What a GET of a path ending so lists (anything else not stored is a 404).
COLLECTIONS = frozenset(
    {
        "secrets",
        "services",
        "endpointslices",
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
    }
)


class ObjectHandler(Protocol):
    """What `object_server` serves: an answer for each request."""

    def handle(self, method: str, path: str, body: Any) -> tuple[int, Any]: ...


@dataclass
class Objects:
    """Objects by path (`/api/v1/namespaces/NS/secrets/NAME`), and every write made."""

    by_path: dict[str, dict[str, Any]] = field(default_factory=dict)
    writes: list[tuple[str, str]] = field(default_factory=list)  # (method, path)
    version: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)

    def put(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` at `path` as an admin would (no write recorded)."""
        with self.lock:
            return self._store(path, copy.deepcopy(obj))

    def get(self, path: str) -> dict[str, Any]:
        with self.lock:
            return copy.deepcopy(self.by_path[path])

    def writes_to(self, path: str) -> list[str]:
        return [method for method, where in self.writes if where == path]

    def _store(self, path: str, obj: dict[str, Any]) -> dict[str, Any]:
        self.version += 1
        meta = obj.setdefault("metadata", {})
        meta["name"] = path.rsplit("/", 1)[1]
        meta["resourceVersion"] = str(self.version)
        self.by_path[path] = obj
        return copy.deepcopy(obj)

    def handle(self, method: str, raw_path: str, body: Any) -> tuple[int, Any]:
        parts = urlsplit(raw_path)
        path = parts.path.rstrip("/")
        with self.lock:
            if method == "GET":
                if path in self.by_path:
                    return 200, copy.deepcopy(self.by_path[path])
                return self._list(path, parse_qs(parts.query))
            self.writes.append((method, path))
            if method == "POST":
                name = (body.get("metadata") or {}).get("name")
                target = f"{path}/{name}"
                if target in self.by_path:
                    return 409, _status(409, "AlreadyExists", f"{name} already exists")
                return 201, self._store(target, body)
            current = self.by_path.get(path)
            if current is None:
                return 404, _status(404, "NotFound", f"{path} not found")
            if method == "PUT":
                wanted = (body.get("metadata") or {}).get("resourceVersion")
                if wanted != current["metadata"]["resourceVersion"]:
                    return 409, _status(409, "Conflict", "the object has been modified")
                return 200, self._store(path, body)
            if method == "PATCH":
                try:
                    patched = jsonpatch.apply_patch(current, body)
                except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:
                    return 422, _status(422, "Invalid", str(exc))
                return 200, self._store(path, patched)
        return 405, _status(405, "MethodNotAllowed", method)

    def _list(self, path: str, query: dict[str, list[str]]) -> tuple[int, Any]:
        wanted = dict(
            term.split("=", 1) for term in query.get("labelSelector", [""])[0].split(",") if term
        )
        items = [
            copy.deepcopy(obj)
            for where, obj in sorted(self.by_path.items())
            if where.rsplit("/", 1)[0] == path
            and wanted.items() <= ((obj.get("metadata") or {}).get("labels") or {}).items()
        ]
        if path.rsplit("/", 1)[1] not in COLLECTIONS:
            return 404, _status(404, "NotFound", f"{path} not found")
        return 200, {"kind": "List", "items": items}


def _status(code: int, reason: str, message: str) -> dict[str, Any]:
    return {
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
    }


@contextlib.contextmanager
def object_server(objects: ObjectHandler) -> Iterator[client.ApiClient]:
    """A `kubernetes` ApiClient talking to `objects` (anything with `handle(method, path,
    body) -> (code, answer)`) over HTTP; stopped on exit."""

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True  # headers and body go out as two writes

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            code, answer = objects.handle(self.command, self.path, body)
            data = json.dumps(answer).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    # A short poll: shutdown() waits for it, once per test.
    threading.Thread(target=server.serve_forever, args=(0.02,), daemon=True).start()
    configuration = client.Configuration(host=f"http://127.0.0.1:{server.server_address[1]}")
    api = client.ApiClient(configuration)
    try:
        yield api
    finally:
        api.close()
        server.shutdown()
        server.server_close()
