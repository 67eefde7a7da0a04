"""`steer controller run`: flags in, `ControllerOptions` out, `serve_controller` called."""

from __future__ import annotations

import argparse
import logging
import sys
from typing import Any

from certs.pki import CertError
from controller import admission_sync, certs_renewal
from controller.serve import (
    DEFAULT_LEASE_NAME,
    DEFAULT_LISTEN,
    ControllerOptions,
    serve_controller,
)
from steer.adapters.kube import add_kubeconfig_flag
from steer.adapters.lease import LeaseSettings, add_lease_flags
from steer.adapters.policy_resource import add_policy_source
from steer.adapters.service_logs import add_log_flags, configure_logging
from steer.adapters.service_run import serve_exit_code


def register(subparsers: Any) -> None:
    controller = subparsers.add_parser(
        "controller",
        help="apply the compiled admission policies and renew the webhook's certificate",
        description="The jobs that write admission objects, the webhook's certificate and "
        "caBundle, apart from the network-facing scorer, under their own identity "
        "(docs/security.md).",
    )
    sub = controller.add_subparsers(dest="controller_command", metavar="ACTION", required=True)
    run = sub.add_parser(
        "run",
        help="run the jobs on the Lease holder; serve /healthz, /readyz and /metrics only",
        description="Keep the admission policies compiled from the running policy on the "
        "apiserver (--admission-policies) and the webhook's certificate valid "
        "(--webhook-certs=renew), from the holder of a Lease. Serves /healthz, /readyz and "
        "/metrics on --listen, nothing else.",
    )
    add_policy_source(
        run,
        required=True,
        file_note=" (hot-reloaded)",
        object_note=" (watched; the leader writes its status.admissionPolicies)",
    )
    add_kubeconfig_flag(run)
    run.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"health and metrics address (default: {DEFAULT_LISTEN})",
    )
    add_lease_flags(run, DEFAULT_LEASE_NAME)
    certs_renewal.add_flags(run)
    admission_sync.add_flags(run)
    add_log_flags(run)
    run.set_defaults(func=_cmd_run)


def _split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"--listen: expected HOST:PORT, got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


def _cmd_run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    host, port = _split_listen(args.listen)
    try:
        webhook_certs = certs_renewal.settings_from(args)
        admission_policies = admission_sync.settings_from(args)
    except (CertError, ValueError) as exc:
        print(f"steer controller run: {exc}", file=sys.stderr)
        return 2
    if webhook_certs is None and admission_policies is None:
        logging.getLogger(__name__).warning(
            "neither --webhook-certs=renew nor --admission-policies: nothing to do but serve health"
        )
    options = ControllerOptions(
        policy_file=args.policy or "",
        policy_resource=args.policy_resource,
        kubeconfig=args.kubeconfig,
        host=host,
        port=port,
        lease=LeaseSettings.from_args(args),
        webhook_certs=webhook_certs,
        admission_policies=admission_policies,
    )
    return serve_exit_code(lambda: serve_controller(options))
