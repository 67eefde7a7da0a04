"""A gthread worker that never parks a thread on an idle TLS connection, and a logger
without gunicorn's access log.

The stock gthread worker waits (up to 5 s) for a new connection's first bytes, then does the
TLS handshake and reads the first request in the same thread with a blocking socket. A client
that opens a connection, completes the handshake and sends nothing yet (Go's HTTP transport, as
used by the kube-apiserver, dials spare connections and keeps them idle in its pool) holds that
thread until it speaks or hangs up. With a few such connections every thread of a worker is
parked and the requests on its other connections stall for seconds (measured with `hey`).

This worker does the handshake, then hands a connection that has no request yet back to the
worker's poller (gunicorn's own "deferred" path), so threads only ever run requests.

The deferral uses two gthread internals (`_DEFER`, `DEFAULT_WORKER_DATA_TIMEOUT`, present since
gunicorn 25); on a gunicorn without them the stock behaviour is kept.
"""

from __future__ import annotations

import ssl
from typing import Any

from gunicorn import glogging
from gunicorn.workers import gthread

_DEFER: Any = getattr(gthread, "_DEFER", None)
_DATA_TIMEOUT: float = getattr(gthread, "DEFAULT_WORKER_DATA_TIMEOUT", 5.0)
# Most clients send the request right behind the handshake; waiting this long for it saves a
# trip through the poller, and is short enough not to matter when it does not come.
FIRST_REQUEST_WAIT = 0.005


class TLSThreadWorker(gthread.ThreadWorker):  # type: ignore[misc]
    def handle(self, conn: Any) -> Any:
        if _DEFER is not None and self.cfg.is_ssl and not conn.initialized:
            try:
                if not conn.wait_for_data(_DATA_TIMEOUT):
                    return _DEFER
                conn.sock.setblocking(True)
                conn.init()
            except (ssl.SSLError, OSError) as exc:
                self.log.debug("TLS handshake with %s failed: %s", conn.client, exc)
                return False
            if not getattr(conn, "is_http2", False) and not conn.sock.pending():
                conn.data_ready = False
                if not conn.wait_for_data(FIRST_REQUEST_WAIT):
                    return _DEFER  # the poller hands it back when the request arrives
        return super().handle(conn)


class ErrorLogger(glogging.Logger):  # type: ignore[misc]
    """gunicorn's logger, less the access log.

    gunicorn writes an access line per request whenever it is given a logging config, which
    `--log-format json` does: one JSON line per admission and per probe, and ~25 us of
    formatting on every request. Text output has never had them (`accesslog` is None); the
    webhook's own log and metrics say what an access log would.
    """

    def access(self, resp: Any, req: Any, environ: Any, request_time: Any) -> None:
        return None
