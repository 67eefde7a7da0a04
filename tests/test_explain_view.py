"""The explain view model: the JSON answer is rendered from it and read back into it, so the
CLI's tables and the HTTP answer say the same thing (scorer/explain/view/)."""

from __future__ import annotations

import dataclasses
from typing import Any

from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.explain import (
    detail_view,
    explain_pod,
    latest_failed_scheduling,
    nodes_view,
    scheduler_verdict,
)
from scorer.explain.render import node_text, nodes_text, pod_text, scheduler_lines
from scorer.explain.view import (
    NodeDetail,
    NodesTable,
    PodExplanation,
    SchedulerVerdict,
    SchedulingEvent,
    Served,
)
from tests import test_scorer_budget as budget
from tests.test_scorer_explain import OPTED_IN, POLICY, gpu_pod, scored_cluster


def test_node_views_read_back_from_their_json_unchanged() -> None:
    plan, cluster = scored_cluster()
    table = nodes_view(plan)
    assert NodesTable.from_json(table.to_json()) == table
    for node in cluster:
        detail = detail_view(POLICY, plan, node.name)
        assert detail is not None
        assert NodeDetail.from_json(detail.to_json()) == detail


def test_budget_pools_read_back_from_their_json_unchanged() -> None:
    node = budget.node_state("n1")
    pods = [budget.usage(budget.FOREIGN), budget.usage(budget.tenant_spec())]
    cycle, _ = plan_cycle(
        budget.POLICY, [node], {}, ScorerMemory(), 1000.0, pod_usages={"n1": pods}
    )
    detail = detail_view(budget.POLICY, cycle, "n1")
    assert detail is not None and detail.budget_pools.floor is not None
    assert detail.budget_pools.pools and detail.budget_pools.gates
    assert NodeDetail.from_json(detail.to_json()) == detail


def test_a_pod_explanation_reads_back_to_the_same_json() -> None:
    plan, cluster = scored_cluster()
    for labels in ({"tenant": "dept-b", **OPTED_IN}, OPTED_IN, {}):
        answer = explain_pod(POLICY, plan, cluster, gpu_pod(), labels, "team-b").to_json()
        assert PodExplanation.from_json(answer).to_json() == answer


def test_the_cli_tables_render_what_the_answer_holds() -> None:
    plan, cluster = scored_cluster()
    served: dict[str, Any] = {"leader": False, "notes": ["no namespace given"]}
    nodes = nodes_text(NodesTable.from_json(nodes_view(plan).to_json()), Served.from_json(served))
    assert nodes.splitlines()[0].split()[:2] == ["NODE", "score-util"]
    assert nodes.splitlines()[-1].endswith("leader=False, stale: power")
    detail = detail_view(POLICY, plan, "c")
    assert detail is not None
    text = node_text(NodeDetail.from_json(detail.to_json()), Served.from_json(served))
    assert text.startswith("node c  policy ") and "condition gpu-hot:" in text
    pod = explain_pod(POLICY, plan, cluster, gpu_pod(), {"tenant": "dept-b", **OPTED_IN})
    text = pod_text(PodExplanation.from_json(pod.to_json()), Served.from_json(served))
    assert "note: no namespace given" in text
    assert {
        line.split()[1].rstrip(":") for line in text.splitlines() if line.startswith("excluded ")
    } == {v.node for v in pod.excluded}


def test_the_nodes_table_carries_each_pool_room_take_and_free_space() -> None:
    node = budget.node_state("n1")
    pods = [budget.usage(budget.FOREIGN), budget.usage(budget.tenant_spec())]
    cycle, _ = plan_cycle(
        budget.POLICY, [node], {}, ScorerMemory(), 1000.0, pod_usages={"n1": pods}
    )
    table = nodes_view(cycle)
    (row,) = table.nodes
    (plan,) = cycle.nodes
    assert [(p.resource, p.room, p.taken, p.free) for p in row.pool_usage] == [
        (p.resource, p.room, p.taken, p.free) for p in plan.pools
    ]
    assert set(row.to_json()["poolUsage"]) == set(row.pools)
    assert NodesTable.from_json(table.to_json()) == table


LIVE_POD = {
    "metadata": {"name": "train", "namespace": "team-b", "uid": "u-1"},
    "spec": {"containers": [{"name": "c"}]},
    "status": {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
                "lastTransitionTime": "2026-12-01T10:00:00Z",
            }
        ],
    },
}


def _event(message: str, uid: str = "u-1", **times: Any) -> dict[str, Any]:
    return {
        "reason": "FailedScheduling",
        "message": message,
        "involvedObject": {"kind": "Pod", "name": "train", "uid": uid},
        "source": {"component": "default-scheduler"},
        **times,
    }


def test_the_latest_failed_scheduling_event_is_picked_by_time_not_by_text() -> None:
    # A MicroTime within the same second sorts after the whole second (as text it would not).
    events = [
        _event("later", eventTime="2026-12-01T10:00:00.250000Z"),
        _event("earlier", lastTimestamp="2026-12-01T10:00:00Z"),
        _event("of an earlier pod", uid="u-0", eventTime="2026-12-01T11:00:00Z"),
        {**_event("not a scheduling failure", eventTime="2026-12-01T12:00:00Z"), "reason": "x"},
    ]
    latest = latest_failed_scheduling(events, "u-1")
    assert latest == SchedulingEvent("later", 1, "2026-12-01T10:00:00.250000Z", "default-scheduler")
    repeated = _event("again", series={"count": 7, "lastObservedTime": "2026-12-01T10:09:00Z"})
    assert latest_failed_scheduling([*events, repeated], "u-1") == SchedulingEvent(
        "again", 7, "2026-12-01T10:09:00Z", "default-scheduler"
    )
    assert latest_failed_scheduling([], "u-1") is None


def test_the_schedulers_verdict_reads_back_and_renders_beside_kube_steers() -> None:
    verdict = scheduler_verdict(
        LIVE_POD, [_event("3 Insufficient cpu", eventTime="2026-12-01T10:00:01Z")]
    )
    assert verdict.node is None and verdict.phase == "Pending"
    assert verdict.pod_scheduled is not None and verdict.pod_scheduled.reason == "Unschedulable"
    assert SchedulerVerdict.from_json(verdict.to_json()) == verdict
    plan, cluster = scored_cluster()
    pod = explain_pod(POLICY, plan, cluster, gpu_pod(), {"tenant": "dept-b", **OPTED_IN}, "team-b")
    live = dataclasses.replace(pod, scheduler=verdict)
    assert PodExplanation.from_json(live.to_json()) == PodExplanation.from_json(
        {**pod.to_json(), "scheduler": verdict.to_json()}
    )
    assert PodExplanation.from_json(live.to_json()).scheduler == verdict
    text = pod_text(PodExplanation.from_json(live.to_json()), Served())
    assert "scheduler: not bound (Pending)" in text
    assert "scheduler: PodScheduled=False Unschedulable: 0/3 nodes are available" in text
    assert "scheduler: FailedScheduling x1 (last 2026-12-01T10:00:01Z): 3 Insufficient cpu" in text
    bound = scheduler_verdict(
        {"spec": {"nodeName": "a"}, "status": {"phase": "Running"}},
        [],
        "events of x not read (403)",
    )
    assert bound.pod_scheduled is None and bound.failed_scheduling is None
    assert scheduler_lines(bound) == [
        "scheduler: bound to a (Running)",
        "note: events of x not read (403)",
    ]
