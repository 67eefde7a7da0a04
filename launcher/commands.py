"""The command tree of `steer` and `kubectl steer`, declared once.

`build_parser(front)` declares every command with its handler; the services add theirs
(`register(actions)` in `scorer.cli`, `controller.cli`, `webhook.cli`, `certs.cli`). A front (launcher.front)
picks the commands it offers and says how they reach out: `steer` offers them all,
`kubectl steer` (launcher.kubectl) the client commands, with kubectl's flags. A command both
offer runs the same handler under both.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from certs import cli as certs_cli
from controller import cli as controller_cli
from launcher import descheduler, policy
from launcher.explain import (
    audit_report,
    explain_node,
    explain_nodes,
    explain_pod_manifest,
    explain_pod_ref,
    open_page,
)
from launcher.front import CommandParser, Front, PodRef
from launcher.kubectl import KubectlFront
from launcher.policy import cmd_policy_validate
from scorer import cli as scorer_cli
from scorer.explain.audit import DEFAULT_LIMIT
from steer import __version__
from webhook import cli as webhook_cli


def build_parser(front: Front | None = None) -> CommandParser:
    """The tree as `front` offers it (default: `steer`'s, every command)."""
    front = front or Front()
    parser = front.root_parser()
    # The handlers ask the front how to reach the scorer and which pod is meant.
    parser.set_defaults(front=front)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    if front.offers("version"):
        version = front.add_command(sub, "version", help="print the kube-steer version")
        version.set_defaults(func=_cmd_version)

    if front.offers("policy"):
        group = sub.add_parser("policy", help="work with SteeringPolicy files")
        actions = group.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
        if front.offers("policy validate"):
            validate = front.add_command(
                actions,
                "validate",
                help="check a policy file; exit 0 when valid, 1 with every problem listed",
                description="Validate a SteeringPolicy YAML file: field types and ranges, "
                "references between rules, and label keys the apiserver would refuse. All "
                "problems are listed.",
            )
            validate.add_argument("file", help="path to the policy YAML file")
            front.add_report_format(validate)
            validate.set_defaults(func=cmd_policy_validate)
        if front.offers("policy admission-policy"):
            policy.register(actions)
        if front.offers("policy check"):
            scorer_cli.register_policy(actions, front.add_report_format)

    if front.offers("scorer"):
        scorer_cli.register(sub)
    if front.offers("controller"):
        controller_cli.register(sub)

    if front.offers("explain"):
        _add_explain(front, sub)
    if front.offers("audit report"):
        _add_audit(front, sub)
    if front.offers("page"):
        _add_page(front, sub)

    if front.offers("webhook"):
        webhook_cli.register(sub)
    if front.offers("certs"):
        certs_cli.register(sub)
    if front.offers("descheduler"):
        descheduler.register(sub)
    return parser


def _add_explain(front: Front, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    explain = sub.add_parser(
        "explain",
        help="ask a running scorer why a node scores as it does, or where a pod may go",
        description="Query a running scorer's /explain endpoints.",
    )
    actions = explain.add_subparsers(dest="explain_command", metavar="WHAT", required=True)
    if front.offers("explain node"):
        node = front.add_command(
            actions, "node", help="raw values, scores, labels and taints of one node"
        )
        node.add_argument("name", help="the Node's name, as `kubectl get nodes` prints it")
        front.add_scorer_flags(node)
        node.set_defaults(func=_cmd_explain_node)
    if front.offers("explain nodes"):
        nodes = front.add_command(
            actions, "nodes", help="every node's values, scores, labels and taints"
        )
        front.add_scorer_flags(nodes)
        nodes.set_defaults(func=_cmd_explain_nodes)
    if front.offers("explain pod"):
        pod = front.add_command(
            actions,
            "pod",
            help="which nodes a pod's steering terms allow, their rank, and why others are "
            "excluded",
        )
        front.add_pod_arguments(pod)
        front.add_scorer_flags(pod)
        pod.set_defaults(func=_cmd_explain_pod)


def _add_audit(front: Front, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    audit = sub.add_parser(
        "audit",
        help="what an audit-mode policy would have changed (ask a running scorer)",
        description="Audit mode (spec.mode or tenants[].mode: audit) steers nothing. Ask a "
        "running scorer how the scheduler's choices for the audited pods compare with what "
        "enforce mode would have allowed and ranked first.",
    )
    actions = audit.add_subparsers(dest="audit_command", metavar="WHAT", required=True)
    report = front.add_command(
        actions,
        "report",
        help="pods on nodes a rule would exclude, and the chosen node's rank, per rule",
    )
    report.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        help=f"judge at most this many pods, the last bound first (default {DEFAULT_LIMIT})",
    )
    front.add_scorer_flags(report)
    report.set_defaults(func=_cmd_audit_report)


def _add_page(front: Front, sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    page = front.add_command(
        sub,
        "page",
        help="open the explain page on a local port, as you (your token)",
        description="Serve the scorer's explain page on a loopback port, relaying each "
        "request to the scorer with your bearer token, so the page shows what you may read "
        "(a browser sends no token itself, and through `kubectl proxy` the apiserver drops "
        "it). Open the URL it prints; Ctrl-C stops it.",
    )
    front.add_scorer_flags(page)
    page.add_argument(
        "--listen",
        default="127.0.0.1:8001",
        metavar="HOST:PORT",
        help="loopback address to serve the page on (default: 127.0.0.1:8001; port 0: any)",
    )
    page.set_defaults(func=_cmd_page)


# -- handlers of the commands the tree itself declares -----------------------------------------


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"kube-steer {__version__}")
    return 0


def _cmd_explain_node(args: argparse.Namespace) -> int:
    return explain_node(args.front.scorer(args), args.name, args.output)


def _cmd_explain_nodes(args: argparse.Namespace) -> int:
    return explain_nodes(args.front.scorer(args), args.output)


def _cmd_explain_pod(args: argparse.Namespace) -> int:
    front: Front = args.front
    pod = front.pod(args)
    if isinstance(pod, PodRef):
        return explain_pod_ref(front.scorer(args), pod.namespace, pod.name, args.output)
    return explain_pod_manifest(
        front.scorer(args), pod.file, pod.namespace, args.output, pod.fallback_namespace
    )


def _cmd_audit_report(args: argparse.Namespace) -> int:
    return audit_report(args.front.scorer(args), args.limit, args.output)


def _cmd_page(args: argparse.Namespace) -> int:
    return open_page(args.front.scorer(args), args.listen)


# -- the two command lines ---------------------------------------------------------------------


def parse_args(front: Front, argv: Sequence[str] | None = None) -> argparse.Namespace:
    return front.parse_args(build_parser(front), argv)


def run(front: Front, argv: Sequence[str] | None = None) -> int:
    return front.run(parse_args(front, argv))


def main(argv: Sequence[str] | None = None) -> int:
    """`steer`."""
    return run(Front(), argv)


def kubectl_main(argv: Sequence[str] | None = None) -> int:
    """`kubectl-steer` (kubectl runs it as `kubectl steer`)."""
    return run(KubectlFront(), argv)


if __name__ == "__main__":
    sys.exit(main())
