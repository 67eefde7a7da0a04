"""The webhook's certificate kept valid from inside the cluster, with no operator machine: one
`check()` reads the CA Secret (certs/ca_secret.py), the serving Secret and the webhooks'
caBundles, asks certs/rollover.py what comes next, and does it with the reads and writes of
`steer certs rotate` (certs/rotate.py). The controller's leader runs it every minute
(controller/certs_renewal.py); each check is idempotent and starts from what the cluster holds, so
a failover, a crash between two writes or a failed write is taken up by the next check.

Writes, in this order: a new CA into the CA Secret (when the kept one nears its end); the
caBundles; when every caBundle has held the CA (an annotation on the CA Secret); the serving
Secret. docs/webhook.md ("Certificates") tells the whole sequence.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from cryptography import x509
from kubernetes import client

from certs.ca_secret import CaSecret
from certs.pki import issue_serving_cert, new_ca
from certs.probe import ServedReport, served_by
from certs.rollover import TrustFacts, ca_renewal_reason, parse_bundle, plan_trust
from certs.rotate import (
    RotateOptions,
    WebhookTrust,
    read_serving_secret,
    read_webhooks,
    set_ca_bundles,
    write_serving_secret,
)
from certs.settings import DEFAULT_CA_SECRET

Prober = Callable[[client.ApiClient, Sequence[WebhookTrust], bytes], ServedReport]


@dataclass(frozen=True)
class RenewerOptions:
    serving: RotateOptions  # the Service, the Secret, the configurations, days, renew_before
    ca_secret: str = DEFAULT_CA_SECRET
    # How long every caBundle holds a new CA before the certificate moves to it.
    settle: timedelta = timedelta(minutes=1)


@dataclass(frozen=True)
class RenewalReport:
    """What one check found and did."""

    ca_expires: datetime
    cert_expires: datetime | None  # the serving certificate in the Secret, after the check
    bundle_cas: int  # CAs every caBundle holds after the check
    ca_created: bool = False  # no CA was kept: one was made
    new_ca: str | None = None  # why the kept CA was replaced
    bundle_written: bool = False
    issued: tuple[str, ...] = ()  # why the serving certificate was issued; empty: kept
    waiting: str | None = None  # why a renewal that is due waits for the bundles
    served: ServedReport | None = None  # asked before the old CAs may leave the bundles
    missing: tuple[str, ...] = ()  # configurations found as neither kind

    @property
    def changed(self) -> bool:
        return self.ca_created or bool(self.new_ca or self.bundle_written or self.issued)

    def done(self) -> list[str]:
        """One line per write, and per renewal that waits its turn, for the log."""
        out = []
        if self.ca_created:
            out.append("made a new CA (none was kept)")
        if self.new_ca:
            out.append(f"made a new CA: {self.new_ca}")
        if self.bundle_written:
            out.append(f"caBundle set to {self.bundle_cas} CA(s) in every webhook")
        if self.issued:
            out.append(f"serving certificate issued because {'; '.join(self.issued)}")
        if self.waiting:
            out.append(f"waiting: {self.waiting}")
        return out

    def problems(self) -> list[str]:
        """What keeps the renewal from finishing, or names something that is not there."""
        out = []
        if self.served is not None and not self.served.verified:
            out.append(f"the old CA stays in caBundle: {self.served.describe()}")
        for name in self.missing:
            out.append(f"{name}: no Mutating/ValidatingWebhookConfiguration of that name")
        return out


class WebhookCertRenewer:
    def __init__(
        self,
        api: client.ApiClient,
        options: RenewerOptions,
        *,
        now: Callable[[], datetime] = lambda: datetime.now(UTC),
        prober: Prober | None = None,
    ) -> None:
        self.api = api
        self.options = options
        self._now = now
        self._prober: Prober = prober or (lambda a, hooks, ca: served_by(a, hooks, ca))

    def check(self) -> RenewalReport:
        """One step of keeping the certificate valid and trusted; `RotateError` (`Conflict`
        when a concurrent writer won) or `CertError` when it cannot."""
        serving = self.options.serving
        identity = serving.identity
        now = self._now()
        store = CaSecret(self.api, identity.namespace, self.options.ca_secret)
        kept, created = store.load_or_create(key_type=serving.key_type, now=now)
        why_new = ca_renewal_reason(kept.ca.certificate, now)
        if why_new:
            # The old CA stays in the bundles while the certificate it signed is served.
            kept = store.replace_ca(kept, new_ca(key_type=serving.key_type, now=now))

        webhooks, missing = read_webhooks(self.api, serving.configurations)
        current = read_serving_secret(self.api, serving)
        bundles = tuple(parse_bundle(w.ca_bundle) for w in webhooks)
        facts = TrustFacts(kept.ca, bundles, current.pems if current else None, kept.trusted_since)
        settle = self.options.settle
        plan = plan_trust(
            facts, identity, now=now, renew_before=serving.renew_before, settle=settle
        )
        served = None
        if plan.ask_served:
            served = self._prober(self.api, webhooks, kept.ca.cert_pem)
            facts = replace(facts, served_by_signer=served.verified)
            plan = plan_trust(
                facts, identity, now=now, renew_before=serving.renew_before, settle=settle
            )

        written = any(bundle != plan.bundle for bundle in bundles)
        if written:
            set_ca_bundles(self.api, plan.bundle_pem, serving)
        if plan.record_trusted_since:
            kept = store.record_trusted_since(kept, now)
        expires = None
        if plan.issue:
            issued = issue_serving_cert(
                kept.ca, identity, days=serving.days, key_type=serving.key_type, now=now
            )
            write_serving_secret(self.api, serving, current, issued)
            expires = x509.load_pem_x509_certificate(issued.cert_pem).not_valid_after_utc
        elif current is not None and current.pems.cert:
            try:
                cert = x509.load_pem_x509_certificate(current.pems.cert)
                expires = cert.not_valid_after_utc
            except ValueError:
                expires = None
        return RenewalReport(
            ca_expires=kept.ca.certificate.not_valid_after_utc,
            cert_expires=expires,
            bundle_cas=len(plan.bundle),
            ca_created=created,
            new_ca=why_new,
            bundle_written=written,
            issued=plan.issue,
            waiting=plan.waiting,
            served=served,
            missing=missing,
        )
