"""How many of the product's files one scoring cycle and one admission review pass through.

A measure of the house, not of speed: the files whose functions run (a `call` event seen by a
profiler on every thread) while

- one steady scoring cycle of the example policy runs from the readings to the writes (the
  second: the first also diagnoses each dimension's data), a node whose kube-steer labels
  were taken off to write again: 3 synthetic
  GPU nodes, their DCGM, Kepler and kube-state-metrics series backfilled into a real
  Prometheus, the Kubernetes API stand-in, a synced (empty) pod ledger so that gates and pools
  are planned, a pod on each node (every dimension has its series), and the cycle as
  leader (every node written);
- the webhook's handler answers one AdmissionReview of a GPU pod in an opted-in namespace,
  unlike any before: an annotation, part of the decision cache's key, differs (no cached
  decision).

Imports and start-up happen before the profiler starts. Product files only (steer, scorer,
webhook, controller, certs, launcher).

    .venv/bin/python bench/files_crossed.py            # both counts and the files
"""

from __future__ import annotations

import argparse
import importlib
import io
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kits.apistub import ApiStub  # noqa: E402
from kits.apistub.synthetic import synthetic_node  # noqa: E402
from kits.demo.environment import demo_policy_text  # noqa: E402
from kits.prometheus_server import PrometheusServer  # noqa: E402
from kits.synthetic_exporter import SyntheticCluster  # noqa: E402

PRODUCT = ("steer", "scorer", "webhook", "controller", "certs", "launcher")


def _first(*names: str) -> Any:
    """The first of these modules that exists (the house may have moved a room)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError:
            continue
    raise ModuleNotFoundError(names[0])


def files_run(action: Callable[[], object]) -> list[str]:
    seen: set[str] = set()

    def profile(frame: FrameType, event: str, _arg: object) -> None:
        if event == "call":
            seen.add(frame.f_code.co_filename)

    threading.setprofile(profile)  # type: ignore[arg-type]
    sys.setprofile(profile)  # type: ignore[arg-type]
    try:
        action()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]
    out = []
    for name in seen:
        path = Path(name)
        if path.is_relative_to(ROOT) and path.relative_to(ROOT).parts[0] in PRODUCT:
            out.append(str(path.relative_to(ROOT)))
    return sorted(out)


def one_cycle(workdir: Path) -> list[str]:
    service = _first("scorer.cycle.service", "scorer.service")
    writer = _first("scorer.cycle.writer", "scorer.writer")
    ledger_mod = _first("scorer.watch.ledger", "scorer.ledger")
    from kubernetes import config

    from steer.adapters.kubejson import KubeJson
    from steer.core.policy import parse_policy

    cluster = SyntheticCluster(nodes=3, gpus_per_node=8)
    for i, name in enumerate(cluster.node_names):  # every dimension has its series
        cluster.add_container(
            name, "team-a", f"app-{i}", requests={"cpu": 1, "memory": 2**30}, limits={"cpu": 2}
        )
    now = time.time()
    text = io.StringIO()
    cluster.write_openmetrics(text, [now - 120 + 15 * i for i in range(9)])
    prom = PrometheusServer([])
    prom.backfill(text.getvalue())
    stub = ApiStub.start()
    try:
        with prom:
            for name in cluster.node_names:
                stub.add_node(synthetic_node(name, gpus=8))
            kubeconfig = stub.kubeconfig(workdir / "kubeconfig")
            api = config.new_client_from_config(config_file=str(kubeconfig))
            policy = parse_policy(demo_policy_text(prom.url))
            ledger = ledger_mod.PodLedger()
            ledger.replace([])
            scorer = service.Scorer(lambda: policy, writer.NodeApi(KubeJson(api)), ledger=ledger)
            try:
                scorer.run_cycle()  # the first cycle also diagnoses each dimension's data

                def unsteer(node: dict[str, Any]) -> dict[str, Any]:
                    labels = node["metadata"]["labels"]
                    for key in [k for k in labels if k.startswith("kube-steer.github.io/")]:
                        del labels[key]
                    return node

                stub.modify("nodes", cluster.node_names[0], unsteer)  # a node to write again
                return files_run(scorer.run_cycle)
            finally:
                scorer.close()
    finally:
        stub.stop()


def one_review() -> list[str]:
    """One review of a pod unlike any before (`gpu-template-new` of bench/webhook_inprocess.py:
    an annotation, part of the decision cache's key, counts up), after one that warms up."""
    from bench.webhook_inprocess import bodies, in_process_handler

    warm_up, measured = bodies("gpu-template-new", 2)
    with in_process_handler() as handle:
        handle(warm_up)  # first-use work out of the count
        return files_run(lambda: handle(measured))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quiet", action="store_true", help="print the counts only")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for what, files in (
            ("one scoring cycle", one_cycle(Path(tmp))),
            ("one admission review", one_review()),
        ):
            print(f"{what}: {len(files)} files")
            if not args.quiet:
                print("".join(f"  {f}\n" for f in files), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
