"""Issue the webhook's serving certificate and the CA the apiserver trusts it by.

Pure cryptography, no files: `issue_webhook_certs` returns PEM bytes, `certs.files` writes them.
`issue_cert` is the one leaf issuer underneath: a server certificate for given names, or a
client certificate for a Kubernetes user and its groups.

The kube-apiserver calls a webhook Service at `https://SERVICE.NAMESPACE.svc:PORT` and verifies
the certificate with Go's crypto/x509, which ignores the Common Name and matches only the
subjectAltName, and requires the serverAuth extended key usage. The CA (`CertificateAuthority`,
kept by `certs.store`) outlives its serving certificates: a renewal signs a new certificate
with the same CA, so the `caBundle` the apiserver holds stays valid.
"""

from __future__ import annotations

import base64
import ipaddress
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Literal, get_args

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from steer.core.k8s_names import is_dns1123_subdomain

KeyType = Literal["ecdsa", "rsa"]
KEY_TYPES: tuple[str, ...] = get_args(KeyType)
DEFAULT_KEY_TYPE: KeyType = "ecdsa"

DEFAULT_DAYS = 365
CA_DAYS = 3650
MAX_DAYS = 3650
RSA_KEY_BITS = 2048
# Backdate notBefore so a node whose clock is a little behind still accepts a fresh certificate.
CLOCK_SKEW = timedelta(minutes=5)

# A Service name is an RFC 1035 label (must start with a letter); a namespace an RFC 1123 label.
_DNS1035_LABEL_RE = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_DNS1123_LABEL_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_MAX = 63


class CertError(ValueError):
    """A certificate request that cannot be honoured; the message names the field and the fix."""


PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class WebhookIdentity:
    """Who the serving certificate speaks for: the webhook Service plus local names and IPs."""

    service: str
    namespace: str
    extra_dns: tuple[str, ...] = ()
    ips: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _check_label("service", self.service, _DNS1035_LABEL_RE, "an RFC 1035 label")
        _check_label("namespace", self.namespace, _DNS1123_LABEL_RE, "an RFC 1123 label")
        for i, name in enumerate(self.extra_dns):
            bare = name[2:] if name.startswith("*.") else name
            if not is_dns1123_subdomain(bare):
                raise CertError(
                    f"dns[{i}]: {name!r} is not a DNS name (lower-case letters, digits, '-' and "
                    "'.', optionally starting with '*.'); pass an IP address with --ip instead"
                )
        for i, ip in enumerate(self.ips):
            try:
                ipaddress.ip_address(ip)
            except ValueError:
                raise CertError(
                    f"ip[{i}]: {ip!r} is not an IPv4 or IPv6 address; pass host names with --dns"
                ) from None

    def dns_names(self) -> tuple[str, ...]:
        """Every DNS SAN, in-cluster forms first, duplicates removed, order kept."""
        svc, ns = self.service, self.namespace
        names = (svc, f"{svc}.{ns}", f"{svc}.{ns}.svc", f"{svc}.{ns}.svc.cluster.local")
        return tuple(dict.fromkeys((*names, *self.extra_dns)))

    def ip_addresses(self) -> tuple[ipaddress.IPv4Address | ipaddress.IPv6Address, ...]:
        return tuple(dict.fromkeys(ipaddress.ip_address(ip) for ip in self.ips))

    @property
    def service_host(self) -> str:
        """The name the kube-apiserver dials for a `service:` webhook clientConfig."""
        return f"{self.service}.{self.namespace}.svc"


@dataclass(frozen=True)
class WebhookCerts:
    """PEM bytes for the three files a webhook deployment needs; the CA key is not among them."""

    ca_cert_pem: bytes
    cert_pem: bytes
    key_pem: bytes = field(repr=False)

    @property
    def ca_bundle(self) -> str:
        """The value for `webhooks[].clientConfig.caBundle`: base64 of the CA's PEM."""
        return ca_bundle_b64(self.ca_cert_pem)


def ca_bundle_b64(ca_pem: bytes) -> str:
    return base64.b64encode(ca_pem).decode("ascii")


@dataclass(frozen=True)
class CertificateAuthority:
    """The CA the apiserver trusts the webhook by (its PEM is the `caBundle`). Kept, so a
    renewed serving certificate verifies against the bundle already in place."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)

    @property
    def certificate(self) -> x509.Certificate:
        return x509.load_pem_x509_certificate(self.cert_pem)

    def private_key(self) -> PrivateKey:
        key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey):
            raise CertError("the CA key is neither ECDSA nor RSA")
        return key

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """Check that the two belong together and the certificate is a CA."""
        ca = cls(cert_pem, key_pem)
        try:
            cert = ca.certificate
            key = ca.private_key()
        except ValueError as exc:
            raise CertError(f"the CA files are not PEM ({exc})") from None
        if cert.public_key() != key.public_key():
            raise CertError("the CA key does not belong to the CA certificate")
        try:
            constraints = cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            constraints = None
        if constraints is None or not constraints.ca:
            raise CertError("the CA certificate is not a CA (basicConstraints ca: false)")
        return ca


def new_ca(
    *, days: int = CA_DAYS, key_type: KeyType = DEFAULT_KEY_TYPE, now: datetime | None = None
) -> CertificateAuthority:
    """A self-signed CA that signs leaf certificates only (pathlen 0)."""
    if not 1 <= days <= MAX_DAYS:
        raise CertError(f"days: must be 1..{MAX_DAYS}, got {days}")
    if key_type not in KEY_TYPES:
        raise CertError(f"key_type: must be one of {', '.join(KEY_TYPES)}, got {key_type!r}")
    start = (now or datetime.now(UTC)) - CLOCK_SKEW
    key = _new_key(key_type)
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "kube-steer"),
            x509.NameAttribute(
                NameOID.COMMON_NAME, f"kube-steer webhook CA {start:%Y-%m-%d %H:%M:%S}"
            ),
        ]
    )
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + CLOCK_SKEW + timedelta(days=days))
        # pathlen 0: this CA signs leaf certificates only.
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True, key_encipherment=False), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key)
    )


@dataclass(frozen=True)
class IssuedCert:
    """A leaf certificate and its private key, PEM."""

    cert_pem: bytes
    key_pem: bytes = field(repr=False)


def issue_cert(
    ca: CertificateAuthority,
    common_name: str,
    *,
    purpose: Literal["server", "client"] = "server",
    organizations: Sequence[str] = (),
    dns_names: Sequence[str] = (),
    ips: Sequence[str | ipaddress.IPv4Address | ipaddress.IPv6Address] = (),
    days: int = DEFAULT_DAYS,
    key_type: KeyType = DEFAULT_KEY_TYPE,
    now: datetime | None = None,
) -> IssuedCert:
    """A leaf certificate signed by `ca`, valid for `days` (never past the CA's own expiry: a
    chain is only as valid as its shortest link). A server certificate is verified by its
    subjectAltNames (`dns_names`, `ips`); a client certificate names a Kubernetes user by its
    Common Name and the user's groups by its Organizations."""
    if not 1 <= days <= MAX_DAYS:
        raise CertError(f"days: must be 1..{MAX_DAYS}, got {days}")
    if key_type not in KEY_TYPES:
        raise CertError(f"key_type: must be one of {', '.join(KEY_TYPES)}, got {key_type!r}")
    ca_cert = ca.certificate
    ca_key = ca.private_key()
    start = (now or datetime.now(UTC)) - CLOCK_SKEW
    end = min(start + CLOCK_SKEW + timedelta(days=days), ca_cert.not_valid_after_utc)
    if end <= start + CLOCK_SKEW:
        raise CertError(
            f"the CA expired on {ca_cert.not_valid_after_utc:%Y-%m-%d}: move its directory "
            "away to make a new one (then every caBundle changes)"
        )
    ca_ski = x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key())
    key = _new_key(key_type)
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usage = (
        ExtendedKeyUsageOID.SERVER_AUTH if purpose == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        # RSA key exchange encrypts with the certificate key; ECDSA keys only ever sign.
        .add_extension(
            _key_usage(cert_sign=False, key_encipherment=key_type == "rsa"), critical=True
        )
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_ski),
            critical=False,
        )
    )
    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in dns_names]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    if sans:  # an empty subjectAltName extension is invalid (RFC 5280 4.2.1.6)
        builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
    cert = builder.sign(ca_key, hashes.SHA256())
    return IssuedCert(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def issue_serving_cert(
    ca: CertificateAuthority,
    identity: WebhookIdentity,
    *,
    days: int = DEFAULT_DAYS,
    key_type: KeyType = DEFAULT_KEY_TYPE,
    now: datetime | None = None,
) -> WebhookCerts:
    """A serverAuth certificate for `identity` signed by `ca`, valid for `days` (never past
    the CA's own expiry)."""
    leaf = issue_cert(
        ca,
        identity.service_host,
        dns_names=identity.dns_names(),
        ips=identity.ip_addresses(),
        days=days,
        key_type=key_type,
        now=now,
    )
    return WebhookCerts(ca_cert_pem=ca.cert_pem, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)


def issue_webhook_certs(
    identity: WebhookIdentity,
    *,
    days: int = DEFAULT_DAYS,
    key_type: KeyType = DEFAULT_KEY_TYPE,
    now: datetime | None = None,
) -> WebhookCerts:
    """A throwaway CA and a serverAuth certificate for `identity`, both valid for `days`; the
    CA key is dropped (tests and local runs; `steer certs` keeps its CA in a `CaStore`)."""
    ca = new_ca(days=days, key_type=key_type, now=now)
    return issue_serving_cert(ca, identity, days=days, key_type=key_type, now=now)


def _key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _new_key(key_type: KeyType) -> PrivateKey:
    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=RSA_KEY_BITS)
    return ec.generate_private_key(ec.SECP256R1())


def _key_usage(*, cert_sign: bool, key_encipherment: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=key_encipherment,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _check_label(field_name: str, value: str, pattern: re.Pattern[str], kind: str) -> None:
    if len(value) > _LABEL_MAX or not pattern.match(value):
        raise CertError(
            f"{field_name}: {value!r} must be {kind}: at most {_LABEL_MAX} lower-case letters, "
            "digits or '-', starting and ending with a letter or digit"
            + (" (a Service name must start with a letter)" if field_name == "service" else "")
        )
