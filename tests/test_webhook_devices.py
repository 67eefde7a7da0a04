"""The webhook classifies DRA pods from its in-memory catalogue (webhook/devices.py): a pod
asking for GPUs by a claim template is a GPU pod once the catalogue knows the template; before
that (not synced, or not seen yet) it is steered without any gate that could keep it off the
GPU nodes, and the answer says so in a warning."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path
from typing import Any

import jsonpatch
import orjson
import pytest
import yaml

from steer.core.mutation import read_trace
from tests.conftest import EXAMPLE_POLICY
from tests.dra_support import CLAIM_POD, DOUBLE_GPU_TEMPLATE, FakeCatalog, FakeStore
from tests.webhook_harness import counted, in_process_handler, review_for
from webhook.devices import NoDevices, WatchedDevices
from webhook.handler import AdmissionHandler

NS = "team-a"  # dept-a, opted in (tests/webhook_harness.py)
UNRESERVED_GPU = "kube-steer.github.io/unreserved-gpu"
TEMPLATE = copy.deepcopy(DOUBLE_GPU_TEMPLATE)
TEMPLATE["metadata"]["namespace"] = NS


@pytest.fixture(scope="module")
def require_policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example policy with GPU nodes kept for GPU pods outright (`reserveNodes: require`):
    every other pod gets the `unreserved-gpu` gate, closed on GPU nodes."""
    doc: dict[str, Any] = yaml.safe_load(EXAMPLE_POLICY.read_text())
    doc["spec"]["podClasses"][0]["reserveNodes"] = "require"
    path = tmp_path_factory.mktemp("policy") / "policy.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _review(pod: dict[str, Any] = CLAIM_POD, **changes: Any) -> bytes:
    body = review_for("pod-create-user-mutating.json", namespace=NS, **changes)
    obj = copy.deepcopy(pod)
    obj["metadata"]["namespace"] = NS
    body["request"]["object"] = obj
    return orjson.dumps(body)


def _answer(handler: AdmissionHandler, body: bytes) -> tuple[dict[str, Any], dict[str, Any]]:
    """The response, and the pod the patch makes."""
    outcome = handler.handle("mutate", body)
    assert outcome.status == 200, outcome.body
    response: dict[str, Any] = orjson.loads(outcome.body)["response"]
    pod = json.loads(body)["request"]["object"]
    if "patch" in response:
        pod = jsonpatch.JsonPatch(json.loads(base64.b64decode(response["patch"]))).apply(pod)
    return response, pod


def _synced_gauge(handler: AdmissionHandler) -> float:
    (family,) = handler.metrics.device_catalog_synced.collect()
    return float(family.samples[0].value)


def _requests(pod: dict[str, Any]) -> dict[str, Any]:
    return dict(pod["spec"]["containers"][0].get("resources", {}).get("requests") or {})


def test_a_known_claim_template_makes_a_gpu_pod(require_policy: Path) -> None:
    store = FakeStore(FakeCatalog.of(TEMPLATE))
    handler = in_process_handler(require_policy, WatchedDevices(store))
    response, pod = _answer(handler, _review())
    assert "warnings" not in response
    trace = read_trace(pod, "kube-steer.github.io/trace")
    assert trace is not None and "notes" not in trace
    # The GPU class's composite, and no gate keeping it off GPU nodes.
    assert "kube-steer.github.io/score-class-gpu" in json.dumps(pod["spec"]["affinity"])
    assert UNRESERVED_GPU not in _requests(pod)
    assert pod["spec"]["schedulerName"] == "steer-binpack"  # the gpu class's profile
    assert store.reads == 2  # the one template it names: its classes and its device count


def test_an_unknown_claim_template_is_steered_soundly_and_said(require_policy: Path) -> None:
    for devices in (WatchedDevices(FakeStore(FakeCatalog())), NoDevices()):
        handler = in_process_handler(require_policy, devices)
        response, pod = _answer(handler, _review())
        assert UNRESERVED_GPU not in _requests(pod)  # it may need a GPU node
        (warning,) = response["warnings"]
        assert warning.startswith(
            "kube-steer: claim template double-gpu not known yet: classified by requests only"
        )
        trace = read_trace(pod, "kube-steer.github.io/trace")
        assert trace is not None and trace["notes"] == [
            "claim template double-gpu not known yet: classified by requests only"
        ]
        assert counted(handler, "device_doubts") == 1
        # Reinvoked, the pod is the same.
        again = _answer(handler, _review(pod))[1]
        assert again == pod


def test_before_the_catalogue_syncs_a_claim_is_not_known(require_policy: Path) -> None:
    store = FakeStore(FakeCatalog.of(TEMPLATE), synced=False)
    devices = WatchedDevices(store)
    handler = in_process_handler(require_policy, devices)
    response, pod = _answer(handler, _review())
    assert "has not synced yet" in response["warnings"][0]
    assert UNRESERVED_GPU not in _requests(pod)
    assert store.reads == 0  # nothing is read from a store that has not synced
    ready, detail = handler.readiness()
    assert ready  # the catalogue is not part of readiness: its absence is steered around
    assert detail["devices"]["watched"] is True and detail["devices"]["synced"] is False
    assert [k["kind"] for k in detail["devices"]["kinds"]] == [
        "deviceclasses",
        "resourceclaims",
        "resourceclaimtemplates",
    ]
    handler.publish_status()
    assert _synced_gauge(handler) == 0
    store.synced = True
    handler.publish_status()
    assert _synced_gauge(handler) == 1
    response, pod = _answer(handler, _review())
    assert "warnings" not in response


def test_pods_without_claims_never_read_the_catalogue(require_policy: Path) -> None:
    store = FakeStore(FakeCatalog.of(TEMPLATE))
    handler = in_process_handler(require_policy, WatchedDevices(store))
    body = orjson.dumps(review_for("pod-create-user-mutating.json", namespace=NS))
    response, pod = _answer(handler, body)
    assert "warnings" not in response
    assert _requests(pod)[UNRESERVED_GPU] == "1"  # a plain pod keeps off the GPU nodes
    assert store.reads == 0


def test_a_malformed_claim_list_is_named_and_the_pod_left_alone(require_policy: Path) -> None:
    handler = in_process_handler(require_policy, NoDevices())
    pod = copy.deepcopy(CLAIM_POD)
    pod["spec"]["resourceClaims"] = [{"name": "x", "resourceClaimTemplateName": ["double-gpu"]}]
    response, _ = _answer(handler, _review(pod))
    assert "patch" not in response
    assert "spec.resourceClaims[0].resourceClaimTemplateName" in response["warnings"][0]
    assert counted(handler, "uninterpretable", reason="spec.resourceClaims") == 1
