"""The webhook's admission logic in process: µs per review through `AdmissionHandler.handle`.

No server, no TLS: what `bench/webhook_bench.py` divides by the bare app's cost, measured alone.
The captured GPU review (tests/fixtures/admission/pod-create-with-affinity-gpu.json, tenant
dept-a's namespace, the example policy) is sent three ways:

- `gpu`: as captured, again and again (the pods of one template: the decision cache answers);
- `gpu-new`: a label no rule reads counts up (the cache's key leaves it out: one verdict);
- `gpu-template-new`: an annotation counts up (part of the key: every pod is decided, as the
  first pod of a new template is).

Each is timed over --reviews reviews after a warm-up, --repeat times; the best and the median
are reported (other work on a small machine only ever slows a repeat down).

    .venv/bin/python bench/webhook_inprocess.py [--reviews 3000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from prometheus_client import CollectorRegistry  # noqa: E402

from kits.apistub import ApiStub  # noqa: E402
from steer.adapters.kube import make_api_client  # noqa: E402
from steer.adapters.policy_file import PolicyWatcher  # noqa: E402
from webhook.handler import AdmissionHandler  # noqa: E402
from webhook.metrics import WebhookMetrics  # noqa: E402
from webhook.namespaces import NamespaceCache  # noqa: E402

FIXTURE = ROOT / "tests" / "fixtures" / "admission" / "pod-create-with-affinity-gpu.json"
POLICY = ROOT / "examples" / "policy.yaml"
NAMESPACE = "team-a"
NAMESPACE_LABELS = {"tenant": "dept-a", "kube-steer.github.io/enabled": "true"}


def bodies(kind: str, count: int) -> list[bytes]:
    review: dict[str, Any] = json.loads(FIXTURE.read_text())["body"]
    review["request"]["namespace"] = NAMESPACE
    metadata = review["request"]["object"]["metadata"]
    metadata["namespace"] = NAMESPACE
    out = []
    for i in range(count):
        if kind == "gpu-new":
            metadata.setdefault("labels", {})["bench-pod"] = f"{i:08d}"
        elif kind == "gpu-template-new":
            metadata.setdefault("annotations", {})["bench-pod"] = f"{i:08d}"
        out.append(json.dumps(review).encode())
    return out


def timed(handle: Callable[[bytes], object], sent: list[bytes]) -> float:
    started = time.perf_counter()
    for body in sent:
        handle(body)
    return (time.perf_counter() - started) / len(sent) * 1e6


@contextlib.contextmanager
def in_process_handler() -> Iterator[Callable[[bytes], object]]:
    """`/mutate` of an `AdmissionHandler` over the example policy, the namespace `NAMESPACE`
    known to its namespace watch (the API stand-in serves it)."""
    stub = ApiStub.start()
    try:
        stub.add_namespace(NAMESPACE, NAMESPACE_LABELS)
        with tempfile.TemporaryDirectory() as tmp:
            kubeconfig = str(stub.kubeconfig(Path(tmp) / "kubeconfig"))
            cache = NamespaceCache(lambda: make_api_client(kubeconfig))
            cache.start()
            try:
                if not cache.wait_synced(10):
                    raise RuntimeError("the namespace watch did not sync")
                handler = AdmissionHandler(
                    PolicyWatcher(str(POLICY)), cache, WebhookMetrics(CollectorRegistry())
                )
                yield lambda body: handler.handle("mutate", body)
            finally:
                cache.stop()
    finally:
        stub.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reviews", type=int, default=3000, help="reviews per repeat")
    parser.add_argument("--repeat", type=int, default=5, help="repeats of each kind")
    args = parser.parse_args(argv)
    with in_process_handler() as handle:
        print("| review | µs per review, best | median |\n|---|---:|---:|")
        for kind in ("gpu", "gpu-new", "gpu-template-new"):
            # Distinct bodies for every repeat: none is answered from an earlier one's.
            sent = bodies(kind, args.reviews * (args.repeat + 1))
            timed(handle, sent[: args.reviews])  # warm-up
            runs = [
                timed(handle, sent[args.reviews * (r + 1) : args.reviews * (r + 2)])
                for r in range(args.repeat)
            ]
            print(f"| {kind} | {min(runs):.1f} | {statistics.median(runs):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
