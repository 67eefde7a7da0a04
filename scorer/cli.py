"""`steer scorer run|once|cleanup` and `steer policy check`, added to the command tree
(launcher.commands) by `register` and `register_policy`.

The commands parse their flags and hand over: `run` to `scorer.serve`, `once` to the
`Scorer`, `cleanup` to `scorer.cleanup`. What `steer explain|audit|page` and `kubectl steer`
print, as clients of a running scorer, is launcher.explain's.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Callable
from typing import Any

from scorer.check import check_policy
from scorer.cleanup import clean_nodes, live_leader
from scorer.cycle.retire import Removal
from scorer.cycle.service import CycleError, CycleResult, Scorer
from scorer.cycle.writer import WriteResult
from scorer.explain import node_row, plan_table
from scorer.model import NodeState, with_devices
from scorer.serve import (
    DEFAULT_LISTEN,
    ScorerInputs,
    ScorerOptions,
    node_api,
    serve_scorer,
)
from steer.adapters.dra import DraStore
from steer.adapters.kube import KubeConfigError, add_kubeconfig_flag, make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.lease import DEFAULT_LEASE_NAME, LeaseSettings, add_lease_flags
from steer.adapters.policy_file import load_policy_file
from steer.adapters.policy_resource import (
    add_policy_source,
    fetch_policy_object,
    parse_policy_object,
)
from steer.adapters.prometheus import PrometheusClient, PrometheusError
from steer.adapters.service_logs import add_log_flags, configure_logging
from steer.adapters.service_run import START_ERRORS, serve_exit_code, start_problem
from steer.core.policy import Policy, PolicyError

log = logging.getLogger(__name__)


def register_policy(
    policy_subparsers: Any, add_report_format: Callable[[argparse.ArgumentParser], None]
) -> None:
    """`steer policy check`: added under `steer policy` by the command tree (launcher.commands),
    which says how a report's format is asked (`add_report_format`, its front's)."""
    check = policy_subparsers.add_parser(
        "check",
        help="check a policy's dimensions against a Prometheus; one line per problem, its fix",
        description="Query every Prometheus dimension of the policy as the scorer would and "
        "report, one line each with the fix: metrics that are absent (and the related exporter "
        "families Prometheus holds instead), a node label that is missing or spelled otherwise, "
        "label values that are not node names (an exporter pod's name, a scrape address), "
        "labels Prometheus renamed (honor_labels), fewer nodes than a dimension's coverage "
        "expects (with --kubeconfig or --nodes), and values that contradict the unit. Exit 0 "
        "with no problem, 1 with problems, 2 when it cannot check.",
    )
    check.add_argument("file", help="path to the policy YAML file")
    _prometheus_flag(check)
    nodes = check.add_mutually_exclusive_group()
    add_kubeconfig_flag(nodes, "to list the cluster's nodes, to check coverage and node names")
    nodes.add_argument(
        "--nodes",
        metavar="NAME[,NAME...]",
        help="the node names to expect, without a cluster",
    )
    add_report_format(check)
    check.set_defaults(func=_cmd_policy_check)


def _cmd_policy_check(args: argparse.Namespace) -> int:
    try:
        policy = load_policy_file(args.file)
    except PolicyError as exc:
        print(f"{args.file}: invalid policy:\n{exc}", file=sys.stderr)
        return 2
    nodes: tuple[NodeState, ...] | None = None
    try:
        if args.kubeconfig:
            nodes = tuple(node_api(args.kubeconfig).list_nodes())
            devices = _devices_once(args.kubeconfig)
            try:  # a node whose GPUs are DRA devices is expected by the GPU dimensions
                nodes = with_devices(nodes, devices.snapshot())
            finally:
                devices.stop()
        elif args.nodes:
            nodes = tuple(NodeState(name=n.strip()) for n in args.nodes.split(",") if n.strip())
    except (KubeConfigError, KubeApiError) as exc:
        print(f"steer policy check: nodes not listed: {exc}", file=sys.stderr)
        return 2
    prom = policy.spec.prometheus
    url = args.prometheus or prom.url
    try:
        with PrometheusClient(
            url,
            timeout_s=prom.timeout_seconds,
            bearer_token_file=prom.bearer_token_file,
            ca_file=prom.ca_file,
        ) as client:
            report = check_policy(policy, client, nodes, resources_known=not args.nodes)
    except PrometheusError as exc:
        print(f"steer policy check: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(json.dumps(report.to_json(), indent=2))
    else:
        for line in report.lines() + report.form_lines():
            print(line)
        print(report.summary())
    return 1 if report.problems or report.errors else 0


def register(subparsers: Any) -> None:
    scorer = subparsers.add_parser(
        "scorer",
        help="score nodes from Prometheus into labels and taints",
        description="Query Prometheus once per dimension, quantise the scores into node labels "
        "under the policy prefix, set the policy's taints, and serve /explain.",
    )
    sub = scorer.add_subparsers(dest="scorer_command", metavar="ACTION", required=True)

    run = sub.add_parser(
        "run",
        help="score on the policy's interval, leader-elected, serving /explain and /metrics",
        description="Run the scoring loop (APScheduler) with Lease leader election, and serve "
        "/explain, /metrics, /healthz and /readyz on --listen. Only the leader writes nodes.",
    )
    _source_args(run)
    run.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help=f"HTTP address (default: {DEFAULT_LISTEN})",
    )
    add_lease_flags(run, DEFAULT_LEASE_NAME)
    run.add_argument(
        "--dry-run", action="store_true", help="compute and serve /explain, never write"
    )
    run.add_argument(
        "--authorization",
        choices=("apiserver", "none"),
        default="apiserver",
        help="apiserver: every caller of the page, /explain and /metrics shows a bearer token "
        "the apiserver reviews (TokenReview) and is answered only what it may read "
        "(SubjectAccessReview; the ServiceAccount needs system:auth-delegator); none: anyone "
        "who reaches --listen reads everything (a no-cluster demo, tests). /healthz and "
        "/readyz answer anyone either way (default: apiserver)",
    )
    _add_moved_flags(run)
    add_log_flags(run)
    run.set_defaults(func=_cmd_run)

    once = sub.add_parser(
        "once",
        help="run one cycle and print the label/taint plan per node",
        description="Run one scoring cycle (or --cycles N) and print the plan. Without --dry-run "
        "the plan is written, without leader election: do not run it beside a live scorer.",
    )
    _source_args(once)
    once.add_argument("--dry-run", action="store_true", help="write nothing, only print the plan")
    once.add_argument(
        "--output", choices=("table", "json"), default="table", help="plan format (default: table)"
    )
    once.add_argument(
        "--cycles",
        type=int,
        default=None,
        help="cycles to run; the last plan is printed (default: 1)",
    )
    once.add_argument(
        "--changes-only",
        action="store_true",
        help="table: only nodes whose labels or taints change",
    )
    once.set_defaults(func=_cmd_once)

    cleanup = sub.add_parser(
        "cleanup",
        help="remove every label, taint, annotation and resource the scorer wrote (uninstall)",
        description="Remove from every node what the scorer wrote there, as its "
        "<prefix>managed annotation records it (labels, taints, extended resources in the "
        "node status) plus the keys the policy owns, then the <prefix>observed-at annotation "
        "and the record itself. Records under an earlier labelPrefix are removed too. "
        "Foreign labels, taints and annotations are never touched. Stop the scorer first "
        "(scale it to 0): a running leader writes its labels again on its next cycle.",
    )
    cleanup.add_argument(
        "--policy", required=True, metavar="FILE", help="the SteeringPolicy the scorer ran"
    )
    add_kubeconfig_flag(cleanup)
    cleanup.add_argument(
        "--dry-run", action="store_true", help="print what would be removed, write nothing"
    )
    cleanup.set_defaults(func=_cmd_cleanup)


def _source_args(parser: argparse.ArgumentParser) -> None:
    add_policy_source(
        parser,
        required=False,
        file_note=" (hot-reloaded by `run`)",
        object_note=" (watched by `run`, which writes its status as leader; docs/policy.md)",
    )
    _prometheus_flag(parser)
    add_kubeconfig_flag(parser)


def _prometheus_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--prometheus",
        metavar="URL",
        help="the Prometheus to ask (default: the policy's spec.prometheus.url)",
    )


# ------------------------------------------------------------------------------ inputs


def _inputs(args: argparse.Namespace) -> ScorerInputs:
    if not args.policy and not args.policy_resource:
        raise SystemExit("--policy FILE or --policy-resource NAME is required")
    return ScorerInputs(
        args.policy or "", args.prometheus, args.kubeconfig, policy_resource=args.policy_resource
    )


def _load_policy(given: ScorerInputs) -> Policy:
    """The policy of `once`: the file's, or the SteeringPolicy object's as it is now."""
    if given.policy_resource:
        kube = KubeJson(make_api_client(given.kubeconfig))
        return parse_policy_object(fetch_policy_object(kube, given.policy_resource))
    return load_policy_file(given.policy_file)


# ------------------------------------------------------------------------------ once


# How long `once` waits for the DRA lists before scoring without them.
ONCE_DEVICES_WAIT_S = 30.0


def _devices_once(kubeconfig: str | None) -> DraStore:
    """DRA devices (ResourceSlices), classes and claims, listed once: GPU nodes whose GPUs
    are devices offer them. Started; the caller stops it."""
    devices = DraStore(make_api_client(kubeconfig))
    devices.start()
    if not devices.wait_synced(ONCE_DEVICES_WAIT_S):
        print(f"DRA objects not read: {devices.status().message}", file=sys.stderr)
    return devices


def _cmd_once(args: argparse.Namespace) -> int:
    given = _inputs(args)
    try:
        policy = _load_policy(given)
        devices = _devices_once(given.kubeconfig)
        scorer = Scorer(
            lambda: policy,
            node_api(given.kubeconfig),
            prometheus_url=given.prometheus_url,
            dry_run=args.dry_run,
            devices=devices,
        )
        cycles = args.cycles if args.cycles is not None else 1
        result = None
        try:
            for _ in range(max(1, cycles)):
                result = scorer.run_cycle()
        finally:
            scorer.close()
            devices.stop()
        assert result is not None
        _print_once(args, policy, result)
        if all(not d.ok for d in result.plan.dimensions):
            sources = sorted({d.source for d in policy.spec.dimensions})
            hint = {
                "prometheus": "--prometheus / spec.prometheus.url",
                "kubernetes": "--kubeconfig and the scorer's RBAC",
                "http": "each http dimension's url",
            }
            print(
                "every dimension failed: check " + "; ".join(hint[s] for s in sources),
                file=sys.stderr,
            )
            return 1
        return 1 if result.report is not None and result.report.errors else 0
    except PolicyError as exc:
        print(f"invalid policy:\n{exc}", file=sys.stderr)
        return 2
    except (KubeConfigError, CycleError) as exc:
        print(str(exc), file=sys.stderr)
        return 2


def _print_once(args: argparse.Namespace, policy: Policy, result: CycleResult) -> None:
    report = result.report
    if args.output == "json":
        body = {
            "policyVersion": policy.version,
            "dryRun": result.dry_run,
            "queries": result.queries,
            "nodesToWrite": len(result.plan.changes),
            "nodesWritten": report.nodes_written if report else 0,
            "writeRequests": report.requests if report else 0,
            "writeErrors": [{"node": e.node, "error": e.error} for e in report.errors]
            if report
            else [],
            "timings": {
                "listSeconds": round(result.list_s, 4),
                "querySeconds": round(result.query_s, 4),
                "computeSeconds": round(result.compute_s, 4),
                "writeSeconds": round(result.write_s, 4),
            },
            "dimensions": [
                {
                    "dimension": d.dimension,
                    "ok": d.ok,
                    "stale": d.stale,
                    "nodes": d.nodes,
                    "unknownNodes": d.unknown,
                    "expectedNodes": d.expected,
                    "error": d.error,
                    "problems": [p.to_json() for p in d.problems],
                }
                for d in result.plan.dimensions
            ],
            "nodes": [node_row(p) for p in result.plan.nodes],
        }
        print(json.dumps(body, indent=2))
        return
    print(plan_table(result.plan, policy, result.nodes, changes_only=args.changes_only))
    done = (
        "dry run: nothing written"
        if result.dry_run
        else f"{report.nodes_written if report else 0} nodes written"
    )
    print(
        f"{result.queries} queries, list {result.list_s:.3f}s, queries {result.query_s:.3f}s, "
        f"compute {result.compute_s:.3f}s, writes {result.write_s:.3f}s; {done}"
    )


# ------------------------------------------------------------------------------ cleanup


def _cmd_cleanup(args: argparse.Namespace) -> int:
    try:
        policy = load_policy_file(args.policy)
        api = node_api(args.kubeconfig)
    except START_ERRORS as exc:
        print(start_problem(exc), file=sys.stderr)
        return 2
    holder = live_leader(api, policy)
    if holder is not None:
        print(
            f"warning: the scorer Lease {policy.spec.project_namespace}/{DEFAULT_LEASE_NAME} is "
            f"held by {holder}: a running scorer writes its labels again; scale it to 0 first",
            file=sys.stderr,
        )
    verb = "would remove" if args.dry_run else "removed"

    def show(gone: Removal, result: WriteResult | None) -> None:
        parts = [
            f"{what} {', '.join(keys)}"
            for what, keys in (
                ("labels", gone.labels),
                ("taints", gone.taints),
                ("annotations", gone.annotations),
                ("resources", gone.resources),
            )
            if keys
        ]
        if result is not None and not result.ok:
            print(f"{gone.node}: FAILED ({result.error}); still carries {'; '.join(parts)}")
        else:
            print(f"{gone.node}: {verb} {'; '.join(parts)}")

    try:
        report = clean_nodes(policy, api, dry_run=args.dry_run, on_node=show)
    except KubeApiError as exc:
        print(f"steer scorer cleanup: {_api_problem(exc)}", file=sys.stderr)
        return 2
    untouched = report.nodes - len(report.removals)
    if args.dry_run:
        print(
            f"dry run: {len(report.removals)} of {report.nodes} nodes carry keys of the scorer; "
            "nothing written"
        )
        return 0
    print(
        f"{len(report.removals) - len(report.errors)} nodes cleaned, {untouched} carried "
        f"nothing of the scorer, {len(report.errors)} failed"
    )
    return 1 if report.errors else 0


def _api_problem(exc: KubeApiError) -> str:
    if exc.status == 0:
        return f"cannot reach the Kubernetes API: {exc.message} (check --kubeconfig)"
    if exc.status in (401, 403):
        return (
            f"the Kubernetes API refused ({exc.status} {exc.reason}): {exc.message}; cleanup "
            "needs list and patch on nodes and patch on nodes/status"
        )
    return str(exc)


# ------------------------------------------------------------------------------ run


def split_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"--listen: expected HOST:PORT, got {listen!r}")
    return host.strip("[]") or "0.0.0.0", int(port)


# The flags of the jobs `steer controller run` took over: the scorer's identity holds no
# admission object, webhook configuration or Secret any more (docs/security.md). Still parsed,
# so that an old Deployment fails with the way forward instead of "unrecognized arguments".
MOVED_FLAGS = (
    "--webhook-certs",
    "--webhook-namespace",
    "--webhook-service",
    "--webhook-secret",
    "--webhook-ca-secret",
    "--webhook-config",
    "--webhook-cert-dns",
    "--webhook-cert-ip",
    "--webhook-cert-days",
    "--webhook-cert-renew-before",
    "--webhook-cert-interval",
    "--webhook-cert-key-type",
    "--admission-policies",
    "--admission-policies-interval",
)


def _add_moved_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "moved to `steer controller run`",
        "The webhook's certificate and the admission policies are the controller's jobs, "
        "under its own identity (docs/security.md): these flags are refused here, but "
        "--webhook-certs=off and --admission-policies=off.",
    )
    for flag in MOVED_FLAGS:
        group.add_argument(
            flag, action="append", metavar="VALUE", help="give it to `steer controller run`"
        )


def moved_flags_error(args: argparse.Namespace) -> str | None:
    """The error for a flag of the jobs the controller runs now; None when none is given, or
    only `--webhook-certs=off` / `--admission-policies=off` (what they always meant here)."""
    given = []
    for flag in MOVED_FLAGS:
        values = getattr(args, flag.removeprefix("--").replace("-", "_"))
        if values and not (
            flag in ("--webhook-certs", "--admission-policies") and set(values) == {"off"}
        ):
            given.append(f"{flag}={values[-1]}")
    if not given:
        return None
    return (
        f"{', '.join(given)}: the webhook's certificate and the admission policies are kept by "
        "`steer controller run` under its own ServiceAccount (steer-controller), no longer by "
        "the scorer; give these flags to it instead (docs/install.md, The controller)"
    )


def _cmd_run(args: argparse.Namespace) -> int:
    configure_logging(args.log_level, args.log_format)
    if args.log_level != "debug":  # one line per job run (every 2 s for the hot-node job) is noise
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
    host, port = split_listen(args.listen)
    moved = moved_flags_error(args)
    if moved is not None:
        print(f"steer scorer run: {moved}", file=sys.stderr)
        return 2
    options = ScorerOptions(
        _inputs(args),
        host=host,
        port=port,
        lease=LeaseSettings.from_args(args),
        dry_run=args.dry_run,
        authorization=args.authorization,
    )
    return serve_exit_code(lambda: serve_scorer(options))
