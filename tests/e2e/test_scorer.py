"""The scorer against the real kube-apiserver v1.36.2 and a real Prometheus.

One Prometheus per module scrapes a synthetic DCGM/Kepler/kube-state-metrics exporter for three
nodes named `scorer-e2e-1..3`; each test creates those Node objects in the session's control
plane (`make_node`, deleted at teardown). The first tests drive the `Scorer` in-process with an
admin client so they can interleave a competing writer between its read and its write; the
election and RBAC tests run `steer scorer run` as operators do.

Every node carries foreign labels (under another prefix, under ours but not ours, and under a
look-alike prefix), foreign annotations and foreign taints, including a `NoSchedule` one that
also keeps other modules' pods off these nodes while they exist.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kits.control_plane import ROOT, ControlPlane
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.service_processes import RunningScorer, running_scorer
from kits.synthetic_exporter import GIB, SyntheticCluster
from kits.waiting import wait_until
from scorer.cycle.plan import DataStatus
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from scorer.model import parse_rfc3339
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import MERGE_PATCH, KubeApiError, KubeJson, node_path
from steer.adapters.lease import DEFAULT_LEASE_NAME, lease_path
from steer.core.policy import Policy, parse_policy
from tests.e2e.waiting import NOT_YET, metric
from tests.scorer_support import SMALL_POLICY

NODES = ("scorer-e2e-1", "scorer-e2e-2", "scorer-e2e-3")
N1, N2, N3 = NODES
POWER = "sum by (node_name) (kepler_node_cpu_watts)"
UTIL = "DCGM_FI_DEV_GPU_UTIL"
SCORER_MANIFEST = ROOT / "manifests" / "scorer" / "scorer.yaml"

OBSERVED_AT = "kube-steer.github.io/observed-at"
MANAGED = "kube-steer.github.io/managed"
HOT_TAINT = {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"}

FOREIGN_LABELS = {
    "team.example.com/owner": "ml",  # another prefix
    "kube-steer.github.io/not-ours": "1",  # our prefix, a key no rule owns
    "kube-steer.github.io.example.com/score-util": "7",  # a look-alike prefix with one of our names
}
FOREIGN_ANNOTATIONS = {
    "team.example.com/note": "hands off",
    "kube-steer.github.io/not-ours": '{"labels":["kube-steer.github.io/score-util"]}',
}
FOREIGN_TAINTS = [
    {
        "key": "node.kubernetes.io/unreachable",
        "effect": "NoExecute",
        "timeAdded": "2026-11-30T03:58:30Z",
    },
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
]

# Hand-computed from `shape` (see tests/test_scorer_service.py for the arithmetic): util fixed
# 0..100 lower-better, power min-max lower-better, composite (3*util + power)/4, score-class-gpu
# from util alone, overcommit-pct raw (node-2 runs no containers: no series, so no label).
EXPECTED = {
    N1: {
        "kube-steer.github.io/score-util": "80",
        "kube-steer.github.io/score-power": "100",
        "kube-steer.github.io/score": "90",
        "kube-steer.github.io/score-class-gpu": "80",
        "kube-steer.github.io/overcommit-pct": "10",
    },
    N2: {
        "kube-steer.github.io/score-util": "50",
        "kube-steer.github.io/score-power": "50",
        "kube-steer.github.io/score": "50",
        "kube-steer.github.io/score-class-gpu": "50",
    },
    N3: {
        "kube-steer.github.io/score-util": "10",
        "kube-steer.github.io/score-power": "0",
        "kube-steer.github.io/score": "0",
        "kube-steer.github.io/score-class-gpu": "10",
        "kube-steer.github.io/overcommit-pct": "0",
        "kube-steer.github.io/gpu-hot": "true",
    },
}
OBSERVED_DIMENSIONS = {
    N1: {"util", "power", "overcommit-pct"},
    N2: {"util", "power"},
    N3: {"util", "power", "overcommit-pct"},
}


def policy_text(**scoring: object) -> str:
    """SMALL_POLICY with scoring fields replaced (ttlSeconds=5, intervalSeconds=1, ...)."""
    text = SMALL_POLICY
    for key, value in scoring.items():
        old = {"ttlSeconds": "ttlSeconds: 60", "intervalSeconds": "intervalSeconds: 30"}[key]
        assert old in text
        text = text.replace(old, f"{key}: {value}")
    return text


# ---------------------------------------------------------------------------------- fixtures


def shape(cluster: SyntheticCluster) -> None:
    """util 20/50/95 %, CPU 300/400/500 W (Kepler's package and dram zones together), CPU
    limits 70 and 32 of 64 cores on nodes 1/3."""
    for name, util, watts in zip(NODES, (20, 50, 95), (300, 400, 500), strict=True):
        cluster.set_gpu_util(name, util)
        cluster.set_power(name, package_watts=watts)
    cluster.add_container(
        N1, "team-a", "big", requests={"cpu": 8}, limits={"cpu": 70, "memory": 128 * GIB}
    )
    cluster.add_container(N3, "team-a", "small", requests={"cpu": 8}, limits={"cpu": 32})


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[SyntheticCluster, PrometheusServer]]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2, node_prefix="scorer-e2e-")
    shape(cluster)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        prom.wait_for(POWER, lambda r: len(r.samples) == 3)
        yield cluster, prom


@pytest.fixture
def nodes(make_node: Callable[..., dict[str, Any]], admin: KubeJson) -> dict[str, dict[str, Any]]:
    """The three nodes with their foreign labels, annotations and taints; returns each Node as
    stored before any scorer ran."""
    before = {}
    for name in NODES:
        make_node(name, gpus=2, labels=FOREIGN_LABELS, taints=FOREIGN_TAINTS)
        admin.request(
            "PATCH",
            node_path(name),
            body={"metadata": {"annotations": FOREIGN_ANNOTATIONS}},
            content_type=MERGE_PATCH,
        )
        before[name] = admin.request("GET", node_path(name))
    return before


@pytest.fixture
def scorer_clients(control_plane: ControlPlane) -> Iterator[Callable[[], client.ApiClient]]:
    made: list[client.ApiClient] = []

    def make() -> client.ApiClient:
        made.append(make_api_client(str(control_plane.kubeconfig)))
        return made[-1]

    yield make
    for api_client in made:
        api_client.close()


def in_process_scorer(
    kube: KubeJson, prom: PrometheusServer, policy: Policy, **kwargs: Any
) -> Scorer:
    return Scorer(lambda: policy, NodeApi(kube), prometheus_url=prom.url, **kwargs)


# ---------------------------------------------------------------------------------- helpers


def owned(node: Mapping[str, Any]) -> dict[str, str]:
    labels = node["metadata"].get("labels") or {}
    return {
        k: v
        for k, v in labels.items()
        if k.startswith("kube-steer.github.io/") and k not in FOREIGN_LABELS
    }


def annotation_json(node: Mapping[str, Any], key: str) -> Any:
    text = (node["metadata"].get("annotations") or {}).get(key)
    return None if text is None else json.loads(text)


def assert_foreign_untouched(
    node: Mapping[str, Any],
    before: Mapping[str, Any],
    owned_labels: Mapping[str, str],
    owned_annotations: set[str],
    taints: list[dict[str, Any]],
) -> None:
    """Labels are exactly the ones before plus the owned ones, annotations the ones before plus
    the owned keys, taints exactly `taints`: nothing foreign changed, disappeared or appeared."""
    meta, old = node["metadata"], before["metadata"]
    assert meta["labels"] == {**old["labels"], **owned_labels}
    annotations = dict(meta.get("annotations") or {})
    assert set(annotations) == set(old["annotations"]) | owned_annotations
    assert {k: v for k, v in annotations.items() if k not in owned_annotations} == old[
        "annotations"
    ]
    assert node["spec"].get("taints") == taints


def get_nodes(admin: KubeJson) -> dict[str, dict[str, Any]]:
    return {name: admin.request("GET", node_path(name)) for name in NODES}


def read_lease(admin: KubeJson, namespace: str) -> dict[str, Any]:
    spec: dict[str, Any] = admin.request("GET", lease_path(namespace, DEFAULT_LEASE_NAME))["spec"]
    return spec


# ---------------------------------------------------------------------------------- 1. labels


def test_a_cycle_writes_quantised_labels_and_annotations_and_no_foreign_key_changes(
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    scorer_clients: Callable[[], client.ApiClient],
) -> None:
    _cluster, prom = scraped
    policy = parse_policy(SMALL_POLICY)
    scorer = in_process_scorer(KubeJson(scorer_clients()), prom, policy)
    started = time.time()

    first = scorer.run_cycle()
    assert first.leader and first.report is not None and not first.report.errors
    assert first.report.nodes_written == 3
    after_first = get_nodes(admin)
    # gpu-hot is debounced (setAfterCycles: 2): after one cycle no condition label, no taint
    assert owned(after_first[N3]) == {
        k: v for k, v in EXPECTED[N3].items() if k != "kube-steer.github.io/gpu-hot"
    }
    assert after_first[N3]["spec"]["taints"] == FOREIGN_TAINTS

    second = scorer.run_cycle()
    assert second.report is not None and not second.report.errors
    assert [r.node for r in second.report.results] == [N3]  # only the taint rule changed
    stored = get_nodes(admin)
    for name in NODES:
        node = stored[name]
        assert owned(node) == EXPECTED[name], name
        taints = [*FOREIGN_TAINTS, HOT_TAINT] if name == N3 else FOREIGN_TAINTS
        assert_foreign_untouched(node, nodes[name], EXPECTED[name], {OBSERVED_AT, MANAGED}, taints)
        observed = annotation_json(node, OBSERVED_AT)
        assert set(observed) == OBSERVED_DIMENSIONS[name], name
        for text in observed.values():
            at = parse_rfc3339(text)
            assert at is not None and started - 2 <= at <= time.time() + 1, (name, text)
        assert annotation_json(node, MANAGED) == {
            "labels": sorted(EXPECTED[name]),
            "taints": ["kube-steer.github.io/gpu-hot"] if name == N3 else [],
            # The gates of SMALL_POLICY (steer/core/gates.py), in the node's status.
            "resources": [
                "kube-steer.github.io/avoid-gpu-hot",
                "kube-steer.github.io/overcommit-0pct",
            ],
        }
        allocatable = node["status"]["allocatable"]
        assert allocatable["kube-steer.github.io/avoid-gpu-hot"] == ("0" if name == N3 else "110")

    # The real apiserver indexes what was written: label selectors find the nodes.
    def selected(selector: str) -> list[str]:
        found = admin.request("GET", node_path(), query={"labelSelector": selector})
        return [n["metadata"]["name"] for n in found["items"]]

    assert selected("kube-steer.github.io/score=90,team.example.com/owner=ml") == [N1]
    assert selected("kube-steer.github.io/gpu-hot=true") == [N3]


def test_labels_are_kept_within_the_ttl_then_withdrawn_with_their_taint(
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    scorer_clients: Callable[[], client.ApiClient],
) -> None:
    cluster, prom = scraped
    ttl = 5.0
    policy = parse_policy(policy_text(ttlSeconds=int(ttl)))
    scorer = in_process_scorer(KubeJson(scorer_clients()), prom, policy)
    scorer.run_cycle()
    last_seen = scorer.run_cycle()  # the taint is on now
    assert get_nodes(admin)[N3]["spec"]["taints"] == [*FOREIGN_TAINTS, HOT_TAINT]
    observed_at = [last_seen.plan.node(n).dimensions["util"].observed_at for n in (N1, N3)]  # type: ignore[union-attr]
    assert None not in observed_at
    last_observed = max(t for t in observed_at if t is not None)
    gone = f'count({UTIL}{{hostname=~"{N1}|{N3}"}}) or vector(0)'
    try:
        for name in (N1, N3):
            cluster.hide(name, UTIL)
        prom.wait_for(gone, lambda r: r.samples[0].value == 0)

        within = scorer.run_cycle()  # data missing, but younger than the TTL: nothing changes
        assert time.time() - last_observed < ttl, "the machine was too slow to test"
        assert within.plan.node(N1).dimensions["util"].status is DataStatus.RETAINED  # type: ignore[union-attr]
        assert within.plan.changes == ()
        kept = get_nodes(admin)
        assert owned(kept[N1]) == EXPECTED[N1] and owned(kept[N3]) == EXPECTED[N3]

        time.sleep(max(0.0, last_observed + ttl + 0.3 - time.time()))
        past = scorer.run_cycle()
    finally:
        for name in (N1, N3):
            cluster.show(name, UTIL)
    assert past.plan.node(N1).dimensions["util"].status is DataStatus.STALE  # type: ignore[union-attr]
    assert past.report is not None and not past.report.errors
    assert {r.node for r in past.report.results} == {N1, N3}
    stored = get_nodes(admin)
    # score-util, score-class-gpu (util alone) and the condition drawn from util go; the
    # composite is recomputed from power alone (node-1: 100, node-3: 0).
    withdrawn = {
        "kube-steer.github.io/score-util",
        "kube-steer.github.io/score-class-gpu",
        "kube-steer.github.io/gpu-hot",
    }
    expected_n1 = {k: v for k, v in EXPECTED[N1].items() if k not in withdrawn}
    expected_n1["kube-steer.github.io/score"] = "100"
    expected_n3 = {k: v for k, v in EXPECTED[N3].items() if k not in withdrawn}
    assert owned(stored[N1]) == expected_n1
    assert owned(stored[N3]) == expected_n3
    assert_foreign_untouched(
        stored[N1], nodes[N1], expected_n1, {OBSERVED_AT, MANAGED}, FOREIGN_TAINTS
    )
    assert_foreign_untouched(
        stored[N3], nodes[N3], expected_n3, {OBSERVED_AT, MANAGED}, FOREIGN_TAINTS
    )
    for name in (N1, N3):
        assert set(annotation_json(stored[name], OBSERVED_AT)) == {"power", "overcommit-pct"}
        assert annotation_json(stored[name], MANAGED)["taints"] == []
    assert owned(stored[N2]) == EXPECTED[N2]  # its util is fresh
    # put the data back for the next test
    prom.wait_for(f'count({UTIL}{{hostname=~"scorer-e2e-.*"}})', lambda r: r.samples[0].value == 6)


# ------------------------------------------------------------------ 2. taints and conflicts


class CompetingWriter(KubeJson):
    """The scorer's client. Right before each of its taint writes to `node` it runs the next
    queued competitor action (a real write through another client), and it records the HTTP
    status of every request it sends."""

    def __init__(self, api_client: client.ApiClient, node: str) -> None:
        super().__init__(api_client)
        self.node = node
        self.before_taint_write: list[Callable[[], None]] = []
        self.sent: list[tuple[str, str, int]] = []

    def request(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        body = kwargs.get("body")
        if (
            method == "PATCH"
            and path == node_path(self.node)
            and isinstance(body, dict)
            and "taints" in (body.get("spec") or {})
            and self.before_taint_write
        ):
            self.before_taint_write.pop(0)()
        try:
            answer = super().request(method, path, **kwargs)
        except KubeApiError as exc:
            self.sent.append((method, path, exc.status))
            raise
        self.sent.append((method, path, 200))
        return answer

    def writes(self) -> list[tuple[str, str, int]]:
        return [s for s in self.sent if s[0] in ("PATCH", "PUT", "POST", "DELETE")]


def competitor(kube: KubeJson, node: str, edit: Callable[[list[dict[str, Any]]], None]) -> Any:
    """Read-modify-write of the node's taints with a PUT (optimistic concurrency, as
    `kubectl edit` does), through a client that is not the scorer's."""

    def act() -> None:
        obj = kube.request("GET", node_path(node))
        taints = obj["spec"].setdefault("taints", [])
        edit(taints)
        kube.request("PUT", node_path(node), body=obj)

    return act


def test_a_concurrent_taint_writer_gets_a_real_409_retry_and_nothing_is_lost(
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    scorer_clients: Callable[[], client.ApiClient],
) -> None:
    _cluster, prom = scraped
    policy = parse_policy(SMALL_POLICY)
    kube = CompetingWriter(scorer_clients(), N3)
    scorer = in_process_scorer(kube, prom, policy)
    scorer.run_cycle()  # labels; the taint rule fires from the second cycle on
    assert get_nodes(admin)[N3]["spec"]["taints"] == FOREIGN_TAINTS

    maintenance = {"key": "maintenance.example.com/drain", "value": "soon", "effect": "NoSchedule"}
    kube.before_taint_write = [
        # between the scorer's node list and its first taint write: a new foreign taint
        competitor(admin, N3, lambda taints: taints.append(dict(maintenance))),
        # between its re-read and its second attempt: a foreign taint's value changes
        competitor(admin, N3, lambda taints: taints[1].update(value="ai")),
    ]
    kube.sent.clear()
    result = scorer.run_cycle()

    assert kube.before_taint_write == []  # both competitor writes happened
    assert result.report is not None and not result.report.errors
    (write,) = [r for r in result.report.results if r.node == N3]
    # One status write (the gpu-hot gate closes with the taint), then three metadata attempts.
    assert write.ok and write.taints_written and write.conflicts == 2 and write.requests == 4
    # the real apiserver refused the two writes based on an outdated resourceVersion
    assert [s for s in kube.writes() if s[1] == node_path(N3)] == [
        ("PATCH", node_path(N3), 409),
        ("PATCH", node_path(N3), 409),
        ("PATCH", node_path(N3), 200),
    ]
    assert [s for s in kube.sent if s[:2] == ("GET", node_path(N3))] == [
        ("GET", node_path(N3), 200)
    ] * 2  # one re-read per conflict
    assert scorer.metrics.registry.get_sample_value("steer_scorer_write_conflicts_total") == 2

    stored = admin.request("GET", node_path(N3))
    changed_dedicated = {**FOREIGN_TAINTS[1], "value": "ai"}
    assert stored["spec"]["taints"] == [
        FOREIGN_TAINTS[0],
        changed_dedicated,
        maintenance,
        HOT_TAINT,
    ]
    assert owned(stored) == EXPECTED[N3]
    assert stored["metadata"]["labels"] == {**nodes[N3]["metadata"]["labels"], **EXPECTED[N3]}

    # Nothing changed since: no request writes anything, no node changes resourceVersion.
    versions = {n: node["metadata"]["resourceVersion"] for n, node in get_nodes(admin).items()}
    requests_before = scorer.metrics.registry.get_sample_value("steer_scorer_write_requests_total")
    kube.sent.clear()
    for _ in range(2):
        idle = scorer.run_cycle()
        assert idle.plan.changes == ()
        assert idle.report is not None and idle.report.requests == 0 and idle.report.results == ()
    assert kube.writes() == []
    # Per cycle one node list, and (no pod watch here) one list of the bound pods for the gates.
    assert [m for m, _p, _s in kube.sent] == ["GET", "GET", "GET", "GET"]
    assert {n: node["metadata"]["resourceVersion"] for n, node in get_nodes(admin).items()} == (
        versions
    )
    assert (
        scorer.metrics.registry.get_sample_value("steer_scorer_write_requests_total")
        == requests_before
    )


# ------------------------------------------------------------------ 3. leader election


def test_two_scorer_processes_one_lease_one_writer_and_takeover_after_the_lease_expires(
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    make_namespace: Callable[..., str],
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    cluster, prom = scraped
    namespace = make_namespace(prefix="scorer-lease")
    policy_file = tmp_path / "policy.yaml"
    policy_file.write_text(policy_text(intervalSeconds=1))

    def replica(identity: str) -> contextlib.AbstractContextManager[RunningScorer]:
        return running_scorer(
            control_plane,
            policy_file,
            prom.url,
            tmp_path,
            name=identity,
            extra_args=["--lease-namespace", namespace, "--identity", identity],
        )

    with contextlib.ExitStack() as stack:
        a = stack.enter_context(replica("scorer-a"))
        a.wait_ready()
        b = stack.enter_context(replica("scorer-b"))
        b.wait_ready()
        # B runs cycles of its own (it computes and explains) ...
        wait_until(
            "scorer-b ran 3 cycles",
            lambda: metric(b, "steer_scorer_cycles_total", {"result": "ok"}) >= 3,
            timeout=30,
            ignoring=NOT_YET,
        )
        lease = read_lease(admin, namespace)
        assert lease["holderIdentity"] == "scorer-a"
        assert lease["leaseDurationSeconds"] == 15
        assert (metric(a, "steer_scorer_leader"), metric(b, "steer_scorer_leader")) == (1, 0)
        assert a.get("/explain/nodes")["leader"] is True
        assert b.get("/explain/nodes")["leader"] is False
        # ... but only A writes.
        assert metric(a, "steer_scorer_write_requests_total") >= 3
        assert metric(b, "steer_scorer_write_requests_total") == 0
        assert metric(b, "steer_scorer_node_writes_total", {"result": "ok"}) == 0
        assert owned(admin.request("GET", node_path(N1))) == EXPECTED[N1]

        # A dies without releasing the Lease; new data appears that only B can write.
        a.process.kill()
        a.process.wait()
        killed = time.monotonic()
        try:
            cluster.set_gpu_util(N2, 20)  # util 50 -> 80 on node-2
            wait_until(
                "scorer-b leads",
                lambda: metric(b, "steer_scorer_leader") == 1,
                timeout=25,
                interval=0.25,
                ignoring=NOT_YET,
            )
            took = time.monotonic() - killed
            lease = read_lease(admin, namespace)
            assert lease["holderIdentity"] == "scorer-b"
            assert lease["leaseTransitions"] == 1
            # B waited the Lease out: A renewed at most one retry period (2 s) before dying, B
            # noticed that renewal up to 2 s later and takes over at its first look (every 2 s)
            # at least 15 s after: between 13 s and 18 s after the kill, plus request times.
            assert 12 <= took <= 15 + 2 + 2 + 2, f"took over {took:.1f}s after the kill"
            print(f"scorer-b took over {took:.1f}s after scorer-a was killed")
            wait_until(
                "scorer-b wrote node-2's new util label",
                lambda: (
                    owned(admin.request("GET", node_path(N2)))["kube-steer.github.io/score-util"]
                    == "80"
                ),
                timeout=30,
                ignoring=NOT_YET,
            )
            assert metric(b, "steer_scorer_write_requests_total") >= 1
        finally:
            cluster.set_gpu_util(N2, 50)
        # a clean stop hands the Lease back at once
        b.stop()
        assert b.process.returncode == 0, b.log()
        lease = read_lease(admin, namespace)
        assert not lease.get("holderIdentity")
        assert lease["leaseDurationSeconds"] == 1


# ------------------------------------------------------------------ 4. RBAC


def scorer_roles(suffix: str, namespace: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ClusterRole and the leader-election Role of manifests/scorer/scorer.yaml, rules
    unchanged; the ClusterRole renamed per test, the Role moved to the test's namespace."""
    docs = {doc["kind"]: doc for doc in yaml.safe_load_all(SCORER_MANIFEST.read_text()) if doc}
    cluster_role, role = docs["ClusterRole"], docs["Role"]
    cluster_role["metadata"]["name"] = f"steer-scorer-{suffix}"
    role["metadata"]["namespace"] = namespace
    return cluster_role, role


def test_the_scorer_runs_with_only_the_permissions_of_its_manifest(
    scraped: tuple[SyntheticCluster, PrometheusServer],
    nodes: dict[str, dict[str, Any]],
    admin: KubeJson,
    make_namespace: Callable[..., str],
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    _cluster, prom = scraped
    namespace = make_namespace(prefix="scorer-rbac")
    suffix = uuid.uuid4().hex[:6]
    user = f"scorer-e2e-{suffix}"
    kubeconfig = control_plane.user_kubeconfig(user)
    user_client = make_api_client(str(kubeconfig))
    as_user = KubeJson(user_client)
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    cluster_role, role = scorer_roles(suffix, namespace)
    subject = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]
    cluster_binding: dict[str, Any] = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": cluster_role["metadata"]["name"]},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": cluster_role["metadata"]["name"],
        },
        "subjects": subject,
    }
    role_binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role["metadata"]["name"], "namespace": namespace},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        },
        "subjects": subject,
    }
    with pytest.raises(KubeApiError) as unbound:
        as_user.request("GET", node_path())
    assert unbound.value.status == 403  # the user is subject to RBAC, not an admin
    try:
        admin.request("POST", f"{rbac}/clusterroles", body=cluster_role)
        admin.request("POST", f"{rbac}/clusterrolebindings", body=cluster_binding)
        admin.request("POST", f"{rbac}/namespaces/{namespace}/roles", body=role)
        admin.request("POST", f"{rbac}/namespaces/{namespace}/rolebindings", body=role_binding)
        wait_until(
            "the bindings are in force",
            lambda: as_user.request("GET", node_path()),
            timeout=30,
            ignoring=NOT_YET,
        )
        with pytest.raises(KubeApiError) as other_lease:
            as_user.request("GET", lease_path(namespace, "someone-else"))
        assert other_lease.value.status == 403  # the Role names its Lease

        policy_file = tmp_path / "policy.yaml"
        policy_file.write_text(policy_text(intervalSeconds=1))
        with running_scorer(
            control_plane,
            policy_file,
            prom.url,
            tmp_path,
            name="scorer-rbac",
            # argparse keeps the last --kubeconfig: the user's, not the admin's
            extra_args=[
                "--kubeconfig",
                str(kubeconfig),
                "--lease-namespace",
                namespace,
                "--identity",
                "rbac-scorer",
            ],
        ) as scorer:
            scorer.wait_ready()
            # labels, then (second cycle) the taint: a PATCH with resourceVersion
            stored = wait_until(
                "the scorer wrote labels and its taint as the restricted user",
                lambda: (
                    node
                    if HOT_TAINT
                    in ((node := admin.request("GET", node_path(N3)))["spec"]).get("taints", [])
                    else None
                ),
                timeout=30,
                ignoring=NOT_YET,
            )
            assert owned(stored) == EXPECTED[N3]
            for name, node in get_nodes(admin).items():
                assert owned(node) == EXPECTED[name], name
            assert read_lease(admin, namespace)["holderIdentity"] == "rbac-scorer"
            assert metric(scorer, "steer_scorer_leader") == 1
            assert metric(scorer, "steer_scorer_node_writes_total", {"result": "error"}) == 0
            assert metric(scorer, "steer_scorer_cycles_total", {"result": "error"}) == 0
            scorer.stop()
            assert scorer.process.returncode == 0
            log = scorer.log(100_000)
            assert "forbidden" not in log.lower(), log
            assert not read_lease(admin, namespace).get("holderIdentity")  # released (update)
    finally:
        for path in (
            f"{rbac}/clusterrolebindings/{cluster_binding['metadata']['name']}",
            f"{rbac}/clusterroles/{cluster_role['metadata']['name']}",
        ):
            with contextlib.suppress(KubeApiError):
                admin.request("DELETE", path)
        user_client.close()
