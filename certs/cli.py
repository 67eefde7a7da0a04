"""`steer certs generate|rotate`: the webhook's serving certificate, signed by a kept CA.

`generate` writes files for local runs and manual installs; the caBundle alone goes to
stdout, so `CA_BUNDLE=$(steer certs generate ...)` works, and what was written goes to stderr.
`rotate` keeps the certificate in the cluster valid (certs/rotate.py). Both sign with the CA
in --ca-dir (default $XDG_CONFIG_HOME/kube-steer/ca), made there the first time.
"""

from __future__ import annotations

import argparse
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from certs.files import CA_CERT_FILE, CERT_FILE, KEY_FILE, load_cert_info, write_webhook_certs
from certs.pki import CertError, WebhookIdentity, issue_serving_cert
from certs.rotate import RotateError, RotateOptions, RotateReport, rotate
from certs.settings import DEFAULT_CONFIGURATIONS, add_cert_flags, cert_values
from certs.store import CaStore, default_ca_dir, unsafe_key_location
from steer.adapters.kube import KubeConfigError, add_kubeconfig_flag, make_api_client

GENERATE_SETTINGS = ("service", "namespace", "dns", "ips", "days", "key_type")
ROTATE_SETTINGS = (
    "namespace",
    "service",
    "secret",
    "renew_before",
    "configurations",
    "dns",
    "ips",
    "days",
    "key_type",
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
        help="write a serving certificate signed by the kept CA; print the caBundle",
        description=(
            f"Write {CA_CERT_FILE}, {CERT_FILE} and {KEY_FILE} into --out, for the webhook "
            "Service SERVICE in NAMESPACE, and print the base64 caBundle for the "
            "MutatingWebhookConfiguration/ValidatingWebhookConfiguration. The certificate "
            "names SERVICE, SERVICE.NAMESPACE, SERVICE.NAMESPACE.svc and "
            "SERVICE.NAMESPACE.svc.cluster.local, plus every --dns and --ip. It is signed by the "
            "CA in --ca-dir (made there the first time, and kept: regenerating leaves the "
            "caBundle as it is). --out must not be a Python package folder or a directory git "
            "would not ignore. Files are replaced atomically, so a running server never reads "
            "half a file."
        ),
    )
    gen.add_argument(
        "--out",
        required=True,
        type=Path,
        metavar="DIR",
        help=f"directory to write into (created 0700 if missing); {KEY_FILE} is written 0600",
    )
    add_cert_flags(
        gen,
        GENERATE_SETTINGS,
        "certs",
        overrides={"service": {"required": True}, "namespace": {"required": True}},
    )
    _ca_dir_arg(gen)
    gen.set_defaults(func=_generate)

    rot = actions.add_parser(
        "rotate",
        help="renew the webhook's certificate Secret when needed and patch caBundle",
        description=(
            "Keep the webhook's serving certificate valid, idempotently: issue it again (signed "
            "by the CA in --ca-dir, made there the first time) when the Secret is missing, or "
            "its certificate expires within --renew-before days, is not signed by the CA, "
            "lacks one of the Service's DNS names, or its key does not match; write it as a "
            "kubernetes.io/tls Secret (created, or replaced keeping its labels and "
            "annotations); and set the CA as caBundle of every webhook in the named "
            "Mutating/ValidatingWebhookConfigurations. A second run changes nothing and says "
            "so. Run it on a schedule (or before --renew-before runs out)."
        ),
    )
    add_cert_flags(rot, ROTATE_SETTINGS, "certs")
    add_kubeconfig_flag(rot)
    _ca_dir_arg(rot)
    rot.add_argument("--dry-run", action="store_true", help="say what would change, write nothing")
    rot.set_defaults(func=_rotate)


def _ca_dir_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--ca-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="where the CA is kept (ca.crt, ca.key: files 0600, directory 0700); default "
        "$XDG_CONFIG_HOME/kube-steer/ca, else ~/.config/kube-steer/ca",
    )


def _identity(flags: dict[str, Any]) -> WebhookIdentity:
    return WebhookIdentity(
        flags["service"], flags["namespace"], tuple(flags["dns"]), tuple(flags["ips"])
    )


def _store(args: argparse.Namespace) -> CaStore:
    return CaStore(args.ca_dir if args.ca_dir is not None else default_ca_dir())


def _generate(args: argparse.Namespace) -> int:
    try:
        flags = cert_values(args, GENERATE_SETTINGS, "certs")
        identity = _identity(flags)
        problem = unsafe_key_location(args.out, KEY_FILE)
        if problem:
            raise CertError(f"--out: {problem}")
        store = _store(args)
        ca, created = store.load_or_create(key_type=flags["key_type"])
        certs = issue_serving_cert(ca, identity, days=flags["days"], key_type=flags["key_type"])
        paths = write_webhook_certs(args.out, certs)
        info = load_cert_info(paths.cert)
    except (CertError, OSError) as exc:
        print(f"steer certs generate: {exc}", file=sys.stderr)
        return 2
    sans = ", ".join((*info.dns_names, *info.ip_addresses))
    print(
        f"{'made a new CA in' if created else 'signed with the CA in'} {store.directory}\n"
        f"wrote {paths.ca_cert}, {paths.cert}, {paths.key}\n"
        f"  names: {sans}\n"
        f"  expires: {info.not_after.isoformat()}  sha256: {info.fingerprint_sha256}\n"
        "caBundle (stdout):",
        file=sys.stderr,
    )
    print(certs.ca_bundle)
    return 0


def _rotate(args: argparse.Namespace) -> int:
    try:
        flags = cert_values(args, ROTATE_SETTINGS, "certs")
        days, renew_before = flags["days"], flags["renew_before"]
        if not 0 <= renew_before < days:
            # A window as long as the validity would issue a new certificate on every run.
            raise CertError(
                f"--renew-before: must be 0 or more days and less than --days ({days}), "
                f"got {renew_before:g}"
            )
        options = RotateOptions(
            identity=_identity(flags),
            secret=flags["secret"],
            renew_before=timedelta(days=renew_before),
            configurations=tuple(flags["configurations"] or DEFAULT_CONFIGURATIONS),
            days=days,
            key_type=flags["key_type"],
            dry_run=args.dry_run,
        )
        store = _store(args)
        report = rotate(make_api_client(args.kubeconfig), store, options)
    except (CertError, RotateError, KubeConfigError, OSError) as exc:
        print(f"steer certs rotate: {exc}", file=sys.stderr)
        return 2
    _print_rotation(args, store, report)
    return 0


def _print_rotation(args: argparse.Namespace, store: CaStore, report: RotateReport) -> None:
    would = "would be " if report.dry_run else ""
    secret = f"Secret {args.namespace}/{args.secret}"
    if report.ca_created:
        print(f"CA: {'would make' if report.dry_run else 'made'} a new CA in {store.directory}")
    else:
        print(f"CA: {store.directory} (expires {report.ca_expires:%Y-%m-%d})")
    expires = f"{report.cert_expires:%Y-%m-%d %H:%M} UTC" if report.cert_expires else "-"
    if report.reasons:
        print(f"{secret}: {would}{report.secret_action}, certificate valid until {expires}")
        for reason in report.reasons:
            print(f"  because {reason}")
    else:
        print(f"{secret}: current, valid until {expires}")
    for change in report.bundles:
        where = f"{change.kind} {change.name}"
        if change.patched:
            print(f"{where}: caBundle {would}set in {change.patched} of {change.webhooks} webhooks")
        else:
            print(f"{where}: caBundle current in all {change.webhooks} webhooks")
    for name in report.missing:
        print(f"{name}: no MutatingWebhookConfiguration or ValidatingWebhookConfiguration; skipped")
    for note in report.notes:
        print(f"warning: {note}", file=sys.stderr)
    if not report.changed:
        print("nothing to do: certificate, Secret and caBundles are current")
    elif report.dry_run:
        print("dry run: nothing written")
