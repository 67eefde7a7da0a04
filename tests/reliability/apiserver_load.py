"""A steady, apiserver-like load of AdmissionReviews, and what it saw.

`ApiserverLoad` runs a few threads, each with its own kept-alive TLS connection and a fresh
one every `fresh_every` requests, posting a fixed mix of reviews with the apiserver's 2 s
timeout. Like Go's http client (which the apiserver uses), a request that fails on a
*reused* connection because the server had closed it before answering (EOF or reset, no
response byte) is retried once on a new connection and counted as a retry, not a failure;
every other error, a timeout, a 5xx or an unexpected decision is a failure.
"""

from __future__ import annotations

import hashlib
import http.client
import json
import re
import ssl
import threading
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tests.reliability.slowclients import APISERVER_TIMEOUT_S, address
from tests.webhook_harness import Webhook, review_for

Expect = Literal["allow", "deny", "deny-until-edit"]


@dataclass(frozen=True)
class Review:
    name: str
    path: str
    body: bytes
    expect: Expect


def mixed_reviews() -> list[Review]:
    """Tenant and GPU pods through /mutate and /validate, with the example policy's answers:
    dept-b (team-b) may not use default-scheduler nor overcommit; `plain` has no tenant."""

    def review(fixture: str, namespace: str) -> bytes:
        return json.dumps(review_for(fixture, namespace)).encode()

    return [
        Review(
            "gpu-mutate", "/mutate", review("pod-create-with-affinity-gpu.json", "team-a"), "allow"
        ),
        Review(
            "tenant-mutate", "/mutate", review("pod-create-user-mutating.json", "team-b"), "allow"
        ),
        Review(
            "dept-b-validate",
            "/validate",
            review("pod-create-user-validating.json", "team-b"),
            "deny-until-edit",
        ),
        Review(
            "dept-b-gpu-validate",
            "/validate",
            review("pod-create-with-affinity-gpu.json", "team-b"),
            "deny",
        ),
        Review(
            "plain-validate",
            "/validate",
            review("pod-create-user-validating.json", "plain"),
            "allow",
        ),
    ]


def fingerprint(sock: Any) -> str:
    der = sock.getpeercert(binary_form=True)
    return hashlib.sha256(der).hexdigest()


# The server closed a pooled connection before answering: Go's transport retries these once.
CLOSED_BEFORE_ANSWER = (
    http.client.RemoteDisconnected,
    ConnectionResetError,
    BrokenPipeError,
    ssl.SSLEOFError,
    ssl.SSLZeroReturnError,
)


class ApiserverLoad:
    """`threads` clients posting `reviews` in turn until `stop()`."""

    def __init__(
        self, hook: Webhook, ca_file: Path, *, threads: int = 3, fresh_every: int = 4
    ) -> None:
        self.hook = hook
        self.host, self.port = address(hook)
        self.context = ssl.create_default_context(cafile=str(ca_file))
        self.reviews = mixed_reviews()
        self.fresh_every = fresh_every
        self._lock = threading.Lock()
        self._stop = threading.Event()
        # Cleared while a policy edit that allows `deny-until-edit` reviews is rolling out.
        self.deny_until_edit = threading.Event()
        self.deny_until_edit.set()
        self.edit_served = threading.Event()  # set once every worker serves the edit
        self.sent = 0
        self.failures: list[str] = []
        self.statuses: Counter[int] = Counter()
        self.bypasses: list[str] = []
        self.decisions: Counter[tuple[str, bool]] = Counter()
        self.retries = 0
        self.latencies: list[float] = []
        # (time answered, certificate fingerprint of the connection, connection was reused)
        self.answers: list[tuple[float, str, bool]] = []
        self._threads = [
            threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(threads)
        ]

    def start(self) -> ApiserverLoad:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join()

    def _connect(self) -> http.client.HTTPSConnection:
        conn = http.client.HTTPSConnection(
            self.host, self.port, context=self.context, timeout=APISERVER_TIMEOUT_S
        )
        conn.connect()
        return conn

    def _run(self, offset: int) -> None:
        conn: http.client.HTTPSConnection | None = None
        served_on_conn = 0
        turn = offset
        while not self._stop.is_set():
            review = self.reviews[turn % len(self.reviews)]
            turn += 1
            if conn is not None and served_on_conn >= self.fresh_every:
                conn.close()
                conn = None
            started = time.monotonic()
            try:
                reused = conn is not None
                if conn is None:
                    conn = self._connect()
                    served_on_conn = 0
                try:
                    status, data = self._post(conn, review)
                except CLOSED_BEFORE_ANSWER:
                    if not reused:
                        raise
                    with self._lock:
                        self.retries += 1
                    conn.close()
                    conn, reused = self._connect(), False
                    served_on_conn = 0
                    status, data = self._post(conn, review)
                served_on_conn += 1
                self._judge(review, status, data, fingerprint(conn.sock), reused, started)
            except (OSError, http.client.HTTPException) as exc:
                self._fail(review, f"{type(exc).__name__}: {exc}", started)
                if conn is not None:
                    conn.close()
                conn = None
        if conn is not None:
            conn.close()

    def _post(self, conn: http.client.HTTPSConnection, review: Review) -> tuple[int, bytes]:
        conn.request(
            "POST",
            f"{review.path}?timeout=2s",
            body=review.body,
            headers={"Content-Type": "application/json"},
        )
        reply = conn.getresponse()
        return reply.status, reply.read()

    def _judge(
        self, review: Review, status: int, data: bytes, cert: str, reused: bool, started: float
    ) -> None:
        now = time.monotonic()
        with self._lock:
            self.sent += 1
            self.statuses[status] += 1
            self.latencies.append(now - started)
            self.answers.append((now, cert, reused))
        try:
            allowed = json.loads(data)["response"]["allowed"]
        except (ValueError, KeyError, TypeError):
            self._record_failure(f"{review.name}: HTTP {status}: {data[:120]!r}")
            return
        if status != 200:
            self._record_failure(f"{review.name}: HTTP {status}")
        with self._lock:
            self.decisions[(review.name, allowed)] += 1
        expect_deny = review.expect == "deny" or (
            review.expect == "deny-until-edit" and self.deny_until_edit.is_set()
        )
        if expect_deny and allowed:
            with self._lock:
                self.bypasses.append(review.name)
        elif review.expect == "allow" and not allowed:
            self._record_failure(f"{review.name}: denied")
        elif review.expect == "deny-until-edit" and self.edit_served.is_set() and not allowed:
            self._record_failure(f"{review.name}: still denied after every worker took the edit")

    def _fail(self, review: Review, message: str, started: float) -> None:
        with self._lock:
            self.sent += 1
            self.latencies.append(time.monotonic() - started)
        self._record_failure(f"{review.name}: {message}")

    def _record_failure(self, message: str) -> None:
        with self._lock:
            self.failures.append(message[:200])

    def server_errors(self) -> int:
        return sum(n for status, n in self.statuses.items() if status >= 500)

    def answered_since(self, since: float, cert: str, *, reused: bool) -> int:
        with self._lock:
            return sum(1 for t, c, r in self.answers if t >= since and c == cert and r == reused)

    def summary(self) -> dict[str, Any]:
        ordered = sorted(self.latencies) or [0.0]
        return {
            "requests": self.sent,
            "failures": len(self.failures),
            "5xx": self.server_errors(),
            "bypasses": len(self.bypasses),
            "idle_retries": self.retries,
            "p99_ms": round(1000 * ordered[int(0.99 * (len(ordered) - 1))], 1),
            "max_ms": round(1000 * ordered[-1], 1),
            "first_failures": self.failures[:3],
        }


# --- the worker processes ---------------------------------------------------------------------


def worker_pids(master: int) -> list[int]:
    """The gunicorn workers: the processes whose parent is the master."""
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                text = (entry / "status").read_text()
            except OSError:
                continue
            match = re.search(r"^PPid:\s+(\d+)$", text, re.M)
            if match and int(match.group(1)) == master:
                pids.append(int(entry.name))
    return sorted(pids)


def rss_mb(pid: int) -> float:
    match = re.search(r"^VmRSS:\s+(\d+) kB$", Path(f"/proc/{pid}/status").read_text(), re.M)
    assert match, pid
    return int(match.group(1)) / 1024
