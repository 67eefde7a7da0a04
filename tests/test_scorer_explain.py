"""Pure tests of `/explain`: which nodes a pod may use, their rank, and why others are excluded."""

from __future__ import annotations

from typing import Any

from scorer.cycle.plan import CyclePlan, ScorerMemory, plan_cycle
from scorer.explain import explain_pod, node_detail, nodes_table, plan_table
from scorer.explain.render import pod_text
from scorer.explain.view import PodExplanation, Served
from scorer.model import NodeState
from steer.core.policy import parse_policy
from steer.core.scheduling import Taint
from tests.dra_support import CLAIM_POD, DOUBLE_GPU_TEMPLATE, GPU_CLASS, FakeCatalog
from tests.dra_support import pod as dra_pod
from tests.scorer_support import SMALL_POLICY, apply_plan, readings_for, small_policy

POLICY = small_policy()
OPTED_IN = {"kube-steer.github.io/enabled": "true"}  # the default opt-in selector
T0 = 1_800_000_000.0
VALUES = {
    "util": {"a": 20.0, "b": 50.0, "c": 95.0, "e": 20.0},
    "overcommit-pct": {"a": 3.2, "b": -10.0, "c": 12.0, "e": 0.0},
}


def scored_cluster() -> tuple[CyclePlan, list[NodeState]]:
    """a, b, c, e scored (c hot for two cycles), d never scored, e carries a foreign taint."""
    room = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "8", "pods": "110"}
    cluster = [
        NodeState("a", allocatable=room, capacity=room),
        NodeState("b", allocatable=room, capacity=room),
        NodeState("c", allocatable=room, capacity=room),
        NodeState("d", allocatable=room, capacity=room),
        NodeState(
            "e",
            taints=(Taint("dedicated", "ml", "NoSchedule"),),
            raw_taints=({"key": "dedicated", "value": "ml", "effect": "NoSchedule"},),
            allocatable=room,
            capacity=room,
        ),
    ]
    memory = ScorerMemory()
    plan = None
    for i in range(2):
        plan, memory = plan_cycle(
            POLICY,
            cluster,
            readings_for(POLICY, cluster, VALUES, T0 + i),
            memory,
            T0 + i,
            pod_usages={},  # no pod bound anywhere: gates are published
        )
        cluster = apply_plan(POLICY, cluster, plan)
    assert plan is not None
    return plan, cluster


def gpu_pod(**spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": "team-b"},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "x",
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "1", "memory": "1Gi"}},
                }
            ],
            **spec,
        },
    }


def test_tenant_budget_and_avoided_taint_exclude_nodes_with_their_data() -> None:
    plan, cluster = scored_cluster()
    result = explain_pod(POLICY, plan, cluster, gpu_pod(), {"tenant": "dept-b", **OPTED_IN})
    assert result.pod_class == "gpu"
    assert result.tenant == "dept-b"
    assert [(v.node, v.rank) for v in result.allowed] == [("b", 1), ("d", 2)]
    assert result.allowed[0].steering_weight == 50  # score-class-gpu 50 (util 50, lower is better)
    assert result.allowed[1].steering_weight == 0  # never scored: allowed, ranked last
    excluded = {v.node: {e.rule: e for e in v.exclusions} for v in result.excluded}
    assert set(excluded) == {"a", "c", "e"}
    # Hard rules are gates: closed where the rule's data says so.
    over = excluded["a"]["overcommit:0"]
    assert over.data["label"]["label"] == "4"
    assert over.data["label"]["raw"] == 3.2
    assert "kube-steer.github.io/overcommit-pct=4 > 0" in over.reason
    assert over.data["gate"]["resource"] == "kube-steer.github.io/overcommit-0pct"
    assert set(excluded["c"]) == {
        "overcommit:0",
        "avoid:gpu-hot",
        "taint kube-steer.github.io/gpu-hot=true:NoSchedule",
    }
    hot = excluded["c"]["avoid:gpu-hot"].data["label"]
    assert hot["observed"] == 95.0 and hot["condition"] == "util (raw) Gt 90"
    assert set(excluded["e"]) == {"taint dedicated=ml:NoSchedule"}


def test_a_pod_outside_any_tenant_ranks_every_tolerable_node() -> None:
    plan, cluster = scored_cluster()
    pod = {
        "containers": [{"name": "web"}],
        "tolerations": [{"key": "dedicated", "operator": "Exists"}],
    }
    result = explain_pod(POLICY, plan, cluster, pod, OPTED_IN)
    assert result.pod_class is None and result.tenant is None
    ranked = [(v.node, v.rank, v.steering_weight) for v in result.allowed]
    # default composite = util only (power has no data): a/e 80, b 50, d unscored
    assert ranked == [("a", 1, 80), ("e", 1, 80), ("b", 3, 50), ("d", 4, 0)]
    assert [v.node for v in result.excluded] == ["c"]


def test_the_pods_own_selector_and_required_terms_are_applied() -> None:
    plan, cluster = scored_cluster()
    # One node name per matchFields requirement: the apiserver refuses more.
    terms = [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [name]}]}
        for name in ("a", "b")
    ]
    pod = {
        "containers": [{"name": "web"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "preference": {
                            "matchExpressions": [
                                {
                                    "key": "kube-steer.github.io/score-util",
                                    "operator": "In",
                                    "values": ["50"],
                                }
                            ]
                        },
                    }
                ],
            }
        },
    }
    result = explain_pod(POLICY, plan, cluster, pod, OPTED_IN)
    assert [(v.node, v.steering_weight + v.user_weight) for v in result.allowed] == [
        ("b", 150),
        ("a", 80),
    ]
    rules = {v.node: [e.rule for e in v.exclusions] for v in result.excluded}
    assert rules["d"] == ["pod.spec.affinity.nodeAffinity.required"]


def test_node_views_carry_values_queries_and_pending_changes() -> None:
    plan, _ = scored_cluster()
    table = nodes_table(plan)
    assert [row["node"] for row in table["nodes"]] == ["a", "b", "c", "d", "e"]
    c_row = table["nodes"][2]
    assert c_row["raw"]["util"] == 95.0
    assert c_row["taints"] == ["kube-steer.github.io/gpu-hot=true:NoSchedule"]
    detail = node_detail(POLICY, plan, "c")
    assert detail is not None
    util, power, overcommit = detail["dimensions"]
    assert util["query"] == POLICY.dimension("util").query
    assert util["observedAt"] == "2027-01-15T08:00:01Z"
    # The raw value and its unit beside the score label that says "higher is better".
    assert (util["raw"], util["unit"], util["labelKey"], util["label"]) == (
        95.0,
        "pct",
        "kube-steer.github.io/score-util",
        "10",
    )
    assert (power["unit"], power["labelKey"]) == (None, "kube-steer.github.io/score-power")
    assert (overcommit["unit"], overcommit["labelKey"]) == (
        "pct",
        "kube-steer.github.io/overcommit-pct",
    )
    assert [d["unit"] for d in table["dimensions"]] == ["pct", None, "pct"]
    assert detail["conditions"][0]["active"] is True
    assert detail["policyVersion"] == POLICY.version
    assert node_detail(POLICY, plan, "nope") is None
    lines = plan_table(plan, POLICY).splitlines()
    readings = lines.index("NODE  util [pct]  power  overcommit-pct [pct]")
    assert lines[readings + 3].split()[:2] == ["c", "95"]
    assert (
        "  score-<dimension>, score, score-class-<class>: 0..100, higher is better for placement"
        in lines
    )
    labels = next(
        i
        for i, line in enumerate(lines)
        if line.split() == ["NODE", "LABELS", "TAINTS", "GATES", "AND", "POOL", "CHANGES"]
    )
    assert lines[labels + 3].startswith("c ")
    assert "score-util=10" in lines[labels + 3] and "gpu-hot:NoSchedule" in lines[labels + 3]


def test_once_table_counts_a_first_write_and_shows_changes_as_old_to_new() -> None:
    nodes = [
        NodeState("a"),
        NodeState("b", labels={"kube-steer.github.io/score-util": "90", "team": "x"}),
    ]
    values = {"util": {"a": 20.0, "b": 50.0}, "power": {"a": 100.0, "b": 200.0}}
    plan, _ = plan_cycle(POLICY, nodes, readings_for(POLICY, nodes, values, T0), ScorerMemory(), T0)
    rows = {line.split()[0]: line for line in plan_table(plan, POLICY, nodes).splitlines() if line}
    a_plan, b_plan = plan.node("a"), plan.node("b")
    assert a_plan is not None and b_plan is not None
    assert rows["a"].endswith(f"+{len(a_plan.label_changes)} labels (first write)")
    assert "score-util=90→50" in rows["b"] and "score-power=0" in rows["b"]
    # Without the nodes as read, every change is listed with its new value only.
    assert "score-util=50 " in plan_table(plan, POLICY).split("\nb ")[-1] + " "


class _CountingPlans(tuple):  # type: ignore[type-arg]
    """A cycle's node plans that count how often they are walked."""

    walks = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).walks += 1
        return super().__iter__()


def test_explaining_a_pod_walks_the_cycle_once_whatever_the_node_count() -> None:
    """O(nodes) per request: each node's plan is looked up by name, never by a scan."""
    room = {"cpu": "8", "memory": "32Gi", "pods": "110"}
    for count in (10, 400):
        cluster = [NodeState(f"n{i}", allocatable=room, capacity=room) for i in range(count)]
        values = {"util": {n.name: 10.0 for n in cluster}, "overcommit-pct": {}}
        plan, _ = plan_cycle(
            POLICY, cluster, readings_for(POLICY, cluster, values, T0), ScorerMemory(), T0
        )
        _CountingPlans.walks = 0
        counted = CyclePlan(
            plan.policy_version, plan.planned_at, _CountingPlans(plan.nodes), plan.dimensions
        )
        result = explain_pod(POLICY, counted, cluster, gpu_pod(), {"tenant": "dept-b", **OPTED_IN})
        assert len(result.verdicts) == count
        assert _CountingPlans.walks == 1, count


# -- DRA: the devices a pod asks for, and claims not known yet ------------------------------

DRA_POLICY = parse_policy(
    SMALL_POLICY.replace(
        "      requestsAny: [nvidia.com/gpu]\n",
        "      requestsAny: [nvidia.com/gpu]\n      deviceClasses: [gpu.nvidia.com]\n",
    )
)


def claim_pod(template: str) -> dict[str, Any]:
    """The NVIDIA quickstart's claim pod (tests/dra_support.py) in team-b, with cpu limits
    (dept-b's budget bounds every container)."""
    pod = dra_pod(CLAIM_POD)
    pod["metadata"]["namespace"] = "team-b"
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template
    pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "1Gi"}
    return pod


def test_a_claim_pod_is_explained_as_the_gpu_pod_it_is() -> None:
    plan, cluster = scored_cluster()
    catalog = FakeCatalog(
        templates={("team-b", "double-gpu"): DOUBLE_GPU_TEMPLATE["spec"]["spec"]},
        extended={"nvidia.com/gpu": GPU_CLASS},
    )
    labels = {"tenant": "dept-b", **OPTED_IN}
    result = explain_pod(
        DRA_POLICY, plan, cluster, claim_pod("double-gpu"), labels, "team-b", devices=catalog
    )
    assert result.pod_class == "gpu"
    assert [a.text for a in result.device_asks] == ["claim template double-gpu -> gpu.nvidia.com"]
    assert result.device_notes == ()
    # The plain nvidia.com/gpu limit, mapped by the DeviceClass: both forms named.
    plugin = explain_pod(DRA_POLICY, plan, cluster, gpu_pod(), labels, "team-b", devices=catalog)
    assert plugin.pod_class == "gpu"
    assert [a.text for a in plugin.device_asks] == [
        "nvidia.com/gpu mapped by DeviceClass gpu.nvidia.com"
    ]
    # Read back and rendered from the one view.
    answer = result.to_json()
    assert answer["deviceAsks"] == [
        {
            "form": "template",
            "name": "double-gpu",
            "deviceClasses": ["gpu.nvidia.com"],
            "text": "claim template double-gpu -> gpu.nvidia.com",
        }
    ]
    assert PodExplanation.from_json(answer).to_json() == answer
    text = pod_text(PodExplanation.from_json(answer), Served.from_json({"leader": True}))
    assert "devices asked: claim template double-gpu -> gpu.nvidia.com" in text


def test_an_unknown_claim_template_is_named_and_the_pod_classified_by_its_requests() -> None:
    plan, cluster = scored_cluster()
    labels = {"tenant": "dept-b", **OPTED_IN}
    for devices in (FakeCatalog(), None):
        result = explain_pod(
            DRA_POLICY, plan, cluster, claim_pod("gpu-1"), labels, "team-b", devices=devices
        )
        assert result.pod_class is None
        (ask,) = result.device_asks
        assert ask.device_classes is None and ask.text == "claim template gpu-1 not known yet"
        assert result.device_notes == (
            "claim template gpu-1 not known yet: classified by requests only",
        )
        text = pod_text(result, Served.from_json({"leader": True}))
        assert "note: claim template gpu-1 not known yet: classified by requests only" in text
