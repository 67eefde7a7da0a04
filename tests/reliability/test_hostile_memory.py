"""Hostile sizes cannot push the webhook past its container's memory limit.

The webhook as manifests/webhook/webhook.yaml runs it (its workers, read timeout, connection
limit), on 127.0.0.1. First 300 distinct pods of 2 MiB each, as `kubectl create
--dry-run=server` sends them (no quota, nothing stored): the decision cache keeps a digest and a
verdict of each template, never the pod, and a review that large is not kept at all. Then 160
connections at once, each sending a 4 MiB review slowly (64 KiB pieces over 2 s, within the
read timeout): 640 MiB, past the container's limit if read at once. Each worker reads at most
`--max-bytes-in-flight` of bodies at once and answers the others 429 with Retry-After once it
has dropped them unread. 160 stays under what one worker holds before it sheds connections
(`--max-connections`, per worker: past it, down to 7/8), because the kernel may hand every
connection to one worker: with 256, one run saw a worker take nearly all and close 65 of them,
as `--max-connections` says it should, which is the connection flood test's subject
(test_slow_clients.py), not this one's.

Throughout, a client with the apiserver's 2 s timeout keeps posting ordinary reviews. The
test holds: the resident memory of the server's processes together (master and workers: what
the container's limit counts, pages shared since the fork counted in each, so it errs high)
never passes the manifest's limit; the ordinary client gets every answer, none 5xx, its p99
under its timeout; every hostile request gets an answer, 200 or 429 (none closed unanswered,
none timed out).
"""

from __future__ import annotations

import json
import re
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.reliability.slowclients import (
    APISERVER_TIMEOUT_S,
    SteadyClient,
    address,
    client_context,
    request_head,
)
from tests.webhook_harness import ROOT, Webhook, metric_value, review_for, running_webhook

MANIFEST = ROOT / "manifests" / "webhook" / "webhook.yaml"
MIB = 1024 * 1024
DISTINCT_PODS = 300
POD_BYTES = 2 * MIB
SLOW_CONNECTIONS = 160  # under 7/8 of the manifest's per-worker --max-connections (module doc)
SLOW_BODY_BYTES = 4 * MIB - 4096  # just within --max-body-bytes (4 MiB)
PIECE = 64 * 1024
# Per slow body: within the manifest's 5 s read timeout, with room for a busy machine (the
# server reads and drops the bodies it refuses, 1 GB in all, while the clock runs).
SEND_SECONDS = 2.0
# Every run is bounded: the phases stop waiting after these, whatever the server does.
PHASE_TIMEOUT_S = 60.0


def _manifest_container() -> dict[str, Any]:
    (deployment,) = [
        d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    return dict(container)


def _quantity_bytes(text: str) -> int:
    match = re.fullmatch(r"(\d+)(Ki|Mi|Gi)?", text)
    assert match, text
    return int(match.group(1)) * {None: 1, "Ki": 1024, "Mi": MIB, "Gi": 1024 * MIB}[match.group(2)]


def manifest_limits() -> tuple[int, tuple[str, ...]]:
    """The container's memory limit in bytes, and the serving flags the manifest passes."""
    container = _manifest_container()
    limit = _quantity_bytes(container["resources"]["limits"]["memory"])
    wanted = ("--workers", "--read-timeout-seconds", "--max-connections")
    wanted += ("--max-body-bytes", "--max-bytes-in-flight", "--decision-cache-bytes")
    args = tuple(a for a in container["args"] if a.split("=", 1)[0] in wanted)
    return limit, args


def _rss_bytes(pid: int) -> int:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    match = re.search(r"^VmRSS:\s+(\d+) kB$", text, re.M)
    return int(match.group(1)) * 1024 if match else 0


def _children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                status = (entry / "status").read_text()
            except OSError:
                continue
            if re.search(rf"^PPid:\s+{pid}$", status, re.M):
                out.append(int(entry.name))
    return out


class RssWatch:
    """The server's resident memory (master and workers together), sampled every 50 ms."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.workers = _children(master)
        self.peak = 0
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def now(self) -> int:
        return sum(_rss_bytes(pid) for pid in (self.master, *self.workers))

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, self.now())
            self.samples += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _padded_review(size: int) -> bytes:
    """A dry-run mutating review of exactly `size` bytes, its pod padded with env values, with
    a label `tag: tag-000000` that `_distinct` rewrites in place."""
    body = review_for("pod-create-by-replicaset.json", "team-b", dryRun=True)
    pod = body["request"]["object"]
    pod["metadata"].setdefault("labels", {})["tag"] = "tag-000000"
    env = pod["spec"]["containers"][0].setdefault("env", [])
    env.append({"name": "PAD", "value": ""})
    short = len(json.dumps(body))
    entry = len(json.dumps({"name": "PAD_000000", "value": ""})) + len(", ")
    count = (size - short) // (entry + 1000)
    env.extend({"name": f"PAD_{i:06d}", "value": "x" * 1000} for i in range(count))
    env[-count - 1]["value"] = "x" * (size - short - count * (entry + 1000))
    text = json.dumps(body).encode()
    assert len(text) == size, (len(text), size)
    return text


def _distinct(template: bytes, index: int) -> bytes:
    return template.replace(b'"tag-000000"', b'"tag-%06d"' % index, 1)


def _answer(tls: ssl.SSLSocket) -> tuple[int, bytes]:
    """The status and body of one HTTP answer on `tls`."""
    received = b""
    while True:
        head, sep, rest = received.partition(b"\r\n\r\n")
        if sep:
            match = re.search(rb"(?i)content-length: *(\d+)", head)
            if match and len(rest) >= int(match.group(1)):
                return int(head.split(b" ", 2)[1]), rest
        chunk = tls.recv(65536)
        if not chunk:
            raise ConnectionError("closed before the answer")
        received += chunk


def _slow_post(hook: Webhook, body: bytes) -> str:
    """Send `body` to /mutate in 64 KiB pieces over SEND_SECONDS; what came back."""
    try:
        raw = socket.create_connection(address(hook), timeout=10)
        with client_context(hook.ca_file).wrap_socket(raw, server_hostname="localhost") as tls:
            tls.sendall(request_head("/mutate", len(body)))
            pieces = range(0, len(body), PIECE)
            pause = SEND_SECONDS / len(pieces)
            for start in pieces:
                tls.sendall(body[start : start + PIECE])
                time.sleep(pause)
            status, answer = _answer(tls)
    except OSError as exc:
        return f"lost: {type(exc).__name__}: {exc}"[:160]
    if status == 200 and json.loads(answer)["response"]["allowed"]:
        return "200"
    if status == 429 and json.loads(answer)["error"]["reason"] == "bytes-in-flight":
        return "429"
    return f"unexpected: {status} {answer[:120]!r}"


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    _limit, args = manifest_limits()
    workers = next(int(a.split("=")[1]) for a in args if a.startswith("--workers="))
    flags = tuple(a for a in args if not a.startswith("--workers="))
    with running_webhook(
        tmp_path_factory.mktemp("hostile-memory"), workers=workers, extra_args=flags
    ) as running:
        yield running


def test_hostile_sizes_keep_the_webhook_within_its_memory_limit(
    hook: Webhook, reliability_summary: Callable[[str], None]
) -> None:
    limit, args = manifest_limits()
    # The slow bodies would pass the limit if read at once, and fit one worker's connections.
    max_connections = next(int(a.split("=")[1]) for a in args if a.startswith("--max-connections="))
    assert limit < SLOW_CONNECTIONS * SLOW_BODY_BYTES
    assert max_connections * 7 // 8 - 8 > SLOW_CONNECTIONS
    started = time.monotonic()
    watch = RssWatch(hook.process.pid)
    client = SteadyClient(hook).start()
    try:
        time.sleep(0.5)
        baseline = watch.now()

        template = _padded_review(POD_BYTES)

        def create(index: int) -> int:
            with hook.session() as session:
                reply = session.post(
                    f"{hook.url}/mutate",
                    data=_distinct(template, index),
                    headers={"Content-Type": "application/json"},
                    timeout=30,
                )
                return reply.status_code

        with ThreadPoolExecutor(8) as pool:
            created = list(pool.map(create, range(DISTINCT_PODS), timeout=PHASE_TIMEOUT_S))
        after_pods = watch.now()
        peak_pods = watch.peak

        slow_body = _padded_review(SLOW_BODY_BYTES)
        with ThreadPoolExecutor(SLOW_CONNECTIONS) as pool:
            slow = list(
                pool.map(
                    lambda i: _slow_post(hook, _distinct(slow_body, 10**5 + i)),
                    range(SLOW_CONNECTIONS),
                    timeout=PHASE_TIMEOUT_S,
                )
            )
        time.sleep(0.5)
    finally:
        client.stop()
        watch.stop()

    summary = client.summary()
    latencies = sorted(client.latencies)
    p99_ms = 1000 * latencies[int(0.99 * (len(latencies) - 1))]
    outcomes = {kind: sum(1 for s in slow if s == kind) for kind in sorted(set(slow))}
    text = hook.metrics()
    deferred = sum(
        metric_value(text, "steer_webhook_requests_deferred_total", endpoint=e)
        for e in ("mutate", "validate", "validate-security")
    )
    reliability_summary(
        f"{DISTINCT_PODS} distinct {POD_BYTES // MIB} MiB pods, then {SLOW_CONNECTIONS} slow "
        f"{SLOW_BODY_BYTES / MIB:.1f} MiB bodies, on {' '.join(args)}: server RSS (all "
        f"processes) baseline {baseline / MIB:.0f} MiB, after the pods {after_pods / MIB:.0f} "
        f"MiB (peak {peak_pods / MIB:.0f}), peak overall {watch.peak / MIB:.0f} MiB of the "
        f"manifest's {limit / MIB:.0f} MiB ({watch.samples} samples); slow bodies: {outcomes}; "
        f"ordinary client: {summary['requests']} requests, p50 {summary['p50_ms']} ms, "
        f"p99 {p99_ms:.1f} ms, max {summary['max_ms']} ms, failures {summary['failures']}; "
        f"{time.monotonic() - started:.0f} s"
    )
    assert created == [200] * DISTINCT_PODS, {s: created.count(s) for s in set(created)}
    closes = [ln for ln in hook.log().splitlines() if "closed" in ln and "connection" in ln]
    assert set(outcomes) <= {"200", "429"}, (
        [s for s in slow if s not in ("200", "429")][:5],
        closes,
    )
    assert outcomes.get("200", 0) >= 2, outcomes  # the budget lets large bodies through too
    assert deferred == outcomes.get("429", 0), (deferred, outcomes)
    assert watch.peak <= limit, f"peak RSS {watch.peak / MIB:.0f} MiB over {limit / MIB:.0f}"
    assert summary["failures"] == 0, summary
    assert all(status < 500 for status in client.statuses), summary
    assert p99_ms < 1000 * APISERVER_TIMEOUT_S, summary
    assert summary["requests"] >= 50, summary
    assert "Traceback" not in hook.log(), hook.log()[-3000:]
