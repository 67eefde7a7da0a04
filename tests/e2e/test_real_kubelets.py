"""A kubelet never refuses a running pod because of kube-steer (issue: safe on a real cluster).

Four kubemark hollow nodes (the real kubelet code, kits/hollow_nodes.py), the session's
real scheduler with the steer profiles, the real webhook registered for the example policy, its
admission policies applied, and the real scorer (in process, reading recorded observations, as
the RBAC-limited scorer identity the node-writes policy confines). Tenant pods of both budgets,
a GPU job and a DaemonSet with a wildcard toleration run. Then every mechanism moves under them:
score labels change, the `gpu-hot` (PreferNoSchedule) and `unhealthy` (NoSchedule) taints are
set, the gpu-hot gate closes, unsteered pods with high limits land and shrink the pools, a
5 % burst raises a floor and closes the gate of 0 %, and the policy's label and resource
prefixes change (old keys retired, old resources kept at what pods hold). A rolling restart of
every kubelet follows: no pod is `Failed`, every budget holds at the end state, and nothing
published is below what bound pods hold. A control pod with a required term on a label that
moved is refused by the same restart (`NodeAffinity`), so the restart did re-check everything.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from kits.control_plane import ControlPlane
from kits.hollow_nodes import HollowNode, pod_state, rolling_restart, start_all
from kits.service_processes import (
    apply_admission_policies,
    register_admission,
    remove_admission_policies,
    running_webhook,
    unregister_admission,
)
from kits.waiting import wait_until
from scorer.cycle.service import Scorer
from scorer.cycle.sources import Readings, SourceRequest
from scorer.cycle.writer import NodeApi
from scorer.watch.bindings import BindingWindow, PodBindingWatcher
from scorer.watch.ledger import PodLedger
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeJson
from steer.core.budget import pod_limits
from steer.core.policy import Policy, parse_policy
from steer.core.quantity import parse_quantity
from tests.e2e.waiting import NOT_YET
from tests.scorer_support import readings_for

from .conftest import ROOT

EXAMPLE = (ROOT / "examples" / "policy.yaml").read_text()
OPT_IN = "kube-steer.github.io/enabled"
GPU = "nvidia.com/gpu"
MOVING = "e2e.kube-steer.github.io/moving"


class Observations:
    """What the scorer reads, changed by the test between cycles."""

    def __init__(self) -> None:
        self.values: dict[str, dict[str, float]] = {}

    def read(self, request: SourceRequest) -> Readings:
        policy, dimensions, nodes, at = (
            request.policy,
            request.dimensions,
            request.nodes,
            request.at,
        )
        wanted = {d.name for d in dimensions}
        # Prometheus answers every query, with an empty vector where nothing is recorded.
        recorded = {d: self.values.get(d, {}) for d in wanted}
        every = readings_for(policy, nodes, recorded, at if at is not None else time.time())
        return Readings(readings={k: v for k, v in every.items() if k in wanted})

    def close(self) -> None:
        pass


class InProcessScorer:
    """The real scorer in this process, as the scorer's RBAC identity (`kubeconfig`), reading
    `observations`, with its pod ledger and binding watch; `policy[0]` is the policy it runs
    (replace it to change the policy between cycles)."""

    def __init__(self, kubeconfig: Path, policy: Policy, observations: Observations) -> None:
        self.policy = [policy]
        self.client = make_api_client(str(kubeconfig))
        self.ledger = PodLedger()
        self.watcher = PodBindingWatcher(
            self.client, BindingWindow(), window_s=lambda: 60.0, ledger=self.ledger
        )
        self.scorer = Scorer(
            lambda: self.policy[0],
            NodeApi(KubeJson(self.client)),
            ledger=self.ledger,
            bindings=self.watcher.window,
            sources={"prometheus": observations},
        )

    def __enter__(self) -> InProcessScorer:
        self.watcher.start()
        wait_until("pod ledger synced", lambda: self.ledger.synced, timeout=30, ignoring=NOT_YET)
        return self

    def __exit__(self, *exc: object) -> None:
        self.watcher.stop()
        self.scorer.close()
        self.client.close()

    def cycle(self) -> None:
        result = self.scorer.run_cycle(at=time.time())
        assert result.report is not None
        assert not result.report.errors, result.report.errors  # the node-writes policy allows it

    def settle(self) -> None:
        """Until the scorer has seen every pod event and written what follows from it."""
        for _ in range(50):
            self.scorer.refresh_hot()
            time.sleep(0.1)
            if self.scorer.refresh_hot() is None:
                return


def pod(
    name: str,
    cpu: tuple[str, str],
    *,
    gpus: int = 0,
    tolerations: Sequence[Mapping[str, Any]] = (),
    affinity: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    requests: dict[str, str] = {"cpu": cpu[0], "memory": "64Mi"}
    limits: dict[str, str] = {"cpu": cpu[1], "memory": "64Mi"}
    if gpus:
        requests[GPU] = limits[GPU] = str(gpus)
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "terminationGracePeriodSeconds": 0,
        "containers": [
            {
                "name": "app",
                "image": "registry.example/app:1",
                "resources": {"requests": requests, "limits": limits},
            }
        ],
    }
    if tolerations:
        spec["tolerations"] = list(tolerations)
    if affinity:
        spec["affinity"] = dict(affinity)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def daemonset(name: str) -> dict[str, Any]:
    template = pod(name, ("10m", "10m"), tolerations=[{"operator": "Exists"}])
    template["metadata"] = {"labels": {"app": name}}
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {"selector": {"matchLabels": {"app": name}}, "template": template},
    }


def node_pods(admin: KubeJson) -> dict[str, list[dict[str, Any]]]:
    out: dict[str, list[dict[str, Any]]] = {}
    for item in admin.list_all("/api/v1/pods", query={"fieldSelector": "spec.nodeName!="}):
        if (item.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            continue
        out.setdefault(item["spec"]["nodeName"], []).append(item)
    return out


def held_vs_published(admin: KubeJson, names: Sequence[str]) -> list[str]:
    """Every resource some bound pod requests that its node advertises below the sum."""
    short = []
    by_node = node_pods(admin)
    for name in names:
        node = admin.request("GET", f"/api/v1/nodes/{name}")
        allocatable = node["status"].get("allocatable") or {}
        totals: dict[str, Fraction] = {}
        for item in by_node.get(name, []):
            for container in item["spec"]["containers"]:
                for key, value in (container["resources"].get("requests") or {}).items():
                    if "kube-steer" in key:
                        totals[key] = totals.get(key, Fraction(0)) + parse_quantity(value)
        for key, total in totals.items():
            if parse_quantity(allocatable.get(key, "0")) < total:
                short.append(f"{name}: {key} {allocatable.get(key)} < {total}")
    return short


@pytest.fixture
def webhook_and_policies(
    control_plane: ControlPlane, tmp_path: Path, scorer_user: Path
) -> Iterator[Path]:
    """The example policy's webhook registered and its admission policies applied; yields the
    policy file. Everything is removed at teardown (other tests share the control plane)."""
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(EXAMPLE)
    with running_webhook(control_plane, policy_file, tmp_path) as hook:
        register_admission(control_plane, hook)
        names = apply_admission_policies(control_plane, policy_file, scorer_user=scorer_user.stem)
        try:
            yield policy_file
        finally:
            unregister_admission(control_plane)
            remove_admission_policies(control_plane, names)


def pinned(name: str, node: str, cpu: tuple[str, str]) -> dict[str, Any]:
    """An unsteered pod bound straight to `node` (as legacy workloads and operators do)."""
    body = pod(name, cpu)
    body["spec"]["nodeName"] = node
    return body


def test_a_rolling_kubelet_restart_after_every_mechanism_moved_fails_no_pod(
    control_plane: ControlPlane,
    hollow: Any,
    make_namespace: Any,
    admin: KubeJson,
    scorer_user: Path,
    webhook_and_policies: Path,
) -> None:
    plane = control_plane
    nodes: list[HollowNode] = [
        hollow("a1", zone="zone-a", labels={MOVING: "1"}),
        hollow("a2", zone="zone-a"),
        hollow("b1", zone="zone-b"),
        hollow("gpu", zone="zone-b", extended_resources={GPU: 8}),
    ]
    start_all(nodes)
    names = [n.name for n in nodes]
    team_a = make_namespace({"tenant": "dept-a", OPT_IN: "true"}, prefix="team-a")
    team_b = make_namespace({"tenant": "dept-b", OPT_IN: "true"}, prefix="team-b")
    shop = make_namespace({OPT_IN: "true"}, prefix="shop")  # opted in, of no tenant
    legacy = make_namespace(prefix="legacy")
    infra = make_namespace(prefix="infra")  # an ordinary namespace, not kube-system

    observations = Observations()
    observations.values = {
        "gpu-util": {names[3]: 10.0},
        "gpu-free": {names[3]: 8.0},
        "gpu-frag": {names[3]: 0.0},
        "power": {n: 200.0 + 10 * i for i, n in enumerate(names)},
        "health": dict.fromkeys(names, 1.0),
        "overcommit-pct": {},  # under scheduler enforcement no budget reads it
    }
    with InProcessScorer(scorer_user, parse_policy(EXAMPLE), observations) as scoring:
        policy, cycle, settle = scoring.policy, scoring.cycle, scoring.settle
        cycle()
        cycle()
        for name in names:
            wait_until(
                f"gates on {name}",
                lambda n=name: (
                    "kube-steer.github.io/pool-cpu"  # type: ignore[misc]
                    in admin.request("GET", f"/api/v1/nodes/{n}")["status"]["allocatable"]
                ),
                timeout=30,
                ignoring=NOT_YET,
            )

        # --- workloads --------------------------------------------------------------------
        apps = "/apis/apps/v1/namespaces"
        admin.request("POST", f"{apps}/{infra}/daemonsets", body=daemonset("node-agent"))
        # One in a tenant namespace too: DaemonSet pods are neither steered nor refused there
        # (no pool request, no gate), though dept-b's pods may not tolerate what they tolerate.
        admin.request("POST", f"{apps}/{team_b}/daemonsets", body=daemonset("tenant-agent"))
        for i in range(3):
            admin.request(
                "POST", f"/api/v1/namespaces/{team_a}/pods", body=pod(f"a-{i}", ("100m", "105m"))
            )
            admin.request(
                "POST", f"/api/v1/namespaces/{team_b}/pods", body=pod(f"b-{i}", ("100m", "100m"))
            )
        for i, cpu in enumerate((("100m", "100m"), ("100m", "300m"))):
            # Pods of no tenant share the pool (their limits): a kubelet restart re-admits them.
            admin.request("POST", f"/api/v1/namespaces/{shop}/pods", body=pod(f"s-{i}", cpu))
        admin.request(
            "POST", f"/api/v1/namespaces/{team_a}/pods", body=pod("train", ("100m", "105m"), gpus=1)
        )
        control = {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": MOVING, "operator": "In", "values": ["1"]}]}
                    ]
                }
            }
        }
        admin.request(
            "POST",
            f"/api/v1/namespaces/{legacy}/pods",
            body=pod("control", ("10m", "10m"), affinity=control),
        )
        tenants = [(team_a, f"a-{i}") for i in range(3)] + [(team_b, f"b-{i}") for i in range(3)]
        tenants += [(shop, "s-0"), (shop, "s-1"), (team_a, "train")]
        every = [*tenants, (legacy, "control")]
        wait_until(
            "every pod Running",
            lambda: all(pod_state(plane, ns, n).phase == "Running" for ns, n in every),
            timeout=90,
            ignoring=NOT_YET,
        )
        wait_until(
            "the DaemonSet on every hollow node (wildcard toleration, security policy applied)",
            lambda: (
                {
                    node
                    for node, items in node_pods(admin).items()
                    if any(i["metadata"]["namespace"] == infra for i in items)
                }
                >= set(names)
            ),
            timeout=60,
            ignoring=NOT_YET,
        )
        stored = admin.request("GET", f"/api/v1/namespaces/{team_b}/pods/b-0")
        requests = stored["spec"]["containers"][0]["resources"]["requests"]
        assert requests["kube-steer.github.io/budget-0pct"] == "1"  # steered by the webhook
        stored = admin.request("GET", f"/api/v1/namespaces/{shop}/pods/s-1")
        requests = stored["spec"]["containers"][0]["resources"]["requests"]
        assert requests["kube-steer.github.io/pool-cpu"] == "300"  # its limits, from the pool
        assert "kube-steer.github.io/budget-0pct" not in requests
        settle()
        cycle()

        # --- every mechanism moves --------------------------------------------------------
        before = {n: admin.request("GET", f"/api/v1/nodes/{n}") for n in names}
        observations.values["gpu-util"][names[3]] = 95.0  # gpu-hot: PreferNoSchedule
        observations.values["health"][names[1]] = 0.0  # unhealthy: NoSchedule (security)
        observations.values["power"] = {n: 900.0 - 100 * i for i, n in enumerate(names)}
        cycle()
        cycle()  # the taint rules set after 2 cycles
        for name in names:  # unsteered pods with high limits land everywhere
            admin.request(
                "POST",
                f"/api/v1/namespaces/{legacy}/pods",
                body=pinned(f"legacy-{name}", name, ("20m", "300m")),
            )
        admin.request(
            "PATCH",
            f"/api/v1/nodes/{names[0]}",
            body={"metadata": {"labels": {MOVING: "2"}}},
            content_type="application/merge-patch+json",
        )
        settle()
        moved = {n: admin.request("GET", f"/api/v1/nodes/{n}") for n in names}
        hot = moved[names[3]]
        assert any(
            t["key"] == "kube-steer.github.io/gpu-hot" for t in hot["spec"].get("taints") or []
        )
        assert (
            hot["status"]["allocatable"]["kube-steer.github.io/avoid-gpu-hot"] == "1"
        )  # closed, held by "train"
        assert any(
            t["key"] == "kube-steer.github.io/unhealthy"
            for t in moved[names[1]]["spec"].get("taints") or []
        )
        shrunk = [
            n
            for n in names
            if parse_quantity(moved[n]["status"]["allocatable"]["kube-steer.github.io/pool-cpu"])
            < parse_quantity(before[n]["status"]["allocatable"]["kube-steer.github.io/pool-cpu"])
        ]
        assert shrunk, "the unsteered pods shrank no pool"
        assert any(
            moved[n]["metadata"]["labels"].get("kube-steer.github.io/score")
            != before[n]["metadata"]["labels"].get("kube-steer.github.io/score")
            for n in names
        ), "no score label moved"
        assert not held_vs_published(admin, names)

        # The prefixes change: the scorer retires every old key in its next cycle and keeps
        # the old resources at what running pods hold.
        # The operator regenerates the admission policies for the new policy, naming the
        # prefixes the scorer still retires.
        renamed_text = (
            EXAMPLE.replace(
                "labelPrefix: kube-steer.github.io/", "labelPrefix: next.example.com/steer-"
            )
            + "  resourcePrefix: next.example.com/\n"
            + "  formerResourcePrefixes: [kube-steer.github.io/]\n"
        )
        renamed_file = webhook_and_policies.with_name("renamed.yaml")
        renamed_file.write_text(renamed_text)
        apply_admission_policies(
            plane,
            renamed_file,
            scorer_user=scorer_user.stem,
            also_prefixes=["kube-steer.github.io/"],
        )
        time.sleep(2)  # the apiserver loads admission policies from a watch
        policy[0] = parse_policy(renamed_text)
        cycle()
        cycle()
        renamed = {n: admin.request("GET", f"/api/v1/nodes/{n}") for n in names}
        for n in names:
            labels = renamed[n]["metadata"]["labels"]
            assert not [k for k in labels if k.startswith("kube-steer.github.io/")], labels
            assert "next.example.com/steer-score" in labels, labels
            assert "next.example.com/pool-cpu" in renamed[n]["status"]["allocatable"]
        assert not held_vs_published(admin, names)

        # --- a rolling restart of every kubelet -------------------------------------------
        rolling_restart(nodes)
        wait_until(
            "the control pod refused (its required term no longer matches)",
            lambda: pod_state(plane, legacy, "control").phase == "Failed",
            timeout=60,
            ignoring=NOT_YET,
        )
        assert pod_state(plane, legacy, "control").reason == "NodeAffinity"
        time.sleep(12)  # a refused pod shows Failed about 10 s after its kubelet restarts
        failed = [
            f"{p['metadata']['namespace']}/{p['metadata']['name']}: {p['status'].get('reason')}"
            for p in admin.list_all("/api/v1/pods")
            if (p.get("status") or {}).get("phase") == "Failed"
            and p["metadata"]["name"] != "control"
        ]
        assert failed == [], failed
        for ns, name in every[:-1]:
            assert pod_state(plane, ns, name).phase == "Running", (ns, name)
        assert not held_vs_published(admin, names)

        # Every budget holds at the end state: on each node, the limits of all its pods stay
        # within (100 + b) % of allocatable for every tenant b with a pod there.
        budgets = {team_a: 5, team_b: 0}
        for name, items in node_pods(admin).items():
            if name not in names:
                continue
            allocatable = admin.request("GET", f"/api/v1/nodes/{name}")["status"]["allocatable"]
            cpu_m = parse_quantity(allocatable["cpu"]) * 1000
            limits = sum((pod_limits(p["spec"]).cpu_m for p in items), Fraction(0))
            for item in items:
                level = budgets.get(item["metadata"]["namespace"])
                if level is not None:
                    assert limits * 100 <= cpu_m * (100 + level), (name, limits, level)
        print(
            yaml.safe_dump(
                {
                    "pools after the move": {
                        n: moved[n]["status"]["allocatable"]["kube-steer.github.io/pool-cpu"]
                        for n in names
                    }
                }
            )
        )
