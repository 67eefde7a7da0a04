"""The admission handler never fails a request: random damage to a pod still gets an answer."""

from __future__ import annotations

import base64
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry

from kits.apistub import ApiStub
from steer.adapters.kube import make_api_client
from steer.adapters.policy_file import PolicyWatcher
from tests.conftest import EXAMPLE_POLICY
from tests.webhook_harness import NAMESPACES, review_for
from webhook.handler import AdmissionHandler
from webhook.metrics import UNINTERPRETABLE_REASONS, WebhookMetrics
from webhook.namespaces import NamespaceCache


@pytest.fixture(scope="module")
def handler(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AdmissionHandler]:
    stub = ApiStub.start()
    for name, labels in NAMESPACES.items():
        stub.add_namespace(name, labels)
    kubeconfig = str(stub.kubeconfig(tmp_path_factory.mktemp("kube") / "kubeconfig"))
    cache = NamespaceCache(lambda: make_api_client(kubeconfig))
    cache.start()
    assert cache.wait_synced(10)
    yield AdmissionHandler(
        PolicyWatcher(str(EXAMPLE_POLICY)), cache, WebhookMetrics(CollectorRegistry())
    )
    cache.stop()
    stub.stop()


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-5, 5) | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)
# Places a malformed (or merely unusual) value could sit in a pod.
PATHS = [
    ("metadata",),
    ("metadata", "labels"),
    ("metadata", "annotations"),
    ("spec",),
    ("spec", "affinity"),
    ("spec", "affinity", "nodeAffinity"),
    ("spec", "affinity", "nodeAffinity", "requiredDuringSchedulingIgnoredDuringExecution"),
    (
        "spec",
        "affinity",
        "nodeAffinity",
        "requiredDuringSchedulingIgnoredDuringExecution",
        "nodeSelectorTerms",
    ),
    ("spec", "affinity", "nodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"),
    ("spec", "tolerations"),
    ("spec", "topologySpreadConstraints"),
    ("spec", "schedulerName"),
    ("spec", "containers"),
    ("spec", "initContainers"),
    ("spec", "resources"),
]


def put(doc: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    node: Any = doc
    for key in path[:-1]:
        if not isinstance(node, dict):
            return
        node = node.setdefault(key, {})
    if isinstance(node, dict):
        node[path[-1]] = value


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    fixture=st.sampled_from(["pod-create-with-affinity-gpu.json", "pod-create-by-replicaset.json"]),
    namespace=st.sampled_from(["team-a", "team-b", "plain"]),
    damage=st.lists(st.tuples(st.sampled_from(PATHS), json_values), max_size=3),
)
def test_any_pod_gets_an_answer_and_patches_apply(
    handler: AdmissionHandler,
    fixture: str,
    namespace: str,
    damage: list[tuple[tuple[str, ...], Any]],
) -> None:
    body = review_for(fixture, namespace)
    pod = body["request"]["object"]
    for path, value in damage:
        put(pod, path, value)
    raw = json.dumps(body).encode()
    for endpoint in ("mutate", "validate", "validate-security"):
        outcome = handler.handle(endpoint, raw)  # type: ignore[arg-type]
        assert outcome.status == 200, (endpoint, outcome.body)
        response = orjson.loads(outcome.body)["response"]
        assert response["uid"] == body["request"]["uid"]
        if endpoint == "mutate":
            assert response["allowed"] is True
            if "patch" in response:
                ops = json.loads(base64.b64decode(response["patch"]))
                jsonpatch.JsonPatch(ops).apply(copy.deepcopy(pod))
        elif not response["allowed"]:
            message = response["status"]["message"]
            if outcome.result == "denied-uninterpretable":
                assert namespace != "plain", message  # a pod in no tenant is never refused so
                assert re.match(r"spec[\w.\[\]]* cannot be read, so no rule of tenant ", message)
            else:
                assert re.match(r"(\d+ policy violations: )?rule [a-z-]+: ", message), message
        elif outcome.result == "uninterpretable":
            # Only a pod in no tenant passes validation unread (with a warning saying so).
            assert namespace == "plain", response
            assert "pod not validated" in response["warnings"][0], response


def test_unexpected_failure_in_mutation_still_allows(
    handler: AdmissionHandler, tmp_path: Path
) -> None:
    body = review_for("pod-create-user-mutating.json")
    plans = handler._decided
    handler._decided = None  # a broken invariant: the handler must still answer
    try:
        outcome = handler.handle("mutate", json.dumps(body).encode())
        assert outcome.status == 200 and outcome.result == "error"
        assert orjson.loads(outcome.body)["response"]["warnings"] == [
            "kube-steer: internal error, pod not steered (see the webhook log)"
        ]
        outcome = handler.handle("validate", json.dumps(body).encode())
        assert outcome.status == 500
        assert orjson.loads(outcome.body) == {
            "error": {
                "reason": "internal-error",
                "message": "the webhook failed on this request; see its log",
            }
        }
    finally:
        handler._decided = plans


def test_uninterpretable_reasons_are_a_fixed_set_whatever_the_container_index(
    handler: AdmissionHandler,
) -> None:
    """A label per container index would be a new series for every index a pod can have."""
    for index in range(12):
        body = review_for("pod-create-by-replicaset.json", "team-b")
        containers = body["request"]["object"]["spec"]["containers"]
        containers += [copy.deepcopy(containers[0]) for _ in range(index)]
        containers[index]["resources"] = {"limits": {"cpu": "lots"}}
        mutate = handler.handle("mutate", json.dumps(body).encode())
        assert mutate.result == "uninterpretable", mutate.body
        assert f"spec.containers[{index}]" in orjson.loads(mutate.body)["response"]["warnings"][0]
        # team-b is a tenant's namespace: validation denies the pod, naming the field.
        validate = handler.handle("validate", json.dumps(body).encode())
        assert validate.result == "denied-uninterpretable", validate.body
        message = orjson.loads(validate.body)["response"]["status"]["message"]
        assert message.startswith(f"spec.containers[{index}].resources.limits.cpu cannot be read")
    reasons = {
        sample.labels["reason"]
        for family in handler.metrics.uninterpretable.collect()
        for sample in family.samples
    }
    assert reasons <= UNINTERPRETABLE_REASONS
    assert "spec.containers" in reasons
    assert not any("[" in reason for reason in reasons)
