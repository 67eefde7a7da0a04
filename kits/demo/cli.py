"""`python -m kits.demo`: the no-cluster demo's command line.

    python -m kits.demo                          # `make demo`: the whole loop, then exit
    python -m kits.demo --serve                  # ... and keep it up until Ctrl-C
    python -m kits.demo --output json            # the verdicts and node table as JSON
    python -m kits.demo scorer once --dry-run    # one `steer scorer` command line on the cluster
    python -m kits.demo scorer run --listen 127.0.0.1:8080

With no command, the whole loop (kits/demo/loop.py): the scorer and the webhook on the demo
cluster, example pods through admission, the verdicts. With `scorer once|run ...`, that
`steer` command line with `--policy`, `--prometheus` and `--kubeconfig` pointing at the demo
cluster (kits/demo/environment.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence

from kits.demo.environment import DemoEnvironment, demo_environment
from kits.demo.loop import run_loop, serve_args, stop_on_signals
from launcher.commands import main as steer_main

USAGE = """\
usage: python -m kits.demo [--serve] [--output text|json]
       python -m kits.demo scorer once|run [FLAG ...]

On a synthetic 6-node GPU cluster (a synthetic exporter, a real Prometheus and the Kubernetes
API stand-in; no external services):

With no command, the whole loop: `steer scorer run` and `steer webhook serve` (TLS) on the
cluster, example pods sent through admission as the apiserver sends them (/mutate, the patch
applied, /validate), and per pod what the webhook added, whether it was admitted and where
the scorer says it may go; then the scorer's node table. --serve keeps everything up, the
explain page at the scorer's URL, until Ctrl-C; --output json prints one JSON document.

With `scorer once` or `scorer run`, that `steer` command line: --policy, --prometheus and
--kubeconfig are the demo's; every other flag is the command's (`steer scorer once --help`)."""


def demo_command(command: Sequence[str], env: DemoEnvironment) -> list[str]:
    """The `steer` command line that runs `command` (`scorer once|run ...`) on `env`."""
    args = [*command, "--policy", str(env.policy_file), "--prometheus", env.prometheus_url]
    args += ["--kubeconfig", str(env.kubeconfig)]
    if command[1] == "once" and "--cycles" not in command:
        args += ["--cycles", "2"]  # the second cycle sets the debounced taints
    if command[1] == "run" and "--lease-namespace" not in command:
        # the stand-in has no project namespace; the Lease goes where a pod would put it
        args += ["--lease-namespace", os.environ.get("POD_NAMESPACE", "default")]
    if command[1] == "run" and not any(a.startswith("--authorization") for a in command):
        # No cluster to review callers with: the demo's scorer answers anyone on loopback.
        args += ["--authorization", "none"]
    return args


def main(argv: Sequence[str] | None = None) -> int:
    command = list(sys.argv[1:] if argv is None else argv)
    if command[:1] in (["-h"], ["--help"]):
        print(USAGE)
        return 0
    if command[:2] in (["scorer", "once"], ["scorer", "run"]):
        print(
            "starting the demo: synthetic exporter, Prometheus, Kubernetes API stand-in ...",
            file=sys.stderr,
        )
        with demo_environment() as env:
            return steer_main(demo_command(command, env))
    loop_args = serve_args(command)
    if loop_args is None:
        print(USAGE, file=sys.stderr)
        return 2
    output, serve = loop_args
    with stop_on_signals():
        try:
            return run_loop(output=output, serve=serve)
        except KeyboardInterrupt:
            # Stopped while starting: everything started is stopped by now.
            print("stopped: every process ended, temporary folders removed", file=sys.stderr)
            return 130


if __name__ == "__main__":
    sys.exit(main())
