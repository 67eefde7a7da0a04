"""SIGTERM under load: the webhook answers what it accepted, then exits inside the pod's
termination grace period (30 s by default; gunicorn's graceful timeout is 20 s)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import requests

from tests.webhook_harness import admission_fixture, running_webhook

GRACE_S = 30.0


def test_sigterm_under_load_answers_in_flight_reviews_and_exits_in_time(tmp_path: Path) -> None:
    with running_webhook(tmp_path, workers=2) as hook:
        fixture = admission_fixture("pod-create-user-mutating.json")
        path, body = fixture["path"], json.dumps(fixture["body"]).encode()
        answered: list[int] = []
        broken: list[str] = []
        refused = threading.Event()
        lock = threading.Lock()

        def load() -> None:
            with hook.session() as session:
                while not refused.is_set():
                    try:
                        reply = session.post(
                            f"{hook.url}{path}",
                            data=body,
                            headers={"Content-Type": "application/json"},
                            timeout=10,
                        )
                    except requests.ConnectionError:
                        refused.set()  # closed for new connections: the server is stopping
                        return
                    with lock:
                        if reply.status_code != 200 or "response" not in reply.json():
                            broken.append(f"{reply.status_code} {reply.text[:200]}")
                        else:
                            answered.append(reply.status_code)

        threads = [threading.Thread(target=load) for _ in range(6)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + 30
        while len(answered) < 200 and time.monotonic() < deadline:
            time.sleep(0.05)
        before = len(answered)
        assert before >= 200, hook.log()[-2000:]
        hook.process.send_signal(signal.SIGTERM)
        started = time.monotonic()
        code = hook.process.wait(timeout=GRACE_S + 5)
        took = time.monotonic() - started
        refused.set()
        for thread in threads:
            thread.join(timeout=15)
        assert code == 0, hook.log()[-2000:]
        assert took < GRACE_S, f"stopped {took:.1f} s after SIGTERM"
        # Every request that got an answer got a whole AdmissionReview, none a 5xx.
        assert broken == []
        assert "Traceback" not in hook.log()


def _workers(pid: int) -> set[int]:
    children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
    return {int(c) for c in children}


def test_a_worker_that_leaves_does_not_take_the_server_or_its_metrics_with_it(
    tmp_path: Path,
) -> None:
    """A worker exits through the same frames as the master (it is a fork of it): the shared
    metrics directory must outlive it, or its replacement cannot boot and the master halts."""
    with running_webhook(tmp_path, workers=2) as hook:
        fixture = admission_fixture("pod-create-user-mutating.json")
        path, body = fixture["path"], json.dumps(fixture["body"]).encode()
        with hook.session() as session:

            def answered() -> bool:
                reply = session.post(
                    f"{hook.url}{path}",
                    data=body,
                    headers={"Content-Type": "application/json", "Connection": "close"},
                    timeout=10,
                )
                return reply.status_code == 200 and "response" in reply.json()

            assert answered()
            old = _workers(hook.process.pid)
            assert len(old) == 2
            os.kill(min(old), signal.SIGTERM)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                now = _workers(hook.process.pid) if hook.process.poll() is None else set()
                if len(now) == 2 and now != old:
                    break
                time.sleep(0.1)
            assert hook.process.poll() is None, hook.log()[-2000:]
            assert len(_workers(hook.process.pid) - old) == 1, hook.log()[-2000:]
            for _ in range(20):
                assert answered()
            assert "steer_webhook" in hook.metrics()
            assert "No such file or directory" not in hook.log()


def test_an_idle_kept_alive_connection_does_not_hold_a_stopping_webhook(tmp_path: Path) -> None:
    """The apiserver keeps its connections open between reviews: a stopping worker closes
    them at once instead of waiting for them until gunicorn's graceful timeout (20 s)."""
    with running_webhook(tmp_path, workers=2) as hook:
        fixture = admission_fixture("pod-create-user-mutating.json")
        with hook.session() as session:
            reply = session.post(
                f"{hook.url}{fixture['path']}", data=json.dumps(fixture["body"]), timeout=5
            )
            assert reply.status_code == 200
            started = time.monotonic()
            hook.process.send_signal(signal.SIGTERM)
            assert hook.process.wait(timeout=GRACE_S) == 0
            took = time.monotonic() - started
        assert took < 5, f"stopped {took:.1f} s after SIGTERM"
