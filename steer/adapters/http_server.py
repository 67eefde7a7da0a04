"""A plain-HTTP WSGI server on a daemon thread, for the scorer's `/explain`, page and
`/metrics` and the webhook's metrics listener: waitress, a production server.

waitress reads each request whole in its event loop before a thread runs it, so a slow
client holds no thread; it closes connections idle past `channel_timeout`, keeps at most
`connection_limit` open, and answers a body over `max_request_body_size` with 413. Everything
here uses its public API (`create_server`, the server's `trigger` and `task_dispatcher`,
`wasyncore.close_all` on the socket map passed in); pyproject.toml bounds its version and
tests/test_http_server.py pins what is relied on.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from typing import Any

import waitress
from waitress import wasyncore

log = logging.getLogger(__name__)

WSGIApp = Callable[..., Iterable[bytes]]


class HttpServer:
    """`app` on http://host:port from a daemon thread; `port` is the bound one (0 picks a
    free port). `start()` serves, `stop()` closes the port and every open connection."""

    def __init__(
        self,
        app: WSGIApp,
        host: str = "127.0.0.1",
        port: int = 0,
        *,
        name: str = "http",
        threads: int = 4,
        idle_timeout_s: int = 30,
        max_connections: int = 100,
        max_body_bytes: int = 1 << 20,
    ) -> None:
        self._map: dict[int, Any] = {}
        self._server: Any = waitress.create_server(
            app,
            map=self._map,
            host=host,
            port=port,
            threads=threads,
            channel_timeout=idle_timeout_s,
            # How often idle connections are looked for (waitress: every 30 s).
            cleanup_interval=max(1, min(30, idle_timeout_s // 2)),
            connection_limit=max_connections,
            max_request_body_size=max_body_bytes,
            ident="",  # no Server header naming the software
            expose_tracebacks=False,
            clear_untrusted_proxy_headers=True,
        )
        self.host = host
        self.port: int = int(self._server.effective_port)
        self._thread = threading.Thread(target=self._server.run, name=name, daemon=True)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def start(self) -> HttpServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Let running requests finish (5 s at most), then close the port and every
        connection in the server's own loop, which then ends."""
        self._server.task_dispatcher.shutdown(cancel_pending=True, timeout=5)
        if self._thread.is_alive():
            self._server.trigger.pull_trigger(lambda: wasyncore.close_all(self._map))
            self._thread.join(timeout=5)
        else:
            wasyncore.close_all(self._map)

    def __enter__(self) -> HttpServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
