"""TLS for the admission webhook: a one-shot CA, a serving certificate, atomic PEM files."""

from certs.files import (
    CertInfo,
    CertPaths,
    atomic_write,
    load_cert_info,
    write_webhook_certs,
)
from certs.pki import (
    CertError,
    KeyType,
    WebhookCerts,
    WebhookIdentity,
    ca_bundle_b64,
    issue_webhook_certs,
)

__all__ = [
    "CertError",
    "CertInfo",
    "CertPaths",
    "KeyType",
    "WebhookCerts",
    "WebhookIdentity",
    "atomic_write",
    "ca_bundle_b64",
    "issue_webhook_certs",
    "load_cert_info",
    "write_webhook_certs",
]
