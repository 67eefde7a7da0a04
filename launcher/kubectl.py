"""`kubectl steer`: the kubectl plugin (the `kubectl-steer` executable on PATH).

kubectl runs `kubectl-steer` with every word after `steer` and no flag of its own, so the
plugin reads kubectl's flags itself: `--kubeconfig`, `--context`, `-n/--namespace` (and
$KUBECONFIG, which kubectl passes on in the environment), anywhere on the line. It asks the
scorer through the apiserver's Service proxy with the kubeconfig's credentials (no
port-forward), or at `--scorer URL`. The answers and their rendering are `steer explain`'s
(`scorer.cli`), and `policy validate` is `steer policy validate`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from steer import __version__
from steer.adapters.kube import KubeConfigError, kubectl_api_client
from steer.cli import validate_policy

if TYPE_CHECKING:  # the scorer's modules load only when a command needs them (fast --help)
    from scorer.client import ScorerClient

PROG = "kubectl steer"
DEFAULT_SCORER_NAMESPACE = "kube-steer"
DEFAULT_SCORER_SERVICE = "steer-scorer"
DEFAULT_SCORER_PORT = "http"

# Flags every command takes, before or after the command words (as kubectl's own flags).
# Defaults are applied after parsing: a subcommand's copy of a flag must not reset the value
# given before the command (argparse writes a subparser's defaults over it).
COMMON_DEFAULTS: dict[str, Any] = {
    "kubeconfig": None,
    "context": None,
    "namespace": None,
    "scorer": None,
    "scorer_namespace": DEFAULT_SCORER_NAMESPACE,
    "scorer_service": DEFAULT_SCORER_SERVICE,
    "scorer_port": DEFAULT_SCORER_PORT,
    "output": "table",
    "request_timeout": 10.0,
}

EXAMPLES = """\
examples:
  kubectl steer explain node gpu-node-3
  kubectl steer explain nodes -o json
  kubectl steer explain pod team-a/web-0
  kubectl steer explain pod web-0 -n team-a --context prod
  kubectl steer explain pod -f pod.yaml -n team-a        what if this pod were created
  kubectl steer audit report --limit 20
  kubectl steer policy validate policy.yaml

The scorer is reached through the apiserver (the Service proxy of
SCORER-NAMESPACE/SCORER-SERVICE, port SCORER-PORT) with your kubeconfig's credentials, which
needs `get` on services/proxy there (`create` for `explain pod -f`). --scorer URL asks a
scorer directly instead (e.g. after `kubectl -n kube-steer port-forward svc/steer-scorer 8080`).
"""


def _common_flags() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    g = common.add_argument_group("kubectl flags")
    g.add_argument(
        "--kubeconfig",
        metavar="FILE",
        default=argparse.SUPPRESS,
        help="kubeconfig file (default: $KUBECONFIG, else ~/.kube/config)",
    )
    g.add_argument(
        "--context",
        default=argparse.SUPPRESS,
        help="kubeconfig context (default: its current-context)",
    )
    g.add_argument(
        "-n",
        "--namespace",
        default=argparse.SUPPRESS,
        help="namespace of the pod (default: the context's namespace, else default)",
    )
    g.add_argument(
        "--request-timeout",
        type=float,
        metavar="SECONDS",
        default=argparse.SUPPRESS,
        help="seconds to wait for an answer (default: 10)",
    )
    s = common.add_argument_group("where the scorer is")
    s.add_argument(
        "--scorer",
        metavar="URL",
        default=argparse.SUPPRESS,
        help="ask the scorer at this URL instead of through the apiserver",
    )
    s.add_argument(
        "--scorer-namespace",
        metavar="NS",
        default=argparse.SUPPRESS,
        help=f"namespace of the scorer Service (default: {DEFAULT_SCORER_NAMESPACE})",
    )
    s.add_argument(
        "--scorer-service",
        metavar="NAME",
        default=argparse.SUPPRESS,
        help=f"the scorer Service (default: {DEFAULT_SCORER_SERVICE})",
    )
    s.add_argument(
        "--scorer-port",
        metavar="PORT",
        default=argparse.SUPPRESS,
        help=f"its port, by name or number (default: {DEFAULT_SCORER_PORT})",
    )
    common.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default=argparse.SUPPRESS,
        help="table for people, json: the scorer's answer as it is (default: table)",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common_flags()
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="kube-steer as a kubectl plugin: why a node scores as it does, where a "
        "pod may go and why not elsewhere, and whether a policy file is valid.",
        epilog=EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        parents=[common],
    )
    parser.add_argument("--version", action="version", version=f"kube-steer {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    explain = sub.add_parser(
        "explain",
        help="ask the scorer why a node scores as it does, or where a pod may go",
        description="Ask the running scorer (its /explain answers).",
    )
    what = explain.add_subparsers(dest="what", metavar="WHAT", required=True)
    node = what.add_parser(
        "node", parents=[common], help="raw values, scores, labels, taints, gates and pools"
    )
    node.add_argument("name", metavar="NAME", help="the Node's name")
    node.set_defaults(func=_explain_node)
    nodes = what.add_parser("nodes", parents=[common], help="every node's scores, labels, taints")
    nodes.set_defaults(func=_explain_nodes)
    pod = what.add_parser(
        "pod",
        parents=[common],
        help="the nodes a pod may go to by rank, and the rule that excludes each other node",
        description="Explain a pod that exists (NAME in -n's namespace, or NAMESPACE/NAME), "
        "or, with -f, a Pod or PodSpec as the webhook would steer it (what-if).",
    )
    pod.add_argument("pod", nargs="?", metavar="[NAMESPACE/]NAME", help="an existing pod")
    pod.add_argument(
        "-f",
        "--filename",
        metavar="FILE",
        help="a Pod or PodSpec manifest (YAML or JSON, '-' for stdin) instead of a pod",
    )
    pod.set_defaults(func=_explain_pod)

    audit = sub.add_parser(
        "audit", help="what an audit-mode policy would have changed (ask the scorer)"
    )
    audit_sub = audit.add_subparsers(dest="audit_command", metavar="WHAT", required=True)
    report = audit_sub.add_parser(
        "report",
        parents=[common],
        help="pods on nodes a rule would exclude, and the chosen node's rank, per rule",
    )
    report.add_argument(
        "--limit", type=int, default=100, help="judge at most this many pods (default: 100)"
    )
    report.set_defaults(func=_audit_report)

    policy = sub.add_parser("policy", help="work with SteeringPolicy files (no cluster needed)")
    policy_sub = policy.add_subparsers(dest="policy_command", metavar="ACTION", required=True)
    validate = policy_sub.add_parser(
        "validate",
        parents=[common],
        help="check a policy file; exit 0 when valid, 1 with every problem and its field path",
    )
    validate.add_argument("file", metavar="FILE", help="the policy YAML file")
    validate.set_defaults(func=_policy_validate)
    return parser


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    args = build_parser().parse_args(argv)
    for name, default in COMMON_DEFAULTS.items():
        if not hasattr(args, name):
            setattr(args, name, default)
    return args


# -- reaching the scorer ---------------------------------------------------------------------


def _scorer(args: argparse.Namespace) -> ScorerClient:
    """The scorer as the flags say: at --scorer, or through the apiserver."""
    from scorer.client import DirectScorer, ProxiedScorer

    if args.scorer:
        return DirectScorer(args.scorer, timeout_s=args.request_timeout)
    api, _namespace = _api(args)
    return ProxiedScorer(
        api,
        args.scorer_namespace,
        args.scorer_service,
        str(args.scorer_port),
        timeout_s=args.request_timeout,
    )


def _api(args: argparse.Namespace) -> Any:
    try:
        return kubectl_api_client(args.kubeconfig, args.context)
    except KubeConfigError as exc:
        raise SystemExit(f"{PROG}: {exc}") from None


def pod_namespace(args: argparse.Namespace) -> str:
    """-n, else the kubeconfig context's namespace (kubectl's rule), else `default`."""
    if args.namespace:
        return str(args.namespace)
    try:
        return kubectl_api_client(args.kubeconfig, args.context)[1]
    except KubeConfigError:
        if args.scorer:  # asked directly: no kubeconfig needed
            return "default"
        raise


def pod_target(args: argparse.Namespace) -> tuple[str, str]:
    """(namespace, name) of `explain pod [NAMESPACE/]NAME`."""
    if "/" in args.pod:
        from scorer.cli import split_pod_ref

        namespace, name = split_pod_ref(args.pod, "pod")
        if args.namespace and args.namespace != namespace:
            raise SystemExit(
                f"{PROG}: the pod {args.pod} is in namespace {namespace!r}, "
                f"but -n says {args.namespace!r}: give one of them"
            )
        return namespace, name
    return pod_namespace(args), str(args.pod)


# -- commands --------------------------------------------------------------------------------


def _explain_node(args: argparse.Namespace) -> int:
    from scorer.cli import explain_node

    return explain_node(_scorer(args), args.name, args.output)


def _explain_nodes(args: argparse.Namespace) -> int:
    from scorer.cli import explain_nodes

    return explain_nodes(_scorer(args), args.output)


def _explain_pod(args: argparse.Namespace) -> int:
    from scorer.cli import explain_pod_manifest, explain_pod_ref

    if args.filename and args.pod:
        raise SystemExit(f"{PROG} explain pod: give a pod or -f FILE, not both")
    if args.filename:
        # -n, else the manifest's namespace, else the context's (as `kubectl apply -f`).
        return explain_pod_manifest(
            _scorer(args), args.filename, args.namespace, args.output, lambda: pod_namespace(args)
        )
    if not args.pod:
        raise SystemExit(f"{PROG} explain pod: give [NAMESPACE/]NAME, or -f FILE for a manifest")
    namespace, name = pod_target(args)
    return explain_pod_ref(_scorer(args), namespace, name, args.output)


def _audit_report(args: argparse.Namespace) -> int:
    from scorer.cli import audit_report

    return audit_report(_scorer(args), args.limit, args.output)


def _policy_validate(args: argparse.Namespace) -> int:
    return validate_policy(args.file, "json" if args.output == "json" else "text")


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result: int = args.func(args)
    except KubeConfigError as exc:
        raise SystemExit(f"{PROG}: {exc}") from None
    return result


if __name__ == "__main__":
    sys.exit(main())
