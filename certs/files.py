"""Certificate files: atomic writes, and a summary of a certificate for `/readyz` and logs.

A serving process may reload its certificate at any moment, so every file is written to a
temporary file in the same directory and renamed over the target: a reader sees the old file or
the new one, never half of one. The key is written before the certificate, so a reloader that
watches `tls.crt` finds the matching key already in place.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from certs.pki import CertError, WebhookCerts

CA_CERT_FILE = "ca.crt"
CERT_FILE = "tls.crt"
KEY_FILE = "tls.key"
KEY_MODE = 0o600
CERT_MODE = 0o644


@dataclass(frozen=True)
class CertPaths:
    """Where `write_webhook_certs` put each file (names as in a kubernetes.io/tls Secret)."""

    ca_cert: Path
    cert: Path
    key: Path


@dataclass(frozen=True)
class CertInfo:
    """What an operator needs to identify a serving certificate and see when it expires."""

    subject: str
    issuer: str
    dns_names: tuple[str, ...]
    ip_addresses: tuple[str, ...]
    not_before: datetime
    not_after: datetime
    serial_number: int
    # Same text as `openssl x509 -noout -fingerprint -sha256`, so the two can be compared.
    fingerprint_sha256: str

    def seconds_until_expiry(self, now: datetime) -> float:
        return (self.not_after - now).total_seconds()

    def as_json(self) -> dict[str, object]:
        return {
            "subject": self.subject,
            "issuer": self.issuer,
            "dnsNames": list(self.dns_names),
            "ipAddresses": list(self.ip_addresses),
            "notBefore": self.not_before.isoformat(),
            "notAfter": self.not_after.isoformat(),
            "serialNumber": format(self.serial_number, "x"),
            "fingerprintSHA256": self.fingerprint_sha256,
        }


def atomic_write(path: Path, data: bytes, mode: int) -> None:
    """Replace `path` with `data` in one rename; the file has `mode` from its first byte."""
    directory = path.parent
    # mkstemp creates the file 0600 whatever the umask, so a key is never briefly world-readable.
    fd, tmp_name = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as tmp:
            tmp.write(data)
            tmp.flush()
            os.fchmod(tmp.fileno(), mode)
            os.fsync(tmp.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    # Persist the rename itself, so a crash cannot bring back the old name after a restart.
    dir_fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def write_webhook_certs(out_dir: Path, certs: WebhookCerts) -> CertPaths:
    """Write ca.crt, tls.key then tls.crt into `out_dir` (created 0700 if missing)."""
    out_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    paths = CertPaths(out_dir / CA_CERT_FILE, out_dir / CERT_FILE, out_dir / KEY_FILE)
    atomic_write(paths.ca_cert, certs.ca_cert_pem, CERT_MODE)
    atomic_write(paths.key, certs.key_pem, KEY_MODE)
    atomic_write(paths.cert, certs.cert_pem, CERT_MODE)
    return paths


def load_cert_info(path: Path | str) -> CertInfo:
    """Summarise the first certificate in the PEM file at `path`."""
    path = Path(path)
    try:
        cert = x509.load_pem_x509_certificate(path.read_bytes())
    except FileNotFoundError:
        raise CertError(f"{path}: no such file; run `steer certs generate --out DIR`") from None
    except ValueError as exc:
        raise CertError(f"{path}: not a PEM certificate ({exc})") from None
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        dns_names = tuple(san.get_values_for_type(x509.DNSName))
        ips = tuple(str(ip) for ip in san.get_values_for_type(x509.IPAddress))
    except x509.ExtensionNotFound:
        dns_names, ips = (), ()
    digest = hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest().upper()
    return CertInfo(
        subject=cert.subject.rfc4514_string(),
        issuer=cert.issuer.rfc4514_string(),
        dns_names=dns_names,
        ip_addresses=ips,
        not_before=cert.not_valid_before_utc,
        not_after=cert.not_valid_after_utc,
        serial_number=cert.serial_number,
        fingerprint_sha256=":".join(digest[i : i + 2] for i in range(0, len(digest), 2)),
    )
