"""The admission HTTP surface: a WSGI app over `AdmissionHandler` (webhook/handler.py).

Admission POSTs are answered directly from the handler's bytes; health, readiness and every
error page are a small Flask app (JSON, never HTML).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from http import HTTPStatus
from typing import Any, Protocol

import orjson
from flask import Flask, Response, request
from werkzeug.exceptions import HTTPException

from webhook import review as rv
from webhook.inflight import BytesInFlight
from webhook.review import Endpoint, Outcome

log = logging.getLogger(__name__)

ENDPOINTS: Mapping[str, Endpoint] = {
    "/mutate": "mutate",
    "/validate": "validate",
    "/validate/security": "validate-security",
}
JSON = "application/json"
# A body over the limit is read and dropped up to this size, so the client reads its 413.
DRAIN_LIMIT = 64 * 1024 * 1024
DROP_PIECE = 64 * 1024
STATUS_LINES = {s.value: f"{s.value} {s.phrase}" for s in HTTPStatus}
# What a 429 asks the apiserver to wait before it sends the review again (client-go's REST
# client honours Retry-After on 429 within the call's timeout).
RETRY_AFTER_SECONDS = 1


def content_length(environ: Mapping[str, Any]) -> int | None:
    """CONTENT_LENGTH as a number; None when absent or not a length (as werkzeug reads it)."""
    value = environ.get("CONTENT_LENGTH")
    if not value:
        return None
    try:
        length = int(value)
    except ValueError:
        return None
    return length if length >= 0 else None


def read_body(environ: Mapping[str, Any], max_bytes: int) -> bytes | None:
    """The request body, or None when it is over `max_bytes` (the caller answers 413).

    A body over the limit is read and dropped, in pieces, up to DRAIN_LIMIT bytes, so that the
    client (which may send it all before it reads) gets its 413 instead of a reset; the
    server closes the connection after a 413 (webhook.gworker). A larger one is not read.
    """
    stream = environ["wsgi.input"]
    length = content_length(environ)
    if length is None:
        # Chunked: the server ends the stream after the last chunk (wsgi.input_terminated),
        # so one byte past the limit says the body is over it. Without that promise a read
        # could wait forever: no length, no body.
        if not environ.get("wsgi.input_terminated"):
            return b""
        body: bytes = stream.read(max_bytes + 1)
        if len(body) <= max_bytes:
            return body
        _drop(stream, DRAIN_LIMIT)
        return None
    if length > max_bytes:
        if length <= DRAIN_LIMIT:
            _drop(stream, length)
        return None
    return stream.read(length) if length else b""


def bytes_to_hold(environ: Mapping[str, Any], max_bytes: int) -> int:
    """What reading this request's body may make the worker hold: its declared length, the
    most a chunked one may be; 0 for one over `max_bytes` (dropped unread) or none."""
    length = content_length(environ)
    if length is None:
        return max_bytes + 1 if environ.get("wsgi.input_terminated") else 0
    return length if length <= max_bytes else 0


def drop_body(environ: Mapping[str, Any]) -> None:
    """Read and forget the request's body (up to DRAIN_LIMIT), a piece at a time."""
    length = content_length(environ)
    if length is None and not environ.get("wsgi.input_terminated"):
        return
    _drop(environ["wsgi.input"], DRAIN_LIMIT if length is None else min(length, DRAIN_LIMIT))


def _drop(stream: Any, limit: int) -> None:
    """Read and forget up to `limit` bytes of `stream`, a piece at a time."""
    left = limit
    while left > 0:
        piece = stream.read(min(DROP_PIECE, left))
        if not piece:
            return
        left -= len(piece)


class Answerer(Protocol):
    """What the HTTP surface needs: `AdmissionHandler`, or the benchmark's allow-all."""

    @property
    def max_body_bytes(self) -> int: ...

    def handle(self, endpoint: Endpoint, body: bytes | None) -> Outcome: ...

    def readiness(self) -> tuple[bool, dict[str, Any]]: ...


class AdmissionApp:
    """The WSGI app: admission POSTs answered directly, everything else by Flask.

    The apiserver waits on an admission request for every pod, and building Flask's request
    and response objects cost more CPU than parsing, mutating and answering the review
    (measured with the captured GPU pod review: ~240 us a request through Flask, ~125 us
    without). Health, readiness and every error page (404 and 405 as JSON) stay in Flask.
    """

    def __init__(
        self,
        handler: Answerer,
        in_flight: BytesInFlight | None = None,
        refused: Callable[[Endpoint], None] | None = None,
    ) -> None:
        self.handler = handler
        self.in_flight = in_flight
        self.refused = refused
        self.flask = _framework_app(handler)

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        endpoint = ENDPOINTS.get(environ.get("PATH_INFO", ""))
        if endpoint is None or environ.get("REQUEST_METHOD") != "POST":
            return self.flask(environ, start_response)
        held = bytes_to_hold(environ, self.handler.max_body_bytes) if self.in_flight else 0
        if held and self.in_flight is not None and not self.in_flight.take(held):
            return self._busy(endpoint, held, environ, start_response)
        try:
            # A client gone mid-body raises here, to the server, which drops the connection.
            body = read_body(environ, self.handler.max_body_bytes)
            try:
                outcome = self.handler.handle(endpoint, body)
            except Exception:  # handle() answers every failure itself; this is the last resort
                log.exception("unhandled error")
                outcome = Outcome(
                    500, rv.error_body("internal-error", "see the webhook log"), "error"
                )
            del body
        finally:
            if held and self.in_flight is not None:
                self.in_flight.give(held)
        start_response(
            STATUS_LINES[outcome.status],
            [("Content-Type", JSON), ("Content-Length", str(len(outcome.body)))],
        )
        return [outcome.body]

    def _busy(
        self,
        endpoint: Endpoint,
        held: int,
        environ: dict[str, Any],
        start_response: Callable[..., Any],
    ) -> list[bytes]:
        """429 for a body the budget has no room for, dropped unread (webhook/inflight.py)."""
        drop_body(environ)
        if self.refused is not None:
            self.refused(endpoint)
        assert self.in_flight is not None
        body = rv.retry_later_body(
            "bytes-in-flight",
            f"kube-steer webhook: no room for a {held}-byte body beside those this worker is "
            f"reading (--max-bytes-in-flight {self.in_flight.total}); retry after "
            f"{RETRY_AFTER_SECONDS} s",
            RETRY_AFTER_SECONDS,
        )
        start_response(
            STATUS_LINES[429],
            [
                ("Content-Type", JSON),
                ("Content-Length", str(len(body))),
                ("Retry-After", str(RETRY_AFTER_SECONDS)),
            ],
        )
        return [body]


def create_app(
    handler: Answerer,
    in_flight: BytesInFlight | None = None,
    refused: Callable[[Endpoint], None] | None = None,
) -> AdmissionApp:
    """The WSGI app: admission endpoints, health, and JSON (never HTML) for every error.
    `in_flight`: the worker's budget for request bodies (none: unbounded); `refused` is called
    for each request it turns away."""
    return AdmissionApp(handler, in_flight, refused)


def _framework_app(handler: Answerer) -> Flask:
    app = Flask(__name__, root_path=os.path.dirname(os.path.abspath(__file__)))

    def answer(endpoint: Endpoint) -> Response:
        outcome = handler.handle(endpoint, read_body(request.environ, handler.max_body_bytes))
        return Response(outcome.body, status=outcome.status, mimetype=JSON)

    # AdmissionApp answers these POSTs before Flask sees them; the routes give other methods
    # their 405 (and serve the endpoints when the Flask app is called on its own).
    @app.post("/mutate")
    def mutate() -> Response:
        return answer("mutate")

    @app.post("/validate")
    def validate() -> Response:
        return answer("validate")

    @app.post("/validate/security")
    def validate_security() -> Response:
        return answer("validate-security")

    @app.get("/healthz")
    def healthz() -> Response:
        return Response(b'{"status":"ok"}', mimetype=JSON)

    # For the kubelet, and anyone who can reach the port: ready or not, nothing more. The
    # detail is on the metrics listener's /status (webhook.status).
    @app.get("/readyz")
    def readyz() -> Response:
        ready, _detail = handler.readiness()
        return Response(orjson.dumps({"ready": ready}), status=200 if ready else 503, mimetype=JSON)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException) -> Response:
        reason = (exc.name or "error").lower().replace(" ", "-")
        body = rv.error_body(reason, exc.description or reason)
        return Response(body, status=exc.code or 500, mimetype=JSON)

    @app.errorhandler(Exception)
    def unexpected(exc: Exception) -> Response:
        log.exception("unhandled error")
        return Response(
            rv.error_body("internal-error", "see the webhook log"), status=500, mimetype=JSON
        )

    return app
