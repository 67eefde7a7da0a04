"""Events on pods a kube-steer rule keeps Pending (scorer/jobs/pending.py, scorer/explain/blocked.py):
which pods are watched, when a rule is the blocker, and how often an Event is written."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from kits.apistub import ApiStub
from scorer.explain.blocked import blocking_message
from scorer.explain.view import Exclusion, NodeVerdict, PodExplanation
from scorer.jobs.pending import EVENT_REASON, REJUDGE_S, PendingPods, SteeringEvents
from steer.adapters.kubejson import KubeJson
from tests.apistub_fixtures import client_for

TRACE = "kube-steer.github.io/trace"
OWNED = frozenset({"kube-steer.github.io/gpu-hot"})


def _explanation(*verdicts: NodeVerdict, steered: bool = True) -> PodExplanation:
    return PodExplanation(
        policy_version="p@1",
        pod_class="gpu",
        tenant="dept-b",
        preferences=(),
        gates=(),
        verdicts=verdicts,
        steered=steered,
    )


def _excluded(node: str, *rules: tuple[str, dict[str, Any]]) -> NodeVerdict:
    return NodeVerdict(
        node, tuple(Exclusion(rule, f"why {rule}", data) for rule, data in rules), 0, 0
    )


POOL = ("budget:pool", {"needs": 500})
HOT_GATE = ("avoid:gpu-hot", {})
HOT_TAINT = (
    "taint kube-steer.github.io/gpu-hot=true:NoSchedule",
    {"taint": {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"}},
)
FOREIGN = ("taint dedicated=ml:NoSchedule", {"taint": {"key": "dedicated"}})
CPU = ("resources", {"resource": "cpu"})


def test_a_rule_blocks_a_pod_where_a_node_fails_only_kube_steers_rules() -> None:
    message = blocking_message(
        _explanation(
            _excluded("a", POOL),
            _excluded("b", HOT_GATE, HOT_TAINT),
            _excluded("c", CPU, POOL),  # would not fit anyway
            _excluded("d", FOREIGN),
        ),
        OWNED,
    )
    assert message is not None
    assert message.startswith(
        "kube-steer rules avoid:gpu-hot, budget:pool, "
        "taint kube-steer.github.io/gpu-hot=true:NoSchedule keep the pod off 2 of 4 nodes"
    )
    assert "a: budget:pool (why budget:pool)" in message and "c:" not in message


def test_no_event_where_kube_steer_is_not_the_blocker() -> None:
    assert (
        blocking_message(_explanation(_excluded("a", CPU), _excluded("b", FOREIGN)), OWNED) is None
    )
    allowed = NodeVerdict("ok", (), 10, 0, rank=1)
    assert blocking_message(_explanation(allowed, _excluded("a", POOL)), OWNED) is None
    refused = _explanation(_excluded("a", POOL))
    refused = PodExplanation(**{**refused.__dict__, "problems": ("the webhook denies it",)})
    assert blocking_message(refused, OWNED) is None  # not admitted: never Pending


def test_a_long_message_is_cut_to_what_an_event_keeps() -> None:
    long = ("budget:pool", {})
    many = [_excluded(f"node-{i:03d}-" + "x" * 400, long) for i in range(10)]
    message = blocking_message(_explanation(*many), OWNED)
    assert message is not None and len(message) <= 1000 and message.endswith("...")


def _pod(
    name: str, *, trace: str | None, condition: str | None = "Unschedulable"
) -> dict[str, Any]:
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "team-b", "uid": f"uid-{name}"},
        "spec": {"containers": [{"name": "c", "image": "x"}]},
        "status": {},
    }
    if trace is not None:
        pod["metadata"]["annotations"] = {TRACE: trace}
    if condition is not None:
        pod["status"]["conditions"] = [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": condition,
                "lastTransitionTime": f"2026-12-01T10:00:0{len(name) % 10}Z",
            }
        ]
    return pod


def test_pending_pods_keep_the_steered_unschedulable_ones_until_bound() -> None:
    pending = PendingPods()
    steered = _pod("steered", trace='{"policy":"p@1","rules":["budget:pool"]}')
    pending.apply("ADDED", steered, TRACE)
    pending.apply("ADDED", _pod("audited", trace='{"policy":"p","mode":"audit"}'), TRACE)
    pending.apply("ADDED", _pod("plain", trace=None), TRACE)
    pending.apply("ADDED", _pod("fresh", trace='{"policy":"p"}', condition=None), TRACE)
    (kept,) = pending.due(10, now=100.0)
    assert kept["metadata"]["name"] == "steered"
    assert "status" not in kept  # only metadata and spec are kept
    # Explained now: not again before REJUDGE_S, then again.
    assert pending.due(10, now=100.0 + REJUDGE_S - 1) == []
    assert [p["metadata"]["name"] for p in pending.due(10, now=100.0 + REJUDGE_S)] == ["steered"]
    bound = copy.deepcopy(steered)
    bound["spec"]["nodeName"] = "a"
    bound["status"] = {"conditions": [{"type": "PodScheduled", "status": "True"}]}
    pending.apply("MODIFIED", bound, TRACE)
    assert len(pending) == 0


def test_events_are_written_once_per_pod_and_message_and_repeated_later(
    apistub: ApiStub, tmp_path: Path
) -> None:
    apistub.add_namespace("team-b", {})
    now = [1_800_000_000.0]
    events = SteeringEvents(
        KubeJson(client_for(apistub, tmp_path / "kubeconfig")),
        instance="scorer-0",
        clock=lambda: now[0],
        repeat_s=600,
        max_events=2,
    )
    pod = _pod("train", trace="{}")
    assert events.emit([(pod, "rule A")]) == 1
    assert events.emit([(pod, "rule A")]) == 0  # the same message: once
    assert events.emit([(pod, "rule B")]) == 1  # a new blocker: said at once
    now[0] += 601
    assert events.emit([(pod, "rule B")]) == 1  # still waiting: said again
    others = [(_pod(f"p{i}", trace="{}"), "rule A") for i in range(5)]
    assert events.emit(others) == 2  # at most max_events a cycle; the rest next cycle
    assert events.emit(others) == 2
    written = apistub.objects("events", "team-b")
    assert len(written) == 7
    first = next(e for e in written if e["involvedObject"]["name"] == "train")
    assert first["reason"] == EVENT_REASON and first["type"] == "Warning"
    assert first["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Pod",
        "namespace": "team-b",
        "name": "train",
        "uid": "uid-train",
    }
    assert first["source"] == {"component": "kube-steer-scorer"}
    assert first["reportingInstance"] == "scorer-0"
    # A pod no longer pending is forgotten: if it waits again, it is said again.
    events.forget(set())
    assert events.emit([(pod, "rule B")]) == 1


def test_the_longest_waiting_pods_are_explained_first_a_few_at_a_time() -> None:
    pending = PendingPods()
    for i in (3, 1, 2):
        pod = _pod(f"p{i}", trace="{}")
        pod["status"]["conditions"][0]["lastTransitionTime"] = f"2026-12-01T10:00:0{i}Z"
        pending.apply("ADDED", pod, TRACE)
    first = [p["metadata"]["name"] for p in pending.due(2, now=0.0)]
    assert first == ["p1", "p2"]
    assert [p["metadata"]["name"] for p in pending.due(2, now=1.0)] == ["p3"]  # the rest next
