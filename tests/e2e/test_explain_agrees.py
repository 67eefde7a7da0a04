"""`/explain` against the real kube-scheduler: for random nodes and random pods, the nodes the
explanation allows are exactly the nodes where the scheduler binds the pod the webhook makes.

Nodes carry what two cycles of the real scorer wrote to them through the apiserver from random
observations and pods (scores, `reserved-for-gpu`, `overcommit-pct`, the `gpu-hot`/`unhealthy`
taints, budget pools, some of them empty), plus foreign labels and taints of every effect, and
some are cordoned. Pods have tolerations that are easy to get wrong (wildcards, effect-less,
case, the cordon's own taint, an Lt/Gt toleration the apiserver refuses), nodeSelectors,
required terms with Gt/Lt on odd label values, matchFields and empty terms, GPU or not, in a
namespace of each tenant, of none, and one not opted in.

Each pod is mutated by the webhook's own `mutate_pod` and explained by `POST /explain/pod` on
that scorer's HTTP app (which reads the namespace from the apiserver); a pod the webhook's
validation or the apiserver refuses must be allowed nowhere. Where it may go is measured by one
probe per node: the mutated pod with `kubernetes.io/hostname In [node]` ANDed into its required
terms, bound or Unschedulable.
Tenant pods never burst (limits = requests), so no probe raises a node's floor, and pools are
either empty or far larger than every probe together.
"""

from __future__ import annotations

import copy
import os
import random
import time
import uuid
from collections.abc import Mapping
from typing import Any

import jsonpatch
import requests
from kubernetes import client

from kits.control_plane import ControlPlane
from scorer.app import create_app
from scorer.cycle.service import Scorer
from scorer.cycle.sources import Readings, SourceRequest
from scorer.cycle.writer import NodeApi
from scorer.model import NodeState
from scorer.watch.ledger import PodLedger
from steer.adapters.http_server import HttpServer
from steer.adapters.kubejson import KubeJson
from steer.core.admission import ValidationPlan, validate_pod
from steer.core.mutation import MutationPlan, mutate_pod
from steer.core.policy import parse_policy
from steer.core.steering import condition_key
from tests.e2e.test_scheduler import SET_KEY
from tests.scorer_support import readings_for

from .conftest import ROOT

# The example policy, with `gpu-hot` a NoSchedule taint: then the toleration the webhook injects
# for dept-a decides where its pods may go.
POLICY_TEXT = (ROOT / "examples" / "policy.yaml").read_text()
HOT_EFFECT = "    - name: gpu-hot\n      condition: {dimension: gpu-util, source: raw, operator: Gt, value: 90, margin: 5}\n      effect: PreferNoSchedule\n"
assert HOT_EFFECT in POLICY_TEXT
POLICY = parse_policy(
    POLICY_TEXT.replace(HOT_EFFECT, HOT_EFFECT.replace("PreferNoSchedule", "NoSchedule"))
)
PLAN = MutationPlan.from_policy(POLICY)
VALIDATION = ValidationPlan.from_policy(POLICY)
# Another seed explores other cases: STEER_AGREE_SEED=7 make e2e.
SEED = int(os.environ.get("STEER_AGREE_SEED", "20261201"))
NODES = 12
PODS = 48
HOSTNAME = "kubernetes.io/hostname"
PROBE_KEY = "e2e.kube-steer.github.io/probe"
HOT = condition_key(POLICY, POLICY.taint_rule("gpu-hot"))
UNHEALTHY = condition_key(POLICY, POLICY.taint_rule("unhealthy"))
OVERCOMMIT = POLICY.label_key("overcommit-pct")
RESERVED_GPU = POLICY.label_key("reserved-for-gpu")

FOREIGN_TAINTS = (
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"},
    {"key": "maintenance", "effect": "NoExecute"},
    {"key": "tier", "value": "5", "effect": "NoSchedule"},
)
TOLERATIONS = (
    {"operator": "Exists"},
    {"operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists", "effect": "PreferNoSchedule"},
    {"key": "dedicated", "operator": "Equal", "value": "ml"},
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
    {"key": "dedicated", "value": "ML"},
    {"key": "dedicated", "operator": "Exists", "effect": "NoExecute"},
    {"key": "maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 3600},
    {"key": "tier", "operator": "Equal", "value": "5"},
    {"key": "tier", "operator": "Gt", "value": "3"},  # the apiserver refuses it (alpha gate off)
    {"key": HOT, "operator": "Equal", "value": "true"},
    {"key": HOT, "value": "true", "effect": "NoSchedule"},
    {"key": UNHEALTHY, "operator": "Exists"},
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
)
TIERS = ("1", "3", "4", "007", "1_0", "10", "x")


def _expression(rng: random.Random, names: list[str]) -> dict[str, Any]:
    choice = rng.randrange(9)
    if choice == 0:
        return {
            "key": "tier",
            "operator": rng.choice(("Gt", "Lt")),
            "values": [rng.choice(("3", "+3", "-1", "7"))],
        }
    if choice == 1:
        return {
            "key": OVERCOMMIT,
            "operator": rng.choice(("Gt", "Lt")),
            "values": [str(rng.randint(-5, 20))],
        }
    if choice == 2:
        return {"key": "disk", "operator": rng.choice(("In", "NotIn")), "values": ["ssd"]}
    if choice == 3:
        return {"key": "zone", "operator": rng.choice(("Exists", "DoesNotExist"))}
    if choice == 4:
        return {"key": RESERVED_GPU, "operator": rng.choice(("Exists", "DoesNotExist"))}
    if choice == 5:
        return {"key": HOSTNAME, "operator": "NotIn", "values": rng.sample(names, 2)}
    if choice == 6:
        return {"key": "tier", "operator": "In", "values": rng.sample(TIERS, 3)}
    if choice == 7:
        return {
            "key": POLICY.label_key("score"),
            "operator": "In",
            "values": ["60", "70", "80", "90", "100"],
        }
    return {"key": "zone", "operator": "In", "values": ["a"]}


def random_pod(rng: random.Random, names: list[str]) -> dict[str, Any]:
    resources: dict[str, str] = {"cpu": "100m", "memory": "64Mi"}
    if rng.random() < 0.3:
        resources["nvidia.com/gpu"] = "1"
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "c",
                "image": "registry.k8s.io/pause:3.10",
                "resources": {"requests": dict(resources), "limits": dict(resources)},
            }
        ],
    }
    if rng.random() < 0.6:
        spec["tolerations"] = [dict(t) for t in rng.sample(TOLERATIONS, rng.randint(1, 3))]
    if rng.random() < 0.3:
        spec["nodeSelector"] = rng.choice(({"disk": "ssd"}, {"zone": "a"}, {"tier": "3"}))
    if rng.random() < 0.6:
        terms: list[dict[str, Any]] = []
        for _ in range(rng.randint(1, 2)):
            shape = rng.random()
            if shape < 0.1:
                terms.append({})  # matches nothing, and must stay so
            elif shape < 0.25:
                terms.append(
                    {
                        "matchFields": [
                            {
                                "key": "metadata.name",
                                "operator": "In",
                                "values": rng.sample(names, 3),
                            }
                        ]
                    }
                )
            else:
                terms.append(
                    {
                        "matchExpressions": [
                            _expression(rng, names) for _ in range(rng.randint(1, 2))
                        ]
                    }
                )
        spec["affinity"] = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}
            }
        }
    return {"metadata": {"name": "p", "labels": {"app": "agree"}}, "spec": spec}


def random_nodes(rng: random.Random, set_id: str) -> tuple[list[NodeState], dict[str, Any]]:
    """Node states to plan from, and per node the foreign labels, taints and cordon."""
    names = [f"{set_id}-{i}" for i in range(NODES)]
    states, extra = [], {}
    for name in names:
        gpus = rng.choice((0, 0, 8))
        allocatable = {"cpu": "32", "memory": "128Gi", "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        labels = {SET_KEY: set_id}
        for key, values in (("zone", ("a", "b")), ("disk", ("ssd", "hdd")), ("tier", TIERS)):
            if rng.random() < 0.7:
                labels[key] = rng.choice(values)
        extra[name] = {
            "gpus": gpus,
            "labels": labels,
            "taints": rng.sample(FOREIGN_TAINTS, rng.choice((0, 0, 1, 2))),
            "cordon": rng.random() < 0.2,
            # Pods outside every pool whose limits exceed the node: every pool is 0 there.
            "full": rng.random() < 0.2,
        }
        states.append(NodeState(name=name, labels=labels, allocatable=allocatable))
    return states, extra


def observations(
    rng: random.Random, names: list[str], extra: Mapping[str, Any]
) -> tuple[dict[str, dict[str, float]], list[dict[str, Any]]]:
    """Random readings per dimension (a fifth of the nodes unscored) and the bound pods of the
    ledger: on a "full" node, one pod outside every pool whose limits exceed the node."""
    observed = [n for n in names if rng.random() < 0.8]  # the others stay unscored
    values = {
        "gpu-util": {n: rng.choice((5.0, 50.0, 95.0)) for n in observed},
        "gpu-free": {n: float(rng.randint(0, 8)) for n in observed},
        "gpu-frag": {n: float(rng.randint(0, 100)) for n in observed},
        "power": {n: float(rng.randint(100, 900)) for n in observed},
        "overcommit-pct": {n: float(rng.randint(-20, 15)) for n in observed},
        "health": {n: rng.choice((1.0, 1.0, 0.0)) for n in observed},
    }
    huge = {"cpu": "1000000", "memory": "1000Ti"}
    pods = [
        {
            "metadata": {"uid": f"full-{n}", "name": f"full-{n}", "namespace": "elsewhere"},
            "spec": {"nodeName": n, "containers": [{"resources": {"limits": huge}}]},
            "status": {"phase": "Running"},
        }
        for n in names
        if extra[n]["full"]
    ]
    return values, pods


class RecordedReadings:
    """The random observations, answered as the Prometheus source answers a cycle."""

    def __init__(self, values: Mapping[str, Mapping[str, float]]) -> None:
        self.values = values

    def read(self, request: SourceRequest) -> Readings:
        policy, dimensions, nodes, at = (
            request.policy,
            request.dimensions,
            request.nodes,
            request.at,
        )
        assert at is not None
        wanted = {d.name for d in dimensions}
        # Prometheus answers every query, with an empty vector where nothing is recorded.
        every = readings_for(policy, nodes, {d: self.values.get(d, {}) for d in wanted}, at)
        return Readings(readings={k: v for k, v in every.items() if k in wanted})

    def close(self) -> None:
        pass


def _probe(pod: Mapping[str, Any], name: str, node: str) -> dict[str, Any]:
    """The mutated pod, confined to `node` by a hostname requirement in each required term (a
    term without requirements matches nothing and stays so)."""
    probe = copy.deepcopy(dict(pod))
    probe["metadata"] = {
        "name": name,
        "labels": {**pod["metadata"].get("labels", {}), PROBE_KEY: "1"},
    }
    pin = {"key": HOSTNAME, "operator": "In", "values": [node]}
    node_affinity = probe["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = node_affinity.setdefault("requiredDuringSchedulingIgnoredDuringExecution", {})
    terms = required.get("nodeSelectorTerms")
    if terms is None:
        required["nodeSelectorTerms"] = [{"matchExpressions": [pin]}]
    else:
        for term in terms:
            if term.get("matchExpressions") or term.get("matchFields"):
                term["matchExpressions"] = [*term.get("matchExpressions", []), pin]
    return probe


def _outcomes(
    core: client.CoreV1Api, namespaces: list[str], names: set[str], timeout: float
) -> dict[str, str | None]:
    """Probe name -> node it is bound to, or None once the scheduler found it Unschedulable."""
    done: dict[str, str | None] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and len(done) < len(names):
        for ns in namespaces:
            for pod in core.list_namespaced_pod(ns, label_selector=PROBE_KEY).items:
                if pod.metadata.name not in names:
                    continue
                if pod.spec.node_name:
                    done[pod.metadata.name] = pod.spec.node_name
                    continue
                for cond in pod.status.conditions or ():
                    if (
                        cond.type == "PodScheduled"
                        and cond.status == "False"
                        and cond.reason == "Unschedulable"
                    ):
                        done[pod.metadata.name] = None
        time.sleep(0.3)
    missing = sorted(names - done.keys())
    assert not missing, f"probes neither bound nor unschedulable after {timeout}s: {missing[:10]}"
    return done


def test_explain_allows_exactly_the_nodes_the_scheduler_binds_the_mutated_pod_to(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any, record_property: Any
) -> None:
    rng = random.Random(SEED)
    set_id = f"agree-{uuid.uuid4().hex[:6]}"
    states, extra = random_nodes(rng, set_id)
    names = [s.name for s in states]
    values, full_pods = observations(rng, names, extra)
    core = client.CoreV1Api(control_plane.api_client())
    for state in states:
        made = extra[state.name]
        make_node(
            state.name,
            cpu=state.allocatable["cpu"],
            memory=state.allocatable["memory"],
            gpus=made["gpus"],
            labels=made["labels"],
            taints=made["taints"],
        )
        if made["cordon"]:
            core.patch_node(state.name, {"spec": {"unschedulable": True}})
    # The scorer itself writes the labels, taints and pools, from the random observations and
    # pods; the taints need two cycles.
    ledger = PodLedger()
    ledger.replace(full_pods)
    scorer = Scorer(
        lambda: POLICY,
        NodeApi(KubeJson(control_plane.api_client())),
        ledger=ledger,
        sources={"prometheus": RecordedReadings(values)},
    )
    for at in (1000.0, 1030.0):
        result = scorer.run_cycle(at=at)
        assert result.report is not None and not result.report.errors
    nodes = [
        NodeState.from_k8s(control_plane.api_client().sanitize_for_serialization(core.read_node(n)))
        for n in names
    ]
    assert any(n.taints for n in nodes) and any(
        r == f"{POLICY.spec.resource_prefix}pool-cpu" for n in nodes for r in n.allocatable
    )

    tenants: list[tuple[Any, dict[str, str]]] = [(None, {"kube-steer.github.io/enabled": "true"})]
    for tenant in POLICY.spec.tenants:
        labels = dict(tenant.namespace_selector.match_labels)
        tenants.append((tenant, {**labels, "kube-steer.github.io/enabled": "true"}))
    # dept-a's labels without opting in: the webhook leaves its pods alone.
    tenants.append(
        (POLICY.spec.tenants[0], dict(POLICY.spec.tenants[0].namespace_selector.match_labels))
    )
    namespaces = [(t, labels, make_namespace(labels, prefix="agree")) for t, labels in tenants]

    # Every explanation is asked as an operator asks it: POST /explain/pod on the scorer's own
    # HTTP app, which reads the namespace's labels from the apiserver.
    server = HttpServer(create_app(scorer)).start()
    http = requests.Session()
    http.trust_env = False
    try:
        cases = []
        probes: set[str] = set()
        refused = []
        denied = []
        for i in range(PODS):
            tenant, ns_labels, ns = namespaces[i % len(namespaces)]
            pod = random_pod(rng, names)
            answer = http.post(f"{server.url}/explain/pod", params={"namespace": ns}, json=pod)
            assert answer.status_code == 200, answer.text
            explanation = answer.json()
            assert explanation["tenant"] == (tenant.name if tenant else None)
            mutated = pod
            if PLAN.opted_in(ns, ns_labels):
                mutated = jsonpatch.apply_patch(pod, list(mutate_pod(PLAN, pod, tenant).ops))
            if validate_pod(VALIDATION, mutated, tenant, ns):
                # The webhook's validation denies the pod: it goes nowhere, and explain says so.
                denied.append(i)
                assert explanation["problems"] and not explanation["allowed"], (i, pod)
                continue
            try:
                for j, node in enumerate(names):
                    probe = _probe(mutated, f"p{i}-{j}", node)
                    core.create_namespaced_pod(ns, probe)
                    probes.add(probe["metadata"]["name"])
            except client.ApiException as exc:
                assert exc.status == 422 and j == 0, exc
                refused.append((i, explanation["problems"], exc.reason))
                assert explanation["problems"] and not explanation["allowed"], (i, pod, exc.body)
                continue
            cases.append((i, pod, tenant, explanation))

    finally:
        http.close()
        server.stop()
        scorer.close()
    outcome = _outcomes(core, [ns for _, _, ns in namespaces], probes, timeout=60)
    disagreements = []
    for i, pod, tenant, explanation in cases:
        bound = {names[j] for j in range(NODES) if outcome.get(f"p{i}-{j}")}
        allowed = {v["node"] for v in explanation["allowed"]}
        if bound != allowed:
            disagreements.append(
                {
                    "pod": i,
                    "tenant": tenant.name if tenant else None,
                    "spec": pod["spec"],
                    "schedulerOnly": sorted(bound - allowed),
                    "explainOnly": sorted(allowed - bound),
                    "excluded": {
                        v["node"]: [e["rule"] for e in v["exclusions"]]
                        for v in explanation["excluded"]
                    },
                }
            )
    feasible = sum(len(e["allowed"]) for *_, e in cases)
    record_property("pods", PODS)
    record_property("nodes", NODES)
    record_property("pod_node_pairs", len(cases) * NODES)
    record_property("feasible_pairs", feasible)
    record_property("refused_pods", len(refused))
    record_property("denied_pods", len(denied))
    assert not disagreements, disagreements
    # The random cases must exercise both answers, and pods the apiserver refuses.
    assert 0 < feasible < len(cases) * NODES and refused
