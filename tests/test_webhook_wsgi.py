"""The WSGI surface without a server: admission POSTs bypass Flask, with the same limits."""

from __future__ import annotations

import io
import json
from typing import Any

import orjson
import pytest

from webhook import review as rv
from webhook.app import DRAIN_LIMIT, AdmissionApp, create_app, read_body
from webhook.inflight import SMALL_BODY, BytesInFlight
from webhook.review import Outcome

LIMIT = 1024


class Echo:
    """Answers with what it was given, so a test sees exactly what the HTTP layer passed on."""

    max_body_bytes = LIMIT

    def __init__(self) -> None:
        self.calls: list[tuple[str, bytes | None]] = []

    def handle(self, endpoint: str, body: bytes | None) -> Outcome:
        self.calls.append((endpoint, body))
        if body is None:
            return Outcome(413, rv.error_body("body-too-large", "over"), "bad_request")
        return Outcome(200, orjson.dumps({"endpoint": endpoint, "bytes": len(body)}), "allowed")

    def readiness(self) -> tuple[bool, dict[str, Any]]:
        return False, {"ready": False}


def environ(
    method: str, path: str, body: bytes = b"", length: str | None = None, **extra: Any
) -> dict[str, Any]:
    env: dict[str, Any] = {
        "REQUEST_METHOD": method,
        "PATH_INFO": path,
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "SERVER_NAME": "localhost",
        "SERVER_PORT": "8443",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "wsgi.url_scheme": "https",
        "wsgi.input": io.BytesIO(body),
        "wsgi.errors": io.StringIO(),
        "wsgi.multithread": True,
        "wsgi.multiprocess": True,
        "wsgi.run_once": False,
        "wsgi.version": (1, 0),
    }
    if length is not None:
        env["CONTENT_LENGTH"] = length
    env.update(extra)
    return env


def call(app: AdmissionApp, env: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
    started: list[tuple[str, list[tuple[str, str]]]] = []
    chunks = app(env, lambda status, headers, exc_info=None: started.append((status, headers)))
    body = b"".join(chunks)
    getattr(chunks, "close", lambda: None)()
    status, headers = started[0]
    return status, dict(headers), body


@pytest.mark.parametrize(
    ("path", "endpoint"),
    [("/mutate", "mutate"), ("/validate", "validate"), ("/validate/security", "validate-security")],
)
def test_admission_posts_are_answered_as_json_with_a_length(path: str, endpoint: str) -> None:
    handler = Echo()
    status, headers, body = call(
        create_app(handler), environ("POST", path, b"{}", "2", QUERY_STRING="timeout=10s")
    )
    assert status == "200 OK"
    assert headers == {"Content-Type": "application/json", "Content-Length": str(len(body))}
    assert json.loads(body) == {"endpoint": endpoint, "bytes": 2}
    assert handler.calls == [(endpoint, b"{}")]


def test_other_methods_and_paths_get_flask_json_errors() -> None:
    app = create_app(Echo())
    status, _, body = call(app, environ("GET", "/mutate"))
    assert status.startswith("405") and json.loads(body)["error"]["reason"] == "method-not-allowed"
    status, _, body = call(app, environ("POST", "/mutate/"))
    assert status.startswith("404") and json.loads(body)["error"]["reason"] == "not-found"
    status, _, body = call(app, environ("GET", "/readyz"))
    assert status.startswith("503") and json.loads(body) == {"ready": False}


class CountingStream(io.BytesIO):
    """A body stream that says the largest read it was asked for."""

    largest = 0

    def read(self, size: int | None = -1) -> bytes:
        self.largest = max(self.largest, size or 0)
        return super().read(size)


def test_a_body_over_the_limit_is_none_read_and_dropped_in_pieces() -> None:
    # Read to its end, so the client that sends it all before reading gets its 413, never
    # kept whole: the pieces are 64 KiB at most.
    size = 300 * 1024
    env = environ("POST", "/mutate", b"x" * size, str(size))
    env["wsgi.input"] = CountingStream(b"x" * size)
    assert read_body(env, LIMIT) is None
    assert env["wsgi.input"].tell() == size
    assert env["wsgi.input"].largest == 64 * 1024


def test_a_body_too_large_to_drain_is_not_read() -> None:
    # The server closes the connection after the answer; reading 64 MiB first is not worth it.
    env = environ("POST", "/mutate", b"x" * 10, str(DRAIN_LIMIT + 1))
    assert read_body(env, LIMIT) is None
    assert env["wsgi.input"].tell() == 0


def test_a_chunked_body_is_read_to_one_byte_past_the_limit() -> None:
    over = environ("POST", "/mutate", b"x" * (LIMIT + 5), None, **{"wsgi.input_terminated": True})
    assert read_body(over, LIMIT) is None
    assert over["wsgi.input"].tell() == LIMIT + 5  # the rest is dropped, to its end
    exact = environ("POST", "/mutate", b"x" * LIMIT, None, **{"wsgi.input_terminated": True})
    assert read_body(exact, LIMIT) == b"x" * LIMIT
    # Without the server's promise that the stream ends, there is no length and no body.
    assert read_body(environ("POST", "/mutate", b"{}"), LIMIT) == b""


@pytest.mark.parametrize("length", ["", "abc", "-1"])
def test_a_length_that_is_not_one_reads_as_no_length(length: str) -> None:
    env = environ("POST", "/mutate", b"{}", length, **{"wsgi.input_terminated": True})
    assert read_body(env, LIMIT) == b"{}"


def test_an_oversized_body_reaches_the_handler_as_none() -> None:
    handler = Echo()
    status, _, _ = call(create_app(handler), environ("POST", "/mutate", b"x" * 2000, "2000"))
    assert status == "413 Request Entity Too Large"
    assert handler.calls == [("mutate", None)]


def test_a_handler_that_raises_is_a_json_500() -> None:
    class Broken(Echo):
        def handle(self, endpoint: str, body: bytes | None) -> Outcome:
            raise RuntimeError("boom")

    status, _, body = call(create_app(Broken()), environ("POST", "/validate", b"{}", "2"))
    assert status == "500 Internal Server Error"
    assert json.loads(body)["error"]["reason"] == "internal-error"


class Holding(Echo):
    """Notes what the budget held while each body was being answered."""

    def __init__(self, budget: BytesInFlight) -> None:
        super().__init__()
        self.budget = budget
        self.held: list[int] = []

    def handle(self, endpoint: str, body: bytes | None) -> Outcome:
        self.held.append(self.budget.held)
        return super().handle(endpoint, body)


def test_a_body_holds_its_declared_length_until_it_is_answered() -> None:
    budget = BytesInFlight(SMALL_BODY * 4)
    handler = Holding(budget)
    app = create_app(handler, budget)
    assert call(app, environ("POST", "/mutate", b"{}", "2"))[0] == "200 OK"
    chunked = environ("POST", "/mutate", b"x" * 10, None, **{"wsgi.input_terminated": True})
    assert call(app, chunked)[0] == "200 OK"
    # Over --max-body-bytes: dropped unread, nothing held.
    assert call(app, environ("POST", "/mutate", b"x" * 2000, "2000"))[0].startswith("413")
    assert handler.held == [2, LIMIT + 1, 0]  # a chunked body counts as the most it may be
    assert budget.held == 0

    class Broken(Holding):
        def handle(self, endpoint: str, body: bytes | None) -> Outcome:
            raise RuntimeError("boom")

    assert call(create_app(Broken(budget), budget), environ("POST", "/mutate", b"{}", "2"))[
        0
    ].startswith("500")
    assert budget.held == 0


def test_a_body_without_room_is_dropped_unread_and_answered_429() -> None:
    budget = BytesInFlight(SMALL_BODY * 4)
    refused: list[str] = []
    handler = Echo()
    handler.max_body_bytes = SMALL_BODY * 4
    app = create_app(handler, budget, refused=refused.append)
    assert budget.take(SMALL_BODY * 2)  # bodies other connections are reading
    size = SMALL_BODY + 1  # a large body may use 3/4 of the budget: 1 byte too many
    env = environ("POST", "/validate", b"x" * size, str(size))
    env["wsgi.input"] = CountingStream(b"x" * size)
    status, headers, body = call(app, env)
    assert status == "429 Too Many Requests"
    assert headers["Retry-After"] == "1"
    assert env["wsgi.input"].tell() == size and env["wsgi.input"].largest <= 64 * 1024
    answer = json.loads(body)
    assert (answer["kind"], answer["code"], answer["reason"]) == ("Status", 429, "TooManyRequests")
    assert answer["details"]["retryAfterSeconds"] == 1
    assert answer["error"]["reason"] == "bytes-in-flight"
    assert f"no room for a {size}-byte body" in answer["message"]
    assert refused == ["validate"] and handler.calls == []
    # A small body still finds the quarter kept for it.
    assert call(app, environ("POST", "/validate", b"{}", "2"))[0] == "200 OK"
    assert budget.held == SMALL_BODY * 2


def test_small_bodies_may_use_the_whole_budget_large_ones_three_quarters() -> None:
    budget = BytesInFlight(1024 * 1024)
    assert budget.take(768 * 1024)  # a large body: up to 3/4
    assert not budget.take(SMALL_BODY + 1)
    for _ in range(4):
        assert budget.take(SMALL_BODY)  # small ones: the rest
    assert not budget.take(1)
    assert (budget.held, budget.peak, budget.refused) == (1024 * 1024, 1024 * 1024, 2)
    budget.give(SMALL_BODY)
    assert budget.take(1)
    with pytest.raises(ValueError, match="at least"):
        BytesInFlight(1024)
