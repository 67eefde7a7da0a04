"""Property-based fuzzing of `AdmissionHandler.handle`, in process.

1. Any review: each captured apiserver review damaged at any of its field paths (replaced by
   arbitrary JSON, deleted, or given a sibling) gets a well-formed answer on every endpoint: an
   AdmissionReview v1 echoing the uid, whose patch applies to the object, or a JSON 400 exactly
   when the envelope is broken, or a 503 from validation for a namespace it does not know.
2. No bypass: a well-formed tenant pod that breaks a rule of the example policy (a schedulerName,
   a reserved toleration, an overcommitted or unbounded container) among arbitrary well-formed
   noise is never allowed by /validate (and never by /validate/security when the rule is a
   security one), on CREATE, on an UPDATE that introduces it, dry run or not. The same pods
   without the planted violation are allowed.

Neither ever answers with an internal error (`result == "error"`: on /mutate a 200 that leaves
the pod unsteered), and /validate never lets a tenant's pod through unread.

Several thousand reviews a run; the counts are printed. `STEER_FUZZ_SCALE=N` runs N times as
many examples (with `--hypothesis-seed` to vary or repeat a run).
"""

from __future__ import annotations

import base64
import copy
import json
import os
import time
from collections.abc import Mapping
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import FIXTURES
from tests.dra_support import DOUBLE_GPU_TEMPLATE, FakeCatalog, FakeStore
from tests.reliability.conftest import record_summary
from tests.webhook_harness import in_process_handler
from webhook.devices import WatchedDevices
from webhook.handler import AdmissionHandler
from webhook.review import Endpoint, Outcome

ENDPOINTS: tuple[Endpoint, ...] = ("mutate", "validate", "validate-security")
FIXTURE_NAMES = sorted(
    p.name for p in (FIXTURES / "admission").glob("*.json") if p.name.startswith("pod-")
)
REVIEWS = {
    name: json.loads((FIXTURES / "admission" / name).read_text())["body"] for name in FIXTURE_NAMES
}
COUNTS = {"any-review": 0, "claims": 0, "no-bypass": 0}
SCALE = int(os.environ.get("STEER_FUZZ_SCALE", "1"))


@pytest.fixture(scope="module")
def handler() -> AdmissionHandler:
    return in_process_handler()


@pytest.fixture(scope="module", autouse=True)
def report() -> Any:
    yield
    record_summary("admission fuzzer", f"fuzzed AdmissionReviews: {COUNTS}")


# --- 1. any review ------------------------------------------------------------------------------


def field_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    paths = [prefix] if prefix else []
    if isinstance(node, dict):
        for key, value in node.items():
            paths += field_paths(value, (*prefix, key))
    elif isinstance(node, list):
        for i, value in enumerate(node):
            paths += field_paths(value, (*prefix, i))
    return paths


PATHS = {name: field_paths(review) for name, review in REVIEWS.items()}
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8)
    | st.sampled_from(["", "0", "-1", "1e400", "Pod", "CREATE", "UPDATE", "team-a", "ghost"]),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def damaged_reviews(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(FIXTURE_NAMES))
    review: dict[str, Any] = copy.deepcopy(REVIEWS[name])
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(PATHS[name]))
        parent: Any = review
        for step in path[:-1]:
            try:
                parent = parent[step]
            except (KeyError, IndexError, TypeError):
                parent = None
                break
        if not isinstance(parent, (dict, list)):
            continue
        last = path[-1]
        if isinstance(parent, dict):
            # An earlier replacement may have turned a list on this path into an object: its
            # index is then a key, and a JSON object's keys are strings.
            last = str(last)
        action = draw(st.sampled_from(["replace", "delete", "sibling"]))
        try:
            if action == "replace":
                parent[last] = draw(json_values)
            elif action == "delete":
                del parent[last]
            elif isinstance(parent, dict):
                parent[draw(st.text(max_size=6))] = draw(json_values)
            else:
                parent.insert(last, draw(json_values))
        except (KeyError, IndexError, TypeError):
            continue
    return review


def check_json(node: Any) -> None:
    """Every key a string: what a JSON document (and so the apiserver) can send."""
    if isinstance(node, dict):
        for key, value in node.items():
            assert isinstance(key, str), f"the fuzzer wrote the key {key!r}"
            check_json(value)
    elif isinstance(node, list):
        for value in node:
            check_json(value)


def envelope_ok(review: Any) -> bool:
    if not isinstance(review, dict):
        return False
    request = review.get("request")
    return (
        review.get("kind") == "AdmissionReview"
        and review.get("apiVersion") == "admission.k8s.io/v1"
        and isinstance(request, dict)
        and isinstance(request.get("uid"), str)
        and bool(request["uid"])
    )


def check_answer(endpoint: Endpoint, review: Any, outcome: Outcome) -> None:
    status, body = outcome.status, outcome.body
    # An internal error is never an answer the handler meant (on /mutate it is still a 200).
    assert outcome.result != "error", (endpoint, body)
    answer = orjson.loads(body)
    if not envelope_ok(review):
        assert status == 400, (endpoint, status, body)
        assert set(answer) == {"error"} and answer["error"]["reason"] and answer["error"]["message"]
        return
    request = review["request"]
    if status == 503:
        assert endpoint != "mutate", body
        assert answer["error"]["reason"] in ("namespace-unknown", "namespace-cache-not-synced")
        return
    assert status == 200, (endpoint, status, body)
    assert answer["apiVersion"] == "admission.k8s.io/v1" and answer["kind"] == "AdmissionReview"
    response = answer["response"]
    assert response["uid"] == request["uid"]
    assert isinstance(response["allowed"], bool)
    if endpoint == "mutate":
        assert response["allowed"] is True
    if "patch" in response:
        assert endpoint == "mutate" and response["patchType"] == "JSONPatch"
        ops = json.loads(base64.b64decode(response["patch"]))
        jsonpatch.JsonPatch(ops).apply(copy.deepcopy(request["object"]))
    if not response["allowed"]:
        assert response["status"]["code"] == 403 and response["status"]["message"]
    for warning in response.get("warnings", []):
        assert isinstance(warning, str) and len(warning) <= 256
    if endpoint != "mutate" and tenant_pod_created(request):
        # No rule is skipped for a tenant's pod: judged, denied as unreadable, or exempt.
        assert outcome.result != "uninterpretable", (endpoint, body)


def tenant_pod_created(request: Mapping[str, Any]) -> bool:
    kind, namespace = request.get("kind"), request.get("namespace")
    return (
        request.get("operation") == "CREATE"
        and isinstance(kind, dict)
        and kind.get("kind") == "Pod"
        and isinstance(request.get("object"), dict)
        and isinstance(namespace, str)
        and namespace in TENANT_OF
    )


@settings(
    max_examples=1000 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(review=damaged_reviews())
def test_any_review_gets_a_well_formed_answer(handler: AdmissionHandler, review: Any) -> None:
    check_json(review)
    raw = orjson.dumps(review)
    for endpoint in ENDPOINTS:
        outcome = handler.handle(endpoint, raw)
        COUNTS["any-review"] += 1
        check_answer(endpoint, review, outcome)


@st.composite
def claim_reviews(draw: st.DrawFn) -> dict[str, Any]:
    """A captured review whose pod names DRA claims: well-formed entries for templates the
    catalogue knows and does not, or arbitrary JSON in their place."""
    name = draw(st.sampled_from(FIXTURE_NAMES))
    review: dict[str, Any] = copy.deepcopy(REVIEWS[name])
    obj = review["request"].get("object")
    if isinstance(obj, dict) and isinstance(obj.get("spec"), dict):
        entry = st.fixed_dictionaries(
            {"name": st.sampled_from(["g", "h"])},
            optional={
                "resourceClaimTemplateName": st.sampled_from(["double-gpu", "ghost"]) | json_values,
                "resourceClaimName": st.sampled_from(["shared", ""]) | json_values,
            },
        )
        obj["spec"]["resourceClaims"] = draw(
            st.lists(entry | json_values, max_size=3) | json_values
        )
    return review


@pytest.fixture(scope="module")
def dra_handler() -> AdmissionHandler:
    template = copy.deepcopy(DOUBLE_GPU_TEMPLATE)
    catalog = FakeCatalog.of(
        *({**template, "metadata": {**template["metadata"], "namespace": ns}} for ns in TENANT_OF)
    )
    return in_process_handler(devices=WatchedDevices(FakeStore(catalog)))


@settings(max_examples=300 * SCALE, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(review=claim_reviews())
def test_a_pod_with_any_claims_gets_a_well_formed_answer(
    dra_handler: AdmissionHandler, review: Any
) -> None:
    check_json(review)
    raw = orjson.dumps(review)
    for endpoint in ENDPOINTS:
        outcome = dra_handler.handle(endpoint, raw)
        COUNTS["claims"] += 1
        check_answer(endpoint, review, outcome)


# --- 2. no bypass ---------------------------------------------------------------------------------

TENANT_OF = {"team-a": "dept-a", "team-b": "dept-b", "team-c": "dept-a"}
SCHEDULERS = {
    "dept-a": ["default-scheduler", "steer-spread", "steer-binpack"],
    "dept-b": ["steer-spread", "steer-binpack"],
}
OVERCOMMIT = {"dept-a": 1.05, "dept-b": 1.0}
RESERVED = {  # taint key -> (effect, security)
    "kube-steer.github.io/gpu-hot": ("PreferNoSchedule", False),
    "kube-steer.github.io/unhealthy": ("NoSchedule", True),
}
MAY_TOLERATE = {"dept-a": {"kube-steer.github.io/gpu-hot"}, "dept-b": set()}
NOT_INFRASTRUCTURE = ["kubernetes-admin", "system:serviceaccount:team-a:deployer", "alice"]

dns_names = st.from_regex(r"[a-z][a-z0-9-]{0,10}[a-z0-9]", fullmatch=True)
label_values = st.from_regex(r"([A-Za-z0-9]([A-Za-z0-9._-]{0,8}[A-Za-z0-9])?)?", fullmatch=True)


@st.composite
def quantity_pair(draw: st.DrawFn, ratio: float) -> tuple[str, str]:
    """A request and a limit in (possibly different) valid units, limit = ratio * request."""
    milli = draw(st.integers(10, 64_000))
    limit_milli = round(milli * ratio)
    forms = [lambda m: f"{m}m"]
    if milli % 1000 == 0:
        forms.append(lambda m: str(m // 1000))
    request = draw(st.sampled_from(forms))(milli)
    limit_forms = [lambda m: f"{m}m"] + (
        [lambda m: str(m // 1000)] if limit_milli % 1000 == 0 else []
    )
    return request, draw(st.sampled_from(limit_forms))(limit_milli)


@st.composite
def memory_pair(draw: st.DrawFn, ratio: float) -> tuple[str, str]:
    mib = draw(st.integers(1, 65_536))
    request = draw(st.sampled_from([f"{mib}Mi", f"{mib * 1024}Ki", f"{mib * 1024 * 1024}"]))
    limit_mib = mib * ratio
    if limit_mib == int(limit_mib):
        return request, draw(st.sampled_from([f"{int(limit_mib)}Mi", f"{int(limit_mib * 1024)}Ki"]))
    return request, f"{int(limit_mib * 1024 * 1024)}"


@st.composite
def containers(draw: st.DrawFn, ratio: float = 1.0) -> dict[str, Any]:
    cpu_request, cpu_limit = draw(quantity_pair(ratio))
    memory_request, memory_limit = draw(memory_pair(ratio))
    container: dict[str, Any] = {
        "name": draw(dns_names),
        "image": "registry.example/app:1",
        "resources": {
            "requests": {"cpu": cpu_request, "memory": memory_request},
            "limits": {"cpu": cpu_limit, "memory": memory_limit},
        },
    }
    if draw(st.booleans()):
        container["resources"]["requests"]["nvidia.com/gpu"] = "1"
        container["resources"]["limits"]["nvidia.com/gpu"] = "1"
    if draw(st.booleans()):
        container["env"] = [{"name": "A", "value": draw(label_values)}]
    return container


benign_tolerations = st.lists(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(["example.com/gpu", "node.kubernetes.io/not-ready"]),
            "operator": st.just("Exists"),
        },
        optional={
            "effect": st.sampled_from(["NoSchedule", "NoExecute"]),
            "tolerationSeconds": st.integers(0, 300),
        },
    ),
    max_size=2,
)


@st.composite
def clean_pods(draw: st.DrawFn, tenant: str, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": draw(st.lists(containers(), min_size=1, max_size=3))}
    if draw(st.booleans()):
        spec["initContainers"] = draw(st.lists(containers(), min_size=1, max_size=2))
    scheduler = draw(st.sampled_from([*SCHEDULERS[tenant], None]))
    if scheduler is None and "default-scheduler" not in SCHEDULERS[tenant]:
        scheduler = SCHEDULERS[tenant][0]
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    tolerations = draw(benign_tolerations)
    if draw(st.booleans()) and MAY_TOLERATE[tenant]:
        tolerations.append({"key": "kube-steer.github.io/gpu-hot", "operator": "Exists"})
    if tolerations:
        spec["tolerations"] = tolerations
    if draw(st.booleans()):
        spec["nodeSelector"] = draw(st.dictionaries(dns_names, label_values, max_size=2))
    if draw(st.booleans()):
        spec["priority"] = draw(st.integers(0, 1000))
    metadata: dict[str, Any] = {"name": draw(dns_names), "namespace": namespace}
    if draw(st.booleans()):
        metadata["labels"] = draw(st.dictionaries(dns_names, label_values, max_size=3))
    if draw(st.booleans()):
        metadata["annotations"] = draw(st.dictionaries(dns_names, st.text(max_size=20), max_size=2))
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}


@st.composite
def violations(draw: st.DrawFn, tenant: str) -> tuple[str, bool, Any]:
    """(rule, security, how to plant it in a pod)."""
    choices = ["scheduler", "toleration", "overcommit", "unbounded"]
    rule = draw(st.sampled_from(choices))
    if rule == "scheduler":
        name = draw(
            st.sampled_from(["evil-scheduler", "default-scheduler", "steer-spread-x"]).filter(
                lambda n: n not in SCHEDULERS[tenant]
            )
        )
        return rule, False, ("schedulerName", name)
    if rule == "toleration":
        key = draw(st.sampled_from([k for k in RESERVED if k not in MAY_TOLERATE[tenant]] + [""]))
        effect = RESERVED.get(key, ("NoSchedule", True))[0]
        toleration: dict[str, Any] = {"operator": "Exists"}
        if key:
            toleration["key"] = key
            if draw(st.booleans()):
                toleration = {"key": key, "operator": "Equal", "value": "true"}
        if draw(st.booleans()):
            toleration["effect"] = effect
        security = RESERVED.get(key, ("", True))[1] or (not key and effect == "NoSchedule")
        return rule, security, ("toleration", toleration)
    if rule == "overcommit":
        ratio = draw(
            st.sampled_from([1.5, 2.0, 4.0]) if tenant == "dept-a" else st.sampled_from([1.25, 2.0])
        )
        return rule, False, ("container", draw(containers(ratio)))
    resource = draw(st.sampled_from(["cpu", "memory"]))
    return rule, False, ("unlimited", resource)


def plant(pod: dict[str, Any], how: tuple[str, Any], where: int) -> dict[str, Any]:
    bad = copy.deepcopy(pod)
    spec = bad["spec"]
    kind, value = how
    if kind == "schedulerName":
        spec["schedulerName"] = value
    elif kind == "toleration":
        tolerations = spec.setdefault("tolerations", [])
        tolerations.insert(where % (len(tolerations) + 1), value)
    elif kind == "container":
        field = "initContainers" if "initContainers" in spec and where % 2 else "containers"
        spec[field].insert(where % (len(spec[field]) + 1), value)
    else:
        containers_ = spec["containers"]
        del containers_[where % len(containers_)]["resources"]["limits"][value]
    return bad


def review(
    pod: dict[str, Any], namespace: str, operation: str, old: Any, dry_run: bool, user: str
) -> bytes:
    request: dict[str, Any] = {
        "uid": f"fuzz-{time.monotonic_ns()}",
        "kind": {"group": "", "version": "v1", "kind": "Pod"},
        "resource": {"group": "", "version": "v1", "resource": "pods"},
        "namespace": namespace,
        "name": pod["metadata"]["name"],
        "operation": operation,
        "userInfo": {"username": user, "groups": ["system:authenticated"]},
        "object": pod,
        "oldObject": old,
        "dryRun": dry_run,
    }
    return orjson.dumps(
        {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    )


@st.composite
def tenant_cases(draw: st.DrawFn) -> dict[str, Any]:
    namespace = draw(st.sampled_from(sorted(TENANT_OF)))
    tenant = TENANT_OF[namespace]
    pod = draw(clean_pods(tenant, namespace))
    rule, security, how = draw(violations(tenant))
    return {
        "namespace": namespace,
        "clean": pod,
        "bad": plant(pod, how, draw(st.integers(0, 7))),
        "rule": rule,
        "security": security,
        "operation": draw(st.sampled_from(["CREATE", "UPDATE"])),
        "dry_run": draw(st.booleans()),
        "user": draw(st.sampled_from(NOT_INFRASTRUCTURE)),
    }


def allowed(handler: AdmissionHandler, endpoint: Endpoint, body: bytes) -> bool:
    outcome = handler.handle(endpoint, body)
    COUNTS["no-bypass"] += 1
    assert outcome.status == 200 and outcome.result != "error", outcome.body
    response = orjson.loads(outcome.body)["response"]
    assert "warnings" not in response or response["allowed"] is False, response
    return bool(response["allowed"])


@settings(
    max_examples=800 * SCALE,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(case=tenant_cases())
def test_no_tenant_pod_that_breaks_a_rule_is_allowed(
    handler: AdmissionHandler, case: dict[str, Any]
) -> None:
    namespace, clean, bad = case["namespace"], case["clean"], case["bad"]
    old = clean if case["operation"] == "UPDATE" else None
    args = (namespace, case["operation"], old, case["dry_run"], case["user"])
    assert allowed(handler, "validate", review(clean, *args)), "a clean pod was denied"
    assert not allowed(handler, "validate", review(bad, *args)), f"bypass: {case['rule']}"
    if case["security"]:
        assert not allowed(handler, "validate-security", review(bad, *args)), "security bypass"
