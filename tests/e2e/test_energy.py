"""Energy as efficiency on the real kube-apiserver and kube-scheduler (steer profiles): the
example policy's plan for two efficient and two power-hungry nodes (watts from the powerModel
an operator fills in it, which the example leaves empty: no Kepler series, as for nodes with
only specs), written by the scorer's own writer, and the
real scheduler filling the active efficient node before waking the idle one or using a
power-hungry one, while the hungry node whose pods fit there is marked a drain candidate.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import yaml
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.waiting import wait_until
from scorer.cycle.plan import ScorerMemory, plan_cycle
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter
from scorer.watch.ledger import BoundPod
from steer.adapters.kubejson import KubeJson
from steer.core.policy import parse_policy
from steer.core.steering import class_preferences, composite_key
from tests.e2e.test_scheduler import SET_KEY, bare_pod, pod_template, wait_bound
from tests.scorer_support import readings_for

from .conftest import ROOT

# The example as an operator completes it: figures for the two kinds of node it runs.
_DOC = yaml.safe_load((ROOT / "examples" / "policy.yaml").read_text())
_DOC["spec"]["energy"]["powerModel"]["types"] = {
    "cpu-efficient": {"idleWatts": 120, "wattsPerCore": 5},
    "cpu-legacy": {"idleWatts": 220, "wattsPerCore": 11},
}
POLICY = parse_policy(yaml.safe_dump(_DOC))
SCORE = composite_key(POLICY, None)
PREFIX = POLICY.spec.label_prefix
INSTANCE_TYPE = POLICY.spec.energy.power_model.node_label
KINDS = {"eff-0": "cpu-efficient", "eff-1": "cpu-efficient", "leg-0": "cpu-legacy"}
KINDS["leg-1"] = "cpu-legacy"


def _resident(name: str, node: str) -> dict[str, Any]:
    """Work already running: a ReplicaSet of one pod of 2 cores, 4 GiB, bound directly (a pod
    its controller would make again, as a drain candidate's pods must be)."""
    resources = {"cpu": "2", "memory": "4Gi"}
    labels = {"resident": name}
    return {
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"requests": resources, "limits": resources},
                        }
                    ],
                },
            },
        },
    }


def test_cpu_work_fills_the_active_efficient_node_and_the_hungry_one_is_marked(
    control_plane: ControlPlane, make_node: Any, make_namespace: Any
) -> None:
    set_id = f"energy-{uuid.uuid4().hex[:6]}"
    names = {short: f"{set_id}-{short}" for short in KINDS}
    for short, kind in KINDS.items():
        make_node(
            names[short], cpu="16", memory="64Gi", labels={SET_KEY: set_id, INSTANCE_TYPE: kind}
        )
    ns = make_namespace(prefix="energy")
    api_client = control_plane.api_client()
    core = client.CoreV1Api(api_client)
    apps = client.AppsV1Api(api_client)
    for s in ("eff-0", "leg-0"):
        apps.create_namespaced_replica_set(ns, _resident(f"resident-{s}", names[s]))
    residents = wait_until(
        "both residents' pods made by their ReplicaSets",
        lambda: [
            api_client.sanitize_for_serialization(p)
            for p in core.list_namespaced_pod(ns, label_selector="resident").items
        ],
        until=lambda pods: len(pods) == 2,
        timeout=30,
    )

    # One scorer cycle over these nodes: the pods as its ledger reduces them, health read,
    # no Kepler series (the powerModel covers every node), written by its writer.
    api = NodeApi(KubeJson(control_plane.api_client()))
    states = [n for n in api.list_nodes() if n.name in names.values()]
    usages: dict[str, list[Any]] = {}
    for pod in residents:
        bound = BoundPod.of(pod)
        assert bound is not None
        usages.setdefault(bound.node, []).append(bound.usage)
    now = time.time()
    health = {"health": {n.name: 1.0 for n in states}}
    plan, _ = plan_cycle(
        POLICY, states, readings_for(POLICY, states, health, now), ScorerMemory(), now,
        pod_usages=usages,
    )  # fmt: skip
    report = NodeWriter(api, RateLimiter(100, 100)).apply(POLICY, plan, states)
    assert all(r.ok for r in report.results), report

    stored = {s: core.read_node(names[s]).metadata for s in KINDS}
    # (2 x core-power + 1 x idle-power + 2 x health + 1 x active) / 6: the active efficient
    # node 100, the idle efficient one 80, both hungry ones 30 (the active one's pods earn it
    # no consolidation term: its cores cost more than the cheapest).
    assert {s: m.labels[SCORE] for s, m in stored.items()} == {
        "eff-0": "100",
        "eff-1": "80",
        "leg-0": "30",
        "leg-1": "30",
    }
    marked = {s for s, m in stored.items() if m.labels.get(f"{PREFIX}drain-candidate") == "true"}
    assert marked == {"leg-0"}
    reason = stored["leg-0"].annotations[f"{PREFIX}drain-candidate-reason"]
    assert reason.startswith(
        f"its 1 movable pod (2 cores, 4 GiB requested) fits on 1 active node ({names['eff-0']}) at 5 W per busy core against 11 W here"
    )
    assert f"{PREFIX}drain-candidate-reason" not in (stored["eff-0"].annotations or {})

    # CPU pods steered as the webhook steers them: the real scheduler fills eff-0 (14 cores
    # free) before the emptier eff-1, and never picks a power-hungry node.
    template = pod_template(
        set_id,
        POLICY.spec.scheduler_profiles.spread,
        labels={"app": "svc"},
        preferred=[t.to_k8s() for t in class_preferences(POLICY, None)],
        requests={"cpu": "2", "memory": "4Gi"},
    )
    pods = [f"svc-{i}" for i in range(7)]
    for name in pods:
        core.create_namespaced_pod(ns, bare_pod(name, template))
    placed = wait_bound(control_plane, ns, pods)
    assert set(placed.values()) == {names["eff-0"]}, placed
    # eff-0 is full now (16 of 16 cores): the next pod wakes the idle efficient node.
    core.create_namespaced_pod(ns, bare_pod("overflow", template))
    assert wait_bound(control_plane, ns, ["overflow"])["overflow"] == names["eff-1"]
