"""The scheduler bench's options change only what they say (bench/benchkit/shapes.py)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from bench.benchkit.shapes import OPTIONS, PREFERRED, SHAPE_BY_NAME, SHAPES, shape_pods
from steer.adapters.policy_file import load_policy_file
from steer.core.mutation import MutationPlan
from steer.core.scheduling import term_matches

ROOT = Path(__file__).resolve().parent.parent
PLAN = MutationPlan.from_policy(load_policy_file(str(ROOT / "examples" / "policy.yaml")))


def normalised(terms: list[dict[str, Any]], nodes: list[dict[str, str]]) -> list[int]:
    """NodeAffinity Score then its NormalizeScore, as kube-scheduler computes them: the sum of
    the weights of the matching terms, times 100 over the largest sum (integer division)."""
    raw = [sum(t["weight"] for t in terms if term_matches(t["preference"], n)) for n in nodes]
    top = max(raw)
    return [100 * r // top if top else 0 for r in raw]


def test_merged_terms_score_every_node_as_the_webhooks_terms_do() -> None:
    pods = shape_pods(PLAN, next(o for o in OPTIONS if o.name == "no-tenant:merged"))
    original = shape_pods(PLAN, SHAPE_BY_NAME["no-tenant"]).steered["spec"]["affinity"]
    terms = original["nodeAffinity"][PREFERRED]
    merged = pods.steered["spec"]["affinity"]["nodeAffinity"][PREFERRED]
    assert len(merged) == len(terms) - 1 and max(t["weight"] for t in merged) <= 100
    buckets = [str(b) for b in range(0, 101, 10)] + [None]
    reserved = [None, "true"]
    # Every set of three nodes a pod could choose between, over every bucket and reservation.
    kinds = []
    for bucket, held in itertools.product(buckets, reserved):
        labels = {}
        if bucket is not None:
            labels["kube-steer.github.io/score"] = bucket
        if held is not None:
            labels["kube-steer.github.io/reserved-for-gpu"] = held
        kinds.append(labels)
    for trio in itertools.combinations(kinds, 3):
        assert normalised(merged, list(trio)) == normalised(terms, list(trio)), trio


@pytest.mark.parametrize("option", OPTIONS, ids=lambda o: o.name)
def test_an_option_keeps_its_shapes_twin_and_changes_only_the_steered_pod(option: Any) -> None:
    assert option.option_of in {s.name for s in SHAPES}
    of = shape_pods(PLAN, SHAPE_BY_NAME[option.option_of])
    pods = shape_pods(PLAN, option)
    assert pods.twin == of.twin
    assert pods.steered != of.steered
    # What the option does not touch stays as the webhook made it.
    for key in ("schedulerName", "tolerations"):
        assert pods.steered["spec"].get(key) == of.steered["spec"].get(key)
    assert pods.steered["metadata"] == of.steered["metadata"]
