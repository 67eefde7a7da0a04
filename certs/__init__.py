"""TLS for the admission webhook: a kept CA, serving certificates it signs, atomic PEM files,
and `steer certs rotate` (certs.rotate) keeping the cluster's Secret and caBundle current. The
certificate's defaults and flags, for `steer certs` and the controller's renewal alike, are
declared once in certs.settings."""

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
