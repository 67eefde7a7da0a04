"""One admission decision (steer/core/decision.py), many callers: the webhook answers from it
and `/explain` reports it, so what `/explain` says the webhook does is what the webhook does.

The webhook is asked as the apiserver asks it: `/mutate`, its patch applied to the object,
then `/validate` of the result; its answer (admitted, the denial, every warning) is compared
with `PodExplanation.admission`. An UPDATE is never explained (`/explain` places pods being
created), so for UPDATEs the webhook is compared with `decide`, the function `/explain` calls.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scorer.explain import explain_pod
from scorer.model import NodeState
from steer.core.decision import (
    AdmissionPlans,
    PodRequest,
    decide,
    decide_mutation,
    decide_validation,
)
from steer.core.dra.catalog import DeviceCatalog
from steer.core.infrastructure import presumed_requester
from steer.core.pod_shape import UninterpretablePod
from tests.conftest import EXAMPLE_POLICY, FIXTURES
from tests.dra_support import CLAIM_POD, DOUBLE_GPU_TEMPLATE, FakeCatalog, FakeStore
from tests.webhook_harness import NAMESPACES, in_process_handler, review_for
from webhook.devices import DeviceSource, WatchedDevices
from webhook.handler import AdmissionHandler
from webhook.review import MAX_WARNING_CHARS

ENFORCE_TEXT = EXAMPLE_POLICY.read_text()
DEPT_B_LINE = "      allowedSchedulerNames: [steer-spread, steer-binpack]\n"
assert DEPT_B_LINE in ENFORCE_TEXT
POLICY_TEXTS = {
    "enforce": ENFORCE_TEXT,
    "dept-b-audit": ENFORCE_TEXT.replace(DEPT_B_LINE, DEPT_B_LINE + "      mode: audit\n"),
    "audit": ENFORCE_TEXT.replace("spec:\n", "spec:\n  mode: audit\n", 1),
}
DAEMONSET_CONTROLLER = "system:serviceaccount:kube-system:daemon-set-controller"
USERS: dict[str, dict[str, Any]] = {
    "user": {"username": "alice", "groups": ["system:authenticated"]},
    "daemonset-controller": {"username": DAEMONSET_CONTROLLER, "groups": []},
    "kubelet": {"username": "system:node:n1", "groups": ["system:nodes", "system:authenticated"]},
}
NODES = [NodeState("n1", allocatable={"cpu": "8", "memory": "32Gi"})]
CAPTURED = sorted(p.name for p in (FIXTURES / "admission").glob("pod-*.json"))
TEMPLATE = copy.deepcopy(DOUBLE_GPU_TEMPLATE)


@dataclass(frozen=True)
class Answer:
    """What the client is told: admitted, the denial's message, the warnings kubectl prints."""

    allowed: bool
    message: str | None
    warnings: tuple[str, ...]


@pytest.fixture(scope="module")
def handlers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, AdmissionHandler]:
    out = {}
    for name, text in POLICY_TEXTS.items():
        path = tmp_path_factory.mktemp(name) / "policy.yaml"
        path.write_text(text)
        out[name] = in_process_handler(path)
    return out


def webhook_answer(handler: AdmissionHandler, body: Mapping[str, Any]) -> Answer:
    """The webhook asked as the apiserver asks it: `/mutate`, the patch applied, `/validate`."""
    review = copy.deepcopy(dict(body))
    warnings: list[str] = []
    mutate = handler.handle("mutate", orjson.dumps(review))
    assert mutate.status == 200, mutate.body
    response = orjson.loads(mutate.body)["response"]
    warnings += response.get("warnings") or []
    if "patch" in response:
        ops = json.loads(base64.b64decode(response["patch"]))
        review["request"]["object"] = jsonpatch.apply_patch(review["request"]["object"], ops)
    validate = handler.handle("validate", orjson.dumps(review))
    assert validate.status == 200, validate.body
    response = orjson.loads(validate.body)["response"]
    warnings += response.get("warnings") or []
    message = None if response["allowed"] else response["status"]["message"]
    return Answer(response["allowed"], message, tuple(warnings))


def explained_answer(
    handler: AdmissionHandler, body: Mapping[str, Any], devices: DeviceCatalog | None = None
) -> Answer | None:
    """What `/explain` says the webhook answers (`decide`'s answer for an UPDATE, which is not
    explained); None when `/explain` refuses the pod as unreadable."""
    request = body["request"]
    namespace = request["namespace"]
    labels = NAMESPACES.get(namespace, {})
    policy = handler.policy.current
    if request["operation"] != "CREATE":
        plans = AdmissionPlans.from_policy(policy)
        pod_request = PodRequest(
            request["object"],
            namespace,
            labels,
            request.get("userInfo"),
            operation=request["operation"],
            old_pod=request.get("oldObject"),
            devices=devices,
        )
        admission = decide(plans, pod_request)
        return Answer(admission.allowed, admission.message, as_sent(admission.warnings))
    try:
        explained = explain_pod(
            policy,
            None,
            NODES,
            request["object"],
            labels,
            namespace,
            devices=devices,
            user_info=request.get("userInfo"),
        )
    except UninterpretablePod:
        return None
    said = explained.admission
    return Answer(said.allowed, said.message, as_sent(said.warnings))


def as_sent(warnings: tuple[str, ...]) -> tuple[str, ...]:
    """Warnings as the webhook sends them: the apiserver may cut one past 256 characters, so
    the webhook cuts it first (webhook/review.py); `/explain` shows them whole."""
    return tuple(
        w if len(w) <= MAX_WARNING_CHARS else w[: MAX_WARNING_CHARS - 3] + "..." for w in warnings
    )


def assert_agree(
    handler: AdmissionHandler, body: Mapping[str, Any], devices: DeviceCatalog | None = None
) -> Answer:
    webhook = webhook_answer(handler, body)
    explained = explained_answer(handler, body, devices)
    if explained is None:
        # /explain cannot place a pod the mutation cannot read: the webhook left it unsteered.
        assert any("pod not steered" in w for w in webhook.warnings), webhook
        return webhook
    assert explained == webhook
    return webhook


# -- the captured AdmissionReviews -------------------------------------------------------------


@pytest.mark.parametrize("fixture", CAPTURED)
@pytest.mark.parametrize("namespace", [*NAMESPACES, "kube-system"])
@pytest.mark.parametrize("policy", list(POLICY_TEXTS))
def test_explain_says_what_the_webhook_answers_on_every_captured_review(
    handlers: dict[str, AdmissionHandler], fixture: str, namespace: str, policy: str
) -> None:
    body = review_for(fixture, namespace)
    assert body["request"]["object"]["kind"] == "Pod"  # every captured review is a pod's
    assert_agree(handlers[policy], body)


def test_the_captured_reviews_cover_creates_and_an_update() -> None:
    operations = {review_for(name)["request"]["operation"] for name in CAPTURED}
    assert operations == {"CREATE", "UPDATE"}


# -- the cases /explain once got wrong -----------------------------------------------------------


def _review(
    namespace: str,
    *,
    user: str = "user",
    owner: str | None = "ReplicaSet",
    mirror: bool = False,
    scheduler: str | None = None,
    tolerations: tuple[Mapping[str, Any], ...] = (),
    limits: Mapping[str, str] | None = None,
    operation: str = "CREATE",
    old_scheduler: str | None = None,
) -> dict[str, Any]:
    body = review_for("pod-create-by-replicaset.json", namespace)
    request = body["request"]
    request["userInfo"] = USERS[user]
    request["operation"] = operation
    pod = request["object"]
    metadata = pod["metadata"]
    metadata.pop("managedFields", None)
    if owner is None:
        metadata.pop("ownerReferences", None)
    else:
        metadata["ownerReferences"][0]["kind"] = owner
    if mirror:
        metadata.setdefault("annotations", {})["kubernetes.io/config.mirror"] = "hash"
    spec = pod["spec"]
    spec.pop("schedulerName", None)
    if scheduler is not None:
        spec["schedulerName"] = scheduler
    spec["tolerations"] = [*spec.get("tolerations", []), *map(dict, tolerations)]
    if limits is not None:
        spec["containers"][0]["resources"] = {
            "requests": {"cpu": "250m", "memory": "64Mi"},
            "limits": dict(limits),
        }
    if operation == "UPDATE":
        old = copy.deepcopy(pod)
        old["spec"].pop("schedulerName", None)
        if old_scheduler is not None:
            old["spec"]["schedulerName"] = old_scheduler
        request["oldObject"] = old
    return body


WILDCARD = {"operator": "Exists"}
UNHEALTHY = {"key": "kube-steer.github.io/unhealthy", "operator": "Exists"}


def test_an_exempt_daemonset_pod_is_admitted_by_both(
    handlers: dict[str, AdmissionHandler],
) -> None:
    body = _review(
        "team-b", user="daemonset-controller", owner="DaemonSet", tolerations=(WILDCARD,)
    )
    assert assert_agree(handlers["enforce"], body) == Answer(True, None, ())
    # The same pod from anyone else is denied, by both, for the same reasons.
    forged = _review("team-b", owner="DaemonSet", tolerations=(WILDCARD,))
    denied = assert_agree(handlers["enforce"], forged)
    assert not denied.allowed and "rule reserved-toleration" in (denied.message or "")


def test_a_live_infrastructure_pod_is_explained_as_its_creator_had_it_admitted(
    handlers: dict[str, AdmissionHandler],
) -> None:
    """A pod read back from the API names no creator: a DaemonSet's pod is explained as its
    controller had it admitted, a mirror pod as its kubelet had (both exempt), any other as a
    user's."""
    policy = handlers["enforce"].policy.current
    labels = NAMESPACES["team-b"]
    daemon = _review("team-b", owner="DaemonSet", tolerations=(WILDCARD,))["request"]["object"]
    mirror = _review("team-b", owner=None, mirror=True, tolerations=(WILDCARD,))["request"][
        "object"
    ]
    mirror["spec"]["nodeName"] = "n1"
    for pod, skipped in ((daemon, "daemonset"), (mirror, "mirror-pod")):
        creator = presumed_requester(policy, pod)
        explained = explain_pod(policy, None, NODES, pod, labels, "team-b", user_info=creator)
        assert explained.skipped == skipped and explained.admission.allowed
        assert not explained.problems
    plain = _review("team-b", tolerations=(WILDCARD,))["request"]["object"]
    assert presumed_requester(policy, plain) is None
    assert not explain_pod(policy, None, NODES, plain, labels, "team-b").admission.allowed


def test_a_static_pods_mirror_is_admitted_by_both(handlers: dict[str, AdmissionHandler]) -> None:
    body = _review("team-b", user="kubelet", owner=None, mirror=True, tolerations=(WILDCARD,))
    assert assert_agree(handlers["enforce"], body) == Answer(True, None, ())


def test_an_audited_tenants_pod_is_admitted_by_both_with_the_same_warnings(
    handlers: dict[str, AdmissionHandler],
) -> None:
    body = _review("team-b", limits={"cpu": "500m"})
    answer = assert_agree(handlers["dept-b-audit"], body)
    assert answer.allowed and answer.warnings
    assert all(w.startswith("kube-steer audit: would deny: ") for w in answer.warnings)
    # A security taint rule holds in audit mode too.
    denied = assert_agree(handlers["audit"], _review("team-b", tolerations=(UNHEALTHY,)))
    assert not denied.allowed


def test_an_update_is_denied_by_both_only_for_what_it_introduces(
    handlers: dict[str, AdmissionHandler],
) -> None:
    kept = _review("team-b", scheduler="other", operation="UPDATE", old_scheduler="other")
    assert assert_agree(handlers["enforce"], kept).allowed
    introduced = _review("team-b", scheduler="other", operation="UPDATE")
    assert not assert_agree(handlers["enforce"], introduced).allowed


def test_an_excluded_namespace_is_left_alone_by_both(
    handlers: dict[str, AdmissionHandler],
) -> None:
    body = _review("kube-system", tolerations=(WILDCARD,), scheduler="other")
    assert assert_agree(handlers["enforce"], body) == Answer(True, None, ())


def test_an_object_that_is_not_a_pod_is_allowed_unjudged_once_the_operation_is_judged() -> None:
    """The operation first (another is left alone, whatever the object), then the kind: another
    kind, or no object, is allowed with a warning naming the kind, by both webhooks."""
    plans = AdmissionPlans.from_policy(in_process_handler().policy.current)
    pod = review_for("pod-create-by-replicaset.json", "team-b")["request"]["object"]
    labels = NAMESPACES["team-b"]
    for request in (
        PodRequest(pod, "team-b", labels, kind="Deployment"),
        PodRequest(None, "team-b", labels),
    ):
        for decide_one, action in (
            (decide_mutation, "not steered"),
            (decide_validation, "not validated"),
        ):
            verdict = decide_one(plans, request)
            text = f"expected a Pod object, got kind {request.kind!r}; {action}"
            assert verdict.result == "uninterpretable" and verdict.allowed
            assert verdict.warnings == (f"kube-steer: {text}",) and verdict.mutation is None
            assert verdict.unreadable is not None
            assert (verdict.unreadable.field, verdict.unreadable.log) == ("kind", text)
        deleted = dataclasses.replace(request, operation="DELETE")
        assert decide_mutation(plans, deleted).result == "skipped"
        assert decide_validation(plans, deleted).result == "skipped"


def test_the_decision_leaves_an_unknown_namespace_to_its_caller() -> None:
    plans = AdmissionPlans.from_policy(in_process_handler().policy.current)
    pod = review_for("pod-create-by-replicaset.json")["request"]["object"]
    request = PodRequest(pod, "team-x", None)
    assert decide_mutation(plans, request).result == "namespace-unknown"
    validation = decide_validation(plans, request)
    assert validation.result == "namespace-unknown" and not validation.allowed


# -- claim pods, with and without the DRA catalogue ---------------------------------------------


def _claim_review(namespace: str, template: str = "double-gpu") -> dict[str, Any]:
    body = review_for("pod-create-user-mutating.json", namespace)
    pod = copy.deepcopy(CLAIM_POD)
    pod["metadata"]["namespace"] = namespace
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template
    pod["spec"]["containers"][0]["resources"]["limits"] = {"cpu": "1", "memory": "1Gi"}
    body["request"]["object"] = pod
    return body


@pytest.mark.parametrize("synced", [True, False], ids=["synced", "not-synced"])
@pytest.mark.parametrize("template", ["double-gpu", "not-seen-yet"])
def test_a_claim_pod_gets_the_same_answer_and_warnings_from_both(
    tmp_path: Path, synced: bool, template: str
) -> None:
    namespace = "team-a"
    known = copy.deepcopy(TEMPLATE)
    known["metadata"]["namespace"] = namespace
    catalog = FakeCatalog.of(known)
    source: DeviceSource = WatchedDevices(FakeStore(catalog, synced=synced))
    path = tmp_path / "policy.yaml"
    path.write_text(ENFORCE_TEXT)
    handler = in_process_handler(path, source)
    answer = assert_agree(handler, _claim_review(namespace, template), source.catalog())
    assert bool(answer.warnings) == (not synced or template != "double-gpu")


# -- generated pods ----------------------------------------------------------------------------


@st.composite
def reviews(draw: st.DrawFn) -> dict[str, Any]:
    operation = draw(st.sampled_from(["CREATE", "CREATE", "UPDATE"]))
    return _review(
        # Tenants' namespaces more often: there the rules judge.
        draw(st.sampled_from(["team-a", "team-b", "team-b", *NAMESPACES, "kube-system"])),
        user=draw(st.sampled_from(list(USERS))),
        owner=draw(st.sampled_from([None, "ReplicaSet", "DaemonSet"])),
        mirror=draw(st.booleans()),
        scheduler=draw(st.sampled_from([None, "default-scheduler", "steer-spread", "other"])),
        tolerations=tuple(
            draw(
                st.lists(
                    st.sampled_from(
                        [
                            WILDCARD,
                            UNHEALTHY,
                            {"key": "kube-steer.github.io/gpu-hot", "operator": "Exists"},
                        ]
                    ),
                    max_size=2,
                )
            )
        ),
        limits=draw(
            st.sampled_from(
                [
                    None,
                    {"cpu": "250m", "memory": "64Mi"},
                    {"cpu": "500m"},
                    {"cpu": "262m", "memory": "64Mi"},
                    {"cpu": "lots", "memory": "64Mi"},
                ]
            )
        ),
        operation=operation,
        old_scheduler=draw(st.sampled_from([None, "other"])),
    )


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=reviews(), policy=st.sampled_from(list(POLICY_TEXTS)))
def test_explain_says_what_the_webhook_answers_on_generated_pods(
    handlers: dict[str, AdmissionHandler], body: dict[str, Any], policy: str
) -> None:
    assert_agree(handlers[policy], body)
