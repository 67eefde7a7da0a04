"""The webhook certificate's settings, each declared once: its default and its flag.

Two command lines set them: `steer certs generate|rotate` (run by hand or by a CronJob) spell
the flags plainly (`--dns`), `steer controller run --webhook-certs=renew` (certs/renewer.py on
the leader) with the controller's webhook prefix (`--webhook-cert-dns`). Each flag below names
both spellings, its type and its help once; `add_cert_flags` adds the ones a command takes and
`cert_values` reads them back by setting, so neither command line repeats a name or a default.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from certs.pki import DEFAULT_DAYS, DEFAULT_KEY_TYPE, KEY_TYPES, MAX_DAYS
from steer.adapters.kube import ArgumentTarget

DEFAULT_NAMESPACE = "kube-steer"
DEFAULT_SERVICE = "steer-webhook"
DEFAULT_SECRET = "steer-webhook-tls"
DEFAULT_CA_SECRET = "steer-webhook-ca"
DEFAULT_CONFIGURATIONS = ("steer-webhook",)
DEFAULT_RENEW_BEFORE_DAYS = 30.0
# The renewal on the leader issues again unattended, so it keeps a certificate short-lived; one
# made by hand (DEFAULT_DAYS) lasts a year.
RENEWED_DAYS = 90

# Which command line a flag is spelled for.
Spelling = Literal["certs", "controller"]


@dataclass(frozen=True)
class CertFlag:
    """One setting's flag: its name under `steer certs` and under `steer controller run`."""

    certs: str
    controller: str
    help: str
    options: Mapping[str, Any] = field(default_factory=dict)
    # What the help says the default is, when the value itself would not say it (None: the
    # value; empty: nothing).
    shown_default: str | None = None

    def name(self, spelling: Spelling) -> str:
        return self.certs if spelling == "certs" else self.controller


# A flag given once per value; none given is none (the help names no default).
_REPEATABLE: Mapping[str, Any] = {"action": "append", "default": []}

CERT_FLAGS: Mapping[str, CertFlag] = {
    "namespace": CertFlag(
        "--namespace",
        "--webhook-namespace",
        "the webhook's namespace",
        {"metavar": "NS", "default": DEFAULT_NAMESPACE},
    ),
    "service": CertFlag(
        "--service",
        "--webhook-service",
        "the webhook's Service (the apiserver dials NAME.NAMESPACE.svc)",
        {"metavar": "NAME", "default": DEFAULT_SERVICE},
    ),
    "secret": CertFlag(
        "--secret",
        "--webhook-secret",
        "the kubernetes.io/tls Secret the webhook mounts",
        {"metavar": "NAME", "default": DEFAULT_SECRET},
    ),
    "configurations": CertFlag(
        "--webhook-config",
        "--webhook-config",
        "Mutating/ValidatingWebhookConfiguration whose caBundle to keep, each kind that exists "
        "by that name; one that does not exist is reported, not an error (repeatable)",
        {"metavar": "NAME", "action": "append"},
        shown_default=" and ".join(DEFAULT_CONFIGURATIONS),
    ),
    "dns": CertFlag(
        "--dns",
        "--webhook-cert-dns",
        "extra DNS name the certificate must carry, e.g. localhost (repeatable)",
        {"metavar": "NAME", **_REPEATABLE},
    ),
    "ips": CertFlag(
        "--ip",
        "--webhook-cert-ip",
        "extra IP address the certificate must carry, e.g. 127.0.0.1 for a local run or the "
        "host of a url clientConfig (repeatable)",
        {"metavar": "IP", **_REPEATABLE},
    ),
    "days": CertFlag(
        "--days",
        "--webhook-cert-days",
        f"validity of a new certificate, in days (1..{MAX_DAYS}; never past the CA's)",
        {"metavar": "N", "type": int, "default": DEFAULT_DAYS},
    ),
    "renew_before": CertFlag(
        "--renew-before",
        "--webhook-cert-renew-before",
        "issue a new certificate when the current one expires within DAYS",
        {"metavar": "DAYS", "type": float, "default": DEFAULT_RENEW_BEFORE_DAYS},
    ),
    "key_type": CertFlag(
        "--key-type",
        "--webhook-cert-key-type",
        "ecdsa: P-256 (smaller, faster handshakes); rsa: 2048-bit, for old clients",
        {"choices": KEY_TYPES, "default": DEFAULT_KEY_TYPE},
    ),
}


def add_cert_flags(
    parser: ArgumentTarget,
    settings: Iterable[str],
    spelling: Spelling,
    *,
    overrides: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Add the flags of `settings` (keys of CERT_FLAGS), in that order, as `spelling` names
    them. `overrides[setting]` replaces options of one (`required`, another `default`, and
    `shown_default` for what the help says of it)."""
    for setting in settings:
        flag = CERT_FLAGS[setting]
        options = {**flag.options, **(overrides or {}).get(setting, {})}
        shown = options.pop("shown_default", flag.shown_default)
        default = options.get("default")
        if shown is None and default not in (None, []):
            shown = f"{default:g}" if isinstance(default, float) else str(default)
        if options.get("required"):
            shown = ""
            options.pop("default", None)
        text = f"{flag.help} (default: {shown})" if shown else flag.help
        parser.add_argument(flag.name(spelling), help=text, **options)


def cert_values(
    args: argparse.Namespace, settings: Iterable[str], spelling: Spelling
) -> dict[str, Any]:
    """The values of `settings` as `add_cert_flags` parsed them, by setting."""
    values = {}
    for setting in settings:
        dest = CERT_FLAGS[setting].name(spelling).lstrip("-").replace("-", "_")
        values[setting] = getattr(args, dest)
    return values


def flag_name(setting: str, spelling: Spelling) -> str:
    """The flag that sets `setting`, for messages that name it."""
    return CERT_FLAGS[setting].name(spelling)
