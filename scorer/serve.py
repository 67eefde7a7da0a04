"""`steer scorer run`: the scoring loop, leader election, the pod watches (bound pods for the
ledger, unbound ones for the Events on blocked pods) and the HTTP surface. The admission
policies and the webhook's certificate are not the scorer's: `steer controller run` keeps them,
under an identity the network-facing scorer does not hold (controller/).

One process runs everything: the loop must score exactly once per replica, so the HTTP
server is a threaded WSGI server beside the scheduler thread, not a gunicorn worker. The
CLI (`scorer.cli`) only parses flags into `ScorerOptions` and calls `serve_scorer`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from scorer.access.reviews import ApiserverReviews
from scorer.app import create_app
from scorer.cycle.loop import ScorerLoop
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from scorer.jobs.pending import PendingPods, PendingPodWatcher, SteeringEvents, report_blocked
from scorer.jobs.policy_status import PolicyStatusWriter, report_rejected_at_start
from scorer.metrics import ScorerMetrics
from scorer.watch.bindings import BindingWindow, PodBindingWatcher
from scorer.watch.ledger import PodLedger
from scorer.watch.nodes import NodeCache, NodeWatcher
from steer.adapters.dra import DraStore
from steer.adapters.http_server import HttpServer
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.adapters.lease import DEFAULT_LEASE_NAME, LeaseSettings, default_identity
from steer.adapters.policy_file import PolicyWatcher
from steer.adapters.policy_resource import PolicyResourceWatcher
from steer.adapters.service_run import stop_on_signals
from steer.core.policy import Policy, PolicyError
from steer.core.steering import trace_annotation_key

log = logging.getLogger(__name__)

DEFAULT_LISTEN = "0.0.0.0:8080"


@dataclass(frozen=True)
class ScorerInputs:
    """What the scorer is pointed at: the policy file, or the name of a SteeringPolicy object
    (`policy_resource`, then `policy_file` is unused), a Prometheus URL override, a kubeconfig
    (the data sources of the dimensions are in scorer/cycle/sources/)."""

    policy_file: str
    prometheus_url: str | None = None
    kubeconfig: str | None = None
    policy_resource: str | None = None


@dataclass(frozen=True)
class ScorerOptions:
    inputs: ScorerInputs
    host: str = "0.0.0.0"
    port: int = 8080
    lease: LeaseSettings = field(default_factory=lambda: LeaseSettings(DEFAULT_LEASE_NAME))
    dry_run: bool = False
    # --authorization: "apiserver" reviews every caller of the data-bearing endpoints with the
    # apiserver (scorer/access/); "none" answers anyone who reaches --listen (tests, the demo).
    authorization: str = "apiserver"


def node_api(kubeconfig: str | None) -> NodeApi:
    return NodeApi(KubeJson(make_api_client(kubeconfig)))


def serve_scorer(options: ScorerOptions) -> None:
    """Score and serve until SIGTERM/SIGINT; `PolicyError`/`KubeConfigError` when it cannot start."""
    inputs = options.inputs
    metrics = ScorerMetrics()
    watcher: PolicyWatcher | PolicyResourceWatcher
    if inputs.policy_resource:
        api = make_api_client(inputs.kubeconfig)
        try:
            watcher = PolicyResourceWatcher(api, inputs.policy_resource)
        except PolicyError as exc:
            if not options.dry_run:
                report_rejected_at_start(KubeJson(api), inputs.policy_resource, exc)
            raise
    else:
        watcher = PolicyWatcher(inputs.policy_file)
    watcher.on_reload_error(lambda _message: metrics.policy_reload_errors.inc())
    _serve(options, watcher, metrics, inputs.prometheus_url, inputs.kubeconfig)


def _serve(
    options: ScorerOptions,
    watcher: PolicyWatcher | PolicyResourceWatcher,
    metrics: ScorerMetrics,
    prometheus: str | None,
    kubeconfig: str | None,
) -> None:
    current: Callable[[], Policy] = lambda: watcher.current  # noqa: E731
    elector = options.lease.elector(
        KubeJson(make_api_client(kubeconfig)), watcher.current.spec.project_namespace
    )
    bindings = BindingWindow()
    ledger = PodLedger()
    node_cache = NodeCache()
    # Devices in ResourceSlices, their classes and the claims holding them (DRA): what GPU
    # nodes offer when their GPUs are not in status.allocatable.
    devices = DraStore(lambda: make_api_client(kubeconfig))
    scorer = Scorer(
        current,
        node_api(kubeconfig),
        prometheus_url=prometheus,
        elector=elector,
        bindings=bindings,
        ledger=ledger,
        metrics=metrics,
        dry_run=options.dry_run,
        node_cache=node_cache,
        devices=devices,
    )
    pending = PendingPods()
    events = SteeringEvents(
        KubeJson(make_api_client(kubeconfig)),
        instance=elector.identity if elector is not None else default_identity(),
    )
    status_writer = None
    if isinstance(watcher, PolicyResourceWatcher) and not options.dry_run:
        status_writer = PolicyStatusWriter(
            KubeJson(make_api_client(kubeconfig)),
            watcher,
            is_leader=(lambda: elector.is_leader) if elector is not None else (lambda: True),
            data=lambda: scorer.last.plan.data_problems if scorer.last is not None else None,
            forms=lambda: scorer.last.plan.data_forms if scorer.last is not None else (),
        )
        if elector is not None:
            elector.on_change(status_writer.on_leadership)

    def after_cycle() -> None:
        report_blocked(scorer, pending, events)
        if status_writer is not None:
            status_writer.sync()  # a write only when the data's problems changed

    loop = ScorerLoop(scorer, after_cycle=after_cycle)
    nodes = NodeWatcher(make_api_client(kubeconfig), node_cache)
    unbound = PendingPodWatcher(
        make_api_client(kubeconfig),
        pending,
        trace_key=lambda: trace_annotation_key(watcher.current),
    )
    pods = PodBindingWatcher(
        make_api_client(kubeconfig),
        bindings,
        window_s=lambda: watcher.current.spec.scoring.hot_window_seconds,
        ledger=ledger,
        on_binding=loop.wake,
    )
    access = None
    if options.authorization == "apiserver":
        access = ApiserverReviews(KubeJson(make_api_client(kubeconfig)))
    else:
        log.warning(
            "--authorization none: anyone who reaches %s:%d reads every pod's explanation, "
            "every node's data and /metrics",
            options.host,
            options.port,
        )
    server = HttpServer(
        create_app(
            scorer,
            policy_status=watcher.status,
            access=access,
        ),
        options.host,
        options.port,
        name="scorer-http",
    )
    stop = stop_on_signals(log)
    watcher.start()
    if elector is not None:
        elector.start(round_first=True)  # a lone replica writes from its first cycle on
    if status_writer is not None:
        status_writer.start()
    nodes.start()
    devices.start()
    pods.start()
    unbound.start()
    loop.start()
    server.start()
    log.info("scorer serving on %s (policy %s)", server.url, watcher.current.version)
    try:
        stop.wait()
    finally:
        scorer.request_stop()  # a cycle in flight ends after the node it is writing
        loop.stop()
        unbound.stop()
        pods.stop()
        nodes.stop()
        devices.stop()
        if elector is not None:
            elector.stop(release=True)
        if status_writer is not None:
            status_writer.stop()
        watcher.stop()
        server.stop()
        scorer.close()
