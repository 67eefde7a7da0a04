"""`kubectl steer`: the kubectl plugin's front (the `kubectl-steer` executable on PATH).

It offers the client commands of the tree (explain, audit report, policy validate), with
their `steer` handlers. kubectl runs `kubectl-steer` with every word after `steer` and no flag
of its own, so the plugin reads kubectl's flags itself: `--kubeconfig`, `--context`,
`-n/--namespace` (and $KUBECONFIG, which kubectl passes on in the environment), anywhere on
the line. It asks the scorer through the apiserver's Service proxy with the kubeconfig's
credentials (no port-forward), or at `--scorer URL`; either way the scorer is shown the
user's bearer token (the kubeconfig's, or `--token`) and answers what that user may read.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from launcher.explain import split_pod_ref
from launcher.front import CommandParser, Front, PodManifest, PodRef
from launcher.scorer_client import DirectScorer, ProxiedScorer, ScorerClient, kubeconfig_token
from steer import __version__
from steer.adapters.kube import KubeConfigError, kubectl_api_client

PROG = "kubectl steer"
DEFAULT_SCORER_NAMESPACE = "kube-steer"
DEFAULT_SCORER_SERVICE = "steer-scorer"
DEFAULT_SCORER_PORT = "http"

# The commands of the tree the plugin offers: those that ask the scorer or need no cluster.
KUBECTL_COMMANDS = frozenset(
    {"explain node", "explain nodes", "explain pod", "audit report", "page", "policy validate"}
)

# Flags every command takes, before or after the command words (as kubectl's own flags).
# Defaults are applied after parsing: a subcommand's copy of a flag must not reset the value
# given before the command (argparse writes a subparser's defaults over it).
COMMON_DEFAULTS: dict[str, Any] = {
    "kubeconfig": None,
    "context": None,
    "token": None,
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
  kubectl steer page                                    the explain page at http://127.0.0.1:8001/
  kubectl steer policy validate policy.yaml

The scorer is reached through the apiserver (the Service proxy of
SCORER-NAMESPACE/SCORER-SERVICE, port SCORER-PORT) with your kubeconfig's credentials, which
needs `get` on services/proxy there (`create` for `explain pod -f`). The scorer then answers
what you may read: a pod's explanation needs `get pods` in its namespace, a node's `get
nodes`, the audit `list pods` and `list nodes`. It reviews your bearer token (the kubeconfig's,
or --token: a kubeconfig user with a client certificate has none to pass on). --scorer URL asks
a scorer directly instead (e.g. after `kubectl -n kube-steer port-forward svc/steer-scorer
8080`).
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
        "--token",
        default=argparse.SUPPRESS,
        help="bearer token for the apiserver and the scorer (default: the kubeconfig user's)",
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


class KubectlFront(Front):
    """`kubectl steer`: the client commands, kubectl's flags on every one (before or after
    the command words), the scorer through the apiserver."""

    prog = PROG
    commands = KUBECTL_COMMANDS

    def __init__(self) -> None:
        # One parser of the common flags, parent of the root and of every command.
        self._common = _common_flags()

    def root_parser(self) -> CommandParser:
        parser = CommandParser(
            prog=PROG,
            # Broken by hand: the raw formatter, which keeps the examples' columns, wraps nothing.
            description="kube-steer as a kubectl plugin: why a node scores as it does, where a pod\n"
            "may go and why not elsewhere, and whether a policy file is valid.",
            epilog=EXAMPLES,
            formatter_class=argparse.RawDescriptionHelpFormatter,
            parents=[self._common],
        )
        parser.add_argument("--version", action="version", version=f"kube-steer {__version__}")
        return parser

    def add_command(self, actions: Any, name: str, **kwargs: Any) -> argparse.ArgumentParser:
        parser: argparse.ArgumentParser = actions.add_parser(name, parents=[self._common], **kwargs)
        return parser

    def add_report_format(self, parser: argparse.ArgumentParser) -> None:
        """-o json is a common flag: a JSON report, anything else text."""

    def add_scorer_flags(self, parser: argparse.ArgumentParser) -> None:
        """The common flags say where the scorer is."""

    def add_pod_arguments(self, parser: argparse.ArgumentParser) -> None:
        parser.description = (
            "Explain a pod that exists (NAME in -n's namespace, or NAMESPACE/NAME), "
            "or, with -f, a Pod or PodSpec as the webhook would steer it (what-if)."
        )
        parser.add_argument("pod", nargs="?", metavar="[NAMESPACE/]NAME", help="an existing pod")
        parser.add_argument(
            "-f",
            "--filename",
            metavar="FILE",
            help="a Pod or PodSpec manifest (YAML or JSON, '-' for stdin) instead of a pod",
        )

    def pod(self, args: argparse.Namespace) -> PodRef | PodManifest:
        if args.filename and args.pod:
            raise SystemExit(f"{PROG} explain pod: give a pod or -f FILE, not both")
        if args.filename:
            # -n, else the manifest's namespace, else the context's (as `kubectl apply -f`).
            return PodManifest(args.filename, args.namespace, lambda: pod_namespace(args))
        if not args.pod:
            raise SystemExit(
                f"{PROG} explain pod: give [NAMESPACE/]NAME, or -f FILE for a manifest"
            )
        return PodRef(*pod_target(args))

    def scorer(self, args: argparse.Namespace) -> ScorerClient:
        """The scorer as the flags say: at --scorer, or through the apiserver."""
        if args.scorer:
            token = args.token
            if token is None:
                try:  # the kubeconfig's user, if there is a kubeconfig
                    token = kubeconfig_token(kubectl_api_client(args.kubeconfig, args.context)[0])
                except KubeConfigError:
                    token = None
            return DirectScorer(args.scorer, timeout_s=args.request_timeout, token=token)
        api, _namespace = _api(args)
        if args.token:  # as kubectl's --token: the apiserver's credential too
            api.configuration.api_key = {"BearerToken": f"Bearer {args.token}"}
            api.configuration.refresh_api_key_hook = None
        return ProxiedScorer(
            api,
            args.scorer_namespace,
            args.scorer_service,
            str(args.scorer_port),
            timeout_s=args.request_timeout,
            token=args.token,
        )

    def parse_args(
        self, parser: argparse.ArgumentParser, argv: Sequence[str] | None
    ) -> argparse.Namespace:
        args = parser.parse_args(argv)
        for name, default in COMMON_DEFAULTS.items():
            if not hasattr(args, name):
                setattr(args, name, default)
        return args

    def run(self, args: argparse.Namespace) -> int:
        try:
            return super().run(args)
        except KubeConfigError as exc:
            raise SystemExit(f"{PROG}: {exc}") from None


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
        namespace, name = split_pod_ref(args.pod, "pod")
        if args.namespace and args.namespace != namespace:
            raise SystemExit(
                f"{PROG}: the pod {args.pod} is in namespace {namespace!r}, "
                f"but -n says {args.namespace!r}: give one of them"
            )
        return namespace, name
    return pod_namespace(args), str(args.pod)
