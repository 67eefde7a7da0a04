"""A local threaded HTTP server for tests of the HTTP JSON source (and of a static /metrics
target): every GET is answered by `answer(path, headers)` → (status, body); a POST too (its
body is read and dropped)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

Answer = Callable[[str, Message], tuple[int, bytes]]


@contextlib.contextmanager
def json_server(answer: Answer, content_type: str = "application/json") -> Iterator[str]:
    """Yields the server's base URL (`http://127.0.0.1:PORT`); stopped on exit."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            status, body = answer(self.path, self.headers)
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.do_GET()

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
