"""gunicorn's gthread worker, changed so that slow or many clients cannot starve it, and a logger
without gunicorn's access log.

The stock worker does each connection's TLS handshake and request read in a pool thread with a
blocking socket: a client that sends part of a handshake, of a head or of a body and then waits
holds that thread for as long as it likes. A few such clients stopped admission (16 did on a
webhook of 2 workers x 4 threads, with nothing logged), and with failurePolicy Ignore every pod
was admitted unvalidated meanwhile. This worker keeps gthread's poller and thread pool and
changes what may wait, and for how long:

- A thread never waits for a client. The handshake and the request are read from non-blocking
  sockets; when the bytes so far are not enough, the connection goes back to the poller and the
  thread moves on. A thread runs a request only once all of it (head, and body by its framing:
  `webhook.framing`) is in memory, so slow connections cost no thread at all.
- Each connection has `read_timeout` seconds from its first byte to finish the TLS handshake,
  and again from the first byte of each request to finish sending it. The main loop closes the
  connections past their deadline, counts them (`steer_webhook_connections_timed_out_total`
  by phase) and logs one line per check that closed any.
- A body over `max_body_bytes`, sized or chunked, is dropped as it arrives (up to DRAIN_LIMIT),
  and answered 413 by the app (the WSGI environ says so: `framing.BODY_OVER_LIMIT`); the
  connection closes after the answer.
- Read-ahead memory is bounded: FREE_READ_AHEAD bytes a connection (any real pod review), more
  only from a per-worker budget. A connection waiting for the budget waits off the poller.
- At `worker_connections` (`--max-connections`) the connections idle longest are closed to make
  room, so a flood of idle connections cannot keep the apiserver's out.
- A connection closed after its answer is drained from the poller (gunicorn's close lingers up
  to 2 s in the main loop, stalling every other connection of the worker meanwhile).
- A thread writes with a socket timeout: a client that never reads its answer cannot hold it.

It builds on gthread internals (`TConn`, `_DEFER`, the poller, `keepalived_conns`,
`enqueue_req`, `handle_request`, `finish_request`); tests/reliability/ exercises them against
the installed gunicorn.
"""

from __future__ import annotations

import contextlib
import heapq
import itertools
import selectors
import socket
import ssl
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

from gunicorn import glogging, http
from gunicorn import sock as gsock
from gunicorn.workers import gthread

from webhook.framing import BODY_OVER_LIMIT, RequestFraming
from webhook.memory import return_large_blocks

_DEFER: Any = gthread._DEFER
_PARK = object()  # wait for read-ahead budget, off the poller

Phase = Literal["handshake", "request"]
RECV_BYTES = 64 * 1024
FREE_READ_AHEAD = 64 * 1024
# A body over the limit is read and dropped up to this size, so the client reads its 413.
DRAIN_LIMIT = 64 * 1024 * 1024
LINGER_SECONDS = 2.0
LINGER_BYTES = 64 * 1024
CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
EXAMPLES_LOGGED = 3
REPORT_EVERY_S = 1.0


@dataclass(frozen=True)
class ConnectionLimits:
    """What one client may take of a worker (the `--read-timeout-seconds`,
    `--max-body-bytes` flags; connections are gunicorn's `worker_connections`)."""

    read_timeout: float = 5.0
    max_body_bytes: int = 4 * 1024 * 1024

    @property
    def read_ahead_budget(self) -> int:
        """Bytes all connections of a worker may hold beyond FREE_READ_AHEAD each."""
        return max(64 * 1024 * 1024, 2 * self.max_body_bytes)


@dataclass
class Progress:
    """Where one connection is: kept on the TConn, touched by one thread at a time."""

    phase: Phase | None = None
    deadline: float | None = None
    buffer: bytearray = field(default_factory=bytearray)
    framing: RequestFraming | None = None
    budgeted: int = 0
    continue_sent: bool = False
    waiting: Literal["", "client", "budget", "linger"] = ""
    since: float = 0.0
    expires_at: float | None = None  # the reaper's entry for this connection
    served: int = 0  # requests answered on this connection

    def start(self, phase: Phase, timeout: float) -> None:
        if self.phase is None:
            self.phase, self.deadline = phase, time.monotonic() + timeout

    def finish(self) -> None:
        self.phase = self.deadline = None
        self.framing = None
        self.continue_sent = False


def progress(conn: Any) -> Progress:
    state: Progress | None = getattr(conn, "steer_progress", None)
    if state is None:
        state = conn.steer_progress = Progress()
    return state


def worker_class(limits: ConnectionLimits) -> type[TLSThreadWorker]:
    """The worker class for gunicorn's `worker_class` setting, with these limits."""
    return type("TLSThreadWorker", (TLSThreadWorker,), {"limits": limits})


class TLSThreadWorker(gthread.ThreadWorker):  # type: ignore[misc]
    limits = ConnectionLimits()
    wsgi: Callable[..., Any]

    # -- set-up ----------------------------------------------------------------------------

    def init_process(self) -> None:
        from webhook.metrics import ConnectionMetrics

        return_large_blocks()
        self.connection_metrics = ConnectionMetrics()
        self.request_flags = threading.local()
        self.budget_lock = threading.Lock()
        self.budget_used = 0
        self.expiry: list[tuple[float, int, Any]] = []  # (time, tiebreak, conn): main thread
        self.sequence = itertools.count()
        self.waiting: dict[Any, None] = {}  # in arrival order: the oldest first
        self.parked: dict[Any, None] = {}
        self.timeouts = {"handshake": 0, "request": 0}  # not yet logged
        self.timeout_examples: list[str] = []
        self.shed_unreported = 0
        self.reported_at = 0.0
        # Bytes gunicorn's parser may take for a head (request line and headers).
        cfg = self.cfg
        self.max_head_bytes = (
            cfg.limit_request_line
            + 4
            + (cfg.limit_request_fields or 100) * (cfg.limit_request_field_size or 8190)
            + 2
        )
        super().init_process()

    def load_wsgi(self) -> None:
        super().load_wsgi()
        app: Callable[..., Any] = self.wsgi
        flags = self.request_flags

        def with_flags(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            if getattr(flags, "over_limit", False):
                environ[BODY_OVER_LIMIT] = True
            return app(environ, start_response)

        self.wsgi = with_flags

    # -- in a pool thread ------------------------------------------------------------------

    def handle(self, conn: Any) -> Any:
        state = progress(conn)
        try:
            if not conn.initialized:
                shaken = self._handshake(conn, state)
                if shaken is not True:
                    return shaken
            read = self._read_ahead(conn, state)
            if read is not True:
                return read
        except Exception as exc:  # a bug here must not take the worker's thread with it
            self.log.exception("reading from %s failed: %s", conn.client, exc)
            return False
        return self._serve(conn, state)

    def _handshake(self, conn: Any, state: Progress) -> Any:
        state.start("handshake", self.limits.read_timeout)
        if not self.cfg.is_ssl:
            conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
            conn.initialized = True
            state.finish()
            return True
        if not isinstance(conn.sock, ssl.SSLSocket):
            conn.sock = gsock.ssl_wrap_socket(conn.sock, self.cfg)
        conn.sock.setblocking(False)
        try:
            conn.sock.do_handshake()
        except (ssl.SSLWantReadError, ssl.SSLWantWriteError):
            return _DEFER
        except (ssl.SSLError, OSError) as exc:
            self.log.debug("TLS handshake with %s failed: %s", conn.client, exc)
            return False
        if gsock.is_http2_negotiated(conn.sock):
            return False  # the context offers http/1.1 only
        conn.parser = http.get_parser(self.cfg, conn.sock, conn.client)
        conn.initialized = True
        state.finish()
        return True

    def _read_ahead(self, conn: Any, state: Progress) -> Any:
        """True once the whole request is in `state.buffer`; else where to wait for it."""
        if state.framing is None:
            state.framing = RequestFraming(
                max_body_bytes=self.limits.max_body_bytes,
                max_head_bytes=self.max_head_bytes,
                drain_limit=DRAIN_LIMIT,
            )
            pipelined = conn.parser.unreader.take_buffered()
            if pipelined:
                state.start("request", self.limits.read_timeout)
                self._keep(state, state.framing.feed(pipelined))
        framing = state.framing
        conn.sock.setblocking(False)
        while not framing.done:
            if not self._may_read(state):
                return _PARK
            try:
                data = conn.sock.recv(RECV_BYTES)
            except (ssl.SSLWantReadError, ssl.SSLWantWriteError, BlockingIOError):
                break
            except (ssl.SSLError, OSError):
                return False  # reset, or not TLS after all
            if not data:
                return False  # gone, before its request was whole (or between requests)
            state.start("request", self.limits.read_timeout)
            self._keep(state, framing.feed(data))
        if framing.done:
            return True
        if framing.expects_continue and not framing.over_limit and not state.continue_sent:
            state.continue_sent = True
            try:
                conn.sock.send(CONTINUE)
            except (ssl.SSLError, OSError):
                return False
        return _DEFER

    def _may_read(self, state: Progress) -> bool:
        if len(state.buffer) < FREE_READ_AHEAD:
            return True
        with self.budget_lock:
            return self.budget_used + RECV_BYTES <= self.limits.read_ahead_budget

    def _keep(self, state: Progress, data: bytes) -> None:
        state.buffer += data
        over = max(0, len(state.buffer) - FREE_READ_AHEAD) - state.budgeted
        if over:
            with self.budget_lock:
                self.budget_used += over
            state.budgeted += over

    def _release(self, state: Progress) -> None:
        if state.budgeted:
            with self.budget_lock:
                self.budget_used -= state.budgeted
            state.budgeted = 0

    def _serve(self, conn: Any, state: Progress) -> Any:
        """Run the request now in memory; gunicorn's gthread `handle`, from the parser on."""
        framing = state.framing
        assert framing is not None
        data = bytes(state.buffer)
        state.buffer = bytearray()
        self._release(state)
        state.finish()
        state.served += 1
        req = None
        self.request_flags.over_limit = framing.over_limit
        try:
            conn.parser.unreader.unread(data)
            # A read the framing did not foresee, and every write, waits this long at most.
            conn.sock.settimeout(self.limits.read_timeout)
            req = next(conn.parser)
            if not req:
                return False
            if framing.closes_connection:
                req.must_close = True  # bytes of it were dropped: the next request cannot start
            return self._keepalive_after(conn, self.handle_request(req, conn))
        except http.errors.NoMoreData as exc:
            self.log.debug("Ignored premature client disconnection. %s", exc)
        except StopIteration as exc:
            self.log.debug("Closing connection. %s", exc)
        except TimeoutError:
            self.log.debug("%s stopped reading or sending mid-request", conn.client)
        except ssl.SSLError as exc:
            if exc.args[0] != ssl.SSL_ERROR_EOF:
                self.handle_error(req, conn.sock, conn.client, exc)
        except OSError as exc:
            self.log.debug("socket error with %s: %s", conn.client, exc)
        except Exception as exc:
            self.handle_error(req, conn.sock, conn.client, exc)
        finally:
            self.request_flags.over_limit = False
        return False

    # -- in the main loop ------------------------------------------------------------------

    def finish_request(self, conn: Any, fs: Any) -> None:
        try:
            result = fs.result() if not fs.cancelled() else False
        except Exception:
            result = False
        state = progress(conn)
        try:
            if result is _DEFER or result is _PARK:
                if not self.alive and state.phase is None:
                    self._close(conn)
                elif state.deadline is not None and time.monotonic() >= state.deadline:
                    self._time_out([conn])
                elif result is _PARK:
                    self._wait(conn, state, "budget")
                else:
                    self._wait(conn, state, "client")
            elif result:
                if conn.parser.unreader.buf.getvalue():
                    self.enqueue_req(conn)  # the next request is here already (pipelined)
                else:
                    conn.sock.setblocking(False)
                    conn.set_timeout()
                    if not self.alive:
                        conn.timeout = min(
                            conn.timeout, time.monotonic() + gthread.STOP_KEEPALIVE_LINGER
                        )
                    self.keepalived_conns.append(conn)
                    self.poller.register(
                        conn.sock,
                        selectors.EVENT_READ,
                        partial(self.on_client_socket_readable, conn),
                    )
            else:
                self._linger(conn, state)
        except Exception:
            self._close(conn)
        self._unpark()

    def _wait(self, conn: Any, state: Progress, why: Literal["client", "budget"]) -> None:
        now = time.monotonic()
        conn.timeout = now + self.cfg.keepalive if state.deadline is None else state.deadline
        state.waiting, state.since = why, now
        self._expire_at(conn, state)
        if why == "budget":
            self.parked[conn] = None
            return
        conn.sock.setblocking(False)
        self.waiting[conn] = None
        self.poller.register(
            conn.sock, selectors.EVENT_READ, partial(self._on_readable, conn, state)
        )

    def _expire_at(self, conn: Any, state: Progress) -> None:
        """Queue `conn` for the reaper at `conn.timeout` (once: a trickling client comes back
        here with the same deadline after every byte)."""
        if state.expires_at != conn.timeout:
            state.expires_at = conn.timeout
            heapq.heappush(self.expiry, (conn.timeout, next(self.sequence), conn))

    def _on_readable(self, conn: Any, state: Progress, _sock: Any) -> None:
        self._unwait(conn, state)
        self.enqueue_req(conn)

    def _unwait(self, conn: Any, state: Progress) -> None:
        if state.waiting == "client" or state.waiting == "linger":
            self.waiting.pop(conn, None)
            with contextlib.suppress(KeyError, ValueError, OSError):
                self.poller.unregister(conn.sock)
        self.parked.pop(conn, None)
        state.waiting = ""

    def _unpark(self) -> None:
        while self.parked:
            with self.budget_lock:
                room = self.budget_used + RECV_BYTES <= self.limits.read_ahead_budget
            if not room:
                return
            conn = next(iter(self.parked))
            self._unwait(conn, progress(conn))
            self.enqueue_req(conn)

    def _linger(self, conn: Any, state: Progress) -> None:
        """Close after an answer: FIN now, then drop what the client still sends for a moment,
        so that unread bytes do not turn the close into a reset that loses the answer."""
        self._release(state)
        try:
            conn.sock.shutdown(socket.SHUT_WR)
            conn.sock.setblocking(False)
        except OSError:
            self._close(conn)
            return
        now = time.monotonic()
        conn.timeout = now + LINGER_SECONDS
        state.waiting, state.since, state.budgeted = "linger", now, 0
        conn.steer_drained = 0
        self._expire_at(conn, state)
        self.waiting[conn] = None
        self.poller.register(conn.sock, selectors.EVENT_READ, partial(self._drain, conn, state))

    def _drain(self, conn: Any, state: Progress, _sock: Any) -> None:
        try:
            data = conn.sock.recv(RECV_BYTES)
        except (BlockingIOError, ssl.SSLWantReadError):
            return
        except OSError:
            data = b""
        conn.steer_drained += len(data)
        if not data or conn.steer_drained > LINGER_BYTES:
            self._close(conn)

    def _close(self, conn: Any) -> None:
        state = progress(conn)
        self._unwait(conn, state)
        self._release(state)
        state.buffer = bytearray()
        self.nr_conns -= 1
        conn.close()

    def _time_out(self, conns: list[Any]) -> None:
        """Close connections past their deadline; counted now, logged by `_report`."""
        for conn in conns:
            phase = progress(conn).phase or "request"
            self.timeouts[phase] += 1
            if len(self.timeout_examples) < EXAMPLES_LOGGED:
                self.timeout_examples.append(_peer(conn.client))
            self.connection_metrics.timed_out.labels(phase=phase).inc()
            self._close(conn)

    def _report(self, now: float) -> None:
        """A line a second at most for each kind of closing, however many connections."""
        total = sum(self.timeouts.values())
        if (not total and not self.shed_unreported) or now - self.reported_at < REPORT_EVERY_S:
            return
        self.reported_at = now
        if self.shed_unreported:
            self.log.warning(
                "closed %d connection(s), the longest waiting first, to stay under "
                "--max-connections (%d)",
                self.shed_unreported,
                self.worker_connections,
            )
            self.shed_unreported = 0
        if not total:
            return
        self.log.warning(
            "closed %d connection(s) that did not finish within --read-timeout-seconds "
            "(%gs): %d in the TLS handshake, %d sending a request (e.g. %s)",
            total,
            self.limits.read_timeout,
            self.timeouts["handshake"],
            self.timeouts["request"],
            ", ".join(self.timeout_examples),
        )
        self.timeouts = {"handshake": 0, "request": 0}
        self.timeout_examples = []

    def murder_pending(self) -> None:
        """Each turn of the main loop: close what is past its time, then make room."""
        now = time.monotonic()
        late: dict[Any, None] = {}
        while self.expiry and self.expiry[0][0] <= now:
            at, _, conn = heapq.heappop(self.expiry)
            state = progress(conn)
            if not state.waiting or conn.timeout != at or conn in late:
                continue  # moved on since
            if state.waiting == "linger" or state.phase is None:
                self._close(conn)  # done lingering, or idle for the keep-alive time
            else:
                late[conn] = None
        self._time_out(list(late))
        if not self.alive:
            for conn in [c for c in self.waiting if progress(c).phase is None]:
                self._close(conn)  # idle: stopping closes it now
        if self.nr_conns >= self.worker_connections:
            self._make_room()
        self._report(now)

    def _make_room(self) -> None:
        """Close connections down to 7/8 of `worker_connections`, so that a flood cannot keep
        new ones out. Lingering ones go first; then those never served, idle before those
        mid-handshake or mid-request; then those served before (a client that has proved
        itself, like the apiserver's kept-alive connections). Within each, the longest
        waiting first: idle since its last answer, or under way since its phase began."""
        target = self.worker_connections - max(1, self.worker_connections // 8)
        timeout = self.limits.read_timeout
        order: list[tuple[int, float, Any]] = []
        for conn in [*self.waiting, *self.parked]:
            state = progress(conn)
            if state.waiting == "linger":
                order.append((0, state.since, conn))
            elif state.served:
                started = state.since if state.deadline is None else state.deadline - timeout
                order.append((3, started, conn))
            elif state.deadline is None:
                order.append((1, state.since, conn))
            else:
                order.append((2, state.deadline - timeout, conn))
        order += [(3, c.timeout - self.cfg.keepalive, c) for c in self.keepalived_conns]
        order.sort(key=lambda entry: entry[:2])
        shed = 0
        for _rank, _since, conn in order:
            if self.nr_conns <= target:
                break
            if progress(conn).waiting:
                self._close(conn)
            else:  # kept alive by gthread
                self.keepalived_conns.remove(conn)
                with contextlib.suppress(KeyError, ValueError, OSError):
                    self.poller.unregister(conn.sock)
                self.nr_conns -= 1
                conn.close()
            shed += 1
        if shed:
            self.connection_metrics.shed.inc(shed)
            self.shed_unreported += shed


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
