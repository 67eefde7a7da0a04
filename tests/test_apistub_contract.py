"""Replays every golden body captured from a real kube-apiserver against the stand-in.

Each fixture file has one case below; a new fixture without a case fails, so the stand-in cannot
silently fall behind what the real server was shown to do. Objects are compared without the
fields a server makes up (uid, resourceVersion, timestamps, managedFields); error bodies are
compared whole.
"""

from __future__ import annotations

import base64
import copy
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import requests

from kits.apistub import ApiStub
from tests.apistub_fixtures import API_FIXTURES, load_api_fixture, seed_fixture_workers

VOLATILE = {"uid", "resourceVersion", "creationTimestamp", "managedFields"}
NODE_1 = "/api/v1/nodes/worker-1"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
STRATEGIC = "application/strategic-merge-patch+json"


def stable(value: Any) -> Any:
    """`value` without the fields a server generates (in objects nested at any depth)."""
    if isinstance(value, dict):
        return {k: stable(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [stable(v) for v in value]
    return value


class Cluster:
    """The stand-in, seeded as the capture cluster was, spoken to over plain HTTP."""

    def __init__(self, stub: ApiStub) -> None:
        self.stub = stub
        self.http = requests.Session()
        self.http.trust_env = False

    def call(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body)
        headers = {"Content-Type": content_type} if data is not None else {}
        reply = self.http.request(method, self.stub.url + path, data=data, headers=headers)
        return reply.status_code, reply.json()

    def patch(self, path: str, body: Any, content_type: str = STRATEGIC) -> tuple[int, Any]:
        return self.call("PATCH", path, body, content_type)


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    stub = ApiStub.start()
    seed_fixture_workers(stub)
    try:
        yield Cluster(stub)
    finally:
        stub.stop()


def _lease_create(c: Cluster, fx: Any) -> None:
    code, body = c.call("POST", LEASES, fx["request"])
    assert code == fx["status_code"] == 201
    assert stable(body) == stable(fx["body"])


def _lease_update_stale(c: Cluster, fx: Any) -> None:
    created = c.call("POST", LEASES, load_api_fixture("lease-create.json")["request"])[1]
    renewed = copy.deepcopy(created)
    renewed["spec"]["renewTime"] = "2026-11-30T04:00:10.000000Z"
    assert c.call("PUT", f"{LEASES}/kube-steer-scorer", renewed)[0] == 200
    takeover = copy.deepcopy(created)  # still carries the first resourceVersion
    takeover["spec"]["holderIdentity"] = "scorer-1"
    code, body = c.call("PUT", f"{LEASES}/kube-steer-scorer", takeover)
    assert code == fx["status_code"] == 409
    assert body == fx["body"]


def _namespace_list(c: Cluster, fx: Any) -> None:
    c.stub.add_namespace("team-a", {"capture": "on", "tenant": "dept-a"})
    c.stub.add_namespace("team-b")
    code, body = c.call("GET", "/api/v1/namespaces")
    assert code == 200
    assert stable(body) == stable(fx["body"])


def _namespace_watch(c: Cluster, fx: Any) -> None:
    # The system namespaces were the first writes on both clusters, so a watch from rv 1
    # replays their creation in the same order.
    reply = c.http.get(
        c.stub.url + "/api/v1/namespaces",
        params={"watch": "1", "resourceVersion": "1", "timeoutSeconds": "1"},
        stream=True,
    )
    lines = reply.iter_lines()
    events = [json.loads(next(lines)) for _ in fx["events"]]
    reply.close()
    assert stable(events) == stable(fx["events"])


def _node_apply_ssa(c: Cluster, fx: Any) -> None:
    path = "/api/v1/nodes/worker-3?fieldManager=kube-steer-scorer"
    code, body = c.patch(path, fx["request"], "application/apply-patch+yaml")
    assert code == fx["status_code"] == 200
    assert body["metadata"]["labels"] == fx["body"]["labels"]
    applied = [m for m in body["metadata"]["managedFields"] if m["operation"] == "Apply"]
    expected = fx["body"]["managedFields"][0]
    assert [(m["manager"], m["fieldsV1"]) for m in applied] == [
        (expected["manager"], expected["fieldsV1"])
    ]


def _node_get(c: Cluster, fx: Any) -> None:
    code, body = c.call("GET", NODE_1)
    assert code == 200
    assert stable(body) == stable(fx["body"])


def _node_list_limit(c: Cluster, fx: Any) -> None:
    code, body = c.call("GET", "/api/v1/nodes?limit=2")
    assert code == 200
    assert stable(body["items"]) == stable(fx["body"]["items"])
    meta, want = body["metadata"], fx["body"]["metadata"]
    assert meta["remainingItemCount"] == want["remainingItemCount"] == 1

    def token(raw: str) -> Any:
        decoded = json.loads(base64.urlsafe_b64decode(raw + "=" * (-len(raw) % 4)))
        return {k: v for k, v in decoded.items() if k != "rv"}

    assert token(meta["continue"]) == token(want["continue"])
    code, rest = c.call("GET", f"/api/v1/nodes?limit=2&continue={meta['continue']}")
    assert [i["metadata"]["name"] for i in rest["items"]] == ["worker-3"]
    assert "continue" not in rest["metadata"]


def _invalid_label(c: Cluster, fx: Any) -> None:
    before = c.stub.get("nodes", "worker-1")
    code, body = c.patch(NODE_1, fx["request"])
    assert code == fx["status_code"] == 422
    assert body == fx["body"]
    assert c.stub.get("nodes", "worker-1") == before


def _label_delete_merge(c: Cluster, fx: Any) -> None:
    c.patch(NODE_1, load_api_fixture("node-patch-labels-strategic.json")["request"])
    code, body = c.patch(NODE_1, fx["request"], "application/merge-patch+json")
    assert code == fx["status_code"] == 200
    assert body["metadata"]["labels"] == fx["body"]


def _labels_strategic(c: Cluster, fx: Any) -> None:
    code, body = c.patch(NODE_1, fx["request"])
    assert code == fx["status_code"] == 200
    assert stable(body) == stable(fx["body"])


def _taints_strategic(c: Cluster, fx: Any) -> None:
    other = {"key": "example.com/maintenance", "value": "true", "effect": "NoSchedule"}
    c.patch(NODE_1, {"spec": {"taints": [other]}})
    code, body = c.patch(NODE_1, fx["request"])
    assert code == fx["status_code"] == 200
    assert body["spec"] == fx["body"]  # the other taint is gone: the list was replaced


def _jsonpatch_fresh(c: Cluster, fx: Any) -> tuple[list[Any], Any]:
    # The captured `test` names rv "340", the node's version on the capture cluster. Versions
    # here start elsewhere, so the guard is pointed at the live version instead.
    ops = copy.deepcopy(fx["request"])
    ops[0]["value"] = c.stub.get("nodes", "worker-1")["metadata"]["resourceVersion"]
    code, body = c.patch(NODE_1, ops, "application/json-patch+json")
    assert code == 200
    return ops, body


def _jsonpatch_test_rv(c: Cluster, fx: Any) -> None:
    _ops, body = _jsonpatch_fresh(c, fx)
    assert fx["status_code"] == 200
    assert body["spec"] == fx["body"]


def _jsonpatch_stale_rv(c: Cluster, fx: Any) -> None:
    # As captured: the same patch sent again, after the first one moved the version on.
    ops, _body = _jsonpatch_fresh(c, load_api_fixture("node-patch-taints-jsonpatch-test-rv.json"))
    before = c.stub.get("nodes", "worker-1")
    code, body = c.patch(NODE_1, ops, "application/json-patch+json")
    assert code == fx["status_code"] == 422
    assert body == fx["body"]
    assert c.stub.get("nodes", "worker-1") == before


def _put_stale(c: Cluster, fx: Any) -> None:
    stale = c.stub.get("nodes", "worker-1")
    c.patch(NODE_1, {"metadata": {"labels": {"kube-steer.github.io/score": "80"}}})
    stale["metadata"]["labels"]["kube-steer.github.io/score"] = "10"
    code, body = c.call("PUT", NODE_1, stale)
    assert code == fx["status_code"] == 409
    assert body == fx["body"]


CASES: dict[str, Callable[[Cluster, Any], None]] = {
    "lease-create.json": _lease_create,
    "lease-update-stale-409.json": _lease_update_stale,
    "namespace-list.json": _namespace_list,
    "namespace-watch-events.json": _namespace_watch,
    "node-apply-labels-ssa.json": _node_apply_ssa,
    "node-get.json": _node_get,
    "node-list-limit2.json": _node_list_limit,
    "node-patch-invalid-label-key-syntax-422.json": _invalid_label,
    "node-patch-invalid-label-key-too-long-422.json": _invalid_label,
    "node-patch-invalid-label-value-422.json": _invalid_label,
    "node-patch-label-delete-merge.json": _label_delete_merge,
    "node-patch-labels-strategic.json": _labels_strategic,
    "node-patch-taints-jsonpatch-stale-rv.json": _jsonpatch_stale_rv,
    "node-patch-taints-jsonpatch-test-rv.json": _jsonpatch_test_rv,
    "node-patch-taints-strategic-replaces-list.json": _taints_strategic,
    "node-put-stale-resourceversion-409.json": _put_stale,
}


def test_fixture_directory_is_present() -> None:
    assert API_FIXTURES.is_dir(), f"golden fixtures missing: expected them in {API_FIXTURES}"


@pytest.mark.parametrize("name", sorted(p.name for p in API_FIXTURES.glob("*.json")))
def test_replays_like_the_real_apiserver(cluster: Cluster, name: str) -> None:
    case = CASES.get(name)
    assert case is not None, f"{name}: no replay case; add one to CASES in {__name__}"
    case(cluster, load_api_fixture(name))
