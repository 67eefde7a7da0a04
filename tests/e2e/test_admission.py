"""Admission end to end: the real kube-apiserver calling `steer webhook serve` over TLS.

One webhook process serves the module, registered with the project's own
manifests/webhook/admission.yaml (clientConfig.url instead of the in-cluster service) together
with the ValidatingAdmissionPolicy `steer policy admission-policy` makes from the policy, and
unregistered when the module ends. Pods are created through the apiserver, so what is checked
is what a user gets back: the stored pod after the whole admission chain, the apiserver's
status code and message, and where the real scheduler binds the pod. The expected steering is
computed from examples/policy.yaml with the project's core functions (steer/core/steering.py),
so a test fails when the webhook drifts from the policy, not only when it changes.
"""

from __future__ import annotations

import base64
import json
import tempfile
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import requests
from kubernetes import client

from kits.control_plane import ControlPlane
from kits.service_processes import (
    RunningWebhook,
    register_admission,
    running_webhook,
)
from kits.waiting import wait_until
from steer.core.budget import tenant_budget
from steer.core.device_counter import device_counter
from steer.core.policy import parse_policy
from steer.core.steering import (
    GPU_RESOURCE,
    class_preferences,
    classify_pod,
    composite_key,
    condition_key,
    overcommit_key,
    owned_resource_keys,
    scheduler_for,
    tenant_for,
    trace_annotation_key,
)
from tests.e2e.admission_support import (
    RELABEL_NAMESPACE_LABEL,
    RELABEL_POD_LABEL,
    registered_webhook,
    relabel_webhook,
)

ROOT = Path(__file__).resolve().parents[2]
# The example policy with budgets enforced by labels only: this module has no scorer to publish
# the burst pools (tests/e2e/test_budget_pools.py and test_budget_admission.py cover those).
POLICY_TEXT = (
    (ROOT / "examples" / "policy.yaml")
    .read_text()
    .replace("    enforcement: scheduler", "    enforcement: labels")
)
POLICY_FILE = Path(tempfile.mkdtemp(prefix="steer-e2e-policy-")) / "policy.yaml"
POLICY_FILE.write_text(POLICY_TEXT)
POLICY = parse_policy(POLICY_TEXT)
assert POLICY.spec.overcommit.enforcement == "labels"
OPT_IN = {"kube-steer.github.io/enabled": "true"}
TRACE_KEY = trace_annotation_key(POLICY)  # kube-steer.github.io/trace
SET_KEY = "e2e.kube-steer.github.io/node-set"
SECURITY_POLICY = "steer-security"  # the ValidatingAdmissionPolicy and its binding
GPU_SPEC = {"containers": [{"name": "c", "resources": {"limits": {GPU_RESOURCE: "1"}}}]}
GPU_CLASS = classify_pod(POLICY, GPU_SPEC)
assert GPU_CLASS is not None


def tenant(name: str) -> Any:
    found = tenant_for(POLICY, {"tenant": name})
    assert found is not None and found.name == name
    return found


def rule_by(name: str) -> Any:
    return POLICY.taint_rule(name)


# --- pods and namespaces ---------------------------------------------------------------------


def make_pod(
    name: str,
    *,
    cpu: tuple[str, str | None] = ("100m", "100m"),
    memory: tuple[str, str | None] = ("64Mi", "64Mi"),
    labels: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    """A pod with one container; (request, limit) per resource, a None limit is left out."""
    requests_ = {"cpu": cpu[0], "memory": memory[0], **(extra or {})}
    limits = {k: v for k, v in (("cpu", cpu[1]), ("memory", memory[1])) if v is not None}
    limits.update(extra or {})
    return {
        "metadata": {"name": name, "labels": dict(labels or {"app": name})},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "app",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": requests_, "limits": limits},
                }
            ],
            **spec,
        },
    }


def gates(policy: Any, *, open_: bool) -> dict[str, str]:
    """The budget gates of `enforcement: labels` as the scorer publishes them on a node that
    carries no pod: open (one unit per pod it may run) or closed (what pods hold: nothing)."""
    names = [f"{policy.spec.resource_prefix}overcommit-{lv}pct" for lv in ("0", "5")]
    return dict.fromkeys(names, "110" if open_ else "0")


def confined(set_id: str, pod: dict[str, Any]) -> dict[str, Any]:
    """`pod` with a user required term confining it to the nodes labelled SET_KEY=set_id."""
    affinity = pod["spec"].setdefault("affinity", {}).setdefault("nodeAffinity", {})
    required = affinity.setdefault(
        "requiredDuringSchedulingIgnoredDuringExecution", {"nodeSelectorTerms": [{}]}
    )
    for term in required["nodeSelectorTerms"]:
        term.setdefault("matchExpressions", []).append(
            {"key": SET_KEY, "operator": "In", "values": [set_id]}
        )
    return pod


def create(
    api: client.ApiClient, namespace: str, pod: Mapping[str, Any], *, dry_run: bool = False
) -> dict[str, Any]:
    """Create through the apiserver; the stored (or, dry run, would-be stored) pod as JSON."""
    core = client.CoreV1Api(api)
    kwargs = {"dry_run": "All"} if dry_run else {}
    made = core.create_namespaced_pod(namespace, pod, **kwargs)
    out: dict[str, Any] = api.sanitize_for_serialization(made)
    return out


def stored(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The pod exactly as the apiserver serves it (raw JSON, not the client's model)."""
    resp = client.CoreV1Api(api).read_namespaced_pod(name, namespace, _preload_content=False)
    out: dict[str, Any] = json.loads(resp.data)
    return out


def rejection(api: client.ApiClient, namespace: str, pod: Mapping[str, Any]) -> tuple[int, str]:
    """Create `pod`, which must be refused: (HTTP status, the Status message)."""
    with pytest.raises(client.ApiException) as refused:
        create(api, namespace, pod)
    status = refused.value.status
    message = json.loads(refused.value.body)["message"]
    return int(status), str(message)


def trace(pod: Mapping[str, Any]) -> dict[str, Any] | None:
    text = (pod["metadata"].get("annotations") or {}).get(TRACE_KEY)
    return None if text is None else dict(json.loads(text))


def steered_by_webhook(api: client.ApiClient, namespace: str) -> bool:
    """A dry-run probe in `namespace` comes back steered (the webhook knows the namespace and
    the apiserver calls it)."""
    probe = make_pod(f"probe-{uuid.uuid4().hex[:6]}")
    try:
        return trace(create(api, namespace, probe, dry_run=True)) is not None
    except client.ApiException:
        return False


def refused_by_security_policy(api: client.ApiClient, namespace: str) -> bool:
    probe = make_pod(f"probe-{uuid.uuid4().hex[:6]}", tolerations=[{"operator": "Exists"}])
    try:
        create(api, namespace, probe, dry_run=True)
    except client.ApiException as exc:
        return f"ValidatingAdmissionPolicy '{SECURITY_POLICY}'" in exc.body
    return False


def admitted(api: client.ApiClient, namespace: str) -> bool:
    probe = make_pod(f"probe-{uuid.uuid4().hex[:6]}")
    try:
        create(api, namespace, probe, dry_run=True)
    except client.ApiException:
        return False
    return True


@pytest.fixture(scope="module")
def webhook(
    control_plane: ControlPlane, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningWebhook]:
    with registered_webhook(control_plane, POLICY_FILE, tmp_path_factory.mktemp("webhook")) as hook:
        yield hook


@pytest.fixture
def namespace_for(
    webhook: RunningWebhook, api: client.ApiClient, make_namespace: Callable[..., str]
) -> Callable[..., str]:
    """namespace_for(tenant or None, opted_in=True, **extra labels) -> a namespace the webhook
    already knows (its namespace cache is filled by a watch, a few milliseconds behind)."""

    def make(tenant_name: str | None, opted_in: bool = True, **extra: str) -> str:
        labels = dict(extra)
        if tenant_name:
            labels["tenant"] = tenant_name
        if opted_in:
            labels.update(OPT_IN)
        ns = make_namespace(labels, prefix=f"adm-{tenant_name or 'plain'}")
        if opted_in:
            wait_until(
                f"webhook steers pods in {ns}", lambda: steered_by_webhook(api, ns), timeout=15
            )
        else:
            wait_until(f"pods admitted in {ns}", lambda: admitted(api, ns), timeout=15)
        # The security rules' admission policy is in force (the apiserver loads it from a
        # watch): an ownerless wildcard toleration is refused in every namespace.
        wait_until(
            "the security admission policy is used",
            lambda: refused_by_security_policy(api, ns),
            timeout=15,
        )
        return ns

    return make


def webhook_metric(hook: RunningWebhook, name: str, **labels: str) -> float:
    """One sample of the webhook's /metrics (summed over gunicorn workers by the server)."""
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(hook.metrics_url, timeout=5).text
    wanted = {f'{k}="{v}"' for k, v in labels.items()}
    total = 0.0
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        inside, _, value = line[len(name) + 1 :].rpartition("} ")
        if wanted <= set(inside.split(",")):
            total += float(value)
    return total


def expr_ids(exprs: Any) -> list[tuple[str, str, tuple[str, ...]]]:
    return [(e["key"], e["operator"], tuple(e.get("values") or ())) for e in exprs]


# --- 1. mutation through the apiserver ----------------------------------------------------------


def test_pod_in_opted_in_namespace_is_steered_and_user_settings_are_kept(
    api: client.ApiClient,
    control_plane: ControlPlane,
    namespace_for: Callable[..., str],
    make_node: Callable[..., dict[str, Any]],
) -> None:
    set_id = f"adm-{uuid.uuid4().hex[:6]}"
    over_budget, within = f"{set_id}-over", f"{set_id}-ok"
    score_key = composite_key(POLICY, None)
    # The best-scored node is over dept-a's 5 % budget: its gate, closed there as the scorer
    # publishes it, must win over the preference.
    make_node(
        over_budget,
        zone="zone-a",
        labels={SET_KEY: set_id, score_key: "100", overcommit_key(POLICY): "20"},
        extra_capacity=gates(POLICY, open_=False),
    )
    make_node(
        within,
        zone="zone-a",
        labels={SET_KEY: set_id, score_key: "30"},
        extra_capacity=gates(POLICY, open_=True),
    )
    ns = namespace_for("dept-a")

    user_preferred = {
        "weight": 5,
        "preference": {
            "matchExpressions": [{"key": "disktype", "operator": "In", "values": ["ssd"]}]
        },
    }
    user_toleration = {"key": "example.com/dedicated", "operator": "Exists", "effect": "NoSchedule"}
    user_spread = {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"app": "web"}},
    }
    user_anti_affinity = {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 1,
                "podAffinityTerm": {
                    "topologyKey": "kubernetes.io/hostname",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                },
            }
        ]
    }
    pod = confined(
        set_id,
        make_pod(
            "web",
            labels={"app": "web", "order-chain": "c1"},
            affinity={
                "nodeAffinity": {
                    "preferredDuringSchedulingIgnoredDuringExecution": [user_preferred]
                },
                "podAntiAffinity": user_anti_affinity,
            },
            tolerations=[user_toleration],
            topologySpreadConstraints=[user_spread],
        ),
    )
    user_term = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"][0]
    create(api, ns, pod)
    got = stored(api, ns, "web")
    spec = got["spec"]
    dept_a = tenant("dept-a")

    # Preferred: the user's term stays first, then the policy's binary-weighted terms.
    ours = [t.to_k8s() for t in class_preferences(POLICY, None)]
    # 4 binary-weighted score terms, then "not a node reserved for GPU pods" (100 + 10).
    assert [t["weight"] for t in ours] == [10, 20, 40, 80, 100, 10]
    assert {e["key"] for t in ours[:4] for e in t["preference"]["matchExpressions"]} == {score_key}
    assert {e["operator"] for t in ours[4:] for e in t["preference"]["matchExpressions"]} == {
        "DoesNotExist"
    }
    node_affinity = spec["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        user_preferred,
        *ours,
    ]

    # Required: the user's one term, untouched. Hard rules are resource requests (a kubelet
    # restart would fail a running pod whose node no longer matched an injected term): here
    # the gate of dept-a's budget (and its limits from the pool, when the scheduler enforces it).
    terms = node_affinity["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert [expr_ids(t["matchExpressions"]) for t in terms] == [
        expr_ids(user_term["matchExpressions"])
    ]
    budget = tenant_budget(POLICY, dept_a)
    assert budget is not None
    want = {
        name: str(units)
        for name, units in budget.container_requests(pod["spec"]["containers"][0]).items()
    }
    if budget.gate is not None:
        want[budget.gate.resource] = "1"
    requests = spec["containers"][0]["resources"]["requests"]
    assert {k: v for k, v in requests.items() if k in owned_resource_keys(POLICY)} == want

    # Tolerations: the user's stays; dept-a may tolerate gpu-hot, so that one is added once.
    gpu_hot = rule_by("gpu-hot")
    hot = {
        "key": condition_key(POLICY, gpu_hot),
        "operator": "Equal",
        "value": "true",
        "effect": gpu_hot.effect,
    }
    assert spec["tolerations"][0] == user_toleration
    assert spec["tolerations"].count(hot) == 1

    # Spread: the user's zone constraint wins over the policy's zone rule; the hostname rule
    # (order-chain-hosts) is added for the pod's order-chain label.
    hosts = next(s for s in POLICY.spec.spread if s.topology_key == "kubernetes.io/hostname")
    assert spec["topologySpreadConstraints"] == [
        user_spread,
        {
            "maxSkew": hosts.max_skew,
            "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": hosts.when_unsatisfiable,
            "labelSelector": {"matchLabels": {hosts.label_key: "c1"}},
            "nodeTaintsPolicy": hosts.node_taints_policy,
        },
    ]
    # Everything else the user set under affinity is untouched.
    assert spec["affinity"]["podAntiAffinity"] == user_anti_affinity

    assert spec["schedulerName"] == scheduler_for(POLICY, dept_a, None) == "steer-spread"
    recorded = trace(got)
    assert recorded is not None
    assert recorded["policy"] == POLICY.version
    assert set(recorded["rules"]) == {
        f"prefer:{score_key}",
        "gate:overcommit:5",
        "tolerate:gpu-hot",
        f"spread:{hosts.name}",
        "scheduler:steer-spread",
    }

    # The real scheduler honours it: not the best-scored node, which is over budget.
    assert control_plane.wait_for_bindings(ns, ["web"], 30) == {"web": within}


def test_gpu_pod_is_routed_to_binpack_and_avoids_hot_nodes(
    api: client.ApiClient,
    control_plane: ControlPlane,
    namespace_for: Callable[..., str],
    make_node: Callable[..., dict[str, Any]],
) -> None:
    set_id = f"adm-gpu-{uuid.uuid4().hex[:6]}"
    gpu_key = composite_key(POLICY, GPU_CLASS)  # kube-steer.github.io/score-class-gpu
    hot_key = condition_key(POLICY, rule_by("gpu-hot"))
    hot_gate = f"{POLICY.spec.resource_prefix}avoid-gpu-hot"
    # The class's device counter, as the scorer publishes it on a node offering 8 GPUs.
    counter = device_counter(POLICY, GPU_CLASS)
    assert counter is not None
    devices = {counter.resource: "8"}
    make_node(
        f"{set_id}-hot",
        gpus=8,
        labels={SET_KEY: set_id, gpu_key: "100", hot_key: "true"},
        extra_capacity={**gates(POLICY, open_=True), hot_gate: "0", **devices},
    )
    make_node(
        f"{set_id}-cool",
        gpus=8,
        labels={SET_KEY: set_id, gpu_key: "20"},
        extra_capacity={**gates(POLICY, open_=True), hot_gate: "110", **devices},
    )
    ns = namespace_for("dept-a")
    create(api, ns, confined(set_id, make_pod("trainer", extra={GPU_RESOURCE: "1"})))
    spec = stored(api, ns, "trainer")["spec"]

    assert (
        spec["schedulerName"]
        == scheduler_for(POLICY, tenant("dept-a"), GPU_CLASS)
        == "steer-binpack"
    )
    preferred = spec["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert preferred == [t.to_k8s() for t in class_preferences(POLICY, GPU_CLASS)]
    # Avoiding gpu-hot is a gate the pod requests, not a required term on a label that moves.
    assert spec["containers"][0]["resources"]["requests"][hot_gate] == "1"
    assert spec["containers"][0]["resources"]["requests"][counter.resource] == "1"  # one GPU
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ]
    assert all(hot_key not in str(term) for term in terms)
    # A class that avoids gpu-hot gets no toleration for it, although dept-a may tolerate it.
    assert not [t for t in spec.get("tolerations") or () if t.get("key") == hot_key]
    assert control_plane.wait_for_bindings(ns, ["trainer"], 30) == {"trainer": f"{set_id}-cool"}


# --- 2. reinvocation adds nothing -----------------------------------------------------------------


def test_the_stored_pod_sent_back_to_mutate_gets_an_empty_patch(
    api: client.ApiClient, webhook: RunningWebhook, namespace_for: Callable[..., str]
) -> None:
    ns = namespace_for("dept-b")
    create(api, ns, make_pod("again", labels={"app": "again", "order-chain": "x"}))
    pod = stored(api, ns, "again")
    assert trace(pod) is not None
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": ns,
            "operation": "CREATE",
            "object": pod,
            "dryRun": False,
        },
    }
    with webhook.session() as session:
        resp = session.post(f"{webhook.url}/mutate", json=review, timeout=10)
    assert resp.status_code == 200
    answer = resp.json()["response"]
    assert answer["allowed"] is True
    assert "patch" not in answer or json.loads(base64.b64decode(answer["patch"])) == []


def test_reinvocation_after_a_later_webhook_changes_nothing(
    api: client.ApiClient,
    control_plane: ControlPlane,
    webhook: RunningWebhook,
    namespace_for: Callable[..., str],
    tmp_path: Path,
) -> None:
    """A foreign webhook after kube-steer modifies the pod, so the apiserver reinvokes
    kube-steer (reinvocationPolicy IfNeeded): its second answer is empty and the pod carries
    each injected term exactly once."""
    ns = namespace_for("dept-a", **{RELABEL_NAMESPACE_LABEL: "on"})
    with relabel_webhook(control_plane, tmp_path) as relabel:
        wait_until(
            "the relabelling webhook is called",
            lambda: (
                RELABEL_POD_LABEL
                in (create(api, ns, make_pod("p"), dry_run=True)["metadata"]["labels"])
            ),
            timeout=15,
        )
        unchanged = webhook_metric(
            webhook,
            "steer_webhook_admission_duration_seconds_count",
            endpoint="mutate",
            result="unchanged",
        )
        relabel.seen.clear()
        create(api, ns, make_pod("twice", labels={"app": "twice", "order-chain": "y"}))
        pod = stored(api, ns, "twice")

    # The foreign webhook ran after kube-steer (it saw the steered pod) and relabelled it.
    assert len(relabel.seen) == 1
    assert trace(relabel.seen[0]) is not None
    assert pod["metadata"]["labels"][RELABEL_POD_LABEL] == "yes"
    # kube-steer was called again and answered without a patch.
    after = webhook_metric(
        webhook,
        "steer_webhook_admission_duration_seconds_count",
        endpoint="mutate",
        result="unchanged",
    )
    assert after == unchanged + 1
    # Each piece is there once.
    spec = pod["spec"]
    node_affinity = spec["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [
        t.to_k8s() for t in class_preferences(POLICY, None)
    ]
    requests = spec["containers"][0]["resources"]["requests"]
    assert requests[f"{POLICY.spec.resource_prefix}overcommit-5pct"] == "1"
    assert "requiredDuringSchedulingIgnoredDuringExecution" not in node_affinity
    hot_key = condition_key(POLICY, rule_by("gpu-hot"))
    assert len([t for t in spec["tolerations"] if t.get("key") == hot_key]) == 1
    assert len(spec["topologySpreadConstraints"]) == len(POLICY.spec.spread)
    assert spec["schedulerName"] == "steer-spread"


# --- 3. not opted in; dry run ----------------------------------------------------------------------


@pytest.mark.parametrize("tenant_name", [None, "dept-a"], ids=["plain", "tenant-not-opted-in"])
def test_pod_outside_opted_in_namespaces_is_not_mutated(
    api: client.ApiClient, namespace_for: Callable[..., str], tenant_name: str | None
) -> None:
    ns = namespace_for(tenant_name, opted_in=False)
    pod = make_pod("untouched", labels={"app": "untouched", "order-chain": "z"})
    create(api, ns, pod)
    got = stored(api, ns, "untouched")
    assert trace(got) is None
    assert "affinity" not in got["spec"]
    assert "topologySpreadConstraints" not in got["spec"]
    assert got["spec"]["schedulerName"] == "default-scheduler"
    assert not [
        t
        for t in got["spec"].get("tolerations") or ()
        if t["key"].startswith("kube-steer.github.io/")
    ]


def test_server_side_dry_run_is_mutated_but_not_persisted(
    api: client.ApiClient, core: client.CoreV1Api, namespace_for: Callable[..., str]
) -> None:
    ns = namespace_for("dept-b")
    answer = create(api, ns, make_pod("ghost"), dry_run=True)
    assert answer["spec"]["schedulerName"] == "steer-spread"
    assert trace(answer) is not None
    # dept-b's budget is 0 %, enforced by labels here: its pod requests the gate open where
    # overcommit-pct is within 0 %.
    requests = answer["spec"]["containers"][0]["resources"]["requests"]
    assert requests["kube-steer.github.io/overcommit-0pct"] == "1"
    with pytest.raises(client.ApiException) as missing:
        core.read_namespaced_pod("ghost", ns)
    assert missing.value.status == 404
    assert core.list_namespaced_pod(ns).items == []


# --- 4. denials reach the client ---------------------------------------------------------------

UNHEALTHY = rule_by("unhealthy")
GPU_HOT = rule_by("gpu-hot")
assert UNHEALTHY.security and not GPU_HOT.security

DENIALS: dict[str, tuple[str | None, dict[str, Any], str, tuple[str, ...]]] = {
    # case: (tenant, pod overrides, rule, substrings of the message)
    "scheduler-not-allowed": (
        "dept-a",
        {"schedulerName": "my-scheduler"},
        "scheduler-name",
        ('"my-scheduler" is not allowed', 'tenant "dept-a"'),
    ),
    "dept-b-unlisted-scheduler": (
        "dept-b",
        {"schedulerName": "steer-gang"},
        "scheduler-name",
        ('"steer-gang" is not allowed', "allowed: steer-spread, steer-binpack"),
    ),
    "dept-b-burst": (
        "dept-b",
        {"cpu": ("100m", "101m")},
        "overcommit",
        ("cpu limit 101m / request 100m", 'tenant "dept-b"'),
    ),
    "dept-a-over-five-percent": (
        "dept-a",
        {"memory": ("100Mi", "106Mi")},
        "overcommit",
        ("memory limit 106Mi / request 100Mi", "overcommitPercent 5"),
    ),
    "dept-a-no-limit": (
        "dept-a",
        {"cpu": ("100m", None)},
        "overcommit",
        ("but no limit for cpu",),
    ),
    "dept-b-tolerates-gpu-hot": (
        "dept-b",
        {
            "tolerations": [
                {
                    "key": condition_key(POLICY, GPU_HOT),
                    "operator": "Exists",
                    "effect": GPU_HOT.effect,
                }
            ]
        },
        "reserved-toleration",
        ('reserved by taint rule "gpu-hot"', 'tenant "dept-b"'),
    ),
    "dept-a-tolerates-unhealthy": (
        "dept-a",
        {
            "tolerations": [
                {
                    "key": condition_key(POLICY, UNHEALTHY),
                    "operator": "Equal",
                    "value": "true",
                    "effect": UNHEALTHY.effect,
                }
            ]
        },
        "reserved-toleration",
        ('reserved by taint rule "unhealthy"', "may tolerate only: gpu-hot"),
    ),
    "wildcard-toleration-outside-tenants": (
        None,
        {"tolerations": [{"operator": "Exists"}]},
        "reserved-toleration",
        ("an empty key tolerates every taint", "(in no tenant)"),
    ),
}


def _pod_with(name: str, overrides: Mapping[str, Any]) -> dict[str, Any]:
    resources = {k: v for k, v in overrides.items() if k in ("cpu", "memory")}
    spec = {k: v for k, v in overrides.items() if k not in ("cpu", "memory")}
    return make_pod(name, **resources, **spec)


@pytest.mark.parametrize("case", list(DENIALS))
def test_denial_reaches_the_client_with_the_rule(
    api: client.ApiClient,
    core: client.CoreV1Api,
    namespace_for: Callable[..., str],
    case: str,
) -> None:
    tenant_name, overrides, rule, fragments = DENIALS[case]
    ns = namespace_for(tenant_name, opted_in=tenant_name is not None)
    status, message = rejection(api, ns, _pod_with("denied", overrides))
    assert status == 403, message
    assert f"rule {rule}:" in message, message
    # Security rules are the apiserver's own admission policy (it runs before the webhooks
    # and words the denial as the webhook does); every other rule is the webhook's.
    if case in ("dept-a-tolerates-unhealthy", "wildcard-toleration-outside-tenants"):
        denied_by = f"ValidatingAdmissionPolicy '{SECURITY_POLICY}' with binding '{SECURITY_POLICY}' denied request"
    else:
        denied_by = 'admission webhook "validate.pods.kube-steer.github.io" denied the request'
    assert denied_by in message, message
    for fragment in fragments:
        assert fragment in message, message
    assert core.list_namespaced_pod(ns).items == []


@pytest.mark.parametrize(
    ("tenant_name", "overrides"),
    [
        ("dept-a", {"cpu": ("100m", "105m"), "memory": ("100Mi", "105Mi")}),
        ("dept-b", {"cpu": ("250m", "250m"), "memory": ("1Gi", "1Gi")}),
        (
            "dept-a",
            {"tolerations": [{"key": condition_key(POLICY, GPU_HOT), "operator": "Exists"}]},
        ),
        ("dept-b", {"schedulerName": "steer-binpack"}),
        # dept-b may not use default-scheduler, but the policy treats an explicit
        # default-scheduler as unset (defaultSchedulerIsUnset), so the mutation replaces it.
        ("dept-b", {"schedulerName": "default-scheduler"}),
    ],
    ids=[
        "dept-a-at-budget",
        "dept-b-guaranteed",
        "dept-a-may-tolerate-gpu-hot",
        "dept-b-binpack",
        "dept-b-default-scheduler-rewritten",
    ],
)
def test_pods_within_the_rules_are_admitted(
    api: client.ApiClient,
    namespace_for: Callable[..., str],
    tenant_name: str,
    overrides: Mapping[str, Any],
) -> None:
    """The boundary cases next to each denial are admitted (so the denials are not vacuous)."""
    ns = namespace_for(tenant_name)
    got = create(api, ns, _pod_with("allowed", overrides))
    assert trace(got) is not None
    wanted = overrides.get("schedulerName", "steer-spread")
    assert got["spec"]["schedulerName"] == wanted.replace("default-scheduler", "steer-spread")


# --- 5. webhook down ---------------------------------------------------------------------------------


def apiserver_fail_open_count(control_plane: ControlPlane, webhook_name: str) -> float:
    """`apiserver_admission_webhook_fail_open_count` for one webhook: calls that failed and
    were ignored (failurePolicy Ignore), counted by the apiserver itself."""
    pki = control_plane.pki_dir
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(
            f"{control_plane.url}/metrics",
            verify=str(control_plane.ca_file),
            cert=(str(pki / "admin.crt"), str(pki / "admin.key")),
            timeout=10,
        ).text
    total = 0.0
    for line in text.splitlines():
        if line.startswith("apiserver_admission_webhook_fail_open_count{") and (
            f'name="{webhook_name}"' in line
        ):
            total += float(line.rsplit(" ", 1)[1])
    return total


def test_webhook_down_every_namespace_admits_pods_and_the_security_policy_still_holds(
    api: client.ApiClient,
    control_plane: ControlPlane,
    webhook: RunningWebhook,
    namespace_for: Callable[..., str],
    make_node: Callable[..., dict[str, Any]],
    tmp_path: Path,
) -> None:
    """A webhook of its own is registered, then stopped while both configurations and the
    security admission policy stay.

    Measured through the apiserver: both configurations fail open (failurePolicy Ignore), so
    pods are created -- unsteered, unvalidated -- in namespaces that are not opted in and in
    those that are, and bound by the scheduler; the apiserver counts each ignored call. The
    security rule does not depend on the webhook: the ValidatingAdmissionPolicy still refuses
    a pod tolerating the reserved `unhealthy` taint, in every namespace.
    """
    make_node(f"down-{uuid.uuid4().hex[:6]}", cpu="16", memory="64Gi")
    steered_ns = namespace_for("dept-a")
    budget_ns = namespace_for("dept-b")
    plain_ns = namespace_for(None, opted_in=False)
    try:
        with running_webhook(control_plane, POLICY_FILE, tmp_path) as doomed:
            register_admission(control_plane, doomed)
            # The apiserver picks configurations up from a watch: wait until it calls `doomed`.
            wait_until(
                "the new registration is used",
                lambda: steered_by_webhook(api, steered_ns),
                timeout=15,
            )
        # `doomed` is stopped now; wait until the apiserver's calls fail (and are ignored).
        wait_until(
            "mutation fails open, webhook down",
            lambda: not steered_by_webhook(api, steered_ns),
            timeout=15,
        )

        failed_open = apiserver_fail_open_count(control_plane, "validate.pods.kube-steer.github.io")
        create(api, plain_ns, make_pod("plain"))
        assert (
            apiserver_fail_open_count(control_plane, "validate.pods.kube-steer.github.io")
            > failed_open
        )
        pod = stored(api, plain_ns, "plain")
        assert trace(pod) is None and pod["spec"]["schedulerName"] == "default-scheduler"
        assert control_plane.wait_for_bindings(plain_ns, ["plain"], 30)["plain"]

        create(api, steered_ns, make_pod("unsteered"))
        pod = stored(api, steered_ns, "unsteered")
        assert trace(pod) is None
        assert "affinity" not in pod["spec"]
        assert pod["spec"]["schedulerName"] == "default-scheduler"
        assert control_plane.wait_for_bindings(steered_ns, ["unsteered"], 30)["unsteered"]
        # dept-b's budget is not enforced while the webhook is down (failurePolicy Ignore).
        create(api, budget_ns, make_pod("bursty", cpu=("100m", "400m")))
        assert trace(stored(api, budget_ns, "bursty")) is None

        # The security rule holds with no webhook: the apiserver evaluates it.
        reserved = {
            "key": condition_key(POLICY, UNHEALTHY),
            "operator": "Exists",
            "effect": UNHEALTHY.effect,
        }
        for ns in (plain_ns, steered_ns, budget_ns):
            status, message = rejection(api, ns, make_pod("reserved", tolerations=[reserved]))
            assert status == 403, message
            assert f"ValidatingAdmissionPolicy '{SECURITY_POLICY}'" in message, message
            assert 'reserved by taint rule "unhealthy"' in message, message
        # kube-system is excluded by every configuration and by the admission policy.
        made = create(
            api,
            "kube-system",
            make_pod(f"ks-{uuid.uuid4().hex[:6]}", tolerations=[reserved]),
            dry_run=True,
        )
        assert made["spec"]["schedulerName"] == "default-scheduler"
    finally:
        register_admission(control_plane, webhook)
        wait_until(
            "the module's webhook is back", lambda: steered_by_webhook(api, steered_ns), timeout=15
        )
