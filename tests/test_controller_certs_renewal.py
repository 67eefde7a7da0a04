"""`steer controller run --webhook-certs=renew` (controller/certs_renewal.py): the flags, off by default;
only the Lease holder checks and writes, the others clear their gauges; a check's outcome in
the controller's metrics, a failed check counted and survived."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

import pytest
from prometheus_client import CollectorRegistry

from certs.cli import ROTATE_SETTINGS
from certs.pki import WebhookIdentity
from certs.renewer import WebhookCertRenewer
from certs.settings import CERT_FLAGS, cert_values
from controller.certs_renewal import (
    CERT_SETTINGS,
    WebhookCertJob,
    WebhookCertSettings,
    settings_from,
)
from controller.metrics import ControllerMetrics
from launcher.commands import build_parser
from tests.certs_support import Objects, object_server

NOW = datetime(2026, 6, 1, tzinfo=UTC)
NS = "kube-steer"
SECRET = f"/api/v1/namespaces/{NS}/secrets/steer-webhook-tls"
MUTATING = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/steer-webhook"


def run_args(*flags: str) -> object:
    return build_parser().parse_args(["controller", "run", "--policy", "p.yaml", *flags])


def value(metrics: ControllerMetrics, name: str, **labels: str) -> float | None:
    registry: CollectorRegistry = metrics.registry
    return registry.get_sample_value(name, labels)


def test_off_by_default_and_the_manifests_flag_turns_it_on() -> None:
    assert settings_from(run_args()) is None  # type: ignore[arg-type]
    settings = settings_from(run_args("--webhook-certs=renew"))  # type: ignore[arg-type]
    assert settings == WebhookCertSettings()
    options = settings.renewer_options("kube-steer")
    assert options.serving.identity.service_host == "steer-webhook.kube-steer.svc"
    assert (options.serving.days, options.serving.renew_before) == (90, timedelta(days=30))
    assert options.settle == timedelta(seconds=60) and options.ca_secret == "steer-webhook-ca"
    custom = settings_from(
        run_args(  # type: ignore[arg-type]
            "--webhook-certs=renew", "--webhook-namespace=steer", "--webhook-config=a",
            "--webhook-config=b", "--webhook-cert-ip=127.0.0.1", "--webhook-cert-days=1",
            "--webhook-cert-renew-before=0.001", "--webhook-cert-interval=2",
        )
    )  # fmt: skip
    assert custom is not None and custom.configurations == ("a", "b")
    assert custom.renewer_options("ignored").serving.identity == WebhookIdentity(
        "steer-webhook", "steer", (), ("127.0.0.1",)
    )


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--webhook-cert-renew-before=90"], "--webhook-cert-renew-before: must be more than 0"),
        (["--webhook-cert-days=0"], "--webhook-cert-days: must be 1..3650, got 0"),
        (["--webhook-cert-interval=0"], "--webhook-cert-interval: must be more than 0 seconds"),
        (
            ["--webhook-cert-ip=host"],
            "--webhook-cert-ip: ip[0]: 'host' is not an IPv4 or IPv6 address; pass host names "
            "with --webhook-cert-dns",
        ),
        (["--webhook-service=Steer"], "--webhook-service: service: 'Steer' must be an RFC 1035"),
    ],
)
def test_a_wrong_flag_is_named(flags: list[str], message: str) -> None:
    args = run_args("--webhook-certs=renew", *flags)
    with pytest.raises(ValueError, match=re.escape(message)):
        settings_from(args)  # type: ignore[arg-type]


def test_the_flags_are_those_of_steer_certs_rotate_under_the_controllers_names(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Declared once (certs/settings.py): the same defaults and help under both names, but
    for the two defaults that differ on purpose."""
    rotate = build_parser().parse_args(["certs", "rotate"])
    by_hand = cert_values(rotate, ROTATE_SETTINGS, "certs")
    renewed = cert_values(run_args("--webhook-certs=renew"), CERT_SETTINGS, "controller")  # type: ignore[arg-type]
    assert set(CERT_SETTINGS) == set(ROTATE_SETTINGS) == set(CERT_FLAGS)
    differ = {setting for setting in CERT_FLAGS if by_hand[setting] != renewed[setting]}
    # The controller's own namespace (the Lease's); a certificate renewed unattended lives 90 days.
    assert differ == {"namespace", "days"}
    assert (renewed["namespace"], renewed["days"], by_hand["days"]) == (None, 90, 365)
    pages = []
    for words in (["certs", "rotate"], ["controller", "run"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args([*words, "--help"])
        pages.append(" ".join(capsys.readouterr().out.split()))
    for flag in CERT_FLAGS.values():
        for page in pages:
            assert " ".join(flag.help.split()) in page, flag.help


def test_only_the_leader_checks_and_its_outcome_is_in_the_metrics() -> None:
    objects = Objects()
    objects.put(MUTATING, {"webhooks": [{"name": "m", "clientConfig": {"url": "https://x"}}]})
    leading = [False]
    metrics = ControllerMetrics()
    settings = WebhookCertSettings()
    with object_server(objects) as api:
        renewer = WebhookCertRenewer(api, settings.renewer_options(NS), now=lambda: NOW)
        job = WebhookCertJob(renewer, metrics, is_leader=lambda: leading[0], wall=lambda: 1.5e9)
        assert value(metrics, "steer_controller_webhook_cert_checks_total", result="error") == 0

        assert job.run_once() is None
        assert objects.writes == []  # a replica that does not lead writes nothing

        leading[0] = True
        report = job.run_once()
        assert report is not None and report.ca_created and report.issued
        assert value(metrics, "steer_controller_webhook_cert_checks_total", result="ok") == 1
        named = {"secret": f"{NS}/steer-webhook-tls"}
        last = value(metrics, "steer_controller_webhook_cert_last_check_timestamp_seconds", **named)
        assert last == 1.5e9
        expires = value(
            metrics,
            "steer_controller_webhook_cert_not_after_timestamp_seconds",
            certificate="serving",
            **named,
        )
        assert expires == (NOW + timedelta(days=90)).timestamp()
        assert value(metrics, "steer_controller_webhook_ca_bundle_cas", **named) == 1
        for what in ("ca", "bundle", "serving"):
            assert value(metrics, "steer_controller_webhook_cert_writes_total", object=what) == 1

        # The Secret turned into something no renewal may overwrite: counted, logged, survived.
        secret = objects.get(SECRET)
        objects.put(SECRET, {**secret, "type": "Opaque"})
        assert job.run_once() is None
        assert value(metrics, "steer_controller_webhook_cert_checks_total", result="error") == 1

        # Leadership lost: the gauges go, so max() over replicas is the new leader's.
        leading[0] = False
        job.run_once()
        assert not [
            sample
            for family in metrics.registry.collect()
            if family.name.startswith("steer_controller_webhook_") and family.type == "gauge"
            for sample in family.samples
        ]
