"""The plain-HTTP server of the scorer and of the webhook's metrics listener (waitress, through
`steer.adapters.http_server`): what it is relied on for, against the installed waitress."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import requests

from steer.adapters.http_server import HttpServer


def slow_app(gate: threading.Event) -> Callable[..., Iterable[bytes]]:
    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        body = environ["wsgi.input"].read()
        if environ["PATH_INFO"] == "/wait":
            gate.wait(5)
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"ok:%d" % len(body)]

    return app


def session() -> requests.Session:
    s = requests.Session()
    s.trust_env = False
    return s


def connected(server: HttpServer) -> socket.socket:
    return socket.create_connection(("127.0.0.1", server.port), timeout=5)


def test_a_slow_client_holds_no_thread() -> None:
    # One thread: were it held by the client that sends half a request, nobody else would be
    # answered. waitress reads a request whole before a thread runs it.
    with HttpServer(slow_app(threading.Event()), threads=1) as server:
        stuck = [connected(server) for _ in range(4)]
        for sock in stuck:
            sock.sendall(b"POST /x HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
        started = time.monotonic()
        reply = session().get(f"{server.url}/", timeout=5)
        assert reply.status_code == 200 and reply.text == "ok:0"
        assert time.monotonic() - started < 1
        for sock in stuck:
            sock.close()


def test_idle_connections_are_closed_after_the_idle_timeout() -> None:
    with HttpServer(slow_app(threading.Event()), idle_timeout_s=1) as server:
        sock = connected(server)
        sock.settimeout(6)
        started = time.monotonic()
        assert sock.recv(1) == b""  # closed by the server
        assert 0.9 <= time.monotonic() - started < 5


def test_a_body_over_the_limit_is_refused_with_413() -> None:
    with HttpServer(slow_app(threading.Event()), max_body_bytes=1024) as server:
        reply = session().post(f"{server.url}/", data=b"x" * 4096, timeout=5)
        assert reply.status_code == 413
        assert session().post(f"{server.url}/", data=b"x" * 512, timeout=5).text == "ok:512"


def test_answers_name_no_server_software() -> None:
    with HttpServer(slow_app(threading.Event())) as server:
        reply = session().get(f"{server.url}/", timeout=5)
        assert "Server" not in reply.headers, reply.headers


def test_stop_closes_the_port_and_every_connection() -> None:
    server = HttpServer(slow_app(threading.Event())).start()
    idle = connected(server)
    idle.settimeout(5)
    server.stop()
    assert idle.recv(1) == b""
    with pytest.raises(OSError):
        connected(server)
    assert not any(t.name == "http" and t.is_alive() for t in threading.enumerate())


def test_a_running_request_may_finish_while_it_stops() -> None:
    gate = threading.Event()
    server = HttpServer(slow_app(gate)).start()
    answers: list[int] = []

    def ask() -> None:
        answers.append(session().get(f"{server.url}/wait", timeout=10).status_code)

    asking = threading.Thread(target=ask)
    asking.start()
    time.sleep(0.3)
    threading.Timer(0.5, gate.set).start()
    server.stop()
    asking.join(10)
    assert answers == [200]
