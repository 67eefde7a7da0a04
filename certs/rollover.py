"""Which CAs the apiserver must trust for the webhook, and when the serving certificate may move
to a new CA, so that no admission call fails on TLS while it changes. Pure: the in-cluster
renewal (certs/renewer.py) reads the cluster, asks `plan_trust`, and writes what it answers.

The apiserver verifies the webhook's certificate against each webhook's `caBundle`, which it
loads from a watch; each webhook pod serves what its mounted Secret held when its kubelet last
synced the volume (a minute or more after a write, each pod on its own schedule). Hence:

- **Same CA** (every renewal but a CA change): the new certificate is signed by the CA every
  bundle already holds, so old and new both verify while the pods pick the new one up. The
  bundles are not written.
- **A new CA** (the kept CA nears its end, a first run where another CA signed the certificate,
  or the CA Secret replaced by hand):
  1. the new CA is added to every caBundle, beside the CAs there that are still valid; the
     serving certificate stays (an old CA still verifies it);
  2. once every bundle has held the new CA for `settle` (time for every apiserver's watch to
     load it), the serving certificate is issued under the new CA: whichever certificate a pod
     serves, one CA of the bundle verifies it;
  3. the old CAs leave the bundles only once every endpoint of the webhook has been seen
     serving a certificate the new CA alone verifies (`served_by_signer`: a TLS handshake with
     each, checked as the apiserver checks it, certs/probe.py). Until then they stay, which
     costs nothing.
- A CA past its notAfter verifies nothing: it leaves the bundles at once.
- A serving certificate that does not work now (missing, expired, wrong key or names, signed by
  no CA of a bundle) is issued at once, with the bundle change if any: waiting would keep
  nothing working.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from certs.pki import CertificateAuthority, WebhookIdentity
from certs.renewal import (
    ServingPems,
    held_certificate,
    renewal_reasons,
    signed_by,
    verified_by,
)

# A CA this close to its end is replaced (certs/pki.py makes CAs for 10 years): far longer than
# any serving certificate, so none is ever cut short by its CA, and a rollover stuck for months
# still finishes before the old CA expires.
CA_RENEW_BEFORE = timedelta(days=365)


@dataclass(frozen=True)
class TrustFacts:
    """What the cluster holds now, as the renewal read it."""

    signer: CertificateAuthority  # the CA new serving certificates are signed by
    bundles: tuple[tuple[x509.Certificate, ...], ...]  # each webhook's caBundle, parsed
    held: ServingPems | None  # the serving Secret's entries; None: no Secret
    signer_trusted_since: datetime | None  # when every bundle was first seen holding the signer
    served_by_signer: bool | None = None  # every endpoint serves a certificate of the signer


@dataclass(frozen=True)
class TrustPlan:
    """What to write, in this order: the bundles, the trusted-since record, the Secret."""

    bundle: tuple[x509.Certificate, ...]  # what every webhook's caBundle must hold
    issue: tuple[str, ...] = ()  # why the serving certificate is issued now; empty: kept
    waiting: str | None = None  # why a renewal that is due waits for the bundles
    record_trusted_since: bool = False  # record now as when every bundle held the signer
    ask_served: bool = False  # the old CAs may go once every endpoint serves the signer's
    retiring: tuple[x509.Certificate, ...] = ()  # CAs kept in the bundle beside the signer

    @property
    def bundle_pem(self) -> bytes:
        return b"".join(ca.public_bytes(Encoding.PEM) for ca in self.bundle)


def parse_bundle(pem: bytes) -> tuple[x509.Certificate, ...]:
    """The certificates of a caBundle (PEM); none when it is empty or does not parse."""
    if not pem.strip():
        return ()
    try:
        return tuple(x509.load_pem_x509_certificates(pem))
    except ValueError:
        return ()


def ca_renewal_reason(
    ca: x509.Certificate, now: datetime, renew_before: timedelta = CA_RENEW_BEFORE
) -> str | None:
    """Why the kept CA must be replaced by a new one, or None."""
    expires = ca.not_valid_after_utc
    if expires - now <= renew_before:
        days = renew_before.total_seconds() / 86400
        return f"the CA expires on {expires:%Y-%m-%d %H:%M} UTC, within {days:g} days"
    return None


def plan_trust(
    facts: TrustFacts,
    identity: WebhookIdentity,
    *,
    now: datetime,
    renew_before: timedelta,
    settle: timedelta,
) -> TrustPlan:
    """The next step of keeping the webhook trusted (the module's docstring says why)."""
    signer = facts.signer.certificate
    others = _still_valid_others(facts.bundles, signer, now)
    overlap = (*others, signer)
    held = facts.held
    reasons = renewal_reasons(held, facts.signer, identity, now=now, renew_before=renew_before)
    works = held is not None and all(
        verified_by(held, bundle, identity, now=now) for bundle in facts.bundles
    )
    moves_ca = not _signed_by_signer(held, signer)

    if not all(signer in bundle for bundle in facts.bundles):
        # Step 1: the signer goes into every bundle first.
        if reasons and works:
            waiting = (
                f"{'; '.join(reasons)}: the new CA goes into caBundle first, the certificate "
                f"under it once every caBundle has held it for {_span(settle)}"
            )
            return TrustPlan(overlap, (), waiting, record_trusted_since=True, retiring=others)
        return TrustPlan(overlap, reasons, record_trusted_since=True, retiring=others)

    since = facts.signer_trusted_since
    record = since is None
    if reasons and works and moves_ca and (since is None or now - since < settle):
        # Step 2 waits until the bundles have settled.
        at = f"at {since + settle:%H:%M:%S} UTC" if since is not None else "after " + _span(settle)
        waiting = f"{'; '.join(reasons)}: the certificate moves to the new CA {at}"
        return TrustPlan(overlap, (), waiting, record_trusted_since=record, retiring=others)
    if not others:
        return TrustPlan((signer,), reasons, record_trusted_since=record)
    if reasons or moves_ca:
        # Step 2 now (or the Secret is not the signer's yet): the old CAs still verify what
        # the pods serve.
        return TrustPlan(overlap, reasons, record_trusted_since=record, retiring=others)
    if facts.served_by_signer:
        return TrustPlan((signer,), record_trusted_since=record)  # step 3
    return TrustPlan(
        overlap,
        record_trusted_since=record,
        ask_served=facts.served_by_signer is None,
        retiring=others,
    )


def _still_valid_others(
    bundles: tuple[tuple[x509.Certificate, ...], ...], signer: x509.Certificate, now: datetime
) -> tuple[x509.Certificate, ...]:
    """The bundles' CAs other than the signer and not expired, in order, each once."""
    seen: list[x509.Certificate] = []
    for bundle in bundles:
        for ca in bundle:
            if ca != signer and ca not in seen and ca.not_valid_after_utc > now:
                seen.append(ca)
    return tuple(seen)


def _signed_by_signer(held: ServingPems | None, signer: x509.Certificate) -> bool:
    cert = held_certificate(held)
    return cert is not None and signed_by(cert, signer)


def _span(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    if seconds >= 3600 and seconds % 3600 == 0:
        return f"{seconds / 3600:g}h"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"
