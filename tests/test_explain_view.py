"""The explain view model: the JSON answer is rendered from it and read back into it, so the
CLI's tables and the HTTP answer say the same thing (scorer/explain/view/)."""

from __future__ import annotations

from typing import Any

from scorer.explain import (
    NodeDetail,
    NodesTable,
    PodExplanation,
    Served,
    detail_view,
    explain_pod,
    nodes_view,
)
from scorer.explain.render import node_text, nodes_text, pod_text
from scorer.plan import ScorerMemory, plan_cycle
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
