"""Server plumbing: certificate reload across a half-written rotation, cache-age metric, flags."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge

from certs import issue_webhook_certs, write_webhook_certs
from certs.files import atomic_write
from launcher.commands import build_parser
from tests.webhook_harness import IDENTITY
from webhook.metrics import (
    CACHE_AGE,
    RELOAD_ERRORS,
    SYNCED_AT,
    CacheAgeCollector,
    LargestCountCollector,
    WebhookMetrics,
)
from webhook.serve import (
    CertReloader,
    ServeError,
    ServerSettings,
    WebhookOptions,
    gunicorn_config,
    metrics_address,
    process_id,
    serve_webhook,
    split_host_port,
)
from webhook.status import listener_app, remove_worker_status, worker_statuses, write_worker_status


def test_reloader_keeps_serving_through_a_half_written_rotation(tmp_path: Path) -> None:
    paths = write_webhook_certs(tmp_path, issue_webhook_certs(IDENTITY))
    reloader = CertReloader(str(paths.cert), str(paths.key))
    first = reloader.context()
    assert reloader.context() is first  # unchanged files: the same context, no re-read
    old_fingerprint = reloader.status()["fingerprintSHA256"]

    new = issue_webhook_certs(IDENTITY)
    atomic_write(paths.key, new.key_pem, 0o600)  # the key has rotated, the certificate not yet
    assert reloader.context() is first
    assert "do not load" in (reloader.last_error or "")
    atomic_write(paths.cert, new.cert_pem, 0o644)
    second = reloader.context()
    assert second is not first and reloader.last_error is None
    status = reloader.status()
    assert (
        status["loaded"] and status["loads"] == 2 and status["fingerprintSHA256"] != old_fingerprint
    )


def test_reloader_clears_its_error_when_a_moved_file_comes_back(tmp_path: Path) -> None:
    """The certificate moved away and back (same inode, same mtime) is the pair in force:
    /status must not keep saying the file cannot be read."""
    paths = write_webhook_certs(tmp_path, issue_webhook_certs(IDENTITY))
    reloader = CertReloader(str(paths.cert), str(paths.key))
    first = reloader.context()
    moved = paths.cert.with_name("tls.crt.moving")
    os.rename(paths.cert, moved)
    assert reloader.context() is first
    assert "cannot stat" in (reloader.last_error or "")
    os.rename(moved, paths.cert)
    assert reloader.context() is first
    assert reloader.status()["lastError"] is None and reloader.status()["reloadErrors"] == 1


def test_reloader_judges_a_broken_pair_once_not_per_handshake(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    paths = write_webhook_certs(tmp_path, issue_webhook_certs(IDENTITY))
    reloader = CertReloader(str(paths.cert), str(paths.key))
    first = reloader.context()
    atomic_write(paths.key, issue_webhook_certs(IDENTITY).key_pem, 0o600)  # matches nothing
    builds = 0
    build = reloader._build

    def counted_build() -> Any:
        nonlocal builds
        builds += 1
        return build()

    reloader._build = counted_build  # type: ignore[method-assign]
    assert all(reloader.context() is first for _ in range(50))
    assert builds == 1
    status = reloader.status()
    assert status["reloadErrors"] == 1 and "KEY_VALUES_MISMATCH" in status["lastError"]
    assert sum("do not load" in r.getMessage() for r in caplog.records) == 1


def test_reloader_without_any_good_pair_refuses_to_start(tmp_path: Path) -> None:
    reloader = CertReloader(str(tmp_path / "none.crt"), str(tmp_path / "none.key"))
    with pytest.raises(ServeError, match="cannot stat certificate files"):
        reloader.context()


def test_cache_age_is_derived_from_the_oldest_worker() -> None:
    registry = CollectorRegistry()
    gauge = Gauge(SYNCED_AT, "t", ["pid"], registry=registry)
    gauge.labels(pid="1").set(1000.0)
    gauge.labels(pid="2").set(990.0)
    collector = CacheAgeCollector(registry.collect, clock=lambda: 1010.0)
    ages = [m for m in collector.collect() if m.name == CACHE_AGE]
    assert [s.value for s in ages[0].samples] == [20.0]


def test_reload_errors_count_once_per_edit_not_once_per_worker() -> None:
    def worker(errors: int) -> CollectorRegistry:
        registry = CollectorRegistry()
        Counter(RELOAD_ERRORS, "t", registry=registry).inc(errors)
        return registry

    workers = [worker(2), worker(2), worker(1)]  # the third one restarted after an edit
    summed = CollectorRegistry()
    Counter(RELOAD_ERRORS, "t", registry=summed).inc(5)  # what the multiprocess sum says
    collector = LargestCountCollector(
        summed.collect, lambda: (w.collect() for w in workers), [RELOAD_ERRORS]
    )
    (family,) = [m for m in collector.collect() if m.name == RELOAD_ERRORS]
    assert [s.value for s in family.samples if s.name.endswith("_total")] == [2.0]


def test_the_metricsprocess_id_follows_a_fork() -> None:
    """The multiprocess values tell their worker's file by this id, kept without a syscall."""
    assert process_id() == os.getpid()
    child = os.fork()
    if child == 0:
        os._exit(0 if process_id() == os.getpid() else 1)
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert process_id() == os.getpid()


def test_deferred_rule_counts_reach_their_counters_once_on_flush() -> None:
    """Under gunicorn the rule counters count in memory until the status pump flushes them."""
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry, deferred=True)
    for _ in range(3):
        metrics.mutated("budget:pool", "prefer")
    metrics.denied("scheduler-name", "scheduler-name")
    metrics.audited("deny", "overcommit")
    metrics.dry_run("mutate", "mutated")

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("steer_webhook_mutations_total", rule="prefer") is None
    metrics.flush()
    metrics.flush()  # nothing new: nothing added twice
    assert value("steer_webhook_mutations_total", rule="budget:pool") == 3
    assert value("steer_webhook_mutations_total", rule="prefer") == 3
    assert value("steer_webhook_denials_total", rule="scheduler-name") == 2
    assert value("steer_webhook_audited_total", action="deny", rule="overcommit") == 1
    assert value("steer_webhook_dry_run_reviews_total", endpoint="mutate", result="mutated") == 1
    metrics.mutated("prefer")
    metrics.flush()
    assert value("steer_webhook_mutations_total", rule="prefer") == 4


def test_single_process_metrics_are_counters_with_build_info(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    metrics = WebhookMetrics(registry)
    metrics.policy_reload_errors.inc()
    metrics.namespace_relists.inc(2)
    assert registry.get_sample_value("steer_webhook_policy_reload_errors_total") == 1
    assert registry.get_sample_value("steer_webhook_namespace_cache_relists_total") == 2
    build = next(m for m in registry.collect() if m.name == "steer_webhook_build_info")
    assert set(build.samples[0].labels) == {"version", "python"}


def test_metrics_bind_the_listen_host_unless_given_a_host() -> None:
    args = build_parser().parse_args(
        ["webhook", "serve", "--policy", "p", "--cert", "c", "--key", "k"]
    )
    assert metrics_address("127.0.0.1:8443", args.metrics_listen) == ("127.0.0.1", 9102)
    assert metrics_address("[::1]:8443", "9200") == ("::1", 9200)
    assert metrics_address("127.0.0.1:8443", "0.0.0.0:9102") == ("0.0.0.0", 9102)
    assert metrics_address("0.0.0.0:8443", "9102") == ("0.0.0.0", 9102)
    with pytest.raises(ServeError, match=r"--metrics-listen: port must be 0\.\.65535"):
        metrics_address("127.0.0.1:8443", "70000")


def test_json_logs_reach_gunicorn_through_its_logging_config(tmp_path: Path) -> None:
    reloader = CertReloader("c", "k")
    text = gunicorn_config(ServerSettings("127.0.0.1:1", "c", "k"), reloader)
    assert "logconfig_dict" not in text  # gunicorn's own line format, as before
    json_logs = gunicorn_config(
        ServerSettings("127.0.0.1:1", "c", "k", log_level="warning", log_format="json"), reloader
    )
    assert json_logs["loglevel"] == "warning"
    assert json_logs["logconfig_dict"]["root"]["level"] == "WARNING"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("127.0.0.1:8443", ("127.0.0.1", 8443)),
        (":9102", ("0.0.0.0", 9102)),
        ("[::1]:1", ("::1", 1)),
    ],
)
def test_listen_addresses(value: str, expected: tuple[str, int]) -> None:
    assert split_host_port(value, "--listen") == expected


def test_settings_name_the_bad_flag(tmp_path: Path) -> None:
    with pytest.raises(ServeError, match="--workers: must be at least 1, got 0"):
        ServerSettings("127.0.0.1:1", "c", "k", workers=0).check()
    server = ServerSettings("127.0.0.1:1", "c", "k")
    with pytest.raises(ServeError, match=r"--decision-cache-entries: must be 0 .* got -1"):
        serve_webhook(WebhookOptions("p", server, decision_cache_entries=-1))
    args = build_parser().parse_args(
        ["webhook", "serve", "--policy", "p", "--cert", "c", "--key", "k"]
    )
    assert (args.decision_cache_entries, args.decision_cache_bytes) == (256, 8 << 20)
    assert args.max_bytes_in_flight == 32 << 20
    with pytest.raises(ServeError, match=r"--decision-cache-bytes: must be 0 .* got -1"):
        serve_webhook(WebhookOptions("p", server, decision_cache_bytes=-1))
    with pytest.raises(ServeError, match="--listen: expected HOST:PORT"):
        ServerSettings("localhost", "c", "k").check()


def test_connection_limits_reach_gunicorn_and_its_worker() -> None:
    settings = ServerSettings(
        "127.0.0.1:1", "c", "k", read_timeout_seconds=2.5, max_connections=100
    )
    reloader = CertReloader("c", "k")
    config = gunicorn_config(settings, reloader)
    # gevent's pool has room above the limit for connections arriving while others close.
    assert config["worker_connections"] == 200
    worker = config["worker_class"]
    assert (worker.limits.read_timeout, worker.limits.max_connections) == (2.5, 100)
    assert worker.tls is reloader
    # TLS is the worker's: gunicorn gets no certificate and so wraps nothing itself.
    assert not {"certfile", "keyfile", "ssl_context", "threads"} & set(config)
    args = build_parser().parse_args(
        ["webhook", "serve", "--policy", "p", "--cert", "c", "--key", "k"]
    )
    assert (args.read_timeout_seconds, args.max_connections, args.threads) == (5.0, 256, None)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"read_timeout_seconds": 0}, "--read-timeout-seconds: must be more than 0"),
        ({"max_connections": 4}, "--max-connections: must be at least 8, got 4"),
        ({"max_body_bytes": 10}, "--max-body-bytes: must be at least 1024"),
        (
            {"max_bytes_in_flight": 4 << 20},
            r"--max-bytes-in-flight: must be at least 4/3 of --max-body-bytes \(4194304\)",
        ),
    ],
)
def test_limits_name_the_bad_flag(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    with pytest.raises(ServeError, match=message):
        ServerSettings("127.0.0.1:1", "c", "k", **change).check()


def call_listener(path: str, method: str = "GET") -> tuple[str, dict[str, Any]]:
    def metrics(environ: dict[str, Any], start_response: Any) -> list[bytes]:
        start_response("200 OK", [("Content-Type", "text/plain")])
        return [b"steer_webhook_x 1\n"]

    workers = [{"pid": 1, "ready": True, "policy": {"version": "v1"}}, {"pid": 2, "ready": False}]
    app = listener_app(metrics, lambda: workers)
    started: list[str] = []
    body = b"".join(
        app(
            {"PATH_INFO": path, "REQUEST_METHOD": method},
            lambda status, headers: started.append(status),
        )
    )
    return started[0], (json.loads(body) if path != "/metrics" else {"text": body.decode()})


def test_the_metrics_listener_serves_metrics_status_and_nothing_else() -> None:
    status, body = call_listener("/metrics")
    assert status == "200 OK" and "steer_webhook_x" in body["text"]
    status, body = call_listener("/status")
    assert status == "200 OK" and body["ready"] is False and len(body["workers"]) == 2
    for path in ("/", "/readyz", "/metrics/", "/favicon.ico"):
        status, body = call_listener(path)
        assert status == "404 Not Found" and body["error"]["reason"] == "not-found"
    status, _ = call_listener("/metrics", "POST")
    assert status.startswith("405")


def test_worker_status_files_round_trip(tmp_path: Path) -> None:
    write_worker_status(str(tmp_path), {"ready": True, "policy": {"version": "v"}})
    (found,) = worker_statuses(str(tmp_path))
    assert found["ready"] is True and found["pid"] == os.getpid() and found["writtenAt"] > 0
    remove_worker_status(str(tmp_path), os.getpid())
    assert worker_statuses(str(tmp_path)) == []
