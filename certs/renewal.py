"""When the webhook's serving certificate must be issued again, and why. Pure.

`steer certs rotate` and the in-cluster renewal ask this of what the Secret holds now; an empty
answer means the Secret stays as it is (a second run changes nothing). `verified_by` says
whether the apiserver accepts the certificate today under a given caBundle (certs/rollover.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import serialization

from certs.pki import CertificateAuthority, WebhookIdentity


@dataclass(frozen=True)
class ServingPems:
    """The PEM entries of a `kubernetes.io/tls` Secret (None: absent)."""

    cert: bytes | None
    key: bytes | None
    ca: bytes | None


def renewal_reasons(
    held: ServingPems | None,
    ca: CertificateAuthority,
    identity: WebhookIdentity,
    *,
    now: datetime,
    renew_before: timedelta,
) -> tuple[str, ...]:
    """Why a new certificate is needed; empty when `held` may stay. `held` None: no Secret."""
    if held is None:
        return ("the Secret does not exist",)
    if not held.cert:
        return ("the Secret has no tls.crt",)
    try:
        cert = x509.load_pem_x509_certificate(held.cert)
    except ValueError:
        return ("tls.crt is not a PEM certificate",)
    reasons: list[str] = []
    if not _key_matches(held.key, cert):
        reasons.append("tls.key is missing or does not belong to tls.crt")
    if not signed_by(cert, ca.certificate):
        reasons.append(
            f"tls.crt is not signed by the CA ({ca.certificate.subject.rfc4514_string()})"
        )
    expires = cert.not_valid_after_utc
    if expires <= now:
        reasons.append(f"tls.crt expired on {expires:%Y-%m-%d %H:%M} UTC")
    elif expires - now <= renew_before:
        reasons.append(
            f"tls.crt expires on {expires:%Y-%m-%d %H:%M} UTC, within --renew-before "
            f"({_days(renew_before)})"
        )
    missing = missing_names(cert, identity)
    if missing:
        reasons.append(f"tls.crt does not name {', '.join(missing)}")
    if held.ca is not None and held.ca.strip() != ca.cert_pem.strip():
        reasons.append("ca.crt is not the CA")
    return tuple(reasons)


def missing_names(cert: x509.Certificate, identity: WebhookIdentity) -> tuple[str, ...]:
    """The identity's DNS names and IPs that the certificate's subjectAltName lacks."""
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return (*identity.dns_names(), *(str(ip) for ip in identity.ip_addresses()))
    dns = set(san.get_values_for_type(x509.DNSName))
    ips = set(san.get_values_for_type(x509.IPAddress))
    return (
        *(n for n in identity.dns_names() if n not in dns),
        *(str(ip) for ip in identity.ip_addresses() if ip not in ips),
    )


def verified_by(
    held: ServingPems | None,
    cas: Sequence[x509.Certificate],
    identity: WebhookIdentity,
    *,
    now: datetime,
) -> bool:
    """Whether a client trusting `cas` (a caBundle) accepts `held` at `now`: a certificate valid
    now, with its key, naming the Service, signed by one of the CAs, itself valid now."""
    cert = held_certificate(held)
    if cert is None or held is None:
        return False
    if not cert.not_valid_before_utc <= now < cert.not_valid_after_utc:
        return False
    if not _key_matches(held.key, cert) or missing_names(cert, identity):
        return False
    return any(
        ca.not_valid_before_utc <= now < ca.not_valid_after_utc and signed_by(cert, ca)
        for ca in cas
    )


def held_certificate(held: ServingPems | None) -> x509.Certificate | None:
    """The certificate of `held`; None when there is none, or it is not PEM."""
    if held is None or not held.cert:
        return None
    try:
        return x509.load_pem_x509_certificate(held.cert)
    except ValueError:
        return None


def signed_by(cert: x509.Certificate, ca: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _key_matches(key_pem: bytes | None, cert: x509.Certificate) -> bool:
    if not key_pem:
        return False
    try:
        key = serialization.load_pem_private_key(key_pem, password=None)
    except (ValueError, TypeError):
        return False
    return key.public_key() == cert.public_key()


def _days(delta: timedelta) -> str:
    days = delta.total_seconds() / 86400
    return f"{days:g} day" + ("" if days == 1 else "s")


def describe(reasons: Iterable[str]) -> str:
    return "; ".join(reasons)
