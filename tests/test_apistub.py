"""The API stand-in as the services meet it: the real `kubernetes` client over HTTP(S),
configured by a kubeconfig file."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from certs.pki import WebhookIdentity, issue_webhook_certs
from kits.apistub import ApiStub
from kits.apistub.__main__ import main as runner_main
from kits.apistub.synthetic import seed_nodes, synthetic_node
from kits.waiting import wait_until
from tests.apistub_fixtures import client_for, load_api_fixture

STRATEGIC = "application/strategic-merge-patch+json"


@pytest.fixture
def apistub() -> Iterator[ApiStub]:
    with ApiStub.start() as stub:
        yield stub


@pytest.fixture
def kube_client(apistub: ApiStub, tmp_path: Path) -> Iterator[client.ApiClient]:
    api_client = client_for(apistub, tmp_path / "kubeconfig")
    yield api_client
    api_client.close()


@pytest.fixture
def core(apistub: ApiStub, kube_client: client.ApiClient) -> client.CoreV1Api:
    seed_nodes(apistub, 7)
    return client.CoreV1Api(kube_client)


def _error_body(exc: ApiException) -> Any:
    return json.loads(exc.body)


def _labels(stub: ApiStub, node: str) -> dict[str, str]:
    labels: dict[str, str] = stub.get("nodes", node)["metadata"]["labels"]
    return labels


# ---------------------------------------------------------------- lists


def test_list_pages_through_every_node_with_limit_and_continue(core: client.CoreV1Api) -> None:
    names, token, remaining = [], None, []
    while True:
        page = core.list_node(limit=3, _continue=token)
        names += [n.metadata.name for n in page.items]
        remaining.append(page.metadata.remaining_item_count)
        token = page.metadata._continue
        if not token:
            break
    assert names == sorted(f"worker-{i}" for i in range(1, 8))
    assert remaining == [4, 1, None]


def test_label_selector_supports_equality_and_existence(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    apistub.modify("nodes", "worker-2", _with_label("kube-steer.github.io/score", "90"))
    zone_a = core.list_node(label_selector="topology.kubernetes.io/zone=zone-a")
    assert [n.metadata.name for n in zone_a.items] == ["worker-1", "worker-4", "worker-7"]
    scored = core.list_node(label_selector="kube-steer.github.io/score,kubernetes.io/os==linux")
    assert [n.metadata.name for n in scored.items] == ["worker-2"]
    unscored = core.list_node(
        label_selector="!kube-steer.github.io/score,topology.kubernetes.io/zone!=zone-a"
    )
    assert [n.metadata.name for n in unscored.items] == ["worker-3", "worker-5", "worker-6"]


def _with_label(key: str, value: str) -> Any:
    def change(obj: dict[str, Any]) -> dict[str, Any]:
        obj["metadata"].setdefault("labels", {})[key] = value
        return obj

    return change


# --------------------------------------------------------------- writes


def test_client_patches_a_dict_body_as_strategic_merge(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    apistub.clear_requests()
    node = core.patch_node(
        "worker-1", {"metadata": {"labels": {"kube-steer.github.io/score": "80"}}}
    )
    assert node.metadata.labels["kube-steer.github.io/score"] == "80"
    assert node.metadata.labels["kubernetes.io/hostname"] == "worker-1"  # merged, not replaced
    [request] = apistub.requests
    assert (request.method, request.path) == ("PATCH", "/api/v1/nodes/worker-1")
    assert request.content_type == STRATEGIC
    assert apistub.count("PATCH", "/api/v1/nodes") == 1


def test_invalid_label_value_is_a_422_naming_the_value(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    with pytest.raises(ApiException) as caught:
        core.patch_node("worker-1", {"metadata": {"labels": {"kube-steer.github.io/score": "8 0"}}})
    assert caught.value.status == 422
    body = _error_body(caught.value)
    assert body["message"].startswith(
        'Node "worker-1" is invalid: metadata.labels: Invalid value: "8 0": a valid label'
    )
    assert "kube-steer.github.io/score" not in _labels(apistub, "worker-1")


def test_bad_taint_effect_is_a_422(core: client.CoreV1Api) -> None:
    taint = {"key": "kube-steer.github.io/hot", "value": "true", "effect": "Sometimes"}
    with pytest.raises(ApiException) as caught:
        core.patch_node("worker-1", {"spec": {"taints": [taint]}})
    assert caught.value.status == 422
    assert _error_body(caught.value)["message"] == (
        'Node "worker-1" is invalid: spec.taints[0].effect: Unsupported value: "Sometimes": '
        'supported values: "NoSchedule", "PreferNoSchedule", "NoExecute"'
    )


def test_stale_put_is_a_409_and_changes_nothing(apistub: ApiStub, core: client.CoreV1Api) -> None:
    mine = core.read_node("worker-1")
    apistub.modify("nodes", "worker-1", _with_label("example.com/owner", "someone-else"))
    mine.metadata.labels["kube-steer.github.io/score"] = "70"
    with pytest.raises(ApiException) as caught:
        core.replace_node("worker-1", mine)
    assert caught.value.status == 409
    assert _error_body(caught.value)["reason"] == "Conflict"
    assert "kube-steer.github.io/score" not in _labels(apistub, "worker-1")
    fresh = core.read_node("worker-1")
    fresh.metadata.labels["kube-steer.github.io/score"] = "70"
    updated = core.replace_node("worker-1", fresh)
    assert updated.metadata.labels["example.com/owner"] == "someone-else"
    assert int(updated.metadata.resource_version) > int(fresh.metadata.resource_version)


def test_no_op_patch_keeps_the_resource_version(apistub: ApiStub, core: client.CoreV1Api) -> None:
    body = {"metadata": {"labels": {"kube-steer.github.io/score": "80"}}}
    first = core.patch_node("worker-1", body)
    cluster_rv = apistub.resource_version
    again = core.patch_node("worker-1", body)
    assert again.metadata.resource_version == first.metadata.resource_version
    assert apistub.resource_version == cluster_rv


def test_json_patch_guarded_by_resource_version(core: client.CoreV1Api) -> None:
    rv = core.read_node("worker-1").metadata.resource_version
    taint = {
        "key": "kube-steer.github.io/energy-emergency",
        "value": "true",
        "effect": "PreferNoSchedule",
    }
    ops = [
        {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
        {"op": "add", "path": "/spec/taints", "value": [taint]},
    ]
    node = core.patch_node("worker-1", ops)  # a list body goes out as a JSON Patch
    assert [t.key for t in node.spec.taints] == ["kube-steer.github.io/energy-emergency"]
    with pytest.raises(ApiException) as caught:
        core.patch_node("worker-1", ops)
    assert caught.value.status == 422
    assert (
        _error_body(caught.value)
        == load_api_fixture("node-patch-taints-jsonpatch-stale-rv.json")["body"]
    )


def test_merge_patch_null_deletes_a_label(apistub: ApiStub, core: client.CoreV1Api) -> None:
    core.patch_node("worker-1", {"metadata": {"labels": {"kube-steer.github.io/score": "80"}}})
    core.patch_node(
        "worker-1",
        {"metadata": {"labels": {"kube-steer.github.io/score": None}}},
        _content_type="application/merge-patch+json",
    )
    assert "kube-steer.github.io/score" not in _labels(apistub, "worker-1")


def test_server_side_apply_owns_the_labels_it_applied(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    def apply(labels: dict[str, str]) -> Any:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": "worker-1", "labels": labels},
        }
        return core.patch_node(
            "worker-1",
            body,
            field_manager="kube-steer-scorer",
            force=True,
            _content_type="application/apply-patch+yaml",
        )

    apply({"kube-steer.github.io/score": "40", "kube-steer.github.io/score-class-gpu": "20"})
    assert apistub.requests[-1].content_type == "application/apply-patch+yaml"
    applied = apply({"kube-steer.github.io/score": "50"})
    assert apply({"kube-steer.github.io/score": "50"}).metadata.resource_version == (
        applied.metadata.resource_version
    )  # the same apply again is no write
    labels = _labels(apistub, "worker-1")
    assert labels["kube-steer.github.io/score"] == "50"
    assert (
        "kube-steer.github.io/score-class-gpu" not in labels
    )  # applied before, left out now: removed
    assert labels["kubernetes.io/hostname"] == "worker-1"  # not ours: untouched


def test_status_subresource_changes_only_status(apistub: ApiStub, core: client.CoreV1Api) -> None:
    core.patch_node_status(
        "worker-1",
        {"status": {"allocatable": {"cpu": "3"}}, "metadata": {"labels": {"x": "y"}}},
    )
    node = apistub.get("nodes", "worker-1")
    assert node["status"]["allocatable"]["cpu"] == "3"
    assert "x" not in node["metadata"]["labels"]
    core.patch_node("worker-1", {"status": {"allocatable": {"cpu": "1"}}})
    assert apistub.get("nodes", "worker-1")["status"]["allocatable"]["cpu"] == "3"


def test_missing_node_is_a_404_status(core: client.CoreV1Api) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_node("worker-99")
    assert caught.value.status == 404
    assert _error_body(caught.value)["details"] == {"name": "worker-99", "kind": "nodes"}


def test_create_and_delete_node(apistub: ApiStub, core: client.CoreV1Api) -> None:
    created = core.create_node(synthetic_node("worker-8", zone="zone-b"))
    assert created.metadata.uid and created.metadata.creation_timestamp
    with pytest.raises(ApiException) as caught:
        core.create_node(synthetic_node("worker-8"))
    assert (caught.value.status, _error_body(caught.value)["reason"]) == (409, "AlreadyExists")
    status = core.delete_node("worker-8")  # typed as `object`: the Status arrives as a dict
    assert status["status"] == "Success"
    with pytest.raises(KeyError):
        apistub.get("nodes", "worker-8")


# -------------------------------------------------------------- watches


def test_watch_replays_added_and_modified_from_a_resource_version(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    start = core.list_node().metadata.resource_version
    core.patch_node("worker-3", {"metadata": {"labels": {"kube-steer.github.io/score": "60"}}})
    core.create_node(synthetic_node("worker-8"))
    core.delete_node("worker-8")
    seen = []
    w = watch.Watch()
    for event in w.stream(core.list_node, resource_version=start, timeout_seconds=10):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 3:
            w.stop()
    assert seen == [("MODIFIED", "worker-3"), ("ADDED", "worker-8"), ("DELETED", "worker-8")]


def test_watch_without_resource_version_lists_then_follows(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    for event in w.stream(core.list_node, label_selector="topology.kubernetes.io/zone=zone-c"):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 2:  # the initial state is in: make a change the selector sees
            apistub.modify(
                "nodes", "worker-3", _with_label("topology.kubernetes.io/zone", "zone-a")
            )
        if len(seen) == 3:
            w.stop()
    assert seen == [("ADDED", "worker-3"), ("ADDED", "worker-6"), ("DELETED", "worker-3")]


def test_watch_from_an_expired_resource_version_gets_410(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    old = core.list_node().metadata.resource_version
    core.patch_node("worker-1", {"metadata": {"labels": {"kube-steer.github.io/score": "10"}}})
    apistub.expire_watch_history()
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(core.list_node, resource_version=old, timeout_seconds=10))
    assert caught.value.status == 410
    assert "Expired" in caught.value.reason
    # The recovery the client must perform: re-list, then watch from the list's version.
    fresh = core.list_node().metadata.resource_version
    core.patch_node("worker-1", {"metadata": {"labels": {"kube-steer.github.io/score": "20"}}})
    w = watch.Watch()
    for event in w.stream(core.list_node, resource_version=fresh, timeout_seconds=10):
        assert (event["type"], event["object"].metadata.labels["kube-steer.github.io/score"]) == (
            "MODIFIED",
            "20",
        )
        w.stop()


def test_event_window_is_bounded(tmp_path: Path) -> None:
    with ApiStub.start(watch_window=3) as stub:
        seed_nodes(stub, 1)
        start = str(stub.resource_version)
        for score in ("1", "2", "3", "4"):
            stub.modify("nodes", "worker-1", _with_label("kube-steer.github.io/score", score))
        api_client = client_for(stub, tmp_path / "kubeconfig")
        core = client.CoreV1Api(api_client)
        with pytest.raises(ApiException) as caught:
            list(watch.Watch().stream(core.list_node, resource_version=start, timeout_seconds=5))
        assert caught.value.status == 410
        api_client.close()


def test_drop_watches_ends_open_streams(apistub: ApiStub, core: client.CoreV1Api) -> None:
    rv = core.list_node().metadata.resource_version
    ended = threading.Event()

    def follow() -> None:
        for _event in watch.Watch().stream(core.list_node, resource_version=rv, timeout_seconds=60):
            pass
        ended.set()

    watcher = threading.Thread(target=follow, daemon=True)
    apistub.clear_requests()
    watcher.start()
    wait_until(
        "the client's watch request is seen",
        lambda: any("watch=" in r.query for r in apistub.requests),
        timeout=5,
        interval=0.01,
    )
    apistub.drop_watches()
    watcher.join(timeout=10)
    assert ended.is_set()


# --------------------------------------------------------------- faults


def test_injected_write_failures_then_recovery(apistub: ApiStub, core: client.CoreV1Api) -> None:
    apistub.fail_next_writes(1, status=409, path_contains="/nodes/worker-1")
    apistub.fail_next_writes(1, status=500)
    body = {"metadata": {"labels": {"kube-steer.github.io/score": "30"}}}
    with pytest.raises(ApiException) as conflict:
        core.patch_node("worker-1", body)
    with pytest.raises(ApiException) as internal:
        core.patch_node("worker-2", body)
    assert (conflict.value.status, internal.value.status) == (409, 500)
    assert _error_body(conflict.value)["message"].startswith(
        'Operation cannot be fulfilled on nodes "worker-1"'
    )
    assert "kube-steer.github.io/score" not in _labels(apistub, "worker-1")
    core.read_node("worker-1")  # reads are never failed
    core.patch_node("worker-1", body)
    assert _labels(apistub, "worker-1")["kube-steer.github.io/score"] == "30"
    assert [r.status for r in apistub.requests if r.method == "PATCH"] == [409, 500, 200]


def test_delay_makes_a_short_client_timeout_fire(apistub: ApiStub, core: client.CoreV1Api) -> None:
    apistub.delay(0.3)
    with pytest.raises(urllib3.exceptions.MaxRetryError):
        core.read_node("worker-1", _request_timeout=0.05)
    apistub.delay(0)
    assert core.read_node("worker-1").metadata.name == "worker-1"


# ------------------------------------------------------ leases, namespaces, pods


def _lease(holder: str, rv: str | None = None, transitions: int = 0) -> client.V1Lease:
    return client.V1Lease(
        metadata=client.V1ObjectMeta(name="kube-steer-scorer", resource_version=rv),
        spec=client.V1LeaseSpec(
            holder_identity=holder, lease_duration_seconds=15, lease_transitions=transitions
        ),
    )


def test_lease_create_conflicts_and_stale_takeover(kube_client: client.ApiClient) -> None:
    leases = client.CoordinationV1Api(kube_client)
    created = leases.create_namespaced_lease("default", _lease("scorer-0"))
    assert created.spec.holder_identity == "scorer-0"
    with pytest.raises(ApiException) as exists:
        leases.create_namespaced_lease("default", _lease("scorer-1"))
    assert exists.value.status == 409
    assert _error_body(exists.value)["message"] == (
        'leases.coordination.k8s.io "kube-steer-scorer" already exists'
    )
    rv = created.metadata.resource_version
    # scorer-2 takes over first; scorer-1 read the same version and loses.
    leases.replace_namespaced_lease("kube-steer-scorer", "default", _lease("scorer-2", rv, 1))
    with pytest.raises(ApiException) as stale:
        leases.replace_namespaced_lease("kube-steer-scorer", "default", _lease("scorer-1", rv, 1))
    assert stale.value.status == 409
    assert _error_body(stale.value) == load_api_fixture("lease-update-stale-409.json")["body"]
    current = leases.read_namespaced_lease("kube-steer-scorer", "default")
    assert current.spec.holder_identity == "scorer-2"


def test_namespaces_carry_their_name_label_and_take_label_patches(
    kube_client: client.ApiClient,
) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name="team-a")))
    core.patch_namespace(
        "team-a", {"metadata": {"labels": {"kube-steer.github.io/tenant": "dept-a"}}}
    )
    opted_in = core.list_namespace(label_selector="kube-steer.github.io/tenant=dept-a")
    [ns] = opted_in.items
    assert ns.metadata.labels == {
        "kubernetes.io/metadata.name": "team-a",
        "kube-steer.github.io/tenant": "dept-a",
    }
    assert ns.status.phase == "Active"


def test_pods_generate_names_bind_and_filter_by_node(
    apistub: ApiStub, core: client.CoreV1Api
) -> None:
    container = client.V1Container(name="app", image="busybox")
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(generate_name="web-"),
        spec=client.V1PodSpec(containers=[container]),
    )
    created = core.create_namespaced_pod("default", pod)
    name = created.metadata.name
    assert name.startswith("web-") and len(name) == len("web-") + 5
    assert created.spec.scheduler_name == "default-scheduler"
    assert created.status.phase == "Pending"
    binding = client.V1Binding(
        metadata=client.V1ObjectMeta(name=name),
        target=client.V1ObjectReference(kind="Node", name="worker-2"),
    )
    reply = core.create_namespaced_binding("default", binding, _preload_content=False)
    assert reply.status == 201
    on_node = core.list_pod_for_all_namespaces(field_selector="spec.nodeName=worker-2")
    assert [p.metadata.name for p in on_node.items] == [name]
    assert core.list_pod_for_all_namespaces(field_selector="spec.nodeName=worker-1").items == []
    deleted = core.delete_namespaced_pod(name, "default")
    assert deleted.metadata.name == name
    assert apistub.objects("pods") == []


def test_pod_in_a_missing_namespace_is_a_404(core: client.CoreV1Api) -> None:
    pod = client.V1Pod(
        metadata=client.V1ObjectMeta(name="p"),
        spec=client.V1PodSpec(containers=[client.V1Container(name="a", image="x")]),
    )
    with pytest.raises(ApiException) as caught:
        core.create_namespaced_pod("nowhere", pod)
    assert caught.value.status == 404
    assert _error_body(caught.value)["message"] == 'namespaces "nowhere" not found'


# -------------------------------------------------------------- plumbing


def test_discovery_answers_the_version_api(kube_client: client.ApiClient) -> None:
    version = client.VersionApi(kube_client).get_code()
    assert version.git_version == "v1.36.2"
    groups = client.ApisApi(kube_client).get_api_versions()
    assert [g.name for g in groups.groups] == ["coordination.k8s.io"]


def test_serves_https_with_a_kubeconfig_naming_the_ca(tmp_path: Path) -> None:
    certs = issue_webhook_certs(WebhookIdentity("apistub", "default", ips=("127.0.0.1",)))
    (tmp_path / "ca.pem").write_bytes(certs.ca_cert_pem)
    (tmp_path / "tls.crt").write_bytes(certs.cert_pem)
    (tmp_path / "tls.key").write_bytes(certs.key_pem)
    with ApiStub.start(tls=(str(tmp_path / "tls.crt"), str(tmp_path / "tls.key"))) as stub:
        seed_nodes(stub, 2)
        assert stub.url.startswith("https://")
        api_client = client_for(stub, tmp_path / "kubeconfig", ca_file=str(tmp_path / "ca.pem"))
        names = [n.metadata.name for n in client.CoreV1Api(api_client).list_node().items]
        assert names == ["worker-1", "worker-2"]
        api_client.close()


def test_runner_help_lists_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        runner_main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for option in ("--port", "--nodes", "--kubeconfig", "--tls-cert"):
        assert option in out
