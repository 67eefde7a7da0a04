"""`steer webhook serve`: run the admission webhook.

Heavy imports (gunicorn, flask, kubernetes) happen when the command runs, not when `steer`
builds its parser, so `steer --help` stays fast and the metrics mode is chosen before any
metric exists.
"""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from steer.adapters.kube import add_kubeconfig_flag
from steer.adapters.policy_resource import add_policy_source
from steer.adapters.service_logs import add_log_flags, configure_logging
from webhook.decision_cache import DEFAULT_ENTRIES as DEFAULT_DECISION_CACHE_ENTRIES
from webhook.decision_cache import DEFAULT_MAX_BYTES as DEFAULT_DECISION_CACHE_BYTES
from webhook.inflight import DEFAULT_BYTES_IN_FLIGHT
from webhook.review import DEFAULT_MAX_BODY_BYTES
from webhook.serve import DEFAULT_LISTEN, DEFAULT_METRICS_LISTEN

log = logging.getLogger(__name__)


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    """Add `webhook serve` to the `steer` command; the handler is `args.func(args) -> int`."""
    webhook = subparsers.add_parser(
        "webhook",
        help="run the mutating/validating admission webhook",
        description="The kube-steer admission webhook for Pods.",
    )
    actions = webhook.add_subparsers(dest="webhook_command", required=True, metavar="ACTION")
    serve = actions.add_parser(
        "serve",
        help="serve /mutate, /validate, /healthz, /readyz over TLS; /metrics, /status on plain HTTP",
        description=(
            "Serve the admission webhook over TLS with gunicorn (gevent workers). POST /mutate "
            "and /validate (and /validate/security, the security taint rules alone) take "
            "admission.k8s.io/v1 AdmissionReviews for Pods. Namespace labels come from a watch "
            "kept in memory, the policy is hot-reloaded, and the certificate files are re-read "
            "when they change, so neither a policy edit nor a rotated Secret needs a restart."
        ),
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    add_policy_source(
        serve,
        required=True,
        file_note="",
        object_note=" (each worker watches it; a bad edit keeps the last good policy)",
    )
    serve.add_argument("--cert", required=True, metavar="FILE", help="serving certificate (PEM)")
    serve.add_argument("--key", required=True, metavar="FILE", help="private key of --cert (PEM)")
    serve.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help="TLS address")
    serve.add_argument(
        "--metrics-listen",
        default=DEFAULT_METRICS_LISTEN,
        metavar="HOST:PORT|PORT",
        help="plain-HTTP address of /metrics and /status (each worker's readiness detail: "
        "policy version and errors, namespace cache, certificate); a bare PORT binds the host "
        "of --listen; 'off' disables it",
    )
    add_kubeconfig_flag(serve, "for the namespace and SteeringPolicy watches")
    serve.add_argument(
        "--workers", type=int, default=2, metavar="N", help="gunicorn worker processes"
    )
    serve.add_argument(
        "--threads",
        type=int,
        default=None,
        metavar="N",
        help="no longer used (each connection is served by its own greenlet); accepted so "
        "that existing manifests keep working, with a warning",
    )
    serve.add_argument(
        "--read-timeout-seconds",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="how long a connection may take from its first byte to a finished TLS handshake, "
        "and each request from its first byte to its last; slower ones are closed (and logged, "
        "and counted in steer_webhook_connections_timed_out_total)",
    )
    serve.add_argument(
        "--max-connections",
        type=int,
        default=256,
        metavar="N",
        help="open connections per worker; past it, those waiting longest are closed",
    )
    serve.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help="larger request bodies, sized or chunked, get HTTP 413 and are not read into memory",
    )
    serve.add_argument(
        "--max-bytes-in-flight",
        type=int,
        default=DEFAULT_BYTES_IN_FLIGHT,
        metavar="N",
        help="request bodies each worker reads and answers at once, counted by their declared "
        "size (a chunked one as --max-body-bytes); one that does not fit is dropped unread and "
        "answered 429 with Retry-After. Bodies over 64 KiB may use 3/4 of it, so the rest "
        "stays for the apiserver's usual reviews",
    )
    serve.add_argument(
        "--decision-cache-entries",
        type=int,
        default=DEFAULT_DECISION_CACHE_ENTRIES,
        metavar="N",
        help="pod templates whose mutation verdict each worker keeps, so the pods of a "
        "scale-up are decided once (least recently used out first); 0 decides every pod",
    )
    serve.add_argument(
        "--decision-cache-bytes",
        type=int,
        default=DEFAULT_DECISION_CACHE_BYTES,
        metavar="N",
        help="what those verdicts may weigh together per worker (each its patch and warnings; "
        "the key is a digest, never the pod; reviews over 256 KiB are not kept); 0 keeps none",
    )
    serve.add_argument(
        "--namespace-sync-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long a starting worker waits for the first namespace list",
    )
    add_log_flags(serve)
    serve.set_defaults(func=_serve)


def _serve(args: argparse.Namespace) -> int:
    from certs.pki import CertError
    from steer.adapters.kube import KubeConfigError
    from steer.core.policy import PolicyError
    from webhook.serve import ServeError, ServerSettings, WebhookOptions, serve_webhook

    configure_logging(args.log_level, args.log_format)
    if args.threads is not None:
        log.warning(
            "--threads %d is ignored: each connection is served by its own greenlet, and the "
            "flag can be dropped",
            args.threads,
        )
    options = WebhookOptions(
        policy_file=args.policy or "",
        policy_resource=args.policy_resource,
        server=ServerSettings(
            listen=args.listen,
            cert_file=args.cert,
            key_file=args.key,
            workers=args.workers,
            log_level=args.log_level,
            log_format=args.log_format,
            read_timeout_seconds=args.read_timeout_seconds,
            max_connections=args.max_connections,
            max_body_bytes=args.max_body_bytes,
            max_bytes_in_flight=args.max_bytes_in_flight,
        ),
        metrics_listen=None if args.metrics_listen == "off" else args.metrics_listen,
        kubeconfig=args.kubeconfig,
        namespace_sync_timeout=args.namespace_sync_timeout,
        decision_cache_entries=args.decision_cache_entries,
        decision_cache_bytes=args.decision_cache_bytes,
    )
    try:
        serve_webhook(options)
    except PolicyError as exc:
        where = args.policy or f"SteeringPolicy {args.policy_resource}"
        print(f"{where}: invalid policy:", file=sys.stderr)
        for issue in exc.issues:
            print(f"  {issue}", file=sys.stderr)
        return 2
    except (ServeError, KubeConfigError, CertError) as exc:
        print(f"steer webhook serve: {exc}", file=sys.stderr)
        return 2
    return 0
