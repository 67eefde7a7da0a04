"""`python -m kits.apistub`: serve a synthetic cluster until interrupted (for the demo and local
runs of the webhook against a stand-in apiserver)."""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Sequence

from kits.apistub.server import ApiStub
from kits.apistub.synthetic import DEFAULT_ZONES, seed_nodes


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=6443, help="port to listen on (0: any free)")
    parser.add_argument("--nodes", type=int, default=10, help="synthetic nodes to create")
    parser.add_argument(
        "--zones",
        default=",".join(DEFAULT_ZONES),
        help="comma-separated topology zones the nodes are spread over",
    )
    parser.add_argument(
        "--gpu-every", type=int, default=0, help="give every Nth node 8 GPUs (0: no GPUs)"
    )
    parser.add_argument(
        "--namespace",
        action="append",
        default=[],
        metavar="NAME[:KEY=VALUE,...]",
        help="extra namespace with labels, e.g. team-a:kube-steer.github.io/tenant=dept-a (repeatable)",
    )
    parser.add_argument("--kubeconfig", help="write a kubeconfig for this server to this path")
    parser.add_argument("--tls-cert", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--tls-key", help="private key (PEM) for --tls-cert")
    parser.add_argument(
        "--watch-window", type=int, default=10000, help="past events a watch can resume from"
    )


def _namespace_spec(spec: str) -> tuple[str, dict[str, str]]:
    name, _, label_text = spec.partition(":")
    labels = {}
    for pair in filter(None, label_text.split(",")):
        key, sep, value = pair.partition("=")
        if not sep:
            raise SystemExit(f"--namespace {spec}: label {pair!r} must be KEY=VALUE")
        labels[key] = value
    return name, labels


def run(args: argparse.Namespace) -> int:
    if bool(args.tls_cert) != bool(args.tls_key):
        raise SystemExit("--tls-cert and --tls-key go together: give both or neither")
    tls = (args.tls_cert, args.tls_key) if args.tls_cert else None
    stub = ApiStub.start(args.host, args.port, tls=tls, watch_window=args.watch_window)
    try:
        for spec in args.namespace:
            stub.add_namespace(*_namespace_spec(spec))
        zones = tuple(z for z in args.zones.split(",") if z)
        seed_nodes(stub, args.nodes, zones=zones, gpu_every=args.gpu_every)
        print(f"apistub serving {args.nodes} nodes at {stub.url}", flush=True)
        if args.kubeconfig:
            print(f"kubeconfig: {stub.kubeconfig(args.kubeconfig)}", flush=True)
        stopped = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stopped.set())
        with contextlib.suppress(KeyboardInterrupt):
            stopped.wait()
    finally:
        stub.stop()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m kits.apistub",
        description="Serve a synthetic Kubernetes API (nodes, namespaces, pods, leases) that "
        "enforces the apiserver's label, conflict and patch rules.",
    )
    _add_arguments(parser)
    return run(parser.parse_args(argv))
