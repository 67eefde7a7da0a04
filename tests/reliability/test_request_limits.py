"""Bounded inputs over real TLS: bodies over `--max-body-bytes` are refused with 413 however
they are framed, and a worker gives back the memory large bodies took."""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from tests.reliability.slowclients import request_head, tls_connection
from tests.webhook_harness import Webhook, metric_value, review_for, running_webhook

LIMIT = 64 * 1024
# The worker's resident memory may stay this far above its baseline once large bodies are gone.
RSS_SLACK_MB = 40


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    with running_webhook(
        tmp_path_factory.mktemp("limits"),
        workers=1,
        extra_args=("--max-body-bytes", str(LIMIT), "--threads", "8"),
    ) as running:
        yield running


def padded_review(size: int) -> bytes:
    """A valid mutating review of about `size` bytes (the padding is one annotation each KiB)."""
    body = review_for("pod-create-user-mutating.json")
    body["request"]["object"]["metadata"]["annotations"] = {
        f"example.com/pad-{i}": "x" * 1000 for i in range(max(0, size // 1024))
    }
    return json.dumps(body).encode()


def chunked(body: bytes, size: int = 8192) -> bytes:
    out = b"".join(
        b"%x\r\n" % len(body[i : i + size]) + body[i : i + size] + b"\r\n"
        for i in range(0, len(body), size)
    )
    return out + b"0\r\n\r\n"


def exchange(hook: Webhook, data: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send `data` on a new TLS connection; the status, headers and body of the answer."""
    with tls_connection(hook) as tls:
        tls.settimeout(10)
        tls.sendall(data)
        received = b""
        while True:
            chunk = tls.recv(65536)
            if not chunk:
                break
            received += chunk
            head, sep, rest = received.partition(b"\r\n\r\n")
            if sep:
                match = re.search(rb"(?i)content-length: *(\d+)", head)
                if match and len(rest) >= int(match.group(1)):
                    break
    head, _, rest = received.partition(b"\r\n\r\n")
    status_line, *header_lines = head.decode().split("\r\n")
    headers = {k.lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines)}
    return int(status_line.split()[1]), headers, rest


def test_a_chunked_body_over_the_limit_is_refused_with_413(hook: Webhook) -> None:
    body = padded_review(LIMIT + 16 * 1024)
    status, headers, answer = exchange(
        hook, request_head("/mutate", None, "Transfer-Encoding: chunked") + chunked(body)
    )
    assert status == 413, answer
    assert json.loads(answer)["error"]["reason"] == "body-too-large"
    assert headers["connection"] == "close"
    # Within the limit, the same framing is answered.
    small = padded_review(LIMIT // 2)
    status, _, answer = exchange(
        hook, request_head("/mutate", None, "Transfer-Encoding: chunked") + chunked(small)
    )
    assert status == 200 and json.loads(answer)["response"]["allowed"] is True


def test_a_sized_body_over_the_limit_is_refused_with_413(hook: Webhook) -> None:
    body = padded_review(LIMIT + 16 * 1024)
    status, headers, answer = exchange(hook, request_head("/mutate", len(body)) + body)
    assert status == 413, answer
    assert json.loads(answer)["error"]["reason"] == "body-too-large"
    assert headers["connection"] == "close"
    text = hook.metrics()
    assert metric_value(text, "steer_webhook_bad_requests_total", reason="body-too-large") >= 2


def worker_pid(hook: Webhook) -> int:
    (pid,) = [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and _ppid(int(entry)) == hook.process.pid
    ]
    return pid


def _ppid(pid: int) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^PPid:\s+(\d+)$", text, re.MULTILINE)
    return int(match.group(1)) if match else None


def rss_mb(pid: int) -> float:
    match = re.search(r"^VmRSS:\s+(\d+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert match
    return int(match.group(1)) / 1024


def test_a_worker_returns_to_its_baseline_after_large_bodies(
    tmp_path: Path, reliability_summary: Callable[[str], None]
) -> None:
    with running_webhook(
        tmp_path, workers=1, extra_args=("--threads", "8", "--max-body-bytes", str(4 << 20))
    ) as live:
        pid = worker_pid(live)
        small = padded_review(0)
        with live.session() as session:
            for _ in range(30):
                session.post(f"{live.url}/mutate", data=small, timeout=5).raise_for_status()
        baseline = rss_mb(pid)
        bodies = [padded_review(size << 20) for size in (1, 2, 3)]

        def send(body: bytes) -> Any:
            with live.session() as session:
                reply = session.post(f"{live.url}/mutate", data=body, timeout=30)
                return reply.status_code

        with ThreadPoolExecutor(8) as pool:
            statuses = list(pool.map(send, bodies * 8))
        assert statuses == [200] * len(statuses)
        peak = rss_mb(pid)
        time.sleep(1.0)
        with live.session() as session:
            for _ in range(10):
                session.post(f"{live.url}/mutate", data=small, timeout=5).raise_for_status()
        after = rss_mb(pid)
        reliability_summary(
            f"worker RSS: baseline {baseline:.0f} MB, right after {len(bodies) * 8} bodies "
            f"of 1-3 MB {peak:.0f} MB, a second later {after:.0f} MB"
        )
        assert after - baseline <= RSS_SLACK_MB, (baseline, peak, after)
