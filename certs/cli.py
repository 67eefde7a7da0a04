"""`steer certs generate`: certificate files for the webhook Service, and its caBundle.

The caBundle alone goes to stdout, so `CA_BUNDLE=$(steer certs generate ...)` works; what was
written goes to stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from certs.files import CA_CERT_FILE, CERT_FILE, KEY_FILE, load_cert_info, write_webhook_certs
from certs.pki import (
    DEFAULT_DAYS,
    KEY_TYPES,
    MAX_DAYS,
    CertError,
    WebhookIdentity,
    issue_webhook_certs,
)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `certs generate` to the `steer` command; the handler is `args.func(args) -> int`."""
    certs = subparsers.add_parser(
        "certs",
        help="make TLS certificates for the admission webhook",
        description="Make TLS certificates for the admission webhook.",
    )
    actions = certs.add_subparsers(dest="certs_command", required=True, metavar="ACTION")
    gen = actions.add_parser(
        "generate",
        help="write a fresh CA and a serving certificate; print the caBundle",
        description=(
            f"Write {CA_CERT_FILE}, {CERT_FILE} and {KEY_FILE} into --out, for the webhook "
            "Service SERVICE in NAMESPACE, and print the base64 caBundle for the "
            "MutatingWebhookConfiguration/ValidatingWebhookConfiguration. The certificate "
            "names SERVICE, SERVICE.NAMESPACE, SERVICE.NAMESPACE.svc and "
            "SERVICE.NAMESPACE.svc.cluster.local, plus every --dns and --ip. A new CA is made "
            "each time and its key is not kept, so after regenerating, update caBundle too. "
            "Files are replaced atomically, so a running server never reads half a file."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    gen.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help=f"directory to write into (created 0700 if missing); {KEY_FILE} is written 0600",
    )
    gen.add_argument(
        "--service",
        required=True,
        metavar="NAME",
        help="name of the webhook's Service (the apiserver dials NAME.NAMESPACE.svc)",
    )
    gen.add_argument(
        "--namespace",
        required=True,
        metavar="NS",
        help="namespace of the webhook's Service",
    )
    gen.add_argument(
        "--dns",
        action="append",
        default=[],
        metavar="NAME",
        help="extra DNS name for the certificate, e.g. localhost (repeatable)",
    )
    gen.add_argument(
        "--ip",
        action="append",
        default=[],
        metavar="IP",
        help="extra IP address for the certificate, e.g. 127.0.0.1 for local runs (repeatable)",
    )
    gen.add_argument(
        "--days",
        type=int,
        default=DEFAULT_DAYS,
        metavar="N",
        help=f"validity of the CA and the certificate, in days (1..{MAX_DAYS})",
    )
    gen.add_argument(
        "--key-type",
        choices=KEY_TYPES,
        default="ecdsa",
        help="ecdsa: P-256 (smaller, faster handshakes); rsa: 2048-bit, for old clients",
    )
    gen.set_defaults(func=_generate)


def _generate(args: argparse.Namespace) -> int:
    try:
        identity = WebhookIdentity(args.service, args.namespace, tuple(args.dns), tuple(args.ip))
        certs = issue_webhook_certs(identity, days=args.days, key_type=args.key_type)
        paths = write_webhook_certs(args.out, certs)
        info = load_cert_info(paths.cert)
    except (CertError, OSError) as exc:
        print(f"steer certs generate: {exc}", file=sys.stderr)
        return 2
    sans = ", ".join((*info.dns_names, *info.ip_addresses))
    print(
        f"wrote {paths.ca_cert}, {paths.cert}, {paths.key}\n"
        f"  names: {sans}\n"
        f"  expires: {info.not_after.isoformat()}  sha256: {info.fingerprint_sha256}\n"
        "caBundle (stdout):",
        file=sys.stderr,
    )
    print(certs.ca_bundle)
    return 0
