"""Audit mode (Spec.mode_for): the same decisions as enforce mode, recorded and warned,
with nothing the scheduler reads changed; security taint rules hold in every mode."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from prometheus_client import CollectorRegistry

from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.explain import audit_report
from scorer.explain.render import audit_text, pod_text
from scorer.explain.view import AuditReport, Served
from scorer.model import NodeState
from steer.adapters.policy_file import PolicyWatcher
from steer.core.admission_policy.budget import budget_admission_policy
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.policy import PolicyError, parse_policy
from steer.core.scheduling import Taint
from steer.core.steering import trace_annotation_key
from tests.conftest import EXAMPLE_POLICY
from tests.scorer_support import SMALL_POLICY, apply_plan, readings_for
from tests.webhook_harness import FixedNamespaces, counted, review_for
from webhook.handler import AdmissionHandler
from webhook.metrics import WebhookMetrics

T0 = 1_800_000_000.0
ENFORCE_TEXT = EXAMPLE_POLICY.read_text()
DEPT_B_LINE = "      allowedSchedulerNames: [steer-spread, steer-binpack]\n"
assert DEPT_B_LINE in ENFORCE_TEXT
# dept-b in audit mode, the rest of the policy enforced.
DEPT_B_AUDIT_TEXT = ENFORCE_TEXT.replace(DEPT_B_LINE, DEPT_B_LINE + "      mode: audit\n")
# The whole policy in audit mode.
AUDIT_TEXT = ENFORCE_TEXT.replace("spec:\n", "spec:\n  mode: audit\n", 1)
ENFORCE = parse_policy(ENFORCE_TEXT)
DEPT_B_AUDIT = parse_policy(DEPT_B_AUDIT_TEXT)
AUDIT = parse_policy(AUDIT_TEXT)


def test_the_mode_is_the_tenants_or_the_policys() -> None:
    assert ENFORCE.spec.mode == "enforce" and AUDIT.spec.mode == "audit"
    assert [DEPT_B_AUDIT.spec.mode_for(t) for t in DEPT_B_AUDIT.spec.tenants] == [
        "enforce",
        "audit",
    ]
    assert DEPT_B_AUDIT.spec.mode_for(None) == "enforce" and AUDIT.spec.mode_for(None) == "audit"
    assert ENFORCE.spec.audited_tenants() == ()
    assert DEPT_B_AUDIT.spec.audited_tenants() == ("dept-b",)
    assert AUDIT.spec.audited_tenants() == ("dept-a", "dept-b", "")
    enforced_a = AUDIT_TEXT.replace(
        "      allowedTolerations: [gpu-hot]\n",
        "      allowedTolerations: [gpu-hot]\n      mode: enforce\n",
    )
    assert parse_policy(enforced_a).spec.audited_tenants() == ("dept-b", "")


def test_a_mode_that_is_neither_is_named() -> None:
    with pytest.raises(PolicyError) as raised:
        parse_policy(ENFORCE_TEXT.replace("spec:\n", "spec:\n  mode: dryrun\n", 1))
    assert "spec.mode: input should be 'enforce' or 'audit', got 'dryrun'" in str(raised.value)
    with pytest.raises(PolicyError) as raised:
        parse_policy(ENFORCE_TEXT.replace(DEPT_B_LINE, DEPT_B_LINE + "      mode: warn\n"))
    assert "spec.tenants[1].mode: input should be 'enforce' or 'audit', got 'warn'" in str(
        raised.value
    )


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = review_for("pod-create-by-replicaset.json", "team-b")["request"]["object"]
    return pod


def _apply(pod: dict[str, Any], ops: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    patched: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(pod), list(ops))
    return patched


def test_an_audited_pod_gets_its_trace_and_nothing_the_scheduler_reads() -> None:
    tenant = DEPT_B_AUDIT.tenant("dept-b")
    pod = _pod()
    enforced = mutate_pod(MutationPlan.from_policy(ENFORCE), pod, ENFORCE.tenant("dept-b"))
    audited = mutate_pod(MutationPlan.from_policy(DEPT_B_AUDIT), pod, tenant)
    assert enforced.added and not enforced.audit
    assert audited.audit and audited.added == () and audited.would_add == enforced.added
    # One op: the trace annotation. Everything else of the pod is as it was sent.
    key = trace_annotation_key(DEPT_B_AUDIT)
    patched = _apply(pod, audited.ops)
    assert len(audited.ops) == 1
    assert audited.ops[0]["path"].startswith("/metadata/annotations")

    def without_trace(doc: dict[str, Any]) -> dict[str, Any]:
        metadata = dict(doc["metadata"])
        annotations = {k: v for k, v in (metadata.pop("annotations", None) or {}).items()}
        annotations.pop(key, None)
        return {**doc, "metadata": {**metadata, "annotations": annotations}}

    assert without_trace(patched) == without_trace(pod)
    trace = orjson.loads(patched["metadata"]["annotations"][key])
    assert trace["mode"] == "audit"
    assert trace["wouldAdd"] == list(enforced.added)
    assert trace["rules"] == list(enforced.in_effect)
    # A reinvocation computes the same trace: no patch.
    again = mutate_pod(MutationPlan.from_policy(DEPT_B_AUDIT), patched, tenant)
    assert again.ops == () and again.trace == audited.trace
    # Asked to enforce, the same plan steers as enforce mode does.
    forced = mutate_pod(MutationPlan.from_policy(DEPT_B_AUDIT), pod, tenant, mode="enforce")
    assert not forced.audit and forced.added == enforced.added
    assert [op["path"] for op in forced.ops] == [op["path"] for op in enforced.ops]
    # The enforce trace has no mode: traces written before audit mode read the same.
    assert "mode" not in orjson.loads(enforced.trace or "{}")


def _handler(tmp_path: Path, text: str) -> AdmissionHandler:
    path = tmp_path / "policy.yaml"
    path.write_text(text)
    return AdmissionHandler(
        PolicyWatcher(str(path)), FixedNamespaces(), WebhookMetrics(CollectorRegistry())
    )


def _violating_review() -> bytes:
    """A dept-b pod with an unbounded memory limit, a cpu limit over its request (budget 0 %)
    and no schedulerName (enforce mode routes it to steer-spread)."""
    body = review_for("pod-create-by-replicaset.json", "team-b")
    spec = body["request"]["object"]["spec"]
    spec.pop("schedulerName", None)
    spec["containers"][0]["resources"] = {
        "requests": {"cpu": "250m", "memory": "64Mi"},
        "limits": {"cpu": "500m"},
    }
    return json.dumps(body).encode()


def _mutated(handler: AdmissionHandler, body: bytes) -> bytes:
    """The review with the mutating webhook's patch applied to its object."""
    review = json.loads(body)
    response = orjson.loads(handler.handle("mutate", body).body)["response"]
    ops = json.loads(base64.b64decode(response["patch"])) if "patch" in response else []
    review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], ops)
    return json.dumps(review).encode()


def test_audit_allows_what_enforce_denies_and_warns_with_the_same_reasons(
    tmp_path: Path,
) -> None:
    body = _violating_review()
    (tmp_path / "e").mkdir()
    (tmp_path / "a").mkdir()
    enforce = _handler(tmp_path / "e", ENFORCE_TEXT)
    audit = _handler(tmp_path / "a", DEPT_B_AUDIT_TEXT)
    # As the apiserver calls them: the mutating webhook, its patch applied, then validation.
    denied = orjson.loads(enforce.handle("validate", _mutated(enforce, body)).body)["response"]
    assert denied["allowed"] is False
    reasons = denied["status"]["message"]
    assert "rule overcommit" in reasons and "scheduler-name" not in reasons

    answer = audit.handle("validate", _mutated(audit, body))
    response = orjson.loads(answer.body)["response"]
    assert (answer.status, answer.result, response["allowed"]) == (200, "audited", True)
    # The pod enforce mode would have made is judged: the same reasons, no scheduler-name
    # (enforce routes the pod to steer-spread before validation).
    assert len(response["warnings"]) == 2
    for warning in response["warnings"]:
        assert warning.startswith("kube-steer audit: would deny: rule overcommit: ")
        assert warning[len("kube-steer audit: would deny: ") :].rstrip(".") in reasons
    assert counted(audit, "audits", action="deny", rule="overcommit") == 2
    assert counted(audit, "denials") == 0

    mutated = audit.handle("mutate", body)
    assert mutated.result == "audited"
    ops = json.loads(base64.b64decode(orjson.loads(mutated.body)["response"]["patch"]))
    assert [op["path"].split("/")[1:3] for op in ops] == [["metadata", "annotations"]]
    assert counted(audit, "audits", action="mutate", rule="budget:pool") == 2  # two reviews
    assert counted(audit, "mutations") == 0


def test_a_security_taint_rule_denies_in_audit_mode_too(tmp_path: Path) -> None:
    body = json.loads(_violating_review())
    body["request"]["object"]["spec"].setdefault("tolerations", []).append(
        {"key": "kube-steer.github.io/unhealthy", "operator": "Exists"}
    )
    raw = json.dumps(body).encode()
    handler = _handler(tmp_path, AUDIT_TEXT)
    for endpoint in ("validate", "validate-security"):
        response = orjson.loads(handler.handle(endpoint, raw).body)["response"]
        assert response["allowed"] is False, endpoint
        assert "rule reserved-toleration" in response["status"]["message"]
        assert "rule overcommit" not in response["status"]["message"]
    full = orjson.loads(handler.handle("validate", raw).body)["response"]
    assert any("would deny: " in w and "rule overcommit" in w for w in full["warnings"])


def test_the_budget_policy_treats_an_audited_tenant_as_outside_every_budget() -> None:
    def budgeted(text: str) -> str:
        vap, _ = budget_admission_policy(parse_policy(text))
        (variable,) = [v for v in vap["spec"]["variables"] if v["name"] == "budgeted"]
        expression: str = variable["expression"]
        return expression

    assert "'dept-a', 'dept-b'" in budgeted(ENFORCE_TEXT)
    assert "['dept-a']" in budgeted(DEPT_B_AUDIT_TEXT)
    vap, _ = budget_admission_policy(AUDIT)
    assert [v["expression"] for v in vap["spec"]["validations"]] == ["true"]


def test_an_audited_policy_labels_a_condition_and_withdraws_its_taint() -> None:
    """Audit mode taints no node (a taint acts on every pod, steered or not): the condition's
    label is written, and a taint an enforcing scorer set is withdrawn."""
    policy = parse_policy(SMALL_POLICY.replace("spec:\n", "spec:\n  mode: audit\n", 1))
    key = "kube-steer.github.io/gpu-hot"
    cluster = [
        NodeState("c", labels={key: "true"}, taints=(Taint(key, "true", "NoSchedule"),)),
        NodeState("d"),
    ]
    memory = ScorerMemory()
    for i in range(3):  # past setAfterCycles for "d"
        values = {"util": {"c": 95.0, "d": 95.0}}
        readings = readings_for(policy, cluster, values, T0 + i)
        plan, memory = plan_cycle(policy, cluster, readings, memory, T0 + i)
        cluster = apply_plan(policy, cluster, plan)
    for node in cluster:
        assert node.labels.get(key) == "true", node.name
        assert node.taints == (), node.name
    # The same data under enforce mode taints both.
    enforced = parse_policy(SMALL_POLICY)
    assert enforced.spec.mode == "enforce"
    plan, _ = plan_cycle(enforced, cluster, readings, memory, T0 + 3)
    assert all(p.taints == (Taint(key, "true", "NoSchedule"),) for p in plan.nodes)


# -- the audit report ------------------------------------------------------------------------

GPU_NODE = {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "4", "pods": "110"}
OPTED_IN = {"kube-steer.github.io/enabled": "true"}


def _audited_gpu_pod(policy: Any, name: str, node: str | None, at: str) -> dict[str, Any]:
    """A GPU pod as the webhook stored it in audit mode, then bound to `node` at `at`."""
    pod: dict[str, Any] = {
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {
            "containers": [
                {
                    "name": "c",
                    "image": "x",
                    "resources": {
                        "limits": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
                    },
                }
            ]
        },
    }
    mutation = mutate_pod(MutationPlan.from_policy(policy), pod, None)
    assert mutation.audit
    stored = mutation.apply(pod)
    if node is not None:
        stored["spec"]["nodeName"] = node
        stored["status"] = {
            "conditions": [{"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]
        }
    return stored


def test_the_audit_report_says_where_the_scheduler_and_the_policy_disagree() -> None:
    policy = parse_policy(SMALL_POLICY.replace("spec:\n", "spec:\n  mode: audit\n", 1))
    cluster = [
        NodeState(n, allocatable=dict(GPU_NODE), capacity=dict(GPU_NODE)) for n in ("a", "b", "c")
    ]
    memory = ScorerMemory()
    for i in range(3):  # "c" runs hot past setAfterCycles: its avoid:gpu-hot gate closes
        values = {"util": {"a": 10.0, "b": 50.0, "c": 95.0}}
        plan, memory = plan_cycle(
            policy,
            cluster,
            readings_for(policy, cluster, values, T0 + i),
            memory,
            T0 + i,
            pod_usages={},  # the pods are seen: gates are published
        )
        cluster = apply_plan(policy, cluster, plan)
    assert all(n.taints == () for n in cluster)  # audit mode: labelled, not tainted
    pods = [
        _audited_gpu_pod(policy, "on-hot", "c", "2026-12-01T10:00:03Z"),
        _audited_gpu_pod(policy, "on-best", "a", "2026-12-01T10:00:02Z"),
        _audited_gpu_pod(policy, "on-second", "b", "2026-12-01T10:00:01Z"),
        _audited_gpu_pod(policy, "pending", None, ""),
    ]
    plain = _audited_gpu_pod(policy, "not-audited", "a", "2026-12-01T10:00:00Z")
    plain["metadata"]["annotations"] = {}
    labels = {"ml": OPTED_IN}
    report = audit_report(policy, plan, cluster, [*pods, plain], labels)
    assert (report.pods, report.agreed, report.on_excluded) == (3, 1, 1)
    assert {r.rule: r.pods for r in report.by_rule} == {"avoid:gpu-hot": 1, "rank": 1}
    assert report.ranks == {1: 1, 2: 1}
    assert [(p.name, p.excluded_by, p.rank) for p in report.divergent] == [
        ("on-hot", ("avoid:gpu-hot",), None),
        ("on-second", (), 2),
    ]
    assert AuditReport.from_json(report.to_json()) == report
    text = audit_text(report, Served(leader=True))
    assert "3 audited pods judged, 1 on the policy's first choice (33 %)" in text
    assert "ml/on-hot" in text and "avoid:gpu-hot" in text
    # The limit judges the last bound first and says how many it left out.
    limited = audit_report(policy, plan, cluster, [*pods, plain], labels, limit=1)
    assert (limited.pods, limited.left_out, limited.divergent[0].name) == (1, 2, "on-hot")


def test_explain_of_an_audited_pod_shows_it_as_the_scheduler_sees_it() -> None:
    """/explain/pod of an audited tenant's pod: not steered, the rules it would get named."""
    from scorer.explain import explain_pod

    nodes = [NodeState("a", allocatable=dict(GPU_NODE), capacity=dict(GPU_NODE))]
    pod = _pod()
    labels = {"tenant": "dept-b", "kube-steer.github.io/enabled": "true"}
    audited = explain_pod(DEPT_B_AUDIT, None, nodes, pod, labels, "team-b")
    enforced = explain_pod(ENFORCE, None, nodes, pod, labels, "team-b")
    assert audited.audit and not audited.steered and audited.gates == ()
    assert audited.rules == enforced.rules and enforced.steered and enforced.gates
    assert "not steered: audit mode; enforce mode would apply" in pod_text(
        audited, Served(leader=True)
    )
    forced = explain_pod(DEPT_B_AUDIT, None, nodes, pod, labels, "team-b", mode="enforce")
    assert forced.steered and forced.gates == enforced.gates
