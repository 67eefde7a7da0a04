"""Slow and many clients on 127.0.0.1 cannot starve admission.

One worker with the default threads, so nothing hides behind a second process. Every stuck
connection is open at once while `SteadyClient` posts reviews with the apiserver's 2 s
timeout: it must see 0 failures and 0 5xx, the server must close each stuck connection once
`--read-timeout-seconds` has passed, and say so in a few log lines (not one per byte).
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.slowclients import (
    APISERVER_TIMEOUT_S,
    ClosureWatch,
    SteadyClient,
    Trickler,
    client_hello,
    closed_request_left_open,
    partial_body,
    partial_head,
    review_bytes,
    silent_connection,
    slow_handshake,
    tls_connection,
)
from tests.webhook_harness import Webhook, metric_value, running_webhook

READ_TIMEOUT_S = 3.0
MAX_CONNECTIONS = 64
# The worker checks deadlines at least once a second.
CLOSE_SLACK_S = 1.6


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    with running_webhook(
        tmp_path_factory.mktemp("slow-clients"),
        workers=1,
        extra_args=(
            "--read-timeout-seconds",
            str(READ_TIMEOUT_S),
            "--max-connections",
            str(MAX_CONNECTIONS * 4),
        ),
    ) as running:
        yield running


def open_concurrently(openers: list[Callable[[], Any]]) -> list[Any]:
    """Open them all at once (a starved server must not make the test itself take minutes)."""
    with ThreadPoolExecutor(16) as pool:
        return list(pool.map(lambda open_one: open_one(), openers))


def refused_is_none(open_one: Callable[[], socket.socket]) -> socket.socket | None:
    """A connection the server closed to make room before its handshake was done is None."""
    try:
        return open_one()
    except OSError:
        return None


def timeout_log_lines(hook: Webhook) -> list[str]:
    return [line for line in hook.log().splitlines() if "--read-timeout-seconds" in line]


def test_slow_handshakes_and_partial_requests_do_not_starve_a_normal_client(
    hook: Webhook, reliability_summary: Callable[[str], None]
) -> None:
    hello = client_hello(hook.ca_file)
    body = review_bytes()
    lines_before = len(timeout_log_lines(hook))
    client = SteadyClient(hook).start()
    time.sleep(0.3)  # a few requests on an idle server first
    opened = time.monotonic()
    stuck = open_concurrently(
        [lambda: slow_handshake(hook, hello)] * 32
        + [lambda: silent_connection(hook)] * 8
        + [lambda: partial_head(hook)] * 8
        + [lambda: partial_body(hook, body)] * 32
    )
    # Connections that asked to be closed and never closed their end.
    lingering = open_concurrently([lambda: closed_request_left_open(hook, body)] * 16)
    tricklers = [Trickler(hook) for _ in range(8)]
    watch = ClosureWatch([*stuck, *(t.tls for t in tricklers)], opened)
    watch.wait(READ_TIMEOUT_S + CLOSE_SLACK_S + 1)
    client.stop()
    watch.stop()
    for sock in lingering:
        sock.close()

    summary = client.summary()
    closed = sorted(watch.closed_after.values())
    reliability_summary(
        f"steady client during {len(stuck) + len(tricklers)} stuck connections: {summary}; "
        f"stuck connections closed by the server: {len(closed)}/{len(stuck) + len(tricklers)}, "
        f"after {closed[0] if closed else 0:.2f}..{closed[-1] if closed else 0:.2f} s "
        f"(read timeout {READ_TIMEOUT_S} s)"
    )
    assert summary["failures"] == 0, summary
    assert all(status < 500 for status in client.statuses), summary
    assert summary["max_ms"] < 1000 * APISERVER_TIMEOUT_S, summary
    assert summary["requests"] >= 50, summary
    assert watch.still_open == 0, f"{watch.still_open} stuck connections still open"
    assert closed[0] >= READ_TIMEOUT_S - 0.5, closed
    assert closed[-1] <= READ_TIMEOUT_S + CLOSE_SLACK_S, closed
    # The tricklers kept sending: the deadline is for the whole request, not per byte.
    assert all(t.sent >= 8 for t in tricklers), [t.sent for t in tricklers]

    def logged() -> tuple[int, list[str]]:
        lines = timeout_log_lines(hook)[lines_before:]
        return sum(
            int(n) for ln in lines for n in re.findall(r"closed (\d+) connection", ln)
        ), lines

    deadline = time.monotonic() + 3  # the last line may wait for the next report (1 s)
    while logged()[0] < len(stuck) + len(tricklers) and time.monotonic() < deadline:
        time.sleep(0.1)
    counted, lines = logged()
    print("logged:", *lines, sep="\n  ")
    assert counted == len(stuck) + len(tricklers), lines
    assert 1 <= len(lines) <= 4, lines  # a line a second at most, not one per connection
    text = hook.metrics()
    assert metric_value(text, "steer_webhook_connections_timed_out_total", phase="handshake") >= 40
    assert metric_value(text, "steer_webhook_connections_timed_out_total", phase="request") >= 48


def test_a_connection_flood_is_shed_oldest_idle_first(
    tmp_path: Path, reliability_summary: Callable[[str], None]
) -> None:
    """More connections than `--max-connections`: idle ones are closed to make room, so new
    connections (the apiserver's) are still accepted and answered."""
    with running_webhook(
        tmp_path,
        workers=1,
        extra_args=(
            "--read-timeout-seconds",
            str(READ_TIMEOUT_S),
            "--max-connections",
            str(MAX_CONNECTIONS),
        ),
    ) as live:
        client = SteadyClient(live, fresh_every=3).start()
        time.sleep(0.3)
        opened = time.monotonic()
        attempts = open_concurrently(
            [lambda: refused_is_none(lambda: tls_connection(live))] * (3 * MAX_CONNECTIONS)
            + [lambda: silent_connection(live)] * MAX_CONNECTIONS
        )
        flood = [sock for sock in attempts if sock is not None]
        watch = ClosureWatch(flood, opened)
        time.sleep(1.5)
        client.stop()
        open_now = watch.still_open
        watch.stop()
        summary = client.summary()
        reliability_summary(
            f"steady client during a flood of {len(flood)} connections "
            f"(--max-connections {MAX_CONNECTIONS}): {summary}; closed by the server during "
            f"their handshake: {len(attempts) - len(flood)}, still open after 1.5 s: {open_now}"
        )
        assert summary["failures"] == 0, summary
        assert summary["max_ms"] < 1000 * APISERVER_TIMEOUT_S, summary
        assert open_now <= MAX_CONNECTIONS, open_now
        log = live.log()
        assert "Traceback" not in log, log[-3000:]
