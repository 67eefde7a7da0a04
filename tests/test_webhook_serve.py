"""Server plumbing: certificate reload across a half-written rotation, cache-age metric, flags."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, Gauge

from certs import issue_webhook_certs, write_webhook_certs
from certs.files import atomic_write
from tests.webhook_harness import IDENTITY
from webhook.metrics import CACHE_AGE, SYNCED_AT, CacheAgeCollector
from webhook.serve import CertReloader, ServeError, ServerSettings, split_host_port


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
    with pytest.raises(ServeError, match="--listen: expected HOST:PORT"):
        ServerSettings("localhost", "c", "k").check()
