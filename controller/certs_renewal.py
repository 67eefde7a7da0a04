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

from certs.pki import KEY_TYPES, MAX_DAYS, CertError, KeyType, WebhookIdentity
from certs.renewer import DEFAULT_CA_SECRET, RenewalReport, RenewerOptions, WebhookCertRenewer
from certs.rotate import DEFAULT_CONFIGURATIONS, RotateError, RotateOptions
from controller.metrics import ControllerMetrics
from steer.adapters.kubejson import KubeApiError
from steer.adapters.periodic import Periodic

log = logging.getLogger(__name__)

DEFAULT_DAYS = 90
DEFAULT_RENEW_BEFORE_DAYS = 30.0
DEFAULT_INTERVAL_S = 60.0


@dataclass(frozen=True)
class WebhookCertSettings:
    """The flags of `--webhook-certs=renew`; `namespace` None: the controller's own (its
    Lease's)."""

    namespace: str | None = None
    service: str = "steer-webhook"
    secret: str = "steer-webhook-tls"
    ca_secret: str = DEFAULT_CA_SECRET
    configurations: tuple[str, ...] = DEFAULT_CONFIGURATIONS
    dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()
    days: int = DEFAULT_DAYS
    renew_before: timedelta = timedelta(days=DEFAULT_RENEW_BEFORE_DAYS)
    interval_s: float = DEFAULT_INTERVAL_S
    key_type: KeyType = "ecdsa"

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
        "--webhook-namespace",
        metavar="NS",
        help="the webhook's namespace (default: the Lease's, $POD_NAMESPACE or the policy's "
        "projectNamespace)",
    )
    group.add_argument(
        "--webhook-service", default="steer-webhook", metavar="NAME", help="the webhook's Service"
    )
    group.add_argument(
        "--webhook-secret",
        default="steer-webhook-tls",
        metavar="NAME",
        help="the kubernetes.io/tls Secret the webhook mounts",
    )
    group.add_argument(
        "--webhook-ca-secret",
        default=DEFAULT_CA_SECRET,
        metavar="NAME",
        help="the Secret holding the CA (ca.crt, ca.key)",
    )
    group.add_argument(
        "--webhook-config",
        action="append",
        metavar="NAME",
        help="Mutating/ValidatingWebhookConfiguration whose caBundle to keep (repeatable; "
        f"default: {' and '.join(DEFAULT_CONFIGURATIONS)})",
    )
    group.add_argument(
        "--webhook-cert-dns",
        action="append",
        default=[],
        metavar="NAME",
        help="extra DNS name the certificate must carry (repeatable)",
    )
    group.add_argument(
        "--webhook-cert-ip",
        action="append",
        default=[],
        metavar="IP",
        help="extra IP address the certificate must carry, e.g. for a url clientConfig "
        "(repeatable)",
    )
    group.add_argument(
        "--webhook-cert-days",
        type=int,
        default=DEFAULT_DAYS,
        metavar="N",
        help=f"validity of a new certificate, in days (default: {DEFAULT_DAYS})",
    )
    group.add_argument(
        "--webhook-cert-renew-before",
        type=float,
        default=DEFAULT_RENEW_BEFORE_DAYS,
        metavar="DAYS",
        help="issue a new certificate when the current one expires within DAYS (default: "
        f"{DEFAULT_RENEW_BEFORE_DAYS:g})",
    )
    group.add_argument(
        "--webhook-cert-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help=f"how often the leader checks (default: {DEFAULT_INTERVAL_S:g})",
    )
    group.add_argument(
        "--webhook-cert-key-type",
        choices=KEY_TYPES,
        default="ecdsa",
        help="ecdsa: P-256; rsa: 2048-bit, for old clients (default: ecdsa)",
    )


def settings_from(args: argparse.Namespace) -> WebhookCertSettings | None:
    """The settings, None with --webhook-certs=off; `CertError` naming a flag that is wrong."""
    if args.webhook_certs == "off":
        return None
    if not 1 <= args.webhook_cert_days <= MAX_DAYS:
        raise CertError(f"--webhook-cert-days: must be 1..{MAX_DAYS}, got {args.webhook_cert_days}")
    if not 0 < args.webhook_cert_renew_before < args.webhook_cert_days:
        # A window as long as the validity would issue a new certificate on every check.
        raise CertError(
            "--webhook-cert-renew-before: must be more than 0 days and less than "
            f"--webhook-cert-days ({args.webhook_cert_days}), got {args.webhook_cert_renew_before:g}"
        )
    if not args.webhook_cert_interval > 0:
        raise CertError(
            f"--webhook-cert-interval: must be more than 0 seconds, got {args.webhook_cert_interval:g}"
        )
    settings = WebhookCertSettings(
        namespace=args.webhook_namespace,
        service=args.webhook_service,
        secret=args.webhook_secret,
        ca_secret=args.webhook_ca_secret,
        configurations=tuple(args.webhook_config or DEFAULT_CONFIGURATIONS),
        dns=tuple(args.webhook_cert_dns),
        ips=tuple(args.webhook_cert_ip),
        days=args.webhook_cert_days,
        renew_before=timedelta(days=args.webhook_cert_renew_before),
        interval_s=args.webhook_cert_interval,
        key_type=args.webhook_cert_key_type,
    )
    try:
        settings.renewer_options(settings.namespace or "kube-steer")  # the names, checked now
    except CertError as exc:
        field = str(exc).split(":", 1)[0].split("[", 1)[0]
        flag = _IDENTITY_FLAGS.get(field, "--webhook-service")
        text = str(exc).replace("with --dns", "with --webhook-cert-dns")
        raise CertError(f"{flag}: {text.replace('with --ip', 'with --webhook-cert-ip')}") from None
    return settings


# WebhookIdentity's fields, by the flag that sets each.
_IDENTITY_FLAGS = {
    "service": "--webhook-service",
    "namespace": "--webhook-namespace",
    "dns": "--webhook-cert-dns",
    "ip": "--webhook-cert-ip",
}


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
