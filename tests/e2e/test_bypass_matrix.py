"""Every way around the budget's currency, tried against the real apiserver with the webhook
DOWN (only the admission policies `steer policy admission-policy` prints, evaluated by the
apiserver itself), and which rule stops it. Each row is a forgery a tenant (or anyone who may
create pods) could send; none may pass unrefused or un-neutralised.

Also: the scorer's Node writes are confined to its own keys, tried as the scorer's identity.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from kits.control_plane import ControlPlane
from kits.service_processes import apply_admission_policies, remove_admission_policies
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.core.budget import pod_usage

from .conftest import ROOT

EXAMPLE = ROOT / "examples" / "policy.yaml"
OPT_IN = "kube-steer.github.io/enabled"
PREFIX = "kube-steer.github.io/"
FORMER = "kube-steer.kubernetes.io/"  # the example policy's formerResourcePrefixes
POOL_CPU, POOL_MEM, GATE0 = f"{PREFIX}pool-cpu", f"{PREFIX}pool-memory", f"{PREFIX}budget-0pct"


def container(
    cpu: tuple[str, str], extra: Mapping[str, str] | None = None, name: str = "app"
) -> dict[str, Any]:
    """`extra`: pool and gate requests; under the extended (non-native) prefixes they carry the
    equal limit the API requires, under the former native one the request alone."""
    limits = {k: v for k, v in (extra or {}).items() if not k.startswith(FORMER)}
    return {
        "name": name,
        "image": "registry.example/app:1",
        "resources": {
            "requests": {"cpu": cpu[0], "memory": "64Mi", **(extra or {})},
            "limits": {"cpu": cpu[1], "memory": "64Mi", **limits},
        },
    }


def former(names: Mapping[str, str]) -> dict[str, str]:
    """The same requests under the former (native) resource prefix, as an earlier webhook
    steered pods."""
    return {FORMER + k.removeprefix(PREFIX): v for k, v in names.items()}


def as_steered(cpu: tuple[str, str], gate: bool) -> dict[str, str]:
    """What the webhook would add for these limits (millicores, MiB)."""
    cpu_m = int(float(cpu[1].removesuffix("m")) * (1 if cpu[1].endswith("m") else 1000))
    out = {POOL_CPU: str(cpu_m), POOL_MEM: "64"}
    if gate:
        out[GATE0] = "1"
    return out


def body(name: str, *containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, **spec.pop("metadata", {})},
        "spec": {"containers": list(containers), "terminationGracePeriodSeconds": 0, **spec},
    }


@pytest.fixture
def policies(control_plane: ControlPlane, scorer_user: Path) -> Iterator[list[str]]:
    names = apply_admission_policies(control_plane, EXAMPLE, scorer_user=scorer_user.stem)
    try:
        yield names
    finally:
        remove_admission_policies(control_plane, names)


def attempt(admin: KubeJson, namespace: str, pod: Mapping[str, Any]) -> str:
    """'admitted', or the policy and message that refused it."""
    path = f"/api/v1/namespaces/{namespace}/pods"
    for _ in range(50):  # the apiserver loads admission policies from a watch
        try:
            admin.request("POST", path, body=pod, query={"dryRun": "All"})
            return "admitted"
        except KubeApiError as exc:
            if exc.status == 403 or exc.status == 422:
                return exc.message
            raise
    raise AssertionError("unreachable")


def test_every_forgery_of_the_budget_currency_is_refused_or_neutralised(
    control_plane: ControlPlane, make_namespace: Any, admin: KubeJson, policies: list[str]
) -> None:
    team_b = make_namespace({"tenant": "dept-b", OPT_IN: "true"}, prefix="team-b")
    team_a = make_namespace({"tenant": "dept-a", OPT_IN: "true"}, prefix="team-a")
    foreign = make_namespace(prefix="foreign")
    # Opted in, of no tenant: its pods share the pool (their limits), without a gate.
    shop = make_namespace({OPT_IN: "true"}, prefix="shop")
    g = (("100m", "100m"), True)
    steered_b = container(g[0], as_steered(*g))
    # A pod exactly as the webhook makes it is admitted: the policies refuse only forgeries.
    import time

    deadline = time.monotonic() + 20
    while attempt(
        admin, team_b, body("ok", steered_b)
    ) != "admitted" or "budget-pool" not in attempt(
        admin, team_b, body("probe", container(("100m", "100m")))
    ):
        assert time.monotonic() < deadline, "the admission policies are not in force"
        time.sleep(0.2)

    daemonset_owner = {
        "ownerReferences": [
            {
                "apiVersion": "apps/v1",
                "kind": "DaemonSet",
                "name": "fake",
                "uid": "8f3b6c1e-0000-4000-8000-000000000000",
                "controller": True,
            }
        ]
    }
    rows: list[tuple[str, str, dict[str, Any], str]] = [
        # (forgery, namespace, pod, the rule that must stop it)
        (
            "pool request from a namespace of no tenant",
            foreign,
            body("f1", container(("100m", "100m"), {POOL_CPU: "100"})),
            "budget-currency",
        ),
        (
            "budget gate from a namespace of no tenant",
            foreign,
            body("f2", container(("100m", "100m"), {GATE0: "1"})),
            "budget-currency",
        ),
        (
            "tenant pod without pool requests (webhook down)",
            team_b,
            body("f3", container(("100m", "100m"))),
            "budget-pool",
        ),
        (
            "pool request below the limits",
            team_b,
            body(
                "f4",
                container(
                    ("100m", "200m"), {**as_steered(("100m", "200m"), True), POOL_CPU: "150"}
                ),
            ),
            "budget-pool",
        ),
        (
            "init container without pool requests",
            team_b,
            body("f5", steered_b, initContainers=[container(("1", "1"), name="init")]),
            "budget-pool",
        ),
        (
            "sidecar without pool requests",
            team_b,
            body(
                "f6",
                steered_b,
                initContainers=[
                    {**container(("1", "1"), name="sidecar"), "restartPolicy": "Always"}
                ],
            ),
            "budget-pool",
        ),
        (
            "dept-b pod without its gate (would land on a floor of 5 %)",
            team_b,
            body("f7", container(("100m", "100m"), as_steered(("100m", "100m"), False))),
            "budget-currency",
        ),
        (
            "dept-a pod with dept-b's gate",
            team_a,
            body(
                "f8",
                container(("100m", "105m"), {**as_steered(("100m", "105m"), False), GATE0: "1"}),
            ),
            "budget-currency",
        ),
        (
            "pod-level resources beside the pool",
            team_b,
            body("f9", steered_b, resources={"limits": {"cpu": "4"}}),
            "budget-pool",
        ),
        (
            "a DaemonSet owner reference written by a user",
            team_b,
            body("f10", container(("100m", "100m")), metadata=daemonset_owner),
            "budget-pool",
        ),
        (
            "former pool request from a namespace of no tenant",
            foreign,
            body("f12", container(("100m", "100m"), former({POOL_CPU: "100"}))),
            "budget-currency",
        ),
        (
            "former pool request below the limits",
            team_b,
            body(
                "f13",
                container(
                    ("100m", "200m"),
                    former({**as_steered(("100m", "200m"), True), POOL_CPU: "150"}),
                ),
            ),
            "budget-pool",
        ),
        (
            "dept-a pod with dept-b's former gate",
            team_a,
            body(
                "f14",
                container(
                    ("100m", "105m"),
                    {**as_steered(("100m", "105m"), False), **former({GATE0: "1"})},
                ),
            ),
            "budget-currency",
        ),
        (
            "pool request below the limits from an opted-in namespace of no tenant",
            shop,
            body(
                "f15",
                container(
                    ("100m", "200m"), {**as_steered(("100m", "200m"), False), POOL_CPU: "150"}
                ),
            ),
            "budget-pool",
        ),
        (
            "budget gate from an opted-in namespace of no tenant",
            shop,
            body("f16", container(("100m", "100m"), as_steered(("100m", "100m"), True))),
            "budget-currency",
        ),
        (
            "nodeName preset, no pool requests",
            team_b,
            body("f11", container(("100m", "100m")), nodeName="some-node"),
            "budget-pool",
        ),
    ]
    report = []
    for forgery, namespace, pod, rule in rows:
        outcome = attempt(admin, namespace, pod)
        report.append(f"{forgery}: {outcome[:160]}")
        assert outcome != "admitted", forgery
        assert f"rule {rule}:" in outcome, (forgery, outcome)
        assert "steer-budget" in outcome, (forgery, outcome)
    print("\n".join(report))

    # A pod of no tenant as the webhook steers it (its limits from the pool) is admitted, and
    # so is one created while no admission path was up (it counts outside the pool).
    shop_pod = container(("100m", "200m"), as_steered(("100m", "200m"), False))
    assert attempt(admin, shop, body("shop-ok", shop_pod)) == "admitted"
    assert attempt(admin, shop, body("shop-bare", container(("100m", "200m")))) == "admitted"

    # A pod an earlier webhook steered with the former names is admitted during an upgrade.
    assert (
        attempt(admin, team_b, body("was", container(g[0], former(as_steered(*g))))) == "admitted"
    )
    assert (
        attempt(
            admin,
            team_a,
            body("was-a", container(("100m", "105m"), former(as_steered(("100m", "105m"), False)))),
        )
        == "admitted"
    )

    # Neutralised: a burst label (of the former mechanism) means nothing now; the pool counts
    # what a pod requests and its limits, never a label.
    labelled = body("l1", steered_b, metadata={"labels": {"kube-steer.github.io/burst": "5"}})
    assert attempt(admin, team_b, labelled) == "admitted"
    assert pod_usage(labelled["spec"]) == pod_usage(body("l2", steered_b)["spec"])
    # Ephemeral containers cannot carry resources at all (the apiserver's own validation).
    burstable = container(("100m", "150m"), as_steered(("100m", "150m"), True))
    admin.request("POST", f"/api/v1/namespaces/{team_b}/pods", body=body("target", burstable))
    debug = {"name": "dbg", "image": "busybox", "resources": {"limits": {"cpu": "8"}}}
    with pytest.raises(KubeApiError) as refused:
        admin.request(
            "PATCH",
            f"/api/v1/namespaces/{team_b}/pods/target/ephemeralcontainers",
            body={"spec": {"ephemeralContainers": [debug]}},
            content_type="application/strategic-merge-patch+json",
        )
    assert refused.value.status == 422 and "ephemeral" in refused.value.message.lower()

    # A resize that raises a limit above the pool request is refused; one within it passes.
    def resize(cpu_limit: str) -> str:
        patch = {
            "spec": {
                "containers": [
                    {
                        "name": "app",
                        "resources": {"limits": {"cpu": cpu_limit}, "requests": {"cpu": "100m"}},
                    }
                ]
            }
        }
        try:
            admin.request(
                "PATCH",
                f"/api/v1/namespaces/{team_b}/pods/target/resize",
                body=patch,
                content_type="application/strategic-merge-patch+json",
            )
            return "admitted"
        except KubeApiError as exc:
            return exc.message

    raised = resize("2")
    assert "rule budget-pool:" in raised and "resize" in raised, raised
    assert resize("120m") == "admitted"  # within its pool request of 150 millicores
    print(f"resize 150m -> 2 cores: {raised[:160]}")


def test_the_scorers_node_writes_are_confined_to_its_keys(
    control_plane: ControlPlane,
    make_node: Any,
    admin: KubeJson,
    scorer_user: Path,
    policies: list[str],
) -> None:
    make_node("writes-e2e", labels={"team": "a"})
    scorer = KubeJson(make_api_client(str(scorer_user)))
    merge = "application/merge-patch+json"
    node = "/api/v1/nodes/writes-e2e"

    def patch(path: str, body: Mapping[str, Any]) -> str:
        try:
            scorer.request("PATCH", path, body=body, content_type=merge)
            return "admitted"
        except KubeApiError as exc:
            return f"{exc.status} {exc.message}"

    import time

    deadline = time.monotonic() + 30
    probe = "probe.example.com/attempt"
    attempt = 0
    # A foreign label that changes at every attempt, until the apiserver refuses it.
    while "scorer-owned-keys" not in patch(node, {"metadata": {"labels": {probe: str(attempt)}}}):
        assert time.monotonic() < deadline, "the node-writes policy is not in force"
        attempt += 1
        time.sleep(0.2)
    assert patch(node, {"metadata": {"labels": {"kube-steer.github.io/score": "50"}}}) == "admitted"
    assert (
        patch(
            node + "/status",
            {"status": {"capacity": {POOL_CPU: "8000"}, "allocatable": {POOL_CPU: "8000"}}},
        )
        == "admitted"
    )
    refused = {
        "a foreign label": (node, {"metadata": {"labels": {"team": None}}}),
        "a foreign annotation": (node, {"metadata": {"annotations": {"example.com/x": "1"}}}),
        "a NoExecute taint of another key": (
            node,
            {"spec": {"taints": [{"key": "evict", "effect": "NoExecute"}]}},
        ),
        "a cordon": (node, {"spec": {"unschedulable": True}}),
        "another resource": (
            node + "/status",
            {"status": {"capacity": {"cpu": "1"}, "allocatable": {"cpu": "1"}}},
        ),
        "a node condition": (
            node + "/status",
            {
                "status": {
                    "conditions": [
                        {"type": "Ready", "status": "False", "reason": "x", "message": "x"}
                    ]
                }
            },
        ),
    }
    for what, (path, body) in refused.items():
        outcome = patch(path, body)
        assert outcome.startswith("403") and "rule scorer-owned-keys" in outcome, (what, outcome)
    current = admin.request("GET", node)
    assert current["metadata"]["labels"]["team"] == "a"
    assert not current["spec"].get("unschedulable")
    print(json.dumps({w: "refused" for w in refused}))
    scorer.api_client.close()
