"""Pod mutation: golden pods, merge rules, and properties over random pods and nodes."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonpatch
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steer.core.budget import container_pool_units, tenant_budget
from steer.core.device_counter import device_counter
from steer.core.encoding import bucket_values
from steer.core.mutation import (
    MAX_LABEL_SETS,
    MutationPlan,
    UnknownNamespace,
    mutate_pod,
    steer_pod,
)
from steer.core.patch import PatchBuilder, apply_ops, escape, pointer
from steer.core.pod_shape import UninterpretablePod
from steer.core.policy import Policy, parse_policy
from steer.core.scheduling import merge_required, term_matches
from steer.core.steering import (
    composite_key,
    owned_resource_keys,
    pod_classification,
    pod_gates,
)
from tests.conftest import EXAMPLE_POLICY
from tests.dra_support import NVIDIA, FakeCatalog
from tests.webhook_harness import admission_fixture

POLICY = parse_policy(EXAMPLE_POLICY.read_text())
PLAN = MutationPlan.from_policy(POLICY)
# Same policy, but never-scored nodes fail the hard rules and no profiles are installed (so
# dept-b's pods keep default-scheduler, which it must then allow).
STRICT = parse_policy(
    EXAMPLE_POLICY.read_text()
    .replace("unscoredNodes: allow", "unscoredNodes: deny")
    .replace("installed: true", "installed: false")
    .replace(
        "allowedSchedulerNames: [steer-spread, steer-binpack]",
        "allowedSchedulerNames: [default-scheduler, steer-spread, steer-binpack]",
    )
)
STRICT_PLAN = MutationPlan.from_policy(STRICT)
# GPU nodes kept for GPU pods outright, and a class known only by its DRA DeviceClass.
DRA = parse_policy(
    EXAMPLE_POLICY.read_text()
    .replace("reserveNodes: prefer", "reserveNodes: require")
    .replace(
        "  tenants:\n",
        "    - {name: fpga, deviceClasses: [fpga.example.com], reserveNodes: require}\n"
        "  tenants:\n",
        1,
    )
)
DRA_PLAN = MutationPlan.from_policy(DRA)
FPGA_TEMPLATE = {
    "devices": {"requests": [{"name": "f", "exactly": {"deviceClassName": "fpga.example.com"}}]}
}
CATALOGS = (None, NVIDIA, FakeCatalog({**NVIDIA.templates, ("gpu-test1", "fpga"): FPGA_TEMPLATE}))
DEPT_A = POLICY.tenant("dept-a")
DEPT_B = POLICY.tenant("dept-b")
GOLDEN = (
    "pod-create-user-mutating.json",
    "pod-create-with-affinity-gpu.json",
    "pod-create-by-replicaset.json",
    "pod-create-dryrun.json",
)


def fixture_pod(name: str) -> dict[str, Any]:
    pod: dict[str, Any] = copy.deepcopy(admission_fixture(name)["body"]["request"]["object"])
    return pod


def apply(pod: Mapping[str, Any], ops: tuple[dict[str, Any], ...]) -> dict[str, Any]:
    """Apply like the apiserver: an `add` under a missing parent is an error, not a no-op.
    The steered pod `/explain` reads (`apply_ops`) is the same, and leaves `pod` unchanged."""
    before = copy.deepcopy(dict(pod))
    patched: dict[str, Any] = jsonpatch.JsonPatch(list(ops)).apply(copy.deepcopy(dict(pod)))
    assert apply_ops(pod, ops) == patched
    assert pod == before
    return patched


def node_affinity(pod: Mapping[str, Any]) -> Mapping[str, Any]:
    return ((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}


def required_terms(pod: Mapping[str, Any]) -> list[dict[str, Any]] | None:
    required = node_affinity(pod).get("requiredDuringSchedulingIgnoredDuringExecution")
    return None if required is None else list(required.get("nodeSelectorTerms") or [])


def node_passes_required(pod: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """The scheduler's NodeAffinity filter: no required affinity passes every node."""
    terms = required_terms(pod)
    return True if terms is None else any(term_matches(t, labels) for t in terms)


# --- golden pods ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", GOLDEN)
@pytest.mark.parametrize("tenant", [None, "dept-a", "dept-b"])
def test_golden_patch_applies_and_reinvocation_adds_nothing(name: str, tenant: str | None) -> None:
    pod = fixture_pod(name)
    t = POLICY.tenant(tenant) if tenant else None
    mutation = mutate_pod(PLAN, pod, t)
    assert mutation.ops, "an opted-in pod always gets at least the preference terms"
    patched = apply(pod, mutation.ops)
    again = mutate_pod(PLAN, patched, t)
    assert again.ops == ()
    assert again.in_effect == mutation.in_effect


def test_gpu_pod_gets_gpu_terms_hard_rules_ored_across_user_terms_and_binpack() -> None:
    pod = fixture_pod("pod-create-with-affinity-gpu.json")
    patched = apply(pod, mutate_pod(PLAN, pod, DEPT_A).ops)
    spec = patched["spec"]
    preferred = node_affinity(patched)["preferredDuringSchedulingIgnoredDuringExecution"]
    # The user's preference stays first; four binary-weighted GPU composite terms follow.
    assert (
        preferred[0]
        == pod["spec"]["affinity"]["nodeAffinity"][
            "preferredDuringSchedulingIgnoredDuringExecution"
        ][0]
    )
    assert [
        (t["weight"], t["preference"]["matchExpressions"][0]["key"]) for t in preferred[1:]
    ] == [
        (10, "kube-steer.github.io/score-class-gpu"),
        (20, "kube-steer.github.io/score-class-gpu"),
        (40, "kube-steer.github.io/score-class-gpu"),
        (80, "kube-steer.github.io/score-class-gpu"),
    ]
    # Hard rules are no required terms (a kubelet restart re-checks those against labels
    # that move): the user's terms stay exactly as they were, and the pod requests the gpu-hot
    # gate and its limits from the pool instead.
    assert required_terms(patched) == required_terms(pod)
    requests = spec["containers"][0]["resources"]["requests"]
    assert requests["kube-steer.github.io/avoid-gpu-hot"] == "1"
    assert {k: v for k, v in requests.items() if "/pool-" in k} == {
        "kube-steer.github.io/pool-cpu": str(container_pool_units(spec["containers"][0])["cpu"]),
        "kube-steer.github.io/pool-memory": str(
            container_pool_units(spec["containers"][0])["memory"]
        ),
    }
    assert spec["schedulerName"] == "steer-binpack"
    # The user's hostname spread constraint wins over the hostname rule; the zone rule is added.
    keys = [c["topologyKey"] for c in spec["topologySpreadConstraints"]]
    assert keys == ["kubernetes.io/hostname", "topology.kubernetes.io/zone"]
    assert spec["topologySpreadConstraints"][0] == pod["spec"]["topologySpreadConstraints"][0]
    # dept-a may tolerate gpu-hot, but GPU pods avoid it: no toleration is added.
    assert spec["tolerations"] == pod["spec"]["tolerations"]


def test_replicaset_pod_spreads_by_order_chain_with_template_hash_and_tolerates_allowed_taint() -> (
    None
):
    pod = fixture_pod("pod-create-by-replicaset.json")
    assert "name" not in pod["metadata"] and pod["metadata"]["generateName"]
    patched = apply(pod, mutate_pod(PLAN, pod, DEPT_A).ops)
    zone, hosts = patched["spec"]["topologySpreadConstraints"]
    assert zone == {
        "maxSkew": 1,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"order-chain": "checkout"}},
        "matchLabelKeys": ["pod-template-hash"],
        "nodeTaintsPolicy": "Honor",
    }
    assert hosts == {
        "maxSkew": 2,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"order-chain": "checkout"}},
        "nodeTaintsPolicy": "Honor",
    }
    assert patched["spec"]["tolerations"][-1] == {
        "key": "kube-steer.github.io/gpu-hot",
        "operator": "Equal",
        "value": "true",
        "effect": "PreferNoSchedule",
    }
    assert patched["spec"]["schedulerName"] == "steer-spread"
    trace = patched["metadata"]["annotations"]["kube-steer.github.io/trace"]
    assert POLICY.version in trace and "tolerate:gpu-hot" in trace and "spread:order-chain" in trace


def test_a_users_zone_constraint_that_differs_only_in_node_taints_policy_is_the_users() -> None:
    """The zone rule asks for `nodeTaintsPolicy: Honor`: a pod with the same constraint but
    for that field has a constraint of its own on the zone (kept; the rule is not in effect),
    while the constraint with it is the rule's own (in effect, nothing added)."""
    pod = fixture_pod("pod-create-by-replicaset.json")
    own = apply(pod, mutate_pod(PLAN, pod, DEPT_A).ops)["spec"]["topologySpreadConstraints"][0]
    assert own["nodeTaintsPolicy"] == "Honor"
    for theirs, in_effect in (
        ({k: v for k, v in own.items() if k != "nodeTaintsPolicy"}, False),
        (own, True),
    ):
        pod["spec"]["topologySpreadConstraints"] = [theirs]
        patched = apply(pod, mutate_pod(PLAN, pod, DEPT_A).ops)
        constraints = patched["spec"]["topologySpreadConstraints"]
        assert constraints[0] == theirs
        assert [c["topologyKey"] for c in constraints] == [
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        ]
        trace = patched["metadata"]["annotations"]["kube-steer.github.io/trace"]
        assert ('"spread:order-chain"' in trace) is in_effect


def test_no_tenant_gets_preferences_and_the_pool_but_no_gate() -> None:
    """A pod of no tenant has no budget of its own, but shares the room the budgets keep: it
    requests its limits from the pool (steer/core/budget.py `tenant_budget`), and no gate."""
    pod = fixture_pod("pod-create-user-mutating.json")
    mutation = mutate_pod(PLAN, pod, None)
    patched = apply(pod, mutation.ops)
    assert required_terms(patched) is None
    assert [r for r in mutation.in_effect if r.startswith(("gate:", "budget:"))] == ["budget:pool"]
    budget = tenant_budget(POLICY, None)
    assert budget is not None and budget.gate is None
    container = pod["spec"]["containers"][0]
    requests = patched["spec"]["containers"][0].get("resources", {}).get("requests", {})
    owned = {k: int(v) for k, v in requests.items() if k in owned_resource_keys(POLICY)}
    assert owned == budget.container_requests(container) and owned
    # 4 binary-weighted score terms, then "not reserved for GPU pods" weighing 100 + 10.
    preferred = node_affinity(patched)["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [t["weight"] for t in preferred] == [10, 20, 40, 80, 100, 10]
    assert preferred[4]["preference"] == {
        "matchExpressions": [
            {"key": "kube-steer.github.io/reserved-for-gpu", "operator": "DoesNotExist"}
        ]
    }


def test_scheduler_left_alone_when_profiles_not_installed_or_set_by_user() -> None:
    pod = fixture_pod("pod-create-user-mutating.json")
    assert (
        apply(pod, mutate_pod(STRICT_PLAN, pod, DEPT_A).ops)["spec"]["schedulerName"]
        == "default-scheduler"
    )
    pod["spec"]["schedulerName"] = "my-scheduler"
    assert apply(pod, mutate_pod(PLAN, pod, DEPT_A).ops)["spec"]["schedulerName"] == "my-scheduler"
    del pod["spec"]["schedulerName"]
    assert apply(pod, mutate_pod(PLAN, pod, DEPT_A).ops)["spec"]["schedulerName"] == "steer-spread"


def test_default_scheduler_counts_as_set_when_the_policy_says_so() -> None:
    policy = parse_policy(
        EXAMPLE_POLICY.read_text().replace(
            "defaultSchedulerIsUnset: true", "defaultSchedulerIsUnset: false"
        )
    )
    pod = fixture_pod("pod-create-user-mutating.json")
    patched = apply(pod, mutate_pod(MutationPlan.from_policy(policy), pod, DEPT_A).ops)
    assert patched["spec"]["schedulerName"] == "default-scheduler"


def test_every_container_requests_its_limits_from_the_pool_and_foreign_claims_go() -> None:
    """Per container, so the apiserver's resize rule can compare a container's limits with its
    own pool request; init containers and sidecars too, so the scheduler sums the pool the way
    it sums the pod's limits. A request of an owned resource the policy would not make (here
    the gate of another budget) is removed."""
    limits = {"cpu": "1500m", "memory": "3Gi"}
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [
                {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "1Gi"}}},
                # Copies: a pod from the apiserver never shares objects between containers.
                {"name": "sidecar", "restartPolicy": "Always", "resources": {"limits": {**limits}}},
            ],
            "containers": [
                {
                    "name": "app",
                    "resources": {
                        "limits": {**limits},
                        "requests": {**limits, "kube-steer.github.io/budget-5pct": "1"},
                    },
                },
                {"name": "helper", "resources": {"limits": {"cpu": "250m"}}},
            ],
        },
    }
    patched = apply(pod, mutate_pod(PLAN, pod, DEPT_B).ops)
    owned = {
        c["name"]: {
            k: v for k, v in c["resources"]["requests"].items() if k in owned_resource_keys(POLICY)
        }
        for part in ("initContainers", "containers")
        for c in patched["spec"][part]
    }
    prefix = "kube-steer.github.io/"
    assert owned == {
        "init": {f"{prefix}pool-cpu": "2000", f"{prefix}pool-memory": "1024"},
        "sidecar": {f"{prefix}pool-cpu": "1500", f"{prefix}pool-memory": "3072"},
        "app": {
            f"{prefix}pool-cpu": "1500",
            f"{prefix}pool-memory": "3072",
            f"{prefix}budget-0pct": "1",
        },
        "helper": {f"{prefix}pool-cpu": "250"},
    }
    assert apply(patched, mutate_pod(PLAN, patched, DEPT_B).ops) == patched


def test_a_pod_that_names_its_node_keeps_only_its_budget() -> None:
    """It skips the scheduler: the kubelet enforces its pool and budget gate at admission, and
    a class gate would only make the kubelet refuse a node someone chose."""
    pod = fixture_pod("pod-create-with-affinity-gpu.json")
    pod["spec"]["nodeName"] = "gpu-1"
    requests = apply(pod, mutate_pod(PLAN, pod, DEPT_B).ops)["spec"]["containers"][0]["resources"][
        "requests"
    ]
    assert "kube-steer.github.io/avoid-gpu-hot" not in requests
    assert requests["kube-steer.github.io/budget-0pct"] == "1"
    assert "kube-steer.github.io/pool-cpu" in requests


def test_patch_creates_missing_parents_in_one_add() -> None:
    """The apiserver rejects an `add` whose parent is missing (golden reply): never emit one."""
    reply = admission_fixture("apiserver-reply-to-client-when-patch-invalid.json")
    assert "doc is missing path" in reply["body"]["message"]
    pod = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    ops = mutate_pod(PLAN, pod, DEPT_A).ops
    paths = [op["path"] for op in ops]
    assert "/spec/affinity" in paths and "/metadata/annotations" in paths
    assert not any(p.startswith("/spec/affinity/") for p in paths)
    apply(pod, ops)


def test_json_pointer_escaping() -> None:
    assert escape("kube-steer.github.io/trace") == "kube-steer.github.io~1trace"
    assert escape("a~b/c") == "a~0b~1c"
    assert pointer(("metadata", "annotations", "x/~y")) == "/metadata/annotations/x~1~0y"
    doc: dict[str, Any] = {"metadata": {"annotations": {}}}
    builder = PatchBuilder(doc)
    builder.set(("metadata", "annotations", "a/b~c"), "v")
    assert apply(doc, tuple(builder.ops()))["metadata"]["annotations"] == {"a/b~c": "v"}


def test_empty_required_term_stays_empty() -> None:
    """A term with no requirement matches no node; filling it would admit nodes it excluded."""
    alternatives = (({"key": "k", "operator": "Exists"},),)
    assert merge_required([{}, {"matchExpressions": []}], alternatives) == [
        {},
        {"matchExpressions": []},
    ]
    merged = merge_required(
        [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}],
        alternatives,
    )
    assert merged == [
        {
            "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}],
            "matchExpressions": [{"key": "k", "operator": "Exists"}],
        }
    ]


@pytest.mark.parametrize(
    ("field", "change"),
    [
        ("spec", lambda p: p.__setitem__("spec", [])),
        ("spec.affinity", lambda p: p["spec"].__setitem__("affinity", "x")),
        ("spec.tolerations", lambda p: p["spec"].__setitem__("tolerations", {"a": 1})),
        ("spec.containers", lambda p: p["spec"].__setitem__("containers", "nope")),
        ("metadata", lambda p: p.pop("metadata")),
    ],
)
def test_uninterpretable_pod_names_the_field(field: str, change: Any) -> None:
    pod = fixture_pod("pod-create-user-mutating.json")
    change(pod)
    with pytest.raises(UninterpretablePod) as info:
        mutate_pod(PLAN, pod, DEPT_A)
    assert info.value.field.startswith(field)


def test_plan_precomputes_every_tenant_and_class() -> None:
    tenants = [None, "dept-a", "dept-b"]
    classes = [None, "gpu"]
    assert set(PLAN.pieces) == {(t, c) for t in tenants for c in classes}
    assert PLAN.opted_in("team-a", {"kube-steer.github.io/enabled": "true"})
    assert not PLAN.opted_in("kube-system", {"kube-steer.github.io/enabled": "true"})
    assert not PLAN.opted_in("kube-steer", {"kube-steer.github.io/enabled": "true"})
    assert not PLAN.opted_in("team-a", {})


# --- properties ----------------------------------------------------------------------------

SCORE = composite_key(POLICY, None)
SCORE_GPU = composite_key(POLICY, POLICY.spec.pod_classes[0])
OVERCOMMIT = "kube-steer.github.io/overcommit-pct"
GPU_HOT = "kube-steer.github.io/gpu-hot"
LABEL_KEYS = ("zone", "pool", OVERCOMMIT, GPU_HOT, SCORE, SCORE_GPU)
BUCKETS = [str(v) for v in bucket_values(POLICY.spec.scoring.step)]
VALUES = ["a", "b", "0", "3", "5", "6", "12", "true", *BUCKETS[:3]]


@st.composite
def expressions(draw: st.DrawFn) -> dict[str, Any]:
    key = draw(st.sampled_from(LABEL_KEYS))
    op = draw(st.sampled_from(["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"]))
    expr: dict[str, Any] = {"key": key, "operator": op}
    if op in ("In", "NotIn"):
        expr["values"] = draw(
            st.lists(st.sampled_from(VALUES), min_size=1, max_size=3, unique=True)
        )
    elif op in ("Gt", "Lt"):
        expr["values"] = [str(draw(st.integers(0, 12)))]
    return expr


terms = st.builds(lambda exprs: {"matchExpressions": exprs}, st.lists(expressions(), max_size=3))
preferences = st.builds(
    lambda w, exprs: {"weight": w, "preference": {"matchExpressions": exprs}},
    st.integers(1, 100),
    st.lists(expressions(), min_size=1, max_size=2),
)
tolerations = st.fixed_dictionaries(
    {
        "key": st.sampled_from(["", GPU_HOT, "kube-steer.github.io/unhealthy", "other"]),
        "operator": st.sampled_from(["Exists", "Equal"]),
    },
    optional={
        "value": st.sampled_from(["true", "x"]),
        "effect": st.sampled_from(["NoSchedule", "PreferNoSchedule"]),
    },
)
constraints = st.fixed_dictionaries(
    {
        "maxSkew": st.integers(1, 3),
        "topologyKey": st.sampled_from(
            ["topology.kubernetes.io/zone", "kubernetes.io/hostname", "rack"]
        ),
        "whenUnsatisfiable": st.sampled_from(["DoNotSchedule", "ScheduleAnyway"]),
        "labelSelector": st.just({"matchLabels": {"app": "x"}}),
    }
)


@st.composite
def pods(draw: st.DrawFn) -> dict[str, Any]:
    resources = {"requests": {"cpu": "1"}, "limits": {"cpu": "1"}}
    if draw(st.booleans()):
        resources = {"requests": {"nvidia.com/gpu": "1"}, "limits": {"nvidia.com/gpu": "1"}}
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": resources}]}
    # DRA claims (tests/dra_support.py): known GPU and FPGA templates, and objects no catalogue
    # has seen yet.
    claims = draw(
        st.lists(
            st.sampled_from(
                [
                    {"name": "g", "resourceClaimTemplateName": "double-gpu"},
                    {"name": "f", "resourceClaimTemplateName": "fpga"},
                    {"name": "m", "resourceClaimTemplateName": "mystery"},
                    {"name": "s", "resourceClaimName": "shared"},
                ]
            ),
            max_size=2,
            unique_by=lambda c: c["name"],
        )
    )
    if claims:
        spec["resourceClaims"] = claims
        spec["containers"][0]["resources"]["claims"] = [{"name": c["name"]} for c in claims]
    node_aff: dict[str, Any] = {}
    if draw(st.booleans()):
        node_aff["requiredDuringSchedulingIgnoredDuringExecution"] = {
            "nodeSelectorTerms": draw(st.lists(terms, min_size=1, max_size=3))
        }
    if draw(st.booleans()):
        node_aff["preferredDuringSchedulingIgnoredDuringExecution"] = draw(
            st.lists(preferences, max_size=2)
        )
    has_rules = bool(node_aff)
    if has_rules or draw(st.booleans()):
        keep = has_rules or draw(st.booleans())
        spec["affinity"] = {"nodeAffinity": node_aff} if keep else {}
    if draw(st.booleans()):
        spec["tolerations"] = draw(st.lists(tolerations, max_size=3))
    if draw(st.booleans()):
        spec["topologySpreadConstraints"] = draw(st.lists(constraints, max_size=2))
    scheduler = draw(st.sampled_from([None, "default-scheduler", "custom", "steer-spread"]))
    if scheduler:
        spec["schedulerName"] = scheduler
    labels = draw(
        st.dictionaries(
            st.sampled_from(["app", "order-chain", "pod-template-hash"]),
            st.sampled_from(["x", "y"]),
        )
    )
    metadata: dict[str, Any] = {"generateName": "p-", "labels": labels}
    if draw(st.booleans()):
        metadata["annotations"] = {"other": "1"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


node_labels = st.dictionaries(
    st.sampled_from(LABEL_KEYS),
    st.one_of(st.sampled_from(VALUES), st.sampled_from(BUCKETS), st.integers(0, 20).map(str)),
)
plans = st.sampled_from([PLAN, STRICT_PLAN, DRA_PLAN])
catalogs = st.sampled_from(CATALOGS)
tenants_of = st.sampled_from([None, "dept-a", "dept-b"])
PROPS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _tenant(policy: Policy, name: str | None) -> Any:
    return policy.tenant(name) if name else None


@PROPS
@given(
    pod=pods(),
    plan=plans,
    tenant=tenants_of,
    nodes=st.lists(node_labels, min_size=1, max_size=6),
    devices=catalogs,
)
def test_property_patch_applies_and_hard_rules_are_requests_not_terms(
    pod: dict[str, Any],
    plan: MutationPlan,
    tenant: str | None,
    nodes: list[dict[str, str]],
    devices: FakeCatalog | None,
) -> None:
    original = copy.deepcopy(pod)
    t = _tenant(plan.policy, tenant)
    mutation = mutate_pod(plan, pod, t, namespace="gpu-test1", devices=devices)
    assert pod == original, "mutation must not change its input"
    patched = apply(pod, mutation.ops)  # (a) applies cleanly
    for labels in nodes:  # (b) required node affinity is exactly the user's
        assert node_passes_required(patched, labels) == node_passes_required(original, labels)
    # (c) the first container requests one unit of each gate, every container its limits
    budget = tenant_budget(plan.policy, t)
    found = pod_classification(
        plan.policy, original["spec"], namespace="gpu-test1", devices=devices
    )
    gates = pod_gates(plan.policy, t, found.pod_class, found.spared)
    for i, container in enumerate(patched["spec"]["containers"]):
        requests = container.get("resources", {}).get("requests", {})
        owned = {
            k: int(v) for k, v in requests.items() if k in plan.pieces[(None, None)].resources.owned
        }
        want = budget.container_requests(original["spec"]["containers"][i]) if budget else {}
        if i == 0:
            want.update({g.resource: 1 for g in gates})
            # and as many units of its class's device counter as the devices it asks for
            counter = device_counter(plan.policy, found.pod_class)
            if counter is not None and found.device_units and not original["spec"].get("nodeName"):
                want[counter.resource] = found.device_units
        assert owned == want


@PROPS
@given(pod=pods(), plan=plans, tenant=tenants_of, devices=catalogs)
def test_property_mutation_is_idempotent(
    pod: dict[str, Any], plan: MutationPlan, tenant: str | None, devices: FakeCatalog | None
) -> None:
    t = _tenant(plan.policy, tenant)
    patched = apply(pod, mutate_pod(plan, pod, t, namespace="gpu-test1", devices=devices).ops)
    again = mutate_pod(plan, patched, t, namespace="gpu-test1", devices=devices)
    assert again.ops == ()  # (c)
    # Everything the user had is still there.
    for key in ("tolerations", "topologySpreadConstraints"):
        for item in pod["spec"].get(key) or []:
            assert item in patched["spec"][key]
    for term in node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []:
        assert term in node_affinity(patched)["preferredDuringSchedulingIgnoredDuringExecution"]


@PROPS
@given(pod=pods(), tenant=tenants_of, devices=catalogs)
def test_property_no_gate_keeps_a_pod_off_the_nodes_of_devices_it_may_ask_for(
    pod: dict[str, Any], tenant: str | None, devices: FakeCatalog | None
) -> None:
    """Soundness with DRA: a class reserving its nodes outright gives every other pod its
    "unreserved" gate. A pod that asks for (or, by a claim not known yet, may ask for) a device
    of that class gets none: it would fit no node that has the device."""
    t = _tenant(DRA, tenant)
    mutation = mutate_pod(DRA_PLAN, pod, t, namespace="gpu-test1", devices=devices)
    requested = apply(pod, mutation.ops)["spec"]["containers"][0]["resources"]["requests"]
    gates = {r for r in requested if "/unreserved-" in r}
    names = {
        c["resourceClaimTemplateName"]
        for c in pod["spec"].get("resourceClaims", ())
        if "resourceClaimTemplateName" in c
    }
    unknown = any(
        c.get("resourceClaimName")
        or (
            devices is None
            or ("gpu-test1", c["resourceClaimTemplateName"]) not in devices.templates
        )
        for c in pod["spec"].get("resourceClaims", ())
    )
    gpu = "nvidia.com/gpu" in requested or (devices is not None and "double-gpu" in names)
    fpga = devices is not None and ("gpu-test1", "fpga") in devices.templates and "fpga" in names
    if gpu or unknown:
        assert "kube-steer.github.io/unreserved-gpu" not in gates
    if fpga or unknown:
        assert "kube-steer.github.io/unreserved-fpga" not in gates
    # ... and a pod that asks for neither, and whose every claim is known, keeps off both.
    if not (gpu or fpga or unknown):
        assert gates == {
            "kube-steer.github.io/unreserved-gpu",
            "kube-steer.github.io/unreserved-fpga",
        }
    # What it was classified without is in its trace.
    if unknown and mutation.pod_class is None:
        assert mutation.notes and mutation.trace is not None and "not known yet" in mutation.trace


@PROPS
@given(
    pod=pods(),
    tenant=tenants_of,
    a=st.sampled_from([None, *BUCKETS]),
    b=st.sampled_from([None, *BUCKETS]),
)
def test_property_injected_weight_orders_nodes_as_scores_do(
    pod: dict[str, Any], tenant: str | None, a: str | None, b: str | None
) -> None:
    t = _tenant(POLICY, tenant)
    mutation = mutate_pod(PLAN, pod, t)
    patched = apply(pod, mutation.ops)
    key = SCORE_GPU if mutation.pod_class == "gpu" else SCORE
    user = node_affinity(pod).get("preferredDuringSchedulingIgnoredDuringExecution") or []
    # The score terms (the "not reserved" terms weigh the same on every unreserved node).
    injected = [
        term
        for term in node_affinity(patched)["preferredDuringSchedulingIgnoredDuringExecution"]
        if term not in user and term["preference"]["matchExpressions"][0]["operator"] == "In"
    ]
    assert injected and all(
        term["preference"]["matchExpressions"][0]["key"] == key for term in injected
    )

    def weight(value: str | None) -> int:
        labels = {} if value is None else {key: value}
        return sum(term["weight"] for term in injected if term_matches(term["preference"], labels))

    def score(value: str | None) -> int:
        return 0 if value is None else int(value)  # a never-scored node ranks with the bottom

    # (d) the NodeAffinity plugin's raw score is the bucket itself, so order is preserved.
    assert (weight(a) > weight(b)) == (score(a) > score(b))
    assert (weight(a) == weight(b)) == (score(a) == score(b))
    assert weight(a) == score(a)


# -- steer_pod: the one entry for the webhook and /explain ------------------------------------

OPTED_IN = {"kube-steer.github.io/enabled": "true", "tenant": "dept-a"}


def _asked(answer: Mapping[str, str] | None) -> tuple[list[int], Any]:
    calls: list[int] = []

    def labels() -> Mapping[str, str] | None:
        calls.append(1)
        return answer

    return calls, labels


def test_steer_pod_skips_what_the_webhook_leaves_alone_and_says_why() -> None:
    pod = fixture_pod("pod-create-user-mutating.json")
    calls, labels = _asked(OPTED_IN)
    # An excluded namespace is decided before its labels are looked up.
    assert steer_pod(PLAN, pod, "kube-system", labels).skipped == "excluded-namespace"
    assert steer_pod(PLAN, pod, "kube-steer", labels).skipped == "excluded-namespace"
    assert calls == []
    daemon = copy.deepcopy(pod)
    daemon["metadata"]["ownerReferences"] = [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "d", "uid": "u", "controller": True}
    ]
    controller = {"username": "system:serviceaccount:kube-system:daemon-set-controller"}
    assert steer_pod(PLAN, daemon, "team-a", labels, controller).skipped == "daemonset"
    # The same owner reference written by a user is steered: who asks decides.
    forged = steer_pod(PLAN, daemon, "team-a", labels, {"username": "alice"})
    assert forged.skipped is None and forged.ops
    _, plain = _asked({"tenant": "dept-a"})
    assert steer_pod(PLAN, pod, "team-a", plain).skipped == "not-opted-in"
    _, unknown = _asked(None)
    with pytest.raises(UnknownNamespace):
        steer_pod(PLAN, pod, "team-a", unknown)


def test_steer_pod_gives_the_patch_the_trace_and_the_steered_pod() -> None:
    pod = fixture_pod("pod-create-user-mutating.json")
    before = copy.deepcopy(pod)
    mutation = steer_pod(PLAN, pod, "team-a", lambda: OPTED_IN)
    assert mutation.skipped is None and mutation.tenant == "dept-a"
    assert mutation.ops and mutation.trace is not None
    steered = mutation.apply(pod)
    assert pod == before  # the steered pod is a new object; the request's stays as sent
    assert steered["metadata"]["annotations"][PLAN.trace_key] == mutation.trace
    assert steered == apply(pod, mutation.ops)
    # Steering the steered pod again changes nothing and keeps the same trace.
    again = steer_pod(PLAN, steered, "team-a", lambda: OPTED_IN)
    assert again.ops == () and again.trace == mutation.trace


@pytest.mark.parametrize(
    "op",
    [
        {"op": "replace", "path": "/spec", "value": {}},
        {"op": "add", "path": "", "value": {}},
        {"op": "add", "path": "/spec/missing/deeper", "value": 1},
        {"op": "remove", "path": "/metadata/absent"},
    ],
)
def test_apply_ops_names_an_op_it_cannot_apply(op: dict[str, Any]) -> None:
    pod = fixture_pod("pod-create-user-mutating.json")
    with pytest.raises(ValueError, match="cannot apply"):
        apply_ops(pod, [op])


def test_a_namespaces_labels_are_judged_once_and_again_when_they_change() -> None:
    """The opt-in and tenant verdicts are kept per labels object (the namespace watch holds one
    per namespace until its labels change); a new object, or one changed in place, is judged
    again, and the kept verdicts stay within their bound."""
    plan = MutationPlan.from_policy(POLICY)
    labels = {"kube-steer.github.io/enabled": "true", "tenant": "dept-b"}
    assert plan.opted_in("team-b", labels) and plan.tenant(labels) == POLICY.tenant("dept-b")
    assert len(plan.by_labels) == 1
    assert plan.tenant(labels) == POLICY.tenant("dept-b") and len(plan.by_labels) == 1
    labels["tenant"] = "dept-a"  # changed in place: not the verdict kept for it
    assert plan.tenant(labels) == POLICY.tenant("dept-a")
    relabelled = {"tenant": "dept-a"}  # the watch's next object for the namespace: not opted in
    assert not plan.opted_in("team-b", relabelled) and plan.tenant(relabelled).name == "dept-a"
    assert not plan.opted_in("kube-system", {"kube-steer.github.io/enabled": "true"})
    for _ in range(MAX_LABEL_SETS + 5):
        plan.tenant({"tenant": "dept-b"})
    assert len(plan.by_labels) <= MAX_LABEL_SETS
