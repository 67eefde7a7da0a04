"""`steer controller run`: the admission policies and the webhook's certificate, kept by the
leader of the Lease `steer-controller`, and an HTTP listener that serves `/healthz`, `/readyz`
and `/metrics` (the jobs' outcomes, no pod, node or tenant data) and nothing else.

The CLI (`controller.cli`) parses flags into `ControllerOptions` and calls `serve_controller`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client import make_wsgi_app

from controller.admission_sync import AdmissionPolicySync, AdmissionSyncSettings
from controller.certs_renewal import WebhookCertSettings, webhook_cert_job
from controller.metrics import ControllerMetrics
from controller.policy_status import AdmissionStatusWriter
from steer.adapters.http_server import HttpServer
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.adapters.lease import LeaseSettings
from steer.adapters.policy_file import PolicyWatcher
from steer.adapters.policy_resource import PolicyResourceWatcher
from steer.adapters.service_run import stop_on_signals

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME = "steer-controller"  # manifests/controller/controller.yaml grants it by name
DEFAULT_LISTEN = "0.0.0.0:8081"


@dataclass(frozen=True)
class ControllerOptions:
    policy_file: str = ""
    policy_resource: str | None = None
    kubeconfig: str | None = None
    host: str = "0.0.0.0"
    port: int = 8081
    lease: LeaseSettings = field(default_factory=lambda: LeaseSettings(DEFAULT_LEASE_NAME))
    # --webhook-certs=renew: the leader keeps the webhook's certificate valid (None: off).
    webhook_certs: WebhookCertSettings | None = None
    # --admission-policies=validating|all: the leader applies the compiled admission policies.
    admission_policies: AdmissionSyncSettings | None = None


def health_app(
    metrics: ControllerMetrics, ready: Callable[[], bool]
) -> Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]:
    """The listener's WSGI app: `/healthz`, `/readyz` (the policy is loaded and the threads
    run), `/metrics`; 404 for anything else."""
    exposition = make_wsgi_app(metrics.registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return exposition(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz" or (path == "/readyz" and ready()):
            start_response("200 OK", [("Content-Type", "text/plain")])
            return [b"ok\n"]
        if path == "/readyz":
            start_response("503 Service Unavailable", [("Content-Type", "text/plain")])
            return [b"not ready\n"]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"not found\n"]

    return app


def serve_controller(options: ControllerOptions) -> None:
    """Run until SIGTERM/SIGINT; `PolicyError`/`KubeConfigError` when it cannot start."""
    metrics = ControllerMetrics()
    watcher: PolicyWatcher | PolicyResourceWatcher
    if options.policy_resource:
        watcher = PolicyResourceWatcher(
            make_api_client(options.kubeconfig), options.policy_resource
        )
    else:
        watcher = PolicyWatcher(options.policy_file)
    elector = options.lease.elector(
        KubeJson(make_api_client(options.kubeconfig)), watcher.current.spec.project_namespace
    )
    if elector is not None:
        elector.on_change(lambda leading: metrics.leader.set(1 if leading else 0))

    def is_leader() -> bool:
        return elector.is_leader if elector is not None else True

    admission = None
    if options.admission_policies is not None:
        admission = AdmissionPolicySync(
            KubeJson(make_api_client(options.kubeconfig)),
            lambda: watcher.current,
            metrics,
            options.admission_policies,
            is_leader=is_leader,
        )
        watcher.subscribe(admission.wake, call_now=False)  # each accepted version
        if elector is not None:
            elector.on_change(admission.wake)
    status_writer = None
    if admission is not None and isinstance(watcher, PolicyResourceWatcher):
        status_writer = AdmissionStatusWriter(
            KubeJson(make_api_client(options.kubeconfig)),
            watcher,
            admission.condition,
            is_leader=is_leader,
        )
        admission.on_change(status_writer.sync)
        if elector is not None:
            elector.on_change(status_writer.on_leadership)
    certs = None
    if options.webhook_certs is not None:
        certs = webhook_cert_job(
            options.webhook_certs,
            make_api_client(options.kubeconfig),
            metrics,
            namespace=options.lease.namespace_in(watcher.current.spec.project_namespace),
            is_leader=is_leader,
        )
    started = threading.Event()
    server = HttpServer(
        health_app(metrics, started.is_set), options.host, options.port, name="controller-http"
    )
    stop = stop_on_signals(log)
    server.start()
    watcher.start()
    if elector is not None:
        elector.start(round_first=True)
    if status_writer is not None:
        status_writer.start()
    if certs is not None:
        certs.start()
    if admission is not None:
        admission.start()
    started.set()
    log.info(
        "controller running (policy %s; admission policies %s, webhook certificate %s); "
        "health on %s",
        watcher.current.version,
        options.admission_policies.scope if options.admission_policies else "off",
        "renew" if options.webhook_certs else "off",
        server.url,
    )
    try:
        stop.wait()
    finally:
        if certs is not None:
            certs.stop()
        if admission is not None:
            admission.stop()
        if status_writer is not None:
            status_writer.stop()
        if elector is not None:
            elector.stop(release=True)
        watcher.stop()
        server.stop()
