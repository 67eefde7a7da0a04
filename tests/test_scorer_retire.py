"""What cleanup and a labelPrefix change remove: the scorer's recorded keys, nothing foreign."""

from __future__ import annotations

import json

from kubernetes import client

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from scorer.cleanup import clean_nodes
from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.cycle.retire import (
    cleanup_removal,
    recorded_prefixes,
    removal_plan,
    retire_old_prefixes,
)
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter
from scorer.model import NodeState
from steer.adapters.kubejson import KubeJson
from steer.core.scheduling import Taint
from tests.scorer_support import apply_node_plan, readings_for, small_policy

POLICY = small_policy()
FOREIGN_LABELS = {"team": "a", "example.com/managed-by": "me", "kube-steer.github.io-like/x": "1"}
FOREIGN_TAINT = Taint("dedicated", "gpu", "NoSchedule")


def _record(labels: list[str], taints: list[str], resources: list[str] | None = None) -> str:
    data: dict[str, list[str]] = {"labels": labels, "taints": taints}
    if resources:
        data["resources"] = resources
    return json.dumps(data)


def _node(prefix: str = "kube-steer.github.io/", **extra_annotations: str) -> NodeState:
    taints = (FOREIGN_TAINT, Taint(f"{prefix}gpu-hot", "true", "NoSchedule"))
    return NodeState(
        name="n1",
        labels={
            **FOREIGN_LABELS,
            f"{prefix}util": "70",
            f"{prefix}score": "60",
            f"{prefix}gpu-hot": "true",
        },
        annotations={
            "foreign/annotation": "keep",
            # Not a record: an unrelated annotation whose key happens to end in "managed".
            "example.com/managed": json.dumps({"labels": ["team"]}),
            f"{prefix}observed-at": "{}",
            f"{prefix}managed": _record(
                [f"{prefix}util", f"{prefix}score", f"{prefix}gpu-hot"],
                [f"{prefix}gpu-hot"],
                [f"{prefix}burst-5pct-cpu"],
            ),
            **extra_annotations,
        },
        taints=taints,
        raw_taints=tuple(t.to_k8s() for t in taints),
        allocatable={"cpu": "8", f"{prefix}burst-5pct-cpu": "400"},
        capacity={"cpu": "8", f"{prefix}burst-5pct-cpu": "400"},
    )


def test_only_records_written_the_scorers_way_are_recognised() -> None:
    node = _node("old.example/steer-")
    assert recorded_prefixes(node) == ("old.example/steer-",)
    assert recorded_prefixes(_node(**{"x.io/managed": _record(["y.io/a"], [])})) == (
        "kube-steer.github.io/",
    )
    assert recorded_prefixes(_node(**{"x.io/managed": "not json"})) == ("kube-steer.github.io/",)


def test_cleanup_removes_every_recorded_key_and_nothing_foreign() -> None:
    node = _node()
    gone = cleanup_removal(POLICY, node, {})
    assert gone.labels == (
        "kube-steer.github.io/gpu-hot",
        "kube-steer.github.io/score",
        "kube-steer.github.io/util",  # recorded under a name the policy no longer writes
    )
    assert gone.taints == ("kube-steer.github.io/gpu-hot",)
    assert gone.annotations == ("kube-steer.github.io/managed", "kube-steer.github.io/observed-at")
    assert gone.resources == ("kube-steer.github.io/burst-5pct-cpu",)

    after = apply_node_plan(POLICY, node, removal_plan(node, gone))
    assert dict(after.labels) == FOREIGN_LABELS
    assert after.taints == (FOREIGN_TAINT,)
    assert set(after.annotations) == {"foreign/annotation", "example.com/managed"}
    assert removal_plan(node, gone).resource_changes == {
        "kube-steer.github.io/burst-5pct-cpu": None
    }


def test_cleanup_takes_a_drain_candidate_mark_and_its_reason() -> None:
    prefix = "kube-steer.github.io/"
    node = _node(**{f"{prefix}drain-candidate-reason": "its 2 movable pods fit elsewhere"})
    node = NodeState(
        name=node.name,
        labels={**node.labels, f"{prefix}drain-candidate": "true"},
        annotations={
            **node.annotations,
            f"{prefix}managed": _record([f"{prefix}drain-candidate"], []),
        },
    )
    gone = cleanup_removal(POLICY, node, {})
    assert f"{prefix}drain-candidate" in gone.labels
    assert f"{prefix}drain-candidate-reason" in gone.annotations
    after = apply_node_plan(POLICY, node, removal_plan(node, gone))
    assert f"{prefix}drain-candidate" not in after.labels
    assert f"{prefix}drain-candidate-reason" not in after.annotations
    assert after.annotations["foreign/annotation"] == "keep"


def test_cleanup_keeps_a_resource_bound_pods_hold_at_what_they_hold() -> None:
    """A kubelet restart re-admits its pods against the node's resources: taking away one
    they request would fail them. It stays at exactly what they hold, still recorded."""
    node = _node()
    gone = cleanup_removal(POLICY, node, {"kube-steer.github.io/burst-5pct-cpu": 300})
    assert gone.resources == () and gone.kept == {"kube-steer.github.io/burst-5pct-cpu": 300}
    plan = removal_plan(node, gone)
    assert plan.resource_changes == {"kube-steer.github.io/burst-5pct-cpu": "300"}
    after = apply_node_plan(POLICY, node, plan)
    assert dict(after.labels) == FOREIGN_LABELS and after.taints == (FOREIGN_TAINT,)
    record = json.loads(after.annotations["kube-steer.github.io/managed"])
    assert record == {
        "labels": [],
        "taints": [],
        "resources": ["kube-steer.github.io/burst-5pct-cpu"],
    }


def test_cleanup_also_takes_records_under_an_old_prefix() -> None:
    old = _node("old.example/steer-")
    gone = cleanup_removal(POLICY, old, {})
    assert gone.prefixes == ("kube-steer.github.io/", "old.example/steer-")
    assert "old.example/steer-util" in gone.labels
    assert gone.taints == ("old.example/steer-gpu-hot",)
    after = apply_node_plan(POLICY, old, removal_plan(old, gone))
    assert dict(after.labels) == FOREIGN_LABELS and after.taints == (FOREIGN_TAINT,)


def test_a_node_without_anything_of_ours_is_left_alone() -> None:
    node = NodeState(name="n2", labels=FOREIGN_LABELS, annotations={"a": "b"})
    assert cleanup_removal(POLICY, node, {}).empty


def test_a_prefix_change_retires_the_old_keys_in_the_same_cycle() -> None:
    node = _node("old.example/steer-")
    at = 1_000_000.0
    readings = readings_for(POLICY, [node], {"util": {"n1": 20.0}, "power": {"n1": 100.0}}, at)
    cycle, _ = plan_cycle(POLICY, [node], readings, ScorerMemory(), at, pod_usages={})
    retired, removals = retire_old_prefixes(POLICY, cycle, [node])
    assert set(removals) == {"n1"}
    plan = retired.node("n1")
    assert plan is not None
    after = apply_node_plan(POLICY, node, plan)
    assert not [k for k in after.labels if k.startswith("old.example/")]
    assert not [k for k in after.annotations if k.startswith("old.example/")]
    # The old prefix's gpu-hot taint moves to the new prefix in the same write: its rule
    # continues from the state the node carries, and clears only after its clear cycles.
    assert set(after.taints) == {
        FOREIGN_TAINT,
        Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule"),
    }
    assert (
        after.labels["kube-steer.github.io/score-util"] == "80"
    )  # the new prefix is written meanwhile
    assert "kube-steer.github.io/managed" in after.annotations
    # The old pool goes (no pod holds it); the gates of this policy are published.
    assert plan.resource_changes == {
        "old.example/steer-burst-5pct-cpu": None,
        "kube-steer.github.io/avoid-gpu-hot": "0",  # gpu-hot holds: closed
        "kube-steer.github.io/overcommit-0pct": "110",  # never measured: open
    }
    # Nothing under another prefix: the plan is returned as it was.
    same, none = retire_old_prefixes(POLICY, cycle, [NodeState(name="n1")])
    assert same is cycle and not none


# --- cleanup over HTTP, through the scorer's own writer ---------------------------------------


def test_clean_nodes_writes_through_the_api_and_a_second_run_finds_nothing(
    apistub: ApiStub, kube_client: client.ApiClient
) -> None:
    foreign_taints = [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}]
    node = synthetic_node(
        "c", labels={"team.example.com/owner": "ml", "kube-steer.github.io/not-ours": "1"}
    )
    node["spec"]["taints"] = foreign_taints
    node["metadata"]["annotations"] = {"team.example.com/note": "hands off"}
    apistub.add_node(node)
    api = NodeApi(KubeJson(kube_client))
    plain = api.get_node("c")
    before = apistub.get("nodes", "c")
    at = 1_800_000_000.0
    hot = {"util": {"c": 95.0}, "power": {"c": 1.0}}
    memory = ScorerMemory()
    writer = NodeWriter(api, RateLimiter(1000, 1000), sleep=lambda _s: None)
    for i in range(2):  # the taint rule needs two hot cycles
        nodes = api.list_nodes()
        cycle, memory = plan_cycle(
            POLICY, nodes, readings_for(POLICY, nodes, hot, at + i), memory, at + i
        )
        writer.apply(POLICY, cycle, nodes)
    scored = api.get_node("c")
    assert "kube-steer.github.io/gpu-hot" in {t.key for t in scored.taints}
    assert "kube-steer.github.io/managed" in scored.annotations

    dry = clean_nodes(POLICY, api, dry_run=True)
    assert [r.node for r in dry.removals] == ["c"] and dry.results == ()
    assert api.get_node("c").labels == scored.labels

    report = clean_nodes(POLICY, api)
    assert not report.errors and [r.node for r in report.results] == ["c"]
    after = apistub.get("nodes", "c")
    assert after["metadata"]["labels"] == before["metadata"]["labels"]
    assert after["metadata"]["annotations"] == {"team.example.com/note": "hands off"}
    assert before["metadata"]["annotations"] == {"team.example.com/note": "hands off"}
    assert after["spec"]["taints"] == foreign_taints
    assert api.get_node("c").labels == plain.labels
    assert clean_nodes(POLICY, api).removals == ()


def test_a_taint_under_an_old_prefix_carries_only_when_its_record_lists_it() -> None:
    at = 1_000_000.0
    cool = {"util": {"n1": 20.0}, "power": {"n1": 100.0}}
    recorded = _node("old.example/steer-")  # the record lists old.example/steer-gpu-hot
    unrecorded = _node(
        "old.example/steer-",
        **{"old.example/steer-managed": _record(["old.example/steer-util"], [])},
    )
    for node, carried in ((recorded, True), (unrecorded, False)):
        readings = readings_for(POLICY, [node], cool, at)
        cycle, _ = plan_cycle(POLICY, [node], readings, ScorerMemory(), at)
        plan = cycle.node("n1")
        assert plan is not None
        assert plan.conditions["gpu-hot"].active is carried
