"""Faults on the files the webhook serves from, while an apiserver-like load keeps going.

Two workers, three client threads (`ApiserverLoad`: kept-alive connections, a fresh
one every few requests, the apiserver's 2 s timeout, one retry of a request that met a
pooled connection the server had closed, as Go's client does). Through every fault the load
must see 0 failures, 0 5xx and 0 bypasses (a review the last good policy denies, allowed).

- Certificate rotation: a good rotation is served to the next new connection while old
  connections keep being answered; a half-done or broken one (the file missing for a moment,
  a key that does not match, a truncated PEM) keeps the last good pair serving, shows its
  reason on /status, logs it, counts it once, and the next good pair is taken.
- Policy faults: bad YAML, a schema error, thousands of nesting levels, an empty file, no
  file, a huge file: each is counted once by the reload-error metric and shown on /status,
  /readyz stays ready, decisions follow the last good policy; a valid edit is then served by
  every worker within `EDIT_BOUND_S`.
"""

from __future__ import annotations

import http.client
import json
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests
from cryptography import x509
from cryptography.hazmat.primitives import hashes

from certs import issue_webhook_certs, write_webhook_certs
from certs.files import CERT_FILE, KEY_FILE, atomic_write
from kits.waiting import wait_until
from steer.core.policy import parse_policy
from tests.reliability.apiserver_load import (
    CLOSED_BEFORE_ANSWER,
    ApiserverLoad,
    fingerprint,
    rss_mb,
    worker_pids,
)
from tests.reliability.slowclients import APISERVER_TIMEOUT_S, address
from tests.webhook_harness import IDENTITY, Webhook, metric_value, peer_fingerprint, running_webhook

RELOAD_ERRORS = "steer_webhook_policy_reload_errors_total"
# The policy is polled every 2 s and /status is rewritten every 2 s.
EDIT_BOUND_S = 6.0
STATUS_BOUND_S = 6.0
# Each broken certificate state is judged once per worker, not once per connection; a
# two-file write may pass through one more broken state (new key, old certificate).
CERT_ERRORS_MAX = 8
# A huge policy must be turned away without being parsed: this content takes the YAML parser
# about 40 s of CPU.
HUGE_POLICY_BYTES = 4 << 20


Summary = Callable[[str], None]


def pem_fingerprint(pem: bytes) -> str:
    return x509.load_pem_x509_certificate(pem).fingerprint(hashes.SHA256()).hex()


def workers(hook: Webhook) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = hook.status()["workers"]
    return found


def ready(hook: Webhook, ca_file: Path) -> bool:
    """/readyz on fresh connections (so both workers are likely asked) and /status agree."""
    answers = [
        requests.get(f"{hook.url}/readyz", verify=str(ca_file), timeout=APISERVER_TIMEOUT_S)
        for _ in range(4)
    ]
    return all(a.status_code == 200 for a in answers) and hook.status()["ready"] is True


def rss_line(before: list[float], after: list[float]) -> str:
    return "/".join(f"{b:.0f}->{a:.0f}" for b, a in zip(before, after, strict=True)) + " MB"


def summary_line(load: ApiserverLoad, rss_before: list[float], rss_after: list[float]) -> str:
    s = load.summary()
    return (
        f"requests {s['requests']}, failures {s['failures']}, 5xx {s['5xx']}, bypasses "
        f"{s['bypasses']}, idle retries {s['idle_retries']}, p99 {s['p99_ms']} ms, max "
        f"{s['max_ms']} ms, worker RSS {rss_line(rss_before, rss_after)}"
    )


def assert_clean(load: ApiserverLoad) -> None:
    summary = load.summary()
    assert load.failures == [], summary
    assert load.server_errors() == 0, summary
    assert load.bypasses == [], summary
    assert summary["requests"] >= 200, summary


# --- certificate rotation -----------------------------------------------------------------------


def cert_errors(hook: Webhook) -> list[str]:
    return [w["certificate"]["lastError"] or "" for w in workers(hook)]


def test_certificate_rotation_under_load(tmp_path: Path, reliability_summary: Summary) -> None:
    rotated, final = issue_webhook_certs(IDENTITY), issue_webhook_certs(IDENTITY)
    stranger = issue_webhook_certs(IDENTITY)  # its key matches no certificate served here
    with running_webhook(tmp_path) as hook:
        cas = tmp_path / "cas.pem"
        cas.write_bytes(hook.ca_file.read_bytes() + rotated.ca_cert_pem + final.ca_cert_pem)
        crt, key = hook.cert_dir / CERT_FILE, hook.cert_dir / KEY_FILE
        host, port = address(hook)

        def served() -> str:
            return peer_fingerprint(host, port, cas)

        pids = worker_pids(hook.process.pid)
        assert len(pids) == 2, pids
        rss_before = [rss_mb(pid) for pid in pids]
        original = served()
        assert original == pem_fingerprint(crt.read_bytes())
        # A pooled connection the apiserver opened before the rotation and uses after it.
        idle = http.client.HTTPSConnection(
            host,
            port,
            context=ssl.create_default_context(cafile=str(cas)),
            timeout=APISERVER_TIMEOUT_S,
        )
        idle.connect()
        load = ApiserverLoad(hook, cas).start()
        try:
            time.sleep(0.5)

            # 1. A good rotation: the next new connection gets the new certificate.
            rotated_at = time.monotonic()
            write_webhook_certs(hook.cert_dir, rotated)  # key, then certificate
            new = pem_fingerprint(rotated.cert_pem)
            wait_until(
                "a new connection is served the rotated certificate",
                lambda: served() == new,
                timeout=3,
            )
            assert [served() for _ in range(6)] == [new] * 6
            wait_until(
                "the load's new connections get the rotated certificate",
                lambda: load.answered_since(rotated_at, new, reused=False) >= 10,
                timeout=5,
            )
            # Connections made before the rotation are still answered (on the old session).
            assert load.answered_since(rotated_at, original, reused=True) >= 1
            idle.request("GET", "/healthz")
            try:
                reply = idle.getresponse()
                idle_outcome = f"answered on the old session ({reply.status})"
                assert reply.status == 200 and fingerprint(idle.sock) == original
                reply.read()
            except CLOSED_BEFORE_ANSWER:  # closed cleanly: Go's client would retry once
                idle_outcome = "closed cleanly"
            idle.close()

            # 2. The certificate file missing for a moment (moved away and back, same inode).
            moved = crt.with_name(CERT_FILE + ".moving")
            os.rename(crt, moved)
            wait_until(
                "a worker reports the missing certificate file",
                lambda: any("cannot stat" in e for e in cert_errors(hook)),
                timeout=STATUS_BOUND_S,
            )
            assert served() == new
            assert ready(hook, cas)
            os.rename(moved, crt)
            wait_until(
                "every worker forgets the error once the file is back",
                lambda: all(e == "" for e in cert_errors(hook)),
                timeout=STATUS_BOUND_S,
            )

            # 3. The key rotated, the certificate not: the pair does not match.
            atomic_write(key, stranger.key_pem, 0o600)
            wait_until(
                "a worker reports the mismatched key",
                lambda: any("KEY_VALUES_MISMATCH" in e for e in cert_errors(hook)),
                timeout=STATUS_BOUND_S,
            )
            assert [served() for _ in range(4)] == [new] * 4
            assert ready(hook, cas)

            # 4. A truncated certificate (beside the key it will match).
            atomic_write(key, final.key_pem, 0o600)
            atomic_write(crt, final.cert_pem[: len(final.cert_pem) // 2], 0o644)
            wait_until(
                "a worker reports the truncated certificate",
                lambda: any("PEM lib" in e for e in cert_errors(hook)),
                timeout=STATUS_BOUND_S,
            )
            assert [served() for _ in range(4)] == [new] * 4
            assert ready(hook, cas)

            # 5. The next good pair is taken.
            final_at = time.monotonic()
            write_webhook_certs(hook.cert_dir, final)
            last = pem_fingerprint(final.cert_pem)
            wait_until("the next good pair is served", lambda: served() == last, timeout=3)
            wait_until(
                "every worker serves the last pair and shows no error",
                lambda: all(
                    w["certificate"]["lastError"] is None
                    and w["certificate"]["fingerprintSHA256"].replace(":", "").lower() == last
                    for w in workers(hook)
                ),
                timeout=STATUS_BOUND_S,
            )
            wait_until(
                "the load's new connections get the last pair",
                lambda: load.answered_since(final_at, last, reused=False) >= 10,
                timeout=5,
            )
        finally:
            load.stop()
        rss_after = [rss_mb(pid) for pid in pids]
        line = summary_line(load, rss_before, rss_after)
        reliability_summary(
            f"certificate rotation under load: {line}; idle connection {idle_outcome}"
        )

        assert_clean(load)
        detail = [w["certificate"] for w in workers(hook)]
        # Each broken state counted, once per worker that met it, not once per handshake.
        counted = [d["reloadErrors"] for d in detail]
        assert 3 <= max(counted) <= CERT_ERRORS_MAX, detail
        assert min(d["loads"] for d in detail) >= 2, detail
        log = hook.log()
        for reason in ("cannot stat certificate files", "KEY_VALUES_MISMATCH", "PEM lib"):
            assert reason in log, reason
        assert "Traceback" not in log, log[-3000:]


# --- policy-file faults -------------------------------------------------------------------------


def deep_yaml(levels: int) -> str:
    return "[" * levels + "]" * levels


def huge_policy(good: str, size: int) -> str:
    """A policy with a flow list of `size` bytes: the slowest kind of YAML to parse."""
    return good.replace("spec:\n", "spec:\n  padding: [" + "1," * (size // 2) + "]\n", 1)


def edited_policy(good: str) -> str:
    """dept-b may now use default-scheduler and overcommit: its validating review flips."""
    edited = good.replace(
        "allowedSchedulerNames: [steer-spread, steer-binpack]",
        "allowedSchedulerNames: [default-scheduler, steer-spread, steer-binpack]",
    ).replace("overcommitPercent: 0\n", "overcommitPercent: 100\n")
    assert edited.count("default-scheduler, steer-spread, steer-binpack") == 2
    return edited


def policy_errors(hook: Webhook) -> list[str]:
    return [w["policy"]["lastError"] or "" for w in workers(hook)]


def inject_policy_fault(
    hook: Webhook, content: str | None, reason: str, count: int, name: str
) -> float:
    """Write `content` (None: delete the file); wait until it is the `count`-th reload error
    and every worker's /status shows `reason`; the webhook stays ready. Seconds it took."""
    started = time.monotonic()
    if content is None:
        hook.policy_file.unlink()
    else:
        atomic_write(hook.policy_file, content.encode(), 0o644)
    wait_until(
        f"{name}: the reload-error metric counts it",
        lambda: metric_value(hook.metrics(), RELOAD_ERRORS) >= count,
        timeout=EDIT_BOUND_S,
    )
    wait_until(
        f"{name}: every worker's /status shows {reason!r}",
        lambda: all(reason in e for e in policy_errors(hook)),
        timeout=STATUS_BOUND_S,
    )
    assert metric_value(hook.metrics(), RELOAD_ERRORS) == count, name  # once, not per poll
    assert ready(hook, hook.ca_file), name
    return time.monotonic() - started


def test_policy_file_faults_under_load(tmp_path: Path, reliability_summary: Summary) -> None:
    with running_webhook(tmp_path) as hook:
        good = hook.policy_file.read_text()
        version = parse_policy(good).version
        faults: list[tuple[str, str | None, str]] = [
            ("invalid YAML", "spec: [unclosed\n  tenants: {\n", "not valid YAML"),
            (
                "schema-invalid",
                good.replace("overcommitPercent: 0\n", "overcommitPercent: 150\n"),
                "overcommitPercent",
            ),
            ("nested 10000 levels", deep_yaml(10_000), "nested too deeply"),
            ("empty", "", "empty document"),
            ("deleted", None, "cannot read policy file"),
            ("huge", huge_policy(good, HUGE_POLICY_BYTES), "a ConfigMap holds; not parsed"),
        ]
        pids = worker_pids(hook.process.pid)
        assert len(pids) == 2, pids
        rss_before = [rss_mb(pid) for pid in pids]
        load = ApiserverLoad(hook, hook.ca_file).start()
        steps = []
        try:
            time.sleep(0.5)
            for count, (name, content, reason) in enumerate(faults, start=1):
                took = inject_policy_fault(hook, content, reason, count, name)
                assert {w["policy"]["version"] for w in workers(hook)} == {version}, name
                steps.append(f"{name} {took:.1f}s")
            denied_while_faulted = load.decisions[("dept-b-validate", False)]

            # A valid edit: served by every worker within the bound.
            edited = edited_policy(good)
            new_version = parse_policy(edited).version
            load.deny_until_edit.clear()
            written = time.monotonic()
            atomic_write(hook.policy_file, edited.encode(), 0o644)
            wait_until(
                "every worker serves the edited policy",
                lambda: all(w["policy"]["version"] == new_version for w in workers(hook)),
                timeout=EDIT_BOUND_S,
            )
            took = time.monotonic() - written
            time.sleep(0.3)  # /status can name the version a moment before its plans are built
            load.edit_served.set()
            allowed_after = load.decisions[("dept-b-validate", True)]
            wait_until(
                "the load's dept-b reviews are allowed under the edit",
                lambda: load.decisions[("dept-b-validate", True)] >= allowed_after + 20,
                timeout=5,
            )
        finally:
            load.stop()
        rss_after = [rss_mb(pid) for pid in pids]
        line = summary_line(load, rss_before, rss_after)
        reliability_summary(
            f"policy faults under load: {line}; {len(faults)} faults counted, edit served by "
            f"every worker after {took:.1f} s"
        )
        print("faults:", ", ".join(steps))

        assert_clean(load)
        assert denied_while_faulted >= 20, load.decisions
        assert all(e == "" for e in policy_errors(hook))
        assert metric_value(hook.metrics(), RELOAD_ERRORS) == len(faults)
        with hook.session() as session:
            reply = session.post(
                f"{hook.url}/validate", data=load.reviews[2].body, timeout=APISERVER_TIMEOUT_S
            )
        assert load.reviews[2].name == "dept-b-validate"
        assert json.loads(reply.content)["response"]["allowed"] is True
        assert "Traceback" not in hook.log(), hook.log()[-3000:]
