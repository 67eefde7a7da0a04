"""The operator's view of a running webhook, kept off the admission port.

`/readyz` on the TLS port is for the kubelet and says only whether a worker is ready: the
detail (policy version, reload error text, namespace cache, certificate serial and names) is
not for any caller that can reach the port. Each worker writes that detail to a file beside
its metrics files every few seconds; the master's plain-HTTP listener (`--metrics-listen`,
bound to the pod IP in the manifest and open only to Prometheus and the apiserver) serves
`/metrics` for all workers and `/status` with each worker's detail, and 404 for anything else.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson

from steer.adapters.http_server import HttpServer

log = logging.getLogger(__name__)

STATUS_PREFIX = "status_"
# A slow scraper or prober gets this long per read or write on the metrics listener.
LISTENER_TIMEOUT_S = 5


def status_file(directory: str, pid: int) -> str:
    return os.path.join(directory, f"{STATUS_PREFIX}{pid}.json")


def write_worker_status(directory: str, detail: Mapping[str, Any]) -> None:
    """This worker's detail, replaced atomically (a reader never sees half a file)."""
    pid = os.getpid()
    path = status_file(directory, pid)
    temporary = f"{path}.tmp"
    with open(temporary, "wb") as out:
        out.write(orjson.dumps({"pid": pid, "writtenAt": time.time(), **detail}))
    os.replace(temporary, path)


def remove_worker_status(directory: str, pid: int) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(status_file(directory, pid))


def worker_statuses(directory: str) -> list[dict[str, Any]]:
    found = []
    for name in sorted(os.listdir(directory)):
        if name.startswith(STATUS_PREFIX) and name.endswith(".json"):
            try:
                with open(os.path.join(directory, name), "rb") as data:
                    found.append(json.loads(data.read()))
            except (OSError, ValueError):
                continue  # a worker that just exited
    return found


def listener_app(
    metrics: Callable[..., Iterable[bytes]], statuses: Callable[[], list[dict[str, Any]]]
) -> Callable[..., Iterable[bytes]]:
    """`/metrics` (the prometheus-client WSGI app), `/status`, and 404 for every other path."""

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if environ.get("REQUEST_METHOD") not in ("GET", "HEAD"):
            return _json(start_response, "405 Method Not Allowed", _error("method-not-allowed"))
        if path == "/metrics":
            return metrics(environ, start_response)
        if path == "/status":
            workers = statuses()
            body = {"ready": bool(workers) and all(w.get("ready") for w in workers)}
            return _json(start_response, "200 OK", {**body, "workers": workers})
        return _json(start_response, "404 Not Found", _error("not-found"))

    return app


def _error(reason: str) -> dict[str, Any]:
    return {"error": {"reason": reason, "message": "this listener serves /metrics and /status"}}


def _json(start_response: Callable[..., Any], status: str, body: Any) -> list[bytes]:
    data = orjson.dumps(body)
    start_response(
        status, [("Content-Type", "application/json"), ("Content-Length", str(len(data)))]
    )
    return [data]


def start_listener(host: str, port: int, app: Callable[..., Iterable[bytes]]) -> HttpServer:
    """Serve `app` on plain HTTP at host:port from a daemon thread (a scrape or a probe that
    stays idle past LISTENER_TIMEOUT_S is closed)."""
    return HttpServer(
        app, host, port, name="metrics-listener", idle_timeout_s=LISTENER_TIMEOUT_S
    ).start()
