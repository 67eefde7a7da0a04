"""`steer page` / `kubectl steer page`: the explain page on a loopback port, each request
relayed to the scorer with the user's bearer token, so the page answers what that user may
read, as `kubectl steer explain` does.

A browser sends no token of its own, and through `kubectl proxy` the apiserver drops
`Authorization` before it reaches the scorer; this relay adds the token (in
`X-Steer-Authorization` through the apiserver, `Authorization` directly), like `kubectl proxy`
adds the kubeconfig's credentials. It answers only requests whose Host is the loopback name
it listens on (a page elsewhere that rebinds its name to 127.0.0.1 is refused, as `kubectl
proxy --accept-hosts` does by default).
"""

from __future__ import annotations

import logging
import re
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from launcher.scorer_client import ScorerClient, ScorerError

log = logging.getLogger(__name__)

LOCAL_HOSTS = re.compile(r"^(localhost|127\.0\.0\.1|\[::1\])(:\d+)?$")
MAX_BODY = 4 * 1024 * 1024  # a posted pod, as the scorer's own limit


def page_relay(
    scorer: ScorerClient, host: str = "127.0.0.1", port: int = 8001
) -> ThreadingHTTPServer:
    """The relay server, bound (`serve_forever()` serves it); port 0 picks a free one."""

    class Relay(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self._relay(None)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length > MAX_BODY:
                self._plain(413, f"a body of at most {MAX_BODY} bytes\n")
                return
            self._relay(self.rfile.read(length))

        def _relay(self, body: bytes | None) -> None:
            if not LOCAL_HOSTS.match(self.headers.get("Host") or ""):
                self._plain(403, "only localhost, 127.0.0.1 or [::1] may be asked\n")
                return
            try:
                answer = scorer.relay(
                    self.command, self.path, body, self.headers.get("Content-Type")
                )
            except ScorerError as exc:
                self._plain(502, f"{exc}\n")
                return
            self.send_response(answer.status)
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(answer.body)))
            self.end_headers()
            self.wfile.write(answer.body)

        def _plain(self, status: int, text: str) -> None:
            data = text.encode()
            self.send_response(status)
            self.send_header("Content-Type", "text/plain; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("page relay: " + format, *args)

    server = ThreadingHTTPServer((host, port), Relay)
    server.daemon_threads = True
    return server
