"""The webhook's gunicorn worker: gunicorn's gevent worker, with limits on what a client may take.

gunicorn's threaded worker does each connection's TLS handshake in a pool thread with a
blocking socket: a client that sends part of a handshake and then waits holds that thread as
long as it likes, and a few such clients stopped admission (16 did on 2 workers x 4 threads,
with nothing logged; with failurePolicy Ignore every pod was admitted unvalidated meanwhile).
The gevent worker (`gunicorn.workers.ggevent.GeventWorker`) serves each connection in its own
greenlet, so a slow client costs a few KB of memory and no thread at all. This worker adds,
through the worker's public hooks (`handle`, `handle_request`, `load_wsgi`) and gevent's
public API only:

- The TLS handshake is done here, with the context `CertReloader` gives for each new
  connection (a rotated certificate serves without a restart), within `read_timeout` seconds
  of the connection's arrival.
- Each request has `read_timeout` seconds from its first byte to its last (`GuardedSocket`
  stands between gunicorn's parser and the TLS socket and keeps the deadline). An idle
  kept-alive connection waits `keepalive` seconds for its next request.
- Past a deadline the connection is closed, counted (`steer_webhook_connections_timed_out_total`
  by phase) and logged in one line a second at most, however many there were.
- At `--max-connections` the connections waiting longest for their client are closed to make
  room, so a flood of idle connections cannot keep the apiserver's out.
- An answer 413 (a body over `--max-body-bytes`, read and dropped by the app) closes the
  connection after it is sent.
- A stopping worker closes its idle kept-alive connections within a second (the requests under
  way are answered, with `Connection: close`), instead of waiting for them until gunicorn's
  graceful timeout.

The behaviour relied on (gevent's worker calls `handle(listener, client, addr)` in a greenlet
per connection; the parser reads with `recv` and the response writes with `sendall`; a request
whose `must_close` is set closes its connection) is pinned by tests/reliability/ against the
installed gunicorn and gevent, whose versions pyproject.toml bounds.
"""

from __future__ import annotations

import errno
import itertools
import os
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import gevent
import gevent.socket
import gevent.ssl
from gunicorn import glogging
from gunicorn.workers.ggevent import GeventWorker

from webhook.memory import return_large_blocks

Phase = Literal["handshake", "request"]
EXAMPLES_LOGGED = 3
REPORT_EVERY_S = 1.0
# A connection closed before its request was read whole (a 413) drops what the client still
# sends for a moment, so that unread bytes do not turn the close into a reset that loses the
# answer.
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 * 1024


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may take of a worker (the `--read-timeout-seconds`,
    `--max-connections` flags)."""

    read_timeout: float = 5.0
    max_connections: int = 256

    @property
    def greenlets(self) -> int:
        """gunicorn's `worker_connections` (the gevent pool): room above `max_connections`
        for the connections that arrive while others are being closed."""
        return 2 * self.max_connections


class ClientGone(ConnectionResetError):
    """The connection was closed here (a deadline, or room for others): gunicorn's worker
    drops a connection reset quietly."""

    def __init__(self, why: str) -> None:
        super().__init__(errno.ECONNRESET, why)


@dataclass(eq=False)
class Connection:
    """One client connection, as the worker's bookkeeping sees it (one greenlet touches it)."""

    peer: str
    sock: Any  # the TCP socket, then the TLS socket over it
    arrived: float
    sequence: int
    phase: Phase | None = "handshake"
    deadline: float | None = None
    served: int = 0
    waiting_since: float | None = None  # set while the greenlet waits for the client
    closed_here: str = ""  # why this worker closed it
    request: Any = None  # gunicorn's request being answered

    def begin_request(self, timeout: float) -> None:
        if self.phase is None:
            self.phase, self.deadline = "request", time.monotonic() + timeout

    def end_request(self) -> None:
        if self.phase == "request":
            self.served += 1
        self.phase = self.deadline = None

    def close_here(self, why: str) -> None:
        """Close the connection from any greenlet: its own wait wakes up to an EOF.

        The shutdown goes through a duplicate of the descriptor (a shutdown is the
        connection's, whichever descriptor asks), so the TLS object the greenlet is reading
        with stays whole and reports the end as the client closing."""
        if self.closed_here:
            return
        self.closed_here = why
        with suppress(OSError), socket.socket(fileno=os.dup(self.sock.fileno())) as duplicate:
            duplicate.shutdown(socket.SHUT_RDWR)


@dataclass
class Connections:
    """The worker's open connections, what it closed, and the lines it owes the log."""

    limits: ConnectionLimits
    log: Any
    metrics: Any
    open: dict[Connection, None] = field(default_factory=dict)  # in arrival order
    sequence: Iterator[int] = field(default_factory=itertools.count)
    timeouts: dict[str, int] = field(default_factory=lambda: {"handshake": 0, "request": 0})
    examples: list[str] = field(default_factory=list)
    shed_unreported: int = 0

    def arrived(self, sock: socket.socket, addr: Any) -> Connection:
        conn = Connection(_peer(addr), sock, time.monotonic(), next(self.sequence))
        self.open[conn] = None
        if len(self.open) > self.limits.max_connections:
            self.make_room()
        return conn

    def left(self, conn: Connection) -> None:
        self.open.pop(conn, None)

    def timed_out(self, conn: Connection, phase: Phase) -> None:
        conn.close_here("timeout")
        self.timeouts[phase] += 1
        if len(self.examples) < EXAMPLES_LOGGED:
            self.examples.append(conn.peer)
        self.metrics.timed_out.labels(phase=phase).inc()

    def make_room(self) -> None:
        """Close connections down to 7/8 of `--max-connections`, among those waiting for
        their client: first those never served (idle, then mid-handshake or mid-request), then
        those served before (a client that has proved itself, like the apiserver's kept-alive
        connections); within each, the longest waiting first."""
        target = self.limits.max_connections - max(1, self.limits.max_connections // 8)
        order = sorted(
            (
                (1 if conn.served else 0, conn.phase is not None, conn.waiting_since, conn)
                for conn in self.open
                if conn.waiting_since is not None and not conn.closed_here
            ),
            key=lambda entry: entry[:3],
        )
        excess = len(self.open) - target
        shed = 0
        for *_rank, conn in order[:excess]:
            conn.close_here("shed")
            self.open.pop(conn, None)  # counted out now: its greenlet ends on its own
            shed += 1
        if shed:
            self.metrics.shed.inc(shed)
            self.shed_unreported += shed

    def close_idle(self) -> None:
        """Close the connections waiting for a next request (a stopping worker: gevent's
        would otherwise wait for them until its graceful timeout)."""
        for conn in list(self.open):
            if conn.phase is None and conn.waiting_since is not None:
                conn.close_here("stopping")

    def report(self) -> None:
        """A line for each kind of closing since the last report, however many connections."""
        if self.shed_unreported:
            self.log.warning(
                "closed %d connection(s), the longest waiting first, to stay under "
                "--max-connections (%d)",
                self.shed_unreported,
                self.limits.max_connections,
            )
            self.shed_unreported = 0
        total = sum(self.timeouts.values())
        if not total:
            return
        self.log.warning(
            "closed %d connection(s) that did not finish within --read-timeout-seconds "
            "(%gs): %d in the TLS handshake, %d sending a request (e.g. %s)",
            total,
            self.limits.read_timeout,
            self.timeouts["handshake"],
            self.timeouts["request"],
            ", ".join(self.examples),
        )
        self.timeouts = {"handshake": 0, "request": 0}
        self.examples = []


@contextmanager
def waiting(conn: Connection) -> Iterator[None]:
    conn.waiting_since = time.monotonic()
    try:
        yield
    finally:
        conn.waiting_since = None


class GuardedSocket:
    """The TLS socket as gunicorn's parser and response see it, with the request deadline.

    The first byte after an answer starts a request: from then on every read waits at most
    until `read_timeout` after it. The first write of an answer ends the request (a 100
    Continue is not an answer). Other attributes are the TLS socket's.
    """

    def __init__(
        self, tls: ssl.SSLSocket, conn: Connection, connections: Connections, idle: float
    ) -> None:
        self.tls = tls
        self.conn = conn
        self.connections = connections
        self.idle = idle

    def __getattr__(self, name: str) -> Any:
        return getattr(self.tls, name)

    def recv(self, size: int) -> bytes:
        conn = self.conn
        if conn.closed_here:
            raise ClientGone(f"closed here ({conn.closed_here})")
        if conn.phase is None:
            data = self._wait_recv(size, self.idle, None)
            conn.begin_request(self.connections.limits.read_timeout)
            return data
        assert conn.deadline is not None
        return self._wait_recv(size, conn.deadline - time.monotonic(), conn.phase)

    def _wait_recv(self, size: int, seconds: float, phase: Phase | None) -> bytes:
        conn = self.conn
        data: bytes | None = None
        if seconds > 0:
            with waiting(conn):
                try:
                    with gevent.Timeout(seconds, False):
                        data = self.tls.recv(size)
                except TimeoutError:
                    raise  # the parser's own timeout, for it to judge
                except OSError as exc:
                    if conn.closed_here:
                        raise ClientGone(f"closed here ({conn.closed_here})") from exc
                    raise
        if data is None:  # the time is up
            if phase is None:
                conn.close_here("idle")
                return b""  # idle past keep-alive: the parser sees the end
            self.connections.timed_out(conn, phase)
            raise ClientGone("the request did not finish within --read-timeout-seconds")
        if not data and conn.closed_here:
            raise ClientGone(f"closed here ({conn.closed_here})")
        return data

    def send(self, data: bytes) -> int:
        sent: int = self._write(self.tls.send, data)
        return sent

    def sendall(self, data: bytes) -> None:
        self._write(self.tls.sendall, data)

    def _write(self, write: Callable[[bytes], Any], data: bytes) -> Any:
        if self.conn.closed_here:
            raise BrokenPipeError(errno.EPIPE, f"closed here ({self.conn.closed_here})")
        if not data.startswith(b"HTTP/1.1 100 "):
            self.conn.end_request()
        try:
            return write(data)
        except OSError as exc:
            raise BrokenPipeError(errno.EPIPE, str(exc)) from exc

    def close(self) -> None:
        request = self.conn.request
        if request is not None and request.must_close and not self.conn.closed_here:
            _linger(self.tls)
        self.tls.close()


def _linger(tls: ssl.SSLSocket) -> None:
    """FIN now, then drop what the client still sends for a moment (a reset would lose the
    answer it has not read yet)."""
    try:
        tls.shutdown(socket.SHUT_WR)
    except OSError:
        return
    drained = 0
    with gevent.Timeout(LINGER_SECONDS, False):
        while drained < LINGER_BYTES:
            try:
                data = tls.recv(LINGER_BYTES)
            except OSError:
                return
            if not data:
                return
            drained += len(data)


@dataclass(frozen=True)
class Listener:
    """What gunicorn asks of a listening socket while serving a connection: its address."""

    name: Any

    def getsockname(self) -> Any:
        return self.name


class TLSContexts(Protocol):
    """Where each connection's TLS context comes from (`webhook.serve.CertReloader`)."""

    context_class: type[ssl.SSLContext]

    def context(self) -> ssl.SSLContext: ...


def worker_class(limits: ConnectionLimits, tls: TLSContexts) -> type[TLSWorker]:
    """The worker class for gunicorn's `worker_class` setting, with these limits; each
    connection's TLS context comes from `tls.context()`."""
    return type("TLSWorker", (TLSWorker,), {"limits": limits, "tls": tls})


class TLSWorker(GeventWorker):  # type: ignore[misc]
    limits = ConnectionLimits()
    tls: TLSContexts
    connections: Connections
    listeners: dict[int, Listener]

    def init_process(self) -> None:
        from webhook.metrics import ConnectionMetrics

        return_large_blocks()
        self.connections = Connections(self.limits, self.log, ConnectionMetrics())
        # Contexts whose sockets wait in gevent's loop (a context is built again in a new
        # process: `CertReloader`).
        self.tls.context_class = gevent.ssl.SSLContext
        super().init_process()

    def patch(self) -> None:
        """The listening sockets as gevent sockets, and nothing else of the process patched.

        gunicorn's gevent worker monkey-patches the whole process here. This one serves with
        gevent's sockets and TLS directly (its documented use without patching), so the
        rest of the worker (the namespace and DRA watches, the policy reload, the metrics)
        keeps real threads and the libraries imported before the fork keep working as they
        were: `ssl` patched after urllib3 imported it would leave the Kubernetes client's TLS
        blocking the whole worker.
        """
        listeners: list[Any] = self.sockets  # type: ignore[has-type]
        self.sockets = [
            gevent.socket.socket(s.FAMILY, socket.SOCK_STREAM, fileno=s.sock.detach())
            for s in listeners
        ]

    def load_wsgi(self) -> None:
        super().load_wsgi()
        # A stopping worker closes its listeners while accepted connections are still being
        # served, and gunicorn asks the listener its address for each one: asked now, once.
        self.listeners = {id(sock): Listener(sock.getsockname()) for sock in self.sockets}
        app: Callable[..., Any] = self.wsgi  # type: ignore[has-type]
        gevent.spawn(self._report_forever)

        def closing_after_413(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            def start(status: str, headers: Any, exc_info: Any = None) -> Any:
                if status.startswith("413"):
                    guarded = environ.get("gunicorn.socket")
                    if isinstance(guarded, GuardedSocket) and guarded.conn.request is not None:
                        guarded.conn.request.must_close = True
                return start_response(status, headers, exc_info)

            return app(environ, start)

        self.wsgi = closing_after_413

    def _report_forever(self) -> None:
        while True:
            gevent.sleep(REPORT_EVERY_S)
            if not self.alive:
                self.connections.close_idle()
            self.connections.report()

    def handle(self, listener: Any, client: socket.socket, addr: Any) -> None:
        conn = self.connections.arrived(client, addr)
        try:
            tls = self._handshake(client, conn)
            if tls is not None:
                guarded = GuardedSocket(tls, conn, self.connections, self._idle())
                named = self.listeners.get(id(listener)) or Listener(listener.getsockname())
                super().handle(named, guarded, addr)  # closes it
        finally:
            self.connections.left(conn)

    def _idle(self) -> float:
        return float(self.cfg.keepalive) or self.limits.read_timeout

    def _handshake(self, client: socket.socket, conn: Connection) -> ssl.SSLSocket | None:
        """The TLS socket once its handshake is done; None when the client did not finish it
        in time (counted), closed it, or failed it."""
        timeout = gevent.Timeout(self.limits.read_timeout)
        tls: Any = client
        try:
            with waiting(conn), timeout:
                tls = self.tls.context().wrap_socket(
                    client, server_side=True, do_handshake_on_connect=False
                )
                conn.sock = tls
                tls.do_handshake()
        except gevent.Timeout as exc:
            if exc is not timeout:
                raise
            self.connections.timed_out(conn, "handshake")
            _close(tls)
            return None
        except (ssl.SSLError, OSError) as exc:
            if not conn.closed_here:
                self.log.debug("TLS handshake with %s failed: %s", conn.peer, exc)
            _close(tls)
            return None
        conn.phase = None
        return tls  # type: ignore[no-any-return]

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> Any:
        if isinstance(sock, GuardedSocket):
            sock.conn.request = req
        return super().handle_request(listener_name, req, sock, addr)


def _close(sock: Any) -> None:
    with suppress(OSError):
        sock.close()


def _peer(client: Any) -> str:
    if isinstance(client, tuple) and len(client) >= 2:
        return f"{client[0]}:{client[1]}"
    return str(client)


class ErrorLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger, less the access log.

    gunicorn writes an access line per request whenever it is given a logging config, which
    `--log-format json` does: one JSON line per admission and per probe, and ~25 us of
    formatting on every request. Text output has never had them (`accesslog` is None); the
    webhook's own log and metrics say what an access log would.
    """

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        return None
