"""Clients that misbehave on purpose, and one that measures what a well-behaved client gets.

Each opener returns a connected socket left in the state it describes; `ClosureWatch` notes
when the server closes each one, and `SteadyClient` keeps posting AdmissionReviews with the
apiserver's patience (a 2 s timeout) and counts what went wrong.
"""

from __future__ import annotations

import contextlib
import json
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests

from tests.webhook_harness import Webhook, review_for

APISERVER_TIMEOUT_S = 2.0


def address(hook: Webhook) -> tuple[str, int]:
    return "127.0.0.1", int(hook.url.rsplit(":", 1)[1])


def client_context(ca_file: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(ca_file))


def client_hello(ca_file: Path) -> bytes:
    """The first flight of a real TLS client, as bytes (nothing is sent)."""
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = client_context(ca_file).wrap_bio(incoming, outgoing, server_hostname="localhost")
    with contextlib.suppress(ssl.SSLWantReadError):
        tls.do_handshake()
    return outgoing.read()


def review_bytes(namespace: str = "team-b") -> bytes:
    return json.dumps(review_for("pod-create-user-validating.json", namespace)).encode()


def request_head(path: str, length: int | None, *extra: str) -> bytes:
    lines = [f"POST {path} HTTP/1.1", "Host: localhost", "Content-Type: application/json"]
    if length is not None:
        lines.append(f"Content-Length: {length}")
    return ("\r\n".join([*lines, *extra]) + "\r\n\r\n").encode()


# --- openers: each leaves one connection stuck in one phase ---------------------------------


def slow_handshake(hook: Webhook, hello: bytes) -> socket.socket:
    """TCP connected, a few bytes of the ClientHello record sent, then silence."""
    sock = socket.create_connection(address(hook), timeout=5)
    sock.sendall(hello[:11])
    return sock


def silent_connection(hook: Webhook) -> socket.socket:
    """TCP connected, not a byte sent."""
    return socket.create_connection(address(hook), timeout=5)


def tls_connection(hook: Webhook) -> ssl.SSLSocket:
    raw = socket.create_connection(address(hook), timeout=5)
    return client_context(hook.ca_file).wrap_socket(raw, server_hostname="localhost")


def partial_head(hook: Webhook) -> ssl.SSLSocket:
    """TLS done, the request line and part of a header, then silence."""
    tls = tls_connection(hook)
    tls.sendall(b"POST /validate HTTP/1.1\r\nHost: localhost\r\nContent-Ty")
    return tls


def partial_body(hook: Webhook, body: bytes) -> ssl.SSLSocket:
    """TLS done, the whole head, half of the body it announces, then silence."""
    tls = tls_connection(hook)
    tls.sendall(request_head("/validate", len(body)) + body[: len(body) // 2])
    return tls


def closed_request_left_open(hook: Webhook, body: bytes) -> ssl.SSLSocket:
    """A whole request with `Connection: close`, its answer read, the socket never closed."""
    tls = tls_connection(hook)
    tls.sendall(request_head("/validate", len(body), "Connection: close") + body)
    tls.settimeout(APISERVER_TIMEOUT_S)
    received = b""
    while b"\r\n\r\n" not in received:
        chunk = tls.recv(65536)
        if not chunk:
            break
        received += chunk
    return tls


class Trickler:
    """Slowloris: TLS done, then the request head one byte every `interval` seconds, for as
    long as the server keeps the connection."""

    def __init__(self, hook: Webhook, interval: float = 0.25) -> None:
        self.tls = tls_connection(hook)
        self.sent = 0
        self._interval = interval
        self._data = request_head("/validate", 10) * 1000
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for i in range(len(self._data)):
            try:
                self.tls.sendall(self._data[i : i + 1])
            except OSError:
                return
            self.sent += 1
            time.sleep(self._interval)


# --- watching the server close them --------------------------------------------------------


class ClosureWatch:
    """When the server closed each socket (EOF or reset), in seconds after `opened`."""

    def __init__(self, sockets: Iterable[socket.socket], opened: float) -> None:
        self.opened = opened
        self.closed_after: dict[int, float] = {}
        self._sockets = list(sockets)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        selector = selectors.DefaultSelector()
        for i, sock in enumerate(self._sockets):
            sock.settimeout(0.05)
            selector.register(sock, selectors.EVENT_READ, i)
        while not self._stop.is_set() and len(self.closed_after) < len(self._sockets):
            for key, _ in selector.select(timeout=0.05):
                index: int = key.data
                try:
                    data = self._sockets[index].recv(65536)
                except (TimeoutError, ssl.SSLWantReadError):
                    continue  # part of a TLS record: not closed
                except OSError:
                    data = b""
                if not data:
                    self.closed_after[index] = time.monotonic() - self.opened
                    selector.unregister(key.fileobj)
        selector.close()

    def wait(self, timeout: float) -> None:
        self._thread.join(timeout)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        for sock in self._sockets:
            with contextlib.suppress(OSError):
                sock.close()

    @property
    def still_open(self) -> int:
        return len(self._sockets) - len(self.closed_after)


# --- the client that must keep being served -----------------------------------------------


@dataclass
class SteadyClient:
    """Posts reviews back to back until stopped: keep-alive, and every `fresh_every`-th request
    on a new connection (as an apiserver dialing more connections under load would)."""

    hook: Webhook
    body: bytes = field(default_factory=review_bytes)
    fresh_every: int = 5
    latencies: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> SteadyClient:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        kept = self.hook.session()
        sent = 0
        while not self._stop.is_set():
            sent += 1
            fresh = sent % self.fresh_every == 0
            self._post(self.hook.session() if fresh else kept, close=fresh)
        kept.close()

    def _post(self, session: requests.Session, *, close: bool) -> None:
        started = time.monotonic()
        try:
            reply = session.post(
                f"{self.hook.url}/validate",
                data=self.body,
                headers={"Content-Type": "application/json"},
                timeout=APISERVER_TIMEOUT_S,
            )
            self.statuses[reply.status_code] = self.statuses.get(reply.status_code, 0) + 1
            if reply.status_code >= 500 or "response" not in reply.json():
                self.failures.append(f"HTTP {reply.status_code}: {reply.text[:120]}")
        except requests.RequestException as exc:
            kind = "new connection" if close else "kept-alive connection"
            self.failures.append(f"{kind}: {type(exc).__name__}: {exc}"[:200])
        finally:
            self.latencies.append(time.monotonic() - started)
            if close:
                session.close()

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies) or [0.0]
        return {
            "requests": len(self.latencies),
            "failures": len(self.failures),
            "statuses": self.statuses,
            "p50_ms": round(1000 * ordered[len(ordered) // 2], 1),
            "max_ms": round(1000 * ordered[-1], 1),
            "first_failures": self.failures[:3],
        }


def open_all(openers: Iterable[Callable[[], socket.socket]]) -> list[socket.socket]:
    return [open_one() for open_one in openers]
