"""What the scorer keeps per object, measured with tracemalloc (deterministic for one Python):
at 100,000 pods and 5,000 nodes these set its memory (bench/scale_scorer.py measures the
process: 285 MiB steady), and what a relist of the pod ledger costs beside it."""

from __future__ import annotations

import copy
import json
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from scorer.model import NodeState
from scorer.watch.ledger import PodLedger
from scorer.watch.nodes import NodeCache

FIXTURES = Path(__file__).parent / "fixtures"


def kept_bytes(fill: Callable[[], object]) -> int:
    """Bytes still allocated after `fill()` returns (what the structure it fills keeps)."""
    tracemalloc.start()
    try:
        keep = fill()
        current, _peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    del keep
    return current


def tenant_pods(count: int) -> Iterator[dict[str, Any]]:
    """A captured pod (2.4 KB of JSON) as a bound tenant pod with pool requests, `count` times."""
    review = json.loads((FIXTURES / "admission" / "pod-create-user-mutating.json").read_text())
    pod = review["body"]["request"]["object"]
    for i in range(count):
        copy_ = copy.deepcopy(pod)
        copy_["metadata"].update(name=f"p-{i}", uid=f"uid-{i:08d}", namespace=f"ns-{i % 50}")
        copy_["spec"]["nodeName"] = f"node-{i % 500:04d}"
        copy_["spec"]["containers"][0]["resources"] = {
            "limits": {"cpu": "500m", "memory": "512Mi"},
            "requests": {
                "cpu": "250m",
                "memory": "256Mi",
                "kube-steer.github.io/pool-cpu": "500",
                "kube-steer.github.io/pool-memory": "512",
            },
        }
        copy_["status"] = {"phase": "Running"}
        yield copy_


POOL_SPEC = {
    "containers": [
        {
            "name": "app",
            "image": "registry.example.com/app:1",
            "resources": {
                "limits": {"cpu": "500m", "memory": "512Mi"},
                "requests": {"cpu": "250m", "kube-steer.github.io/pool-cpu": "500"},
            },
        }
    ]
}


def listed_pods(count: int, nodes: int = 5000) -> Iterator[dict[str, Any]]:
    """`count` bound pods as a list streams them: each one decoded anew (its uid and node name
    are strings of its own), with uids shaped like the apiserver's."""
    for i in range(count):
        yield {
            "metadata": {"uid": f"{i:08x}-5e1f-4c2a-9d3b-{i * 7919:012x}", "name": f"p-{i}"},
            "spec": {**POOL_SPEC, "nodeName": f"node-{i % nodes:05d}"},
            "status": {"phase": "Running"},
        }


def real_sized_nodes(count: int) -> Iterator[dict[str, Any]]:
    """A captured Node given what a real one carries besides (35 images: 8-10 KB of JSON)."""
    node = json.loads((FIXTURES / "api" / "node-get.json").read_text())["body"]
    node["status"]["images"] = [
        {"names": [f"registry.example.com/team/image-{i}@sha256:{'ab' * 32}"], "sizeBytes": i}
        for i in range(35)
    ]
    for i in range(count):
        copy_ = copy.deepcopy(node)
        copy_["metadata"].update(name=f"node-{i:05d}", resourceVersion=str(i))
        yield copy_


def test_the_pod_ledger_keeps_under_700_bytes_a_pod() -> None:
    pods = 5000
    ledger = PodLedger()
    kept = kept_bytes(lambda: ledger.replace(tenant_pods(pods)))
    assert len(ledger) == pods
    assert kept / pods < 700, f"{kept / pods:.0f} bytes a pod"


def test_the_node_cache_keeps_no_image_list() -> None:
    nodes = 2000
    sample = next(real_sized_nodes(1))
    assert len(json.dumps(sample)) > 4000
    cache = NodeCache()
    kept = kept_bytes(
        lambda: cache.replace(NodeState.from_k8s(obj) for obj in real_sized_nodes(nodes))
    )
    assert len(cache) == nodes
    assert kept / nodes < 1600, f"{kept / nodes:.0f} bytes a node"


def test_a_relist_of_100000_pods_holds_one_copy_of_the_ledger() -> None:
    """The list after a 410 Gone: the new map is built beside the old one, but an unchanged pod
    keeps its entry and its key, so the peak above the steady ledger is the new map's table
    (0.24x measured; 0.99x when every entry and uid was held twice)."""
    pods = 100_000
    ledger = PodLedger()
    tracemalloc.start()
    try:
        ledger.replace(listed_pods(pods))
        steady, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        changed = ledger.replace(listed_pods(pods - 1))  # one pod gone since
        after, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert changed == {f"node-{(pods - 1) % 5000:05d}"} and len(ledger) == pods - 1
    growth = (peak - steady) / steady
    assert growth < 0.5, f"a relist grew memory by {growth:.2f}x the ledger's {steady:,} bytes"
    assert after < 1.01 * steady, (after, steady)  # and no bigger after it
