"""The node writer against the Kubernetes API stand-in: merge patches of owned keys only,
taint merges with resourceVersion, 409 retries, 422 reporting, the rate limiter."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from tests.scorer_support import SMALL_POLICY, readings_for, small_policy

POLICY = small_policy()
T0 = 1_800_000_000.0
HOT = {"util": {"c": 95.0}, "overcommit-pct": {"c": 12.0}}
FOREIGN_TAINTS = [
    {
        "key": "node.kubernetes.io/unreachable",
        "effect": "NoExecute",
        "timeAdded": "2026-11-30T03:58:30Z",
    },
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
]


class NoSleep:
    def __init__(self) -> None:
        self.slept: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.slept.append(seconds)


@pytest.fixture
def api(apistub: ApiStub, kube_client: client.ApiClient) -> NodeApi:
    node = synthetic_node(
        "c", labels={"team.example.com/owner": "ml", "kube-steer.github.io/not-ours": "1"}
    )
    node["spec"]["taints"] = FOREIGN_TAINTS
    apistub.add_node(node)
    return NodeApi(KubeJson(kube_client))


def writer(api: NodeApi, sleep: NoSleep | None = None) -> NodeWriter:
    return NodeWriter(api, RateLimiter(1000, 1000), sleep=sleep or NoSleep())


def hot_plans(api: NodeApi, cycles: int = 2) -> tuple[Any, Any]:
    """Plan `cycles` cycles of a hot node, writing each; return the last plan and nodes."""
    memory = ScorerMemory()
    w = writer(api)
    for i in range(cycles):
        nodes = api.list_nodes()
        plan, memory = plan_cycle(
            POLICY, nodes, readings_for(POLICY, nodes, HOT, T0 + i), memory, T0 + i
        )
        if i < cycles - 1:
            w.apply(POLICY, plan, nodes)
    return plan, nodes


def test_labels_taints_and_annotation_are_written_and_foreign_ones_survive(
    apistub: ApiStub, api: NodeApi
) -> None:
    plan, nodes = hot_plans(api)
    report = writer(api).apply(POLICY, plan, nodes)
    assert report.nodes_written == 1 and not report.errors
    stored = apistub.get("nodes", "c")
    labels = stored["metadata"]["labels"]
    assert labels["team.example.com/owner"] == "ml"
    assert labels["kube-steer.github.io/not-ours"] == "1"
    assert labels["kube-steer.github.io/gpu-hot"] == "true"
    assert labels["kube-steer.github.io/score-util"] == "10"
    assert labels["kube-steer.github.io/overcommit-pct"] == "12"
    assert stored["spec"]["taints"] == [
        *FOREIGN_TAINTS,
        {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"},
    ]
    assert (
        '"util":"2027-01-15T08:00:00Z"'
        in stored["metadata"]["annotations"]["kube-steer.github.io/observed-at"]
    )
    # the next cycle, same data: nothing to write
    nodes = api.list_nodes()
    again, _ = plan_cycle(
        POLICY, nodes, readings_for(POLICY, nodes, HOT, T0 + 2), ScorerMemory(), T0 + 2
    )
    assert again.changes == ()


def test_label_patches_name_only_changed_keys(apistub: ApiStub, api: NodeApi) -> None:
    nodes = api.list_nodes()
    plan, _ = plan_cycle(
        POLICY, nodes, readings_for(POLICY, nodes, {"util": {"c": 40.0}}, T0), ScorerMemory(), T0
    )
    # another client adds a label after our list: a merge patch of our keys cannot undo it
    apistub.modify(
        "nodes",
        "c",
        lambda n: {
            **n,
            "metadata": {**n["metadata"], "labels": {**n["metadata"]["labels"], "late": "yes"}},
        },
    )
    apistub.clear_requests()
    report = writer(api).apply(POLICY, plan, nodes)
    assert report.requests == 1
    (request,) = apistub.requests
    assert (request.method, request.content_type) == ("PATCH", "application/merge-patch+json")
    labels = apistub.get("nodes", "c")["metadata"]["labels"]
    assert labels["late"] == "yes"
    assert labels["kube-steer.github.io/score-util"] == "60"


def test_an_injected_409_is_retried_and_nothing_is_lost(apistub: ApiStub, api: NodeApi) -> None:
    plan, nodes = hot_plans(api)
    apistub.fail_next_writes(2, status=409, path_contains="/nodes/c")
    sleep = NoSleep()
    report = writer(api, sleep).apply(POLICY, plan, nodes)
    (result,) = report.results
    assert result.ok and result.conflicts == 2 and result.requests == 3
    assert len(sleep.slept) == 2 and sleep.slept[1] > 0
    stored = apistub.get("nodes", "c")
    assert stored["spec"]["taints"][:2] == FOREIGN_TAINTS
    assert stored["spec"]["taints"][2]["key"] == "kube-steer.github.io/gpu-hot"
    assert stored["metadata"]["labels"]["kube-steer.github.io/gpu-hot"] == "true"


def test_a_concurrent_taint_change_causes_a_real_409_then_a_merge(
    apistub: ApiStub, api: NodeApi
) -> None:
    plan, nodes = hot_plans(api)  # `nodes` holds the resourceVersion our taint write is based on

    def add_taint(node: dict[str, Any]) -> dict[str, Any]:
        node["spec"]["taints"].append({"key": "maintenance", "effect": "NoSchedule"})
        return node

    apistub.modify("nodes", "c", add_taint)
    report = writer(api).apply(POLICY, plan, nodes)
    (result,) = report.results
    assert result.ok and result.conflicts == 1
    keys = [t["key"] for t in apistub.get("nodes", "c")["spec"]["taints"]]
    assert keys == [
        "node.kubernetes.io/unreachable",
        "dedicated",
        "maintenance",
        "kube-steer.github.io/gpu-hot",
    ]


def test_after_a_409_the_node_watch_s_state_is_merged_without_a_get(
    apistub: ApiStub, api: NodeApi
) -> None:
    """With a node watch (`reread`), the change that caused the 409 is taken from the watch,
    not read again by a GET: the scorer's role needs no `get nodes`. A watch that has not
    caught up yet is asked again after the next backoff."""
    plan, nodes = hot_plans(api)

    def add_taint(node: dict[str, Any]) -> dict[str, Any]:
        node["spec"]["taints"].append({"key": "maintenance", "effect": "NoSchedule"})
        return node

    apistub.modify("nodes", "c", add_taint)
    fresh = api.list_nodes()[0]
    asked: list[str] = []

    def watch_seen(name: str) -> Any:  # behind for its first answer, as a watch can be
        asked.append(name)
        return nodes[0] if len(asked) == 1 else fresh

    apistub.clear_requests()
    sleep = NoSleep()
    report = NodeWriter(api, RateLimiter(1000, 1000), sleep=sleep, reread=watch_seen).apply(
        POLICY, plan, nodes
    )
    (result,) = report.results
    assert result.ok and result.conflicts == 2 and asked == ["c", "c"]
    assert [r.method for r in apistub.requests] == ["PATCH", "PATCH", "PATCH"]
    keys = [t["key"] for t in apistub.get("nodes", "c")["spec"]["taints"]]
    assert keys == [
        "node.kubernetes.io/unreachable",
        "dedicated",
        "maintenance",
        "kube-steer.github.io/gpu-hot",
    ]


def test_a_node_the_watch_saw_deleted_after_a_409_is_not_written_again(
    apistub: ApiStub, api: NodeApi
) -> None:
    plan, nodes = hot_plans(api)
    apistub.fail_next_writes(1, status=409, path_contains="/nodes/c")
    apistub.clear_requests()
    report = NodeWriter(
        api, RateLimiter(1000, 1000), sleep=NoSleep(), reread=lambda _name: None
    ).apply(POLICY, plan, nodes)
    (result,) = report.results
    assert not result.ok and result.status == 404 and len(apistub.requests) == 1


def test_withdrawing_a_taint_removes_only_ours(apistub: ApiStub, api: NodeApi) -> None:
    plan, nodes = hot_plans(api)
    writer(api).apply(POLICY, plan, nodes)
    nodes = api.list_nodes()
    cold, _ = plan_cycle(POLICY, nodes, {}, ScorerMemory(), T0 + 3600)  # everything past its TTL
    writer(api).apply(POLICY, cold, nodes)
    stored = apistub.get("nodes", "c")
    assert stored["spec"]["taints"] == FOREIGN_TAINTS
    assert {k for k in stored["metadata"]["labels"] if k.startswith("kube-steer.github.io/")} == {
        "kube-steer.github.io/not-ours"
    }
    assert "kube-steer.github.io/observed-at" not in (stored["metadata"].get("annotations") or {})


def test_a_rule_removed_from_the_policy_takes_its_label_and_taint_with_it(
    apistub: ApiStub, api: NodeApi
) -> None:
    """Keys this scorer wrote are recorded on the node, so a rule that leaves the policy does
    not leave its NoSchedule taint behind forever; keys it never wrote stay."""
    plan, nodes = hot_plans(api)
    writer(api).apply(POLICY, plan, nodes)
    stored = apistub.get("nodes", "c")
    assert any(t["key"] == "kube-steer.github.io/gpu-hot" for t in stored["spec"]["taints"])
    record = json.loads(stored["metadata"]["annotations"]["kube-steer.github.io/managed"])
    assert (
        record["taints"] == ["kube-steer.github.io/gpu-hot"]
        and "kube-steer.github.io/gpu-hot" in record["labels"]
    )

    doc = yaml.safe_load(SMALL_POLICY)
    del doc["spec"]["taints"]
    for pod_class in doc["spec"]["podClasses"]:
        pod_class.pop("avoid", None)
    without_rule = parse_policy(yaml.safe_dump(doc))
    nodes = api.list_nodes()
    readings = readings_for(without_rule, nodes, HOT, T0 + 10)
    plan, _ = plan_cycle(without_rule, nodes, readings, ScorerMemory(), T0 + 10)
    writer(api).apply(without_rule, plan, nodes)

    stored = apistub.get("nodes", "c")
    assert stored["spec"]["taints"] == FOREIGN_TAINTS
    labels = stored["metadata"]["labels"]
    assert "kube-steer.github.io/gpu-hot" not in labels
    assert (
        labels["kube-steer.github.io/not-ours"] == "1"
        and "kube-steer.github.io/score-util" in labels
    )
    record = json.loads(stored["metadata"]["annotations"]["kube-steer.github.io/managed"])
    assert record["taints"] == [] and "kube-steer.github.io/gpu-hot" not in record["labels"]
    # Once retired, the next cycle has nothing left to do.
    nodes = api.list_nodes()
    again, _ = plan_cycle(without_rule, nodes, readings, ScorerMemory(), T0 + 11)
    assert not again.changes


def test_an_invalid_label_is_reported_with_the_apiservers_message(
    apistub: ApiStub, api: NodeApi
) -> None:
    nodes = api.list_nodes()
    plan, _ = plan_cycle(
        POLICY, nodes, readings_for(POLICY, nodes, {"util": {"c": 40.0}}, T0), ScorerMemory(), T0
    )
    bad = dataclasses.replace(
        plan.nodes[0], label_changes={"kube-steer.github.io/score-util": "not valid!"}
    )
    report = writer(api).apply(POLICY, dataclasses.replace(plan, nodes=(bad,)), nodes)
    (result,) = report.results
    assert not result.ok and result.status == 422 and result.requests == 1
    assert 'metadata.labels: Invalid value: "not valid!"' in (result.error or "")
    assert "kube-steer.github.io/score-util" not in apistub.get("nodes", "c")["metadata"]["labels"]


def test_rate_limiter_allows_a_burst_then_paces() -> None:
    now = [0.0]
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        now[0] += seconds

    limiter = RateLimiter(10, 3, clock=lambda: now[0], sleep=sleep)
    waits = [limiter.acquire() for _ in range(5)]
    assert waits[:3] == [0.0, 0.0, 0.0]
    assert waits[3] == pytest.approx(0.1) and waits[4] == pytest.approx(0.1)
    now[0] += 10  # idle: the bucket refills up to the burst, not beyond
    assert [limiter.acquire() for _ in range(3)] == [0.0, 0.0, 0.0]
    assert limiter.acquire() == pytest.approx(0.1)
