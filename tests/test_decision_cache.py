"""The webhook's mutation verdicts kept by pod template (webhook/decision_cache.py).

What the cache relies on is pinned here: the decision reads no identity field of a pod, so a
pod that differs from an earlier one in those alone gets the earlier verdict; anything else the
decision reads (the pod's other fields, its namespace's labels, the user, the DRA catalogue,
the policy) is another key or an empty cache. And a handler that keeps verdicts answers every
generated review byte for byte as one that keeps none.
"""

from __future__ import annotations

import base64
import copy
import dataclasses
import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from steer.core.decision import AdmissionPlans, PodRequest, decide_mutation
from steer.core.policy import parse_policy
from tests.conftest import EXAMPLE_POLICY
from tests.dra_support import FakeCatalog, FakeStore
from tests.test_admission_decision import CAPTURED, POLICY_TEXTS, reviews
from tests.webhook_harness import NAMESPACES, counted, in_process_handler, review_for
from webhook.decision_cache import (
    IDENTITY_FIELDS,
    LARGEST_KEYED_REVIEW,
    DecisionCache,
    keep,
    template_key,
    verdict_bytes,
)
from webhook.devices import WatchedDevices
from webhook.handler import AdmissionHandler

ANOTHER_IDENTITY = {
    "name": "web-888f7f7c8-zq2xk",
    "generateName": "web-888f7f7c8-",
    "uid": "0b6cbd6f-61a4-4c39-8f0e-5f2d0c0f5a11",
    "resourceVersion": "123456",
    "generation": 1,
    "creationTimestamp": "2026-12-03T10:00:00Z",
    "managedFields": [
        {
            "manager": "kube-controller-manager",
            "operation": "Update",
            "apiVersion": "v1",
            "time": "2026-12-03T10:00:00Z",
            "fieldsType": "FieldsV1",
            "fieldsV1": {"f:metadata": {"f:generateName": {}}},
        }
    ],
    "deletionTimestamp": "2026-12-03T10:00:30Z",
    "deletionGracePeriodSeconds": 30,
}
assert set(ANOTHER_IDENTITY) == IDENTITY_FIELDS


def another_pod(
    body: Mapping[str, Any], uid: str = "another", *, drop: bool = False
) -> dict[str, Any]:
    """The review of another pod of the same template: a new request uid, and every identity
    field set to another value (`drop`: removed)."""
    review = copy.deepcopy(dict(body))
    review["request"]["uid"] = uid
    metadata = review["request"]["object"]["metadata"]
    for key in IDENTITY_FIELDS:
        metadata.pop(key, None)
    if not drop:
        metadata.update(copy.deepcopy(ANOTHER_IDENTITY))
    return review


def patch_of(response: Mapping[str, Any]) -> list[dict[str, Any]]:
    ops: list[dict[str, Any]] = orjson.loads(base64.b64decode(response["patch"]))
    return ops


def mutate(handler: AdmissionHandler, body: Mapping[str, Any]) -> dict[str, Any]:
    outcome = handler.handle("mutate", orjson.dumps(body))
    assert outcome.status == 200, outcome.body
    response: dict[str, Any] = orjson.loads(outcome.body)["response"]
    del response["uid"]
    return response


@pytest.fixture(scope="module")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[AdmissionHandler, ...]]:
    """Per policy: a handler keeping verdicts (for the whole module, so they pile up) and one
    keeping none."""
    out = {}
    for name, text in POLICY_TEXTS.items():
        path = tmp_path_factory.mktemp(name) / "policy.yaml"
        path.write_text(text)
        out[name] = (in_process_handler(path), in_process_handler(path, decision_cache_entries=0))
    return out


def _request(body: Mapping[str, Any]) -> PodRequest:
    request = body["request"]
    namespace = request.get("namespace") or ""
    return PodRequest(
        pod=request["object"],
        namespace=namespace,
        namespace_labels=NAMESPACES.get(namespace),
        user_info=request.get("userInfo"),
        operation=request["operation"],
    )


PLANS = {name: AdmissionPlans.from_policy(parse_policy(t)) for name, t in POLICY_TEXTS.items()}


@pytest.mark.parametrize("fixture", CAPTURED)
@pytest.mark.parametrize("namespace", [*NAMESPACES, "kube-system"])
def test_the_decision_reads_no_identity_field_of_a_captured_pod(
    fixture: str, namespace: str
) -> None:
    body = review_for(fixture, namespace)
    first = decide_mutation(PLANS["enforce"], _request(body))
    for drop in (False, True):
        assert decide_mutation(PLANS["enforce"], _request(another_pod(body, drop=drop))) == first


def relabelled(body: Mapping[str, Any], changes: Mapping[str, str | None]) -> dict[str, Any]:
    """The review with these pod labels set (None: removed)."""
    review = copy.deepcopy(dict(body))
    metadata = review["request"]["object"].setdefault("metadata", {})
    labels = metadata.get("labels")
    labels = dict(labels) if isinstance(labels, dict) else {}
    for key, value in changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    metadata["labels"] = labels
    return review


UNREAD = {"build.example.com/number": "4711", "batch.kubernetes.io/job-completion-index": "3"}


@pytest.mark.parametrize("fixture", CAPTURED)
@pytest.mark.parametrize("namespace", [*NAMESPACES, "kube-system"])
def test_pods_that_differ_in_a_label_no_rule_reads_share_a_key_and_a_verdict(
    fixture: str, namespace: str
) -> None:
    """The decision reads a pod's labels only through the spread rules (their labelKey and
    matchLabelKeys, `MutationPlan.read_label_keys`): another value, or another label, leaves the
    verdict as it is, and so the key; a read label's value changes both where a rule asks."""
    plans = PLANS["enforce"]
    read = plans.mutation.read_label_keys
    assert read == {"order-chain", "pod-template-hash"}
    body = review_for(fixture, namespace)
    first = decide_mutation(plans, _request(body))
    key = template_key(_request(body), 0, read)
    other = relabelled(body, UNREAD)
    assert decide_mutation(plans, _request(other)) == first
    assert template_key(_request(other), 0, read) == key
    if key is not None:  # a creation (an update is never kept)
        chained = relabelled(body, {"order-chain": "payments"})
        assert template_key(_request(chained), 0, read) != key
        assert template_key(_request(other), 0) != template_key(_request(body), 0)  # all labels


@settings(max_examples=100, deadline=None)
@given(
    body=reviews(),
    policy=st.sampled_from(list(POLICY_TEXTS)),
    label=st.sampled_from(sorted(UNREAD)),
    value=st.none() | st.text(max_size=8),
)
def test_the_decision_reads_no_other_label_of_a_generated_pod(
    body: dict[str, Any], policy: str, label: str, value: str | None
) -> None:
    body["request"]["operation"] = "CREATE"
    first = decide_mutation(PLANS[policy], _request(body))
    assert decide_mutation(PLANS[policy], _request(relabelled(body, {label: value}))) == first


@settings(max_examples=100, deadline=None)
@given(body=reviews(), policy=st.sampled_from(list(POLICY_TEXTS)), drop=st.booleans())
def test_the_decision_reads_no_identity_field_of_a_generated_pod(
    body: dict[str, Any], policy: str, drop: bool
) -> None:
    body["request"]["operation"] = "CREATE"
    first = decide_mutation(PLANS[policy], _request(body))
    assert decide_mutation(PLANS[policy], _request(another_pod(body, drop=drop))) == first


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(body=reviews(), policy=st.sampled_from(list(POLICY_TEXTS)))
def test_a_handler_keeping_verdicts_answers_every_pod_as_one_keeping_none(
    pairs: dict[str, tuple[AdmissionHandler, ...]], body: dict[str, Any], policy: str
) -> None:
    cached, uncached = pairs[policy]
    for review in (body, another_pod(body), another_pod(body, drop=True), body):
        assert mutate(cached, review) == mutate(uncached, review)


def test_the_pods_of_one_template_are_decided_once() -> None:
    handler = in_process_handler()
    first = review_for("pod-create-by-replicaset.json", "team-b")
    answers = [mutate(handler, first)]
    answers += [mutate(handler, another_pod(first, f"pod-{i}")) for i in range(3)]
    assert "patch" in answers[0] and all(a == answers[0] for a in answers)
    handler.metrics.flush()
    assert counted(handler, "decisions", result="miss") == 1
    assert counted(handler, "decisions", result="hit") == 3
    # The mutation counters still count every pod.
    assert counted(handler, "mutations", rule="budget:pool") == 4


class Relabelled:
    """Namespaces whose labels a test changes."""

    synced = True

    def __init__(self) -> None:
        self.by_name = copy.deepcopy(NAMESPACES)

    def labels(self, name: str) -> Mapping[str, str] | None:
        return self.by_name.get(name)

    def status(self) -> Any:
        raise NotImplementedError


def test_what_the_decision_reads_besides_the_pod_is_part_of_the_key(tmp_path: Path) -> None:
    namespaces = Relabelled()
    store = FakeStore(FakeCatalog())
    handler = in_process_handler(devices=WatchedDevices(store))
    handler.namespaces = namespaces
    body = review_for("pod-create-by-replicaset.json", "team-b")
    dept_b = mutate(handler, body)
    # The namespace moves to another tenant: dept-a's budget, not dept-b's.
    namespaces.by_name["team-b"] = {**NAMESPACES["team-b"], "tenant": "dept-a"}
    dept_a = mutate(handler, another_pod(body))
    assert dept_a != dept_b
    # The DRA catalogue moves: decided again.
    store.generation += 1
    assert mutate(handler, another_pod(body, "third")) == dept_a
    # Another user, another key (the infrastructure exemption reads it).
    body["request"]["userInfo"] = {"username": "bob", "groups": ["system:authenticated"]}
    mutate(handler, another_pod(body, "fourth"))
    handler.metrics.flush()
    assert counted(handler, "decisions", result="miss") == 4
    assert counted(handler, "decisions", result="hit") == 0
    # A new policy starts an empty cache.
    assert len(handler._decided[1]) == 4  # type: ignore[index]
    path = tmp_path / "policy.yaml"
    path.write_text(EXAMPLE_POLICY.read_text().replace("spec:\n", "spec:\n  mode: audit\n", 1))
    handler._on_policy(parse_policy(path.read_text()))
    assert len(handler._decided[1]) == 0  # type: ignore[index]
    (trace,) = patch_of(mutate(handler, another_pod(body, "fifth")))  # audit: the trace alone
    assert '"mode":"audit"' in orjson.dumps(trace).decode().replace("\\", "")


def test_a_namespace_not_known_yet_is_never_kept() -> None:
    handler = in_process_handler()
    body = review_for("pod-create-by-replicaset.json", "team-x")
    for uid in ("a", "b"):
        assert "namespace" in mutate(handler, another_pod(body, uid))["warnings"][0]
    handler.metrics.flush()
    assert counted(handler, "decisions", result="hit") == 0


def test_a_catalogue_that_has_not_synced_is_its_own_key() -> None:
    store = FakeStore(FakeCatalog(), synced=False)
    devices = WatchedDevices(store)
    request = _request(review_for("pod-create-by-replicaset.json", "team-b"))
    unsynced = template_key(request, devices.generation())
    store.synced = True
    assert unsynced is not None and template_key(request, devices.generation()) != unsynced
    assert template_key(request, None) is None  # a catalogue that cannot say: not kept
    # A request that found no catalogue is decided apart from one that found it, even when the
    # store has synced in between.
    handler = in_process_handler(devices=devices)
    found = handler._decision(request, keyed=True)
    with_store = dataclasses.replace(request, devices=store)  # type: ignore[arg-type]
    assert found[2] is False and handler._decision(with_store, keyed=True)[2] is False


def test_only_the_creation_of_a_pod_is_keyed() -> None:
    """Anything else the decision answers at once, and the cache neither counts nor keeps it."""
    request = _request(review_for("pod-create-by-replicaset.json", "team-b"))
    assert template_key(request, 0) is not None
    for other in (
        dataclasses.replace(request, operation="UPDATE"),
        dataclasses.replace(request, operation="DELETE"),
        dataclasses.replace(request, kind="Deployment"),
        dataclasses.replace(request, pod=None),
    ):
        assert template_key(other, 0) is None


def test_entries_are_bounded_the_least_recently_used_out_first() -> None:
    verdict = decide_mutation(
        in_process_handler().plans,
        _request(review_for("pod-create-by-replicaset.json", "team-b")),
    )
    kept = keep(verdict)
    cache = DecisionCache(3)
    for key in (b"a", b"b", b"c"):
        cache.put(key, kept)
    assert cache.get(b"a") is kept  # now the most recently used
    cache.put(b"d", kept)
    assert [k for k in (b"a", b"b", b"c", b"d") if cache.get(k)] == [b"a", b"c", b"d"]
    assert len(cache) == 3
    none = DecisionCache(0)
    none.put(b"a", kept)
    assert len(none) == 0 and none.get(b"a") is None
    with pytest.raises(ValueError, match="0 or more"):
        DecisionCache(-1)


def test_keys_differ_for_pods_the_decision_tells_apart() -> None:
    base = review_for("pod-create-with-affinity-gpu.json")
    keys = set()
    for label, toleration in itertools.product(("a", "b"), (None, {"operator": "Exists"})):
        body = copy.deepcopy(base)
        pod = body["request"]["object"]
        pod["metadata"]["labels"]["order-chain"] = label
        if toleration is not None:
            pod["spec"].setdefault("tolerations", []).append(toleration)
        keys.add(template_key(_request(body), 0))
    assert len(keys) == 4


def _padded(body: Mapping[str, Any], size: int, tag: str) -> dict[str, Any]:
    """`body`'s review with ~`size` bytes of annotations: another template per `tag`."""
    review = copy.deepcopy(dict(body))
    metadata = review["request"]["object"]["metadata"]
    metadata["annotations"] = {f"example.com/pad-{i}": "x" * 1000 for i in range(size // 1024)}
    metadata.setdefault("labels", {})["tag"] = tag
    return review


def test_the_key_is_a_digest_and_the_pod_is_never_kept() -> None:
    handler = in_process_handler()
    body = _padded(review_for("pod-create-by-replicaset.json", "team-b"), 64 * 1024, "a")
    key = template_key(_request(body), 0)
    assert key is not None and len(key) == 32
    mutate(handler, body)
    _plans, cache = handler._decided  # type: ignore[misc]
    assert len(cache) == 1 and cache.bytes < 32 * 1024  # the verdict, not the 64 KiB pod


def test_a_large_review_is_decided_every_time_and_never_kept() -> None:
    handler = in_process_handler()
    base = review_for("pod-create-by-replicaset.json", "team-b")
    large = _padded(base, LARGEST_KEYED_REVIEW, "a")
    assert len(orjson.dumps(large)) > LARGEST_KEYED_REVIEW
    uncached = in_process_handler(decision_cache_entries=0)
    for review in (large, another_pod(large)):
        assert mutate(handler, review) == mutate(uncached, review)
    handler.metrics.flush()
    assert counted(handler, "decisions") == 0  # not keyed: neither hit nor miss
    assert len(handler._decided[1]) == 0  # type: ignore[index]


def test_entries_are_bounded_in_bytes() -> None:
    verdict = decide_mutation(
        in_process_handler().plans,
        _request(review_for("pod-create-by-replicaset.json", "team-b")),
    )
    kept = keep(verdict)
    weight = kept.weight
    assert weight == verdict_bytes(verdict) and 1024 < weight < 64 * 1024
    # The patch is serialised once, as the answer carries it.
    assert kept.patch is not None and base64.b64decode(kept.patch) == orjson.dumps(verdict.ops)
    entry = weight + 2  # an entry weighs its key too: these are 2 bytes
    cache = DecisionCache(100, max_bytes=entry * 8 + entry // 2)
    for i in range(20):
        assert cache.put(b"%02d" % i, kept)
    assert len(cache) == 8 and cache.bytes == 8 * entry <= cache.max_bytes
    assert [i for i in range(20) if cache.get(b"%02d" % i)] == list(range(12, 20))
    # Replacing an entry does not count it twice.
    cache.put(b"19", kept)
    assert cache.bytes == 8 * entry
    # An entry heavier than an eighth of the budget is not kept at all.
    small = DecisionCache(100, max_bytes=entry * 8 - 8)
    assert not small.put(b"ab", kept) and len(small) == 0
    assert not DecisionCache(100, max_bytes=0).put(b"a", kept)
    with pytest.raises(ValueError, match="0 or more"):
        DecisionCache(1, max_bytes=-1)
