"""`steer controller run --webhook-certs=renew`: the controller's leader keeps the webhook's
serving certificate valid and trusted from inside the cluster (certs/renewer.py), every
`--webhook-cert-interval` seconds, so that no operator machine and no cron job is needed.

Every replica runs the job; only the Lease holder checks, the others clear the job's gauges
(so a `max()` over replicas is the leader's). A check that fails is counted and logged and the
next one starts again from what the cluster holds. Off by default: a controller run by hand
touches no Secret; the manifests turn it on, and off again with cert-manager.
"""

from __future__ import annotations

import argparse
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta

from kubernetes import client

from certs.pki import DEFAULT_KEY_TYPE, MAX_DAYS, CertError, KeyType, WebhookIdentity
from certs.renewer import RenewalReport, RenewerOptions, WebhookCertRenewer
from certs.rotate import RotateError, RotateOptions
from certs.settings import (
    DEFAULT_CA_SECRET,
    DEFAULT_CONFIGURATIONS,
    DEFAULT_NAMESPACE,
    DEFAULT_RENEW_BEFORE_DAYS,
    DEFAULT_SECRET,
    DEFAULT_SERVICE,
    RENEWED_DAYS,
    add_cert_flags,
    cert_values,
    flag_name,
)
from controller.metrics import ControllerMetrics
from steer.adapters.kubejson import KubeApiError
from steer.adapters.periodic import Periodic

log = logging.getLogger(__name__)

DEFAULT_INTERVAL_S = 60.0
# The certificate's settings this job takes, as certs.settings declares them.
CERT_SETTINGS = (
    "namespace",
    "service",
    "secret",
    "configurations",
    "dns",
    "ips",
    "days",
    "renew_before",
    "key_type",
)


@dataclass(frozen=True)
class WebhookCertSettings:
    """The flags of `--webhook-certs=renew`; `namespace` None: the controller's own (its
    Lease's)."""

    namespace: str | None = None
    service: str = DEFAULT_SERVICE
    secret: str = DEFAULT_SECRET
    ca_secret: str = DEFAULT_CA_SECRET
    configurations: tuple[str, ...] = DEFAULT_CONFIGURATIONS
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    days: int = RENEWED_DAYS
    renew_before: timedelta = timedelta(days=DEFAULT_RENEW_BEFORE_DAYS)
    interval_s: float = DEFAULT_INTERVAL_S
    key_type: KeyType = DEFAULT_KEY_TYPE

    def renewer_options(self, namespace: str) -> RenewerOptions:
        """`CertError` naming the flag when a name is not one Kubernetes allows."""
        identity = WebhookIdentity(self.service, self.namespace or namespace, self.dns, self.ips)
        serving = RotateOptions(
            identity=identity,
            secret=self.secret,
            renew_before=self.renew_before,
            configurations=self.configurations,
            days=self.days,
            key_type=self.key_type,
        )
        # A new CA must have reached every apiserver before the certificate moves to it: one
        # interval after the check that saw it in every caBundle, at the earliest.
        settle = timedelta(seconds=self.interval_s)
        return RenewerOptions(serving, ca_secret=self.ca_secret, settle=settle)


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "the webhook's certificate",
        "With --webhook-certs=renew the leader keeps the webhook's serving certificate valid "
        "and trusted (docs/webhook.md, Certificates): a CA kept in the Secret --webhook-ca-secret "
        "(made there the first time), the certificate in --webhook-secret issued again "
        "--webhook-cert-renew-before days before it expires, and the CA as caBundle of the "
        "named webhook configurations; a new CA is added to caBundle before the certificate "
        "moves to it and the old one dropped only once every webhook endpoint serves the new.",
    )
    group.add_argument(
        "--webhook-certs",
        choices=("off", "renew"),
        default="off",
        help="renew: keep the webhook's certificate valid from the leader; off (default): "
        "cert-manager or `steer certs rotate` does",
    )
    group.add_argument(
        "--webhook-ca-secret",
        default=DEFAULT_CA_SECRET,
        metavar="NAME",
        help="the Secret holding the CA (ca.crt, ca.key)",
    )
    add_cert_flags(
        group,
        CERT_SETTINGS,
        "controller",
        overrides={
            # None: the controller's own namespace, as serve_controller finds it.
            "namespace": {
                "default": None,
                "shown_default": "the Lease's, $POD_NAMESPACE or the policy's projectNamespace",
            },
            "days": {"default": RENEWED_DAYS},
        },
    )
    group.add_argument(
        "--webhook-cert-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"how often the leader checks (default: {DEFAULT_INTERVAL_S:g})",
    )


def settings_from(args: argparse.Namespace) -> WebhookCertSettings | None:
    """The settings, None with --webhook-certs=off; `CertError` naming a flag that is wrong."""
    if args.webhook_certs == "off":
        return None
    flags = cert_values(args, CERT_SETTINGS, "controller")
    days, renew_before = flags["days"], flags["renew_before"]
    days_flag = flag_name("days", "controller")
    if not 1 <= days <= MAX_DAYS:
        raise CertError(f"{days_flag}: must be 1..{MAX_DAYS}, got {days}")
    if not 0 < renew_before < days:
        # A window as long as the validity would issue a new certificate on every check.
        raise CertError(
            f"{flag_name('renew_before', 'controller')}: must be more than 0 days and less than "
            f"{days_flag} ({days}), got {renew_before:g}"
        )
    if not args.webhook_cert_interval > 0:
        raise CertError(
            f"--webhook-cert-interval: must be more than 0 seconds, got {args.webhook_cert_interval:g}"
        )
    settings = WebhookCertSettings(
        namespace=flags["namespace"],
        service=flags["service"],
        secret=flags["secret"],
        ca_secret=args.webhook_ca_secret,
        configurations=tuple(flags["configurations"] or DEFAULT_CONFIGURATIONS),
        dns=tuple(flags["dns"]),
        ips=tuple(flags["ips"]),
        days=days,
        renew_before=timedelta(days=renew_before),
        interval_s=args.webhook_cert_interval,
        key_type=flags["key_type"],
    )
    try:
        settings.renewer_options(settings.namespace or DEFAULT_NAMESPACE)  # the names, checked now
    except CertError as exc:
        # WebhookIdentity names its field, and `steer certs`' flags in its hints.
        field = str(exc).split(":", 1)[0].split("[", 1)[0]
        setting = _IDENTITY_SETTINGS.get(field, "service")
        text = str(exc)
        for hinted in ("dns", "ips"):
            text = text.replace(
                f"with {flag_name(hinted, 'certs')}", f"with {flag_name(hinted, 'controller')}"
            )
        raise CertError(f"{flag_name(setting, 'controller')}: {text}") from None
    return settings


# WebhookIdentity's fields, by the setting that gives each.
_IDENTITY_SETTINGS = {"service": "service", "namespace": "namespace", "dns": "dns", "ip": "ips"}


class WebhookCertJob:
    """The renewal on the leader, every `interval_s`, its outcome in the metrics and the log."""

    def __init__(
        self,
        renewer: WebhookCertRenewer,
        metrics: ControllerMetrics,
        *,
        is_leader: Callable[[], bool],
        interval_s: float = DEFAULT_INTERVAL_S,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.renewer = renewer
        self.metrics = metrics
        self.is_leader = is_leader
        self._wall = wall
        serving = renewer.options.serving
        self._secret = f"{serving.identity.namespace}/{serving.secret}"
        self._periodic = Periodic("webhook-certs", interval_s, self.run_once)
        for result in ("ok", "error"):  # both series from the start, so increase() sees the first
            metrics.webhook_cert_checks.labels(result=result)

    def run_once(self) -> RenewalReport | None:
        """One check when leading (None otherwise, or when it failed)."""
        m = self.metrics
        if not self.is_leader():
            for gauge in (m.webhook_cert_not_after, m.webhook_ca_bundle_cas):
                gauge.clear()
            m.webhook_cert_last_check.clear()
            return None
        try:
            report = self.renewer.check()
        except (RotateError, CertError, KubeApiError, OSError, ValueError) as exc:
            m.webhook_cert_checks.labels(result="error").inc()
            log.warning("webhook certificate: check failed: %s", exc)
            return None
        except Exception:
            m.webhook_cert_checks.labels(result="error").inc()
            log.exception("webhook certificate: check failed")
            return None
        m.webhook_cert_checks.labels(result="ok").inc()
        secret = self._secret
        m.webhook_cert_last_check.labels(secret=secret).set(self._wall())
        expiries = (("ca", report.ca_expires), ("serving", report.cert_expires))
        for certificate, expires in expiries:
            if expires is not None:
                m.webhook_cert_not_after.labels(secret=secret, certificate=certificate).set(
                    expires.timestamp()
                )
        m.webhook_ca_bundle_cas.labels(secret=secret).set(report.bundle_cas)
        for done, what in (
            (report.ca_created or report.new_ca, "ca"),
            (report.bundle_written, "bundle"),
            (report.issued, "serving"),
        ):
            if done:
                m.webhook_cert_writes.labels(object=what).inc()
        for line in report.done():
            log.info("webhook certificate: %s", line)
        for line in report.problems():
            log.warning("webhook certificate: %s", line)
        return report

    def start(self) -> None:
        self._periodic.start()

    def stop(self) -> None:
        self._periodic.stop()


def webhook_cert_job(
    settings: WebhookCertSettings,
    api: client.ApiClient,
    metrics: ControllerMetrics,
    *,
    namespace: str,
    is_leader: Callable[[], bool],
) -> WebhookCertJob:
    renewer = WebhookCertRenewer(api, settings.renewer_options(namespace))
    return WebhookCertJob(renewer, metrics, is_leader=is_leader, interval_s=settings.interval_s)
