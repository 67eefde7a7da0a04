"""An upgrade from the native-prefixed budget currency (`kube-steer.kubernetes.io/...`, the
earlier default) to the project's own extended resources (`kube-steer.github.io/...`) fails no
pod (issue: names the Kubernetes API allows).

Three kubemark hollow nodes (the real kubelet code), the session's real scheduler with the steer
profiles, the real webhook and admission policies, and the real scorer (in process, on recorded
readings, as the scorer's RBAC identity confined by the node-writes policy).

Before: the policy with `resourcePrefix: kube-steer.kubernetes.io/` and `nativeResourceNames`
(what the earlier release ran): tenant pods of both budgets and a GPU job hold the old names.
The upgrade, in the order the chart and the docs give: the new admission policies first (they
accept both names, so a pod an old webhook replica steers is still admitted), then the scorer
(it publishes the new names and keeps the old ones at what their pods hold), then the webhook
(new pods get the new names, with the limits extended resources need). A rolling restart of every
kubelet follows: no pod is Failed, nothing published is below what bound pods hold, every budget
holds at the end state. When the last pod holding an old name goes, the name leaves the node.
"""

from __future__ import annotations

import time
from fractions import Fraction
from pathlib import Path
from typing import Any

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
from scorer.cycle.writer import FIELD_MANAGER
from steer.adapters.kubejson import KubeJson
from steer.core.budget import pod_limits
from steer.core.k8s_names import WELL_KNOWN_KEYS, kubernetes_domain
from steer.core.policy import parse_policy
from steer.core.quantity import parse_quantity
from tests.e2e.test_real_kubelets import (
    EXAMPLE,
    GPU,
    OPT_IN,
    InProcessScorer,
    Observations,
    daemonset,
    held_vs_published,
    node_pods,
    pod,
)
from tests.e2e.waiting import NOT_YET

OLD = "kube-steer.kubernetes.io/"
NEW = "kube-steer.github.io/"
# What the apiserver's DefaultTolerationSeconds admission plugin adds to every pod.
DEFAULT_TOLERATIONS = [
    {
        "key": f"node.kubernetes.io/{key}",
        "operator": "Exists",
        "effect": "NoExecute",
        "tolerationSeconds": 300,
    }
    for key in ("not-ready", "unreachable")
]
BEFORE = EXAMPLE + (
    f"  resourcePrefix: {OLD}\n  nativeResourceNames: true\n  formerResourcePrefixes: []\n"
)


def owned_requests(stored: dict[str, Any], part: str = "requests") -> dict[str, str]:
    """The pool and gate requests (or limits) of a stored pod's first container."""
    values = stored["spec"]["containers"][0]["resources"].get(part) or {}
    return {k: v for k, v in values.items() if k.startswith((OLD, NEW))}


def steered_b(prefix: str) -> dict[str, str]:
    """What the webhook gives a dept-b pod of 100m / 64Mi under `prefix`."""
    return {f"{prefix}pool-cpu": "100", f"{prefix}pool-memory": "64", f"{prefix}budget-0pct": "1"}


def test_an_upgrade_to_extended_resource_names_fails_no_pod(
    control_plane: ControlPlane,
    hollow: Any,
    make_namespace: Any,
    admin: KubeJson,
    scorer_user: Path,
    tmp_path: Path,
) -> None:
    plane = control_plane
    nodes: list[HollowNode] = [
        hollow("m1", zone="zone-a"),
        hollow("m2", zone="zone-b"),
        hollow("mgpu", zone="zone-b", extended_resources={GPU: 8}),
    ]
    start_all(nodes)
    names = [n.name for n in nodes]
    team_a = make_namespace({"tenant": "dept-a", OPT_IN: "true"}, prefix="mig-a")
    team_b = make_namespace({"tenant": "dept-b", OPT_IN: "true"}, prefix="mig-b")
    infra = make_namespace(prefix="mig-infra")

    served = tmp_path / "policy.yaml"
    served.write_text(BEFORE)
    observations = Observations()
    observations.values = {
        "gpu-util": {names[2]: 10.0},
        "gpu-free": {names[2]: 8.0},
        "gpu-frag": {names[2]: 0.0},
        "power": {n: 200.0 + 10 * i for i, n in enumerate(names)},
        "health": dict.fromkeys(names, 1.0),
        "overcommit-pct": {},
    }
    policy_names: list[str] = []
    scoring = InProcessScorer(scorer_user, parse_policy(BEFORE), observations)
    policy, cycle, settle = scoring.policy, scoring.cycle, scoring.settle

    def allocatable(name: str) -> dict[str, str]:
        node = admin.request("GET", f"/api/v1/nodes/{name}")
        return dict(node["status"].get("allocatable") or {})

    def create(namespace: str, body: dict[str, Any]) -> None:
        admin.request("POST", f"/api/v1/namespaces/{namespace}/pods", body=body)

    def stored(namespace: str, name: str) -> dict[str, Any]:
        got: dict[str, Any] = admin.request("GET", f"/api/v1/namespaces/{namespace}/pods/{name}")
        return got

    def run_workloads(tag: str) -> list[tuple[str, str]]:
        """Two pods of each tenant and a GPU job, once every one is Running."""
        made = [(team_a, f"{tag}-a-{i}") for i in range(2)]
        made += [(team_b, f"{tag}-b-{i}") for i in range(2)]
        for ns, name in made:
            create(ns, pod(name, ("100m", "105m" if ns == team_a else "100m")))
        create(team_a, pod(f"{tag}-train", ("100m", "105m"), gpus=1))
        made.append((team_a, f"{tag}-train"))
        wait_until(
            f"every {tag} pod Running",
            lambda: all(pod_state(plane, ns, n).phase == "Running" for ns, n in made),
            timeout=90,
            ignoring=NOT_YET,
        )
        return made

    def scorer_keys(name: str) -> set[str]:
        """The keys of a Node the scorer's writes own (its field manager in managedFields):
        labels, annotations and status resources; and every taint (no kubelet here sets one)."""
        node = admin.request("GET", f"/api/v1/nodes/{name}")
        keys: set[str] = set()
        for entry in node["metadata"].get("managedFields") or ():
            if entry.get("manager") != FIELD_MANAGER["fieldManager"]:
                continue
            fields = entry.get("fieldsV1") or {}
            meta = fields.get("f:metadata") or {}
            status = fields.get("f:status") or {}
            for part in (
                meta.get("f:labels"),
                meta.get("f:annotations"),
                status.get("f:capacity"),
                status.get("f:allocatable"),
            ):
                keys |= {k.removeprefix("f:") for k in part or {} if k.startswith("f:")}
        # Taints are an atomic list, owned as a whole; no kubelet here sets one.
        return keys | {t["key"] for t in node["spec"].get("taints") or ()}

    with scoring, running_webhook(plane, served, tmp_path) as hook:
        register_admission(plane, hook)
        policy_names[:] = apply_admission_policies(plane, served, scorer_user=scorer_user.stem)
        try:
            # --- before: the native-prefixed currency -------------------------------------
            cycle()
            cycle()
            for name in names:
                wait_until(
                    f"old pools on {name}",
                    lambda n=name: f"{OLD}pool-cpu" in allocatable(n),  # type: ignore[misc]
                    timeout=30,
                    ignoring=NOT_YET,
                )
            apps = "/apis/apps/v1/namespaces"
            admin.request("POST", f"{apps}/{infra}/daemonsets", body=daemonset("mig-agent"))
            old_pods = run_workloads("old")
            b0 = stored(team_b, "old-b-0")
            assert owned_requests(b0) == steered_b(OLD)
            assert owned_requests(b0, "limits") == {}  # native names: requests alone
            settle()
            cycle()

            # --- the upgrade, step 1: the admission policies of the new release ----------
            after = EXAMPLE  # the default: kube-steer.github.io/, the old prefix as former
            generated = tmp_path / "after.yaml"
            generated.write_text(after)
            policy_names[:] = apply_admission_policies(
                plane, generated, scorer_user=scorer_user.stem
            )
            time.sleep(2)  # the apiserver loads admission policies from a watch
            # A pod an old webhook replica steers (old names) is still admitted.
            create(team_b, pod("mid-b", ("100m", "100m")))
            assert f"{OLD}pool-cpu" in owned_requests(stored(team_b, "mid-b"))
            old_pods.append((team_b, "mid-b"))

            # --- step 2: the scorer ------------------------------------------------------
            policy[0] = parse_policy(after)
            settle()
            cycle()
            cycle()
            for name in names:
                published = allocatable(name)
                assert f"{NEW}pool-cpu" in published, published
            assert not held_vs_published(admin, names)

            # --- step 3: the webhook -----------------------------------------------------
            served.write_text(after)
            dry = pod("dry", ("100m", "100m"))

            def steered_with_new_names() -> bool:
                got = admin.request(
                    "POST",
                    f"/api/v1/namespaces/{team_b}/pods",
                    body=dry,
                    query={"dryRun": "All"},
                )
                return f"{NEW}pool-cpu" in owned_requests(got)

            wait_until("the webhook steers with the new names", steered_with_new_names, timeout=30)
            new_pods = run_workloads("new")
            nb = stored(team_b, "new-b-0")
            assert owned_requests(nb) == steered_b(NEW)
            assert owned_requests(nb, "limits") == owned_requests(nb)  # extended: limit = request
            settle()
            cycle()
            assert not held_vs_published(admin, names)

            # --- a rolling restart of every kubelet --------------------------------------
            rolling_restart(nodes)
            time.sleep(12)  # a refused pod shows Failed about 10 s after its kubelet restarts
            failed = [
                f"{p['metadata']['namespace']}/{p['metadata']['name']}: "
                f"{p['status'].get('reason')} {p['status'].get('message')}"
                for p in admin.list_all("/api/v1/pods")
                if (p.get("status") or {}).get("phase") == "Failed"
            ]
            assert failed == [], failed
            for ns, name in [*old_pods, *new_pods]:
                assert pod_state(plane, ns, name).phase == "Running", (ns, name)
            settle()
            cycle()
            assert not held_vs_published(admin, names)

            # Budgets exact at the end state: the old pool and the new one together keep
            # every node's limits within (100 + b) % of allocatable for every tenant b there,
            # and each pool is published at what decides it.
            budgets = {team_a: 5, team_b: 0}
            for name, items in node_pods(admin).items():
                if name not in names:
                    continue
                cpu_m = parse_quantity(allocatable(name)["cpu"]) * 1000
                limits = sum((pod_limits(p["spec"]).cpu_m for p in items), Fraction(0))
                for item in items:
                    level = budgets.get(item["metadata"]["namespace"])
                    if level is not None:
                        assert limits * 100 <= cpu_m * (100 + level), (name, limits, level)
                held_old = sum(
                    int(parse_quantity(owned_requests(p).get(f"{OLD}pool-cpu", "0"))) for p in items
                )
                published = allocatable(name)
                if held_old:
                    assert parse_quantity(published[f"{OLD}pool-cpu"]) == held_old, published
                else:
                    assert f"{OLD}pool-cpu" not in published, published

            # --- the last old pod goes: so do the old names --------------------------------
            for ns, name in old_pods:
                admin.request(
                    "DELETE",
                    f"/api/v1/namespaces/{ns}/pods/{name}",
                    query={"gracePeriodSeconds": "0"},
                )
            wait_until(
                "no bound pod holds an old name",
                lambda: (
                    not any(
                        k.startswith(OLD)
                        for items in node_pods(admin).values()
                        for item in items
                        for k in owned_requests(item)
                    )
                ),
                timeout=60,
                ignoring=NOT_YET,
            )
            settle()
            cycle()
            for name in names:
                left = [k for k in allocatable(name) if k.startswith(OLD)]
                assert left == [], (name, left)
            for ns, name in new_pods:
                assert pod_state(plane, ns, name).phase == "Running", (ns, name)

            # After the upgrade, nothing kube-steer wrote to a Node or injected into a pod is
            # under kubernetes.io or k8s.io, except the well-known keys Kubernetes defines.
            for name in names:
                ours = scorer_keys(name)
                assert f"{NEW}pool-cpu" in ours and f"{NEW}score" in ours, (name, ours)
                assert not {k for k in ours if kubernetes_domain(k)} - WELL_KNOWN_KEYS, (name, ours)
            for ns, name in new_pods:
                spec = stored(ns, name)["spec"]
                injected = set(spec["containers"][0]["resources"]["requests"])
                injected |= set(spec["containers"][0]["resources"]["limits"])
                injected |= set(stored(ns, name)["metadata"].get("annotations") or {})
                injected |= {
                    t["key"]
                    for t in spec.get("tolerations") or ()
                    if "key" in t and t not in DEFAULT_TOLERATIONS
                }
                assert not {k for k in injected if kubernetes_domain(k)} - WELL_KNOWN_KEYS, (
                    name,
                    injected,
                )
        finally:
            unregister_admission(plane)
            remove_admission_policies(plane, policy_names)
