"""The scorer's HTTP surface: `/explain` (nodes, node, pod, cluster, audit), the explain page
at `/`, `/metrics`, `/healthz`, `/readyz`.

Each caller is answered only what it may read (scorer/access/): with `access`, every request
but the probes shows a bearer token the apiserver reviews, and is allowed what its path needs
(a pod's explanation `get pods` in its namespace, a node's `get nodes`, `/metrics` the `get`
on that URL); a node's DRA claims in namespaces the caller may not read are left out.

Every answer comes from the scorer's last computed cycle (its own, also on a replica that is
not the leader), so `/explain` never waits on Prometheus. Explaining an existing pod reads the
pod, its namespace and its `FailedScheduling` events from the API. The page (scorer/page/) is
static files that fetch the `/explain` answers. The server is waitress on a thread
(`steer.adapters.http_server.HttpServer`) started by `steer scorer run` next to the scheduler
thread, not a gunicorn worker: the scoring loop must run exactly once per process.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

import orjson
import yaml
from flask import Flask, Response, request
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from scorer.access.gate import AccessGate
from scorer.access.reviews import ApiserverReviews
from scorer.access.rules import LIST_PODS, ResourceNeed, pod_needs
from scorer.cycle.clusterscore import cluster_detail
from scorer.cycle.service import Scorer
from scorer.explain import audit_report, detail_view, explain_pod, nodes_view, scheduler_verdict
from scorer.explain.audit import DEFAULT_LIMIT
from scorer.explain.view import NodeDetail, SchedulerVerdict
from scorer.page import page_asset
from steer.adapters.kubejson import KubeApiError
from steer.adapters.policy_file import ReloadStatus
from steer.core.infrastructure import presumed_requester
from steer.core.pod_shape import UninterpretablePod, pod_spec_of

PAGE_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'"
)


def _json(body: Any, status: int = 200) -> Response:
    return Response(
        orjson.dumps(body, option=orjson.OPT_INDENT_2), status=status, mimetype="application/json"
    )


def _error(status: int, message: str) -> Response:
    return _json({"error": message}, status)


def create_app(
    scorer: Scorer,
    *,
    policy_status: Callable[[], ReloadStatus] | None = None,
    access: ApiserverReviews | None = None,
) -> Flask:
    """`access`: the apiserver that reviews every caller (`--authorization apiserver`); None
    answers every caller everything (`--authorization none`: in-process tests, the demo)."""
    app = Flask(__name__)
    gate = AccessGate(access, _error) if access is not None else None
    if gate is not None:
        gate.install(app)

    def readable(detail: NodeDetail) -> NodeDetail:
        """The node's view without the claims (and their pods) of namespaces whose pods the
        caller may not read."""
        if gate is None or not any(d.claim for d in detail.devices) or gate.may(LIST_PODS):
            return detail
        may: dict[str, bool] = {}
        devices = []
        for device in detail.devices:
            namespace = device.claim.partition("/")[0] if device.claim else ""
            if namespace and namespace not in may:
                may[namespace] = gate.may(ResourceNeed("get", "pods", namespace))
            if namespace and not may[namespace]:
                device = dataclasses.replace(device, claim=None, pods=())
            devices.append(device)
        return dataclasses.replace(detail, devices=tuple(devices))

    def cycle_info() -> dict[str, Any]:
        last = scorer.last
        info: dict[str, Any] = {"leader": scorer.is_leader, "policyVersion": scorer.policy.version}
        if scorer.elector is not None:
            info["identity"] = scorer.elector.identity
            info["leaseHolder"] = scorer.elector.holder
        if last is not None:
            info["cycle"] = {
                "wrote": last.report is not None,
                "dryRun": last.dry_run,
                "nodesWritten": last.report.nodes_written if last.report else 0,
                "queries": last.queries,
                "durationSeconds": round(last.duration_s, 4),
                "computeSeconds": round(last.compute_s, 4),
            }
        if policy_status is not None:
            status = policy_status()
            info["policyReloadErrors"] = status.reload_errors
            info["policyLastError"] = status.last_error
        return info

    def no_cycle() -> Response:
        return _error(503, "no scoring cycle has completed yet; see /readyz")

    @app.get("/explain/nodes")
    def explain_nodes() -> Response:
        last = scorer.last
        if last is None:
            return no_cycle()
        table = nodes_view(last.plan, scorer.policy, scorer.inventory(), scorer.device_readings)
        return _json({**cycle_info(), **table.to_json()})

    @app.get("/explain/cluster")
    def explain_cluster() -> Response:
        if not scorer.policy.spec.cluster_scores.enabled:
            return _error(404, "spec.clusterScores is not enabled in the policy")
        if scorer.last is None:
            return no_cycle()
        published = scorer.placement_scores.last if scorer.placement_scores else None
        return _json({**cycle_info(), **cluster_detail(scorer.cluster_scores, published)})

    @app.get("/explain/node/<name>")
    def explain_node(name: str) -> Response:
        last = scorer.last
        if last is None:
            return no_cycle()
        detail = detail_view(
            scorer.policy, last.plan, name, scorer.inventory(), scorer.device_readings
        )
        if detail is None:
            return _error(404, f"node {name!r} was not in the last cycle ({len(last.nodes)} nodes)")
        return _json({**cycle_info(), **readable(detail).to_json()})

    def explain(
        pod: dict[str, Any],
        namespace: str | None,
        labels: dict[str, str] | None,
        scheduler: SchedulerVerdict | None = None,
        user_info: Mapping[str, Any] | None = None,
    ) -> Response:
        last = scorer.last
        if last is None:
            return no_cycle()
        notes = []
        if labels is None:
            labels = {}
            if namespace:
                try:
                    labels = scorer.node_api.namespace_labels(namespace)
                except KubeApiError as exc:
                    notes.append(
                        f"namespace {namespace!r} not read ({exc.status}): no tenant applied"
                    )
            else:
                notes.append(
                    "no namespace given (metadata.namespace or ?namespace=): no tenant applied"
                )
        try:
            # The DRA snapshot the scorer's watches keep, to classify claim pods by.
            devices = scorer.inventory() if scorer.devices is not None else None
            result = explain_pod(
                scorer.policy,
                last.plan,
                last.nodes,
                pod,
                labels,
                namespace,
                devices=devices,
                user_info=user_info,
            )
        except UninterpretablePod as exc:
            return _error(400, f"body: {exc}")
        if scheduler is not None:
            result = dataclasses.replace(result, scheduler=scheduler)
        return _json({**cycle_info(), "namespace": namespace, "notes": notes, **result.to_json()})

    @app.post("/explain/pod")
    def explain_posted_pod() -> Response:
        raw = request.get_data()
        try:
            body = yaml.safe_load(raw) if raw else None  # YAML is a superset of JSON
        except yaml.YAMLError as exc:
            return _error(400, f"body: not JSON or YAML: {exc}")
        if not isinstance(body, dict):
            return _error(400, "body: must be a Pod or a PodSpec object (JSON or YAML)")
        spec = pod_spec_of(body)
        if not isinstance(spec.get("containers"), list):
            return _error(400, "body: spec.containers must be a list (post a Pod or a PodSpec)")
        meta = body.get("metadata") if isinstance(body.get("metadata"), dict) else {}
        namespace = request.args.get("namespace") or (meta or {}).get("namespace")
        if gate is not None:
            denied = gate.require(pod_needs(namespace if isinstance(namespace, str) else None))
            if denied is not None:
                return denied
        return explain(body, namespace, None)

    @app.get("/explain/pod/<namespace>/<name>")
    def explain_existing_pod(namespace: str, name: str) -> Response:
        if scorer.last is None:
            return no_cycle()
        try:
            pod = scorer.node_api.get_pod(namespace, name)
        except KubeApiError as exc:
            code = 404 if exc.status == 404 else 502
            return _error(code, f"pod {namespace}/{name}: {exc}")
        events: list[dict[str, Any]] = []
        events_error = None
        try:
            events = scorer.node_api.failed_scheduling_events(namespace, name)
        except KubeApiError as exc:
            events_error = f"events of {namespace}/{name} not read ({exc.status}): {exc.message}"
        # Admitted as its creator asked: a DaemonSet's pod by its controller, a mirror pod by
        # its kubelet (both exempt), any other by a user.
        creator = presumed_requester(scorer.policy, pod)
        verdict = scheduler_verdict(pod, events, events_error)
        return explain(pod, namespace, None, verdict, creator)

    @app.get("/")
    def page() -> Response:
        return page_file("index.html")

    @app.get("/ui/<name>")
    def page_file(name: str) -> Response:
        found = page_asset(name)
        if found is None:
            return _error(404, f"no page file {name!r}")
        body, mimetype = found
        response = Response(body, mimetype=mimetype)
        response.headers["Cache-Control"] = "no-cache"  # a new scorer version serves a new page
        # Nothing from elsewhere: the page's own files and the /explain answers only.
        response.headers["Content-Security-Policy"] = PAGE_POLICY
        response.headers["X-Content-Type-Options"] = "nosniff"
        return response

    @app.get("/explain/audit")
    def explain_audit() -> Response:
        last = scorer.last
        if last is None:
            return no_cycle()
        raw_limit = request.args.get("limit", str(DEFAULT_LIMIT))
        if not raw_limit.isdigit() or int(raw_limit) < 1:
            return _error(400, f"limit: a positive whole number of pods, got {raw_limit!r}")
        try:
            labels = scorer.node_api.all_namespace_labels()
            pods = scorer.node_api.bound_pods()
            report = audit_report(
                scorer.policy,
                last.plan,
                last.nodes,
                pods,
                labels,
                limit=int(raw_limit),
                devices=scorer.inventory() if scorer.devices is not None else None,
            )
        except KubeApiError as exc:
            return _error(502, f"pods and namespaces could not be read: {exc}")
        return _json({**cycle_info(), "notes": [], **report.to_json()})

    @app.get("/metrics")
    def metrics() -> Response:
        return Response(generate_latest(scorer.metrics.registry), mimetype=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    def healthz() -> Response:
        return Response("ok\n", mimetype="text/plain")

    @app.get("/readyz")
    def readyz() -> Response:
        """Ready once a cycle has completed. A policy edit that could not be loaded does not
        make the scorer unready (the last good policy keeps serving) but shows here, with its
        reason, until a good policy loads."""
        policy: dict[str, Any] = {"version": scorer.policy.version}
        if policy_status is not None:
            status = policy_status()
            policy.update(reloadErrors=status.reload_errors, lastError=status.last_error)
        detail: dict[str, Any] = {"ready": scorer.ready, "policy": policy}
        if not scorer.ready:
            detail["reason"] = "no scoring cycle has completed yet"
        last = scorer.last
        if last is not None:
            # What the dimensions' data lacks does not make the scorer unready (it steers on
            # what it has), but shows here with each fix until the data is whole.
            problems = last.plan.data_problems
            detail["data"] = {
                "problems": len(problems),
                "lines": [p.line() for p in problems],
                "dimensions": {
                    d.dimension: {
                        "nodes": d.nodes,
                        "expectedNodes": d.expected,
                        "problems": [p.to_json() for p in d.problems],
                        "forms": [{"form": f, "nodes": n} for f, n in d.forms],
                    }
                    for d in last.plan.dimensions
                },
            }
        return _json(detail, 200 if scorer.ready else 503)

    return app
