"""The product's scorer run on recorded readings: what it writes to the nodes of the scheduler
bench, without a Prometheus.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import yaml

from kits.control_plane import ControlPlane
from scorer.cycle.observe import read_dimension
from scorer.cycle.service import Scorer
from scorer.cycle.sources import Readings, SourceRequest
from scorer.cycle.writer import NodeApi
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import KubeJson
from steer.adapters.prometheus import Sample
from steer.core.policy import Policy

from . import ROOT
from .nodes import BareNode

EXAMPLE_POLICY = ROOT / "examples" / "policy.yaml"
SCORER_WRITE_QPS = 1000  # the policy's maximum; the example's 20 would take minutes


class RecordedSource:
    """Fixed readings, `values[dimension][node]`, answered as the Prometheus source answers a
    cycle (each node identified by its name in the dimension's nodeLabel)."""

    def __init__(self, values: Mapping[str, Mapping[str, float]]) -> None:
        self.values = values

    def read(self, request: SourceRequest) -> Readings:
        dimensions, index, at = request.dimensions, request.index, request.at
        observed_at = time.time() if at is None else at
        out = Readings()
        for dim in dimensions:
            samples = [
                Sample({dim.node_label: node}, value)
                for node, value in self.values.get(dim.name, {}).items()
            ]
            out.readings[dim.name] = read_dimension(
                dim, samples, observed_at=observed_at, index=index
            )
        return out

    def close(self) -> None:
        pass


def bench_policy_text(write_qps: int = SCORER_WRITE_QPS) -> str:
    """examples/policy.yaml with the scorer's write rates raised (labels, and the status
    resources written first at their own rate), nothing else changed."""
    doc = yaml.safe_load(EXAMPLE_POLICY.read_text())
    scoring = doc["spec"]["scoring"]
    for key in ("writeQps", "writeBurst", "resourceWriteQps", "resourceWriteBurst"):
        scoring[key] = write_qps
    return yaml.safe_dump(doc, sort_keys=False)


def score_nodes(
    plane: ControlPlane,
    policy: Policy,
    values: Mapping[str, Mapping[str, float]],
    cycles: int = 2,
) -> list[dict[str, Any]]:
    """Run the real scorer `cycles` times on recorded readings and no pods (a synced, empty
    ledger, so the budget pools are published); its write reports, one per cycle."""
    ledger = PodLedger()
    ledger.replace([])
    scorer = Scorer(
        lambda: policy,
        NodeApi(KubeJson(plane.api_client())),
        ledger=ledger,
        sources={"prometheus": RecordedSource(values)},
    )
    reports = []
    try:
        for _ in range(cycles):
            result = scorer.run_cycle(at=time.time())
            report = result.report
            if report is None or report.errors:
                errors = report.errors[:3] if report else "nothing written"
                raise RuntimeError(f"scorer cycle failed: {errors}")
            reports.append(
                {
                    "nodes_written": report.nodes_written,
                    "requests": report.requests,
                    "list_s": round(result.list_s, 2),
                    "compute_s": round(result.compute_s, 2),
                    "write_s": round(result.write_s, 2),
                }
            )
    finally:
        scorer.close()
    return reports


# Seeded readings for the scorer: spread so the score buckets vary, some nodes over each
# tenant's budget, a few unhealthy ones, a few GPU nodes hot.
UNHEALTHY_SHARE = 0.05
HOT_SHARE = 0.10
OVERCOMMIT_SHARE = 0.8  # nodes with a reading at all: the others carry no overcommit-pct


def scorer_readings(nodes: Sequence[BareNode], seed: int) -> dict[str, dict[str, float]]:
    rng = random.Random(seed)
    gpu = [n.name for n in nodes if n.gpus]
    names = [n.name for n in nodes]
    return {
        "gpu-util": {
            n: 97.0 if rng.random() < HOT_SHARE else float(rng.randint(0, 85)) for n in gpu
        },
        "gpu-free": {n: float(rng.randint(0, 8)) for n in gpu},
        "gpu-frag": {n: rng.random() for n in gpu},
        "power": {n: float(rng.randint(100, 900)) for n in names},
        # What a core of work costs and what an idle node draws: the default composite's
        # energy terms, so nodes differ in `score` as they would in a cluster.
        "core-power": {n: round(rng.uniform(4.0, 12.0), 2) for n in names},
        "idle-power": {n: float(rng.randint(100, 300)) for n in names},
        "overcommit-pct": {
            n: float(rng.randint(-30, 15)) for n in names if rng.random() < OVERCOMMIT_SHARE
        },
        "health": {n: 0.0 if rng.random() < UNHEALTHY_SHARE else 1.0 for n in names},
    }


SCORER_READINGS = (
    f"power 100-900 W, core-power 4-12 W per core, idle-power 100-300 W and health 1 on every "
    f"node ({UNHEALTHY_SHARE:.0%} at 0), overcommit-pct "
    f"-30..15 on {OVERCOMMIT_SHARE:.0%}, GPU nodes gpu-util 0..85 ({HOT_SHARE:.0%} at 97), "
    "gpu-free 0..8, gpu-frag 0..1"
)


def node_summary(policy: Policy, nodes: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """How many nodes carry each of the scorer's labels, taints and resources (pools, gates)."""
    prefix = policy.spec.label_prefix
    # Resources may live under their own prefix (one with `kubernetes.io/` in it).
    resource_prefix: str = getattr(policy.spec, "resource_prefix", prefix)
    counts: Counter[str] = Counter()
    for node in nodes:
        for key in node["metadata"].get("labels") or {}:
            if key.startswith(prefix):
                counts["label " + key.removeprefix(prefix)] += 1
        for taint in node.get("spec", {}).get("taints") or ():
            if taint["key"].startswith(prefix):
                counts[f"taint {taint['key'].removeprefix(prefix)}:{taint['effect']}"] += 1
        for resource in node.get("status", {}).get("allocatable") or {}:
            if resource.startswith((prefix, resource_prefix)):
                counts["resource " + resource] += 1
    return dict(sorted(counts.items()))
