"""Whole cycles against a real Prometheus (scraping the synthetic exporter, or backfilled with
promtool) and the Kubernetes API stand-in."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.synthetic_exporter import GIB, SyntheticCluster
from kits.waiting import wait_until
from scorer.cycle.plan import DataStatus
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from scorer.model import NodeState
from scorer.watch.ledger import PodLedger
from scorer.watch.nodes import NodeCache, NodeWatcher
from steer.adapters.kubejson import MERGE_PATCH, KubeJson
from steer.adapters.lease import LeaseElector
from steer.adapters.prometheus import QueryResult
from steer.core.policy import Policy, parse_policy
from steer.presets import POWER_KEPLER_010, POWER_KEPLER_07
from tests.apistub_fixtures import client_for
from tests.scorer_support import (
    FOREIGN_LABELS,
    FOREIGN_TAINTS,
    SMALL_POLICY,
    backfilled_prometheus,
    owned_labels,
    stub_nodes,
)

POLICY = parse_policy(SMALL_POLICY)
NODES = ("node-1", "node-2", "node-3")
POWER = "sum by (node_name) (kepler_node_cpu_watts)"


def shape(cluster: SyntheticCluster) -> None:
    """util 20/50/95 %, CPU 300/400/500 W (Kepler's package and dram zones together), CPU
    limits 70 and 32 of 64 cores on node-1/3."""
    for name, util, watts in zip(NODES, (20, 50, 95), (300, 400, 500), strict=True):
        cluster.set_gpu_util(name, util)
        cluster.set_power(name, package_watts=watts)
    cluster.add_container(
        "node-1", "team-a", "big", requests={"cpu": 8}, limits={"cpu": 70, "memory": 128 * GIB}
    )
    cluster.add_container("node-3", "team-a", "small", requests={"cpu": 8}, limits={"cpu": 32})


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[SyntheticCluster, PrometheusServer]]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        prom.wait_for(POWER, lambda r: len(r.samples) == 3)
        yield cluster, prom


def make_scorer(
    stub: ApiStub, tmp_path: Path, prom_url: str, policy: Policy = POLICY, **kwargs: object
) -> Scorer:
    kube = client_for(stub, tmp_path / f"kubeconfig-{time.monotonic_ns()}")
    return Scorer(lambda: policy, NodeApi(KubeJson(kube)), prometheus_url=prom_url, **kwargs)  # type: ignore[arg-type]


def query_requests(prom: PrometheusServer) -> float:
    """Instant queries Prometheus itself has answered (its own counter, so no client can hide one)."""
    session = requests.Session()
    session.trust_env = False
    text = session.get(f"{prom.url}/metrics", timeout=5).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("prometheus_http_requests_total{") and 'handler="/api/v1/query"' in line
    )


def near(value: float) -> Callable[[QueryResult], bool]:
    return lambda r: abs(r.samples[0].value - value) <= 1.5


def test_labels_and_taints_match_hand_computed_values(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    _cluster, prom = scraped
    stub_nodes(apistub, NODES)
    scorer = make_scorer(apistub, tmp_path, prom.url)
    for _ in range(3):
        result = scorer.run_cycle()
    assert result.queries == 3 and result.leader
    node1, node2, node3 = (apistub.get("nodes", n) for n in NODES)
    # util fixed 0..100 lower-better: 80/50/5→10. power min-max lower-better: 100/50/0.
    # composite (3*util + power)/4: 85→90, 50, 3.75→0. score-class-gpu (util only): 80/50/10.
    # overcommit: max(70/64, 128Gi/512Gi) - 1 = 9.375 % → 10; node-3 32/64 → 0; node-2 has no
    # limits at all, so kube-state-metrics has no series for it: no label, not zero.
    assert owned_labels(node1) == {
        "kube-steer.github.io/score-util": "80",
        "kube-steer.github.io/score-power": "100",
        "kube-steer.github.io/score": "90",
        "kube-steer.github.io/score-class-gpu": "80",
        "kube-steer.github.io/overcommit-pct": "10",
    }
    assert owned_labels(node2) == {
        "kube-steer.github.io/score-util": "50",
        "kube-steer.github.io/score-power": "50",
        "kube-steer.github.io/score": "50",
        "kube-steer.github.io/score-class-gpu": "50",
    }
    assert owned_labels(node3) == {
        "kube-steer.github.io/score-util": "10",
        "kube-steer.github.io/score-power": "0",
        "kube-steer.github.io/score": "0",
        "kube-steer.github.io/score-class-gpu": "10",
        "kube-steer.github.io/overcommit-pct": "0",
        "kube-steer.github.io/gpu-hot": "true",
    }
    assert node3["spec"]["taints"] == [
        {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"}
    ]
    # foreign labels and taints survived three cycles untouched
    assert node1["metadata"]["labels"].items() >= FOREIGN_LABELS.items()
    assert node1["spec"]["taints"] == list(FOREIGN_TAINTS)
    assert set(
        json.loads(node1["metadata"]["annotations"]["kube-steer.github.io/observed-at"])
    ) == {
        "util",
        "power",
        "overcommit-pct",
    }


def test_queries_per_cycle_equal_dimensions_whatever_the_node_count(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    cluster, prom = scraped
    stub_nodes(apistub, NODES)
    scorer = make_scorer(apistub, tmp_path, prom.url)
    scorer.run_cycle()  # the first also diagnoses each dimension's data (then hourly)
    before = query_requests(prom)
    scorer.run_cycle()
    assert query_requests(prom) - before == len(POLICY.spec.dimensions)
    extra = [f"node-{i}" for i in range(4, 41)]
    try:
        for name in extra:
            cluster.add_node(name, gpus=2)
        stub_nodes(apistub, extra)
        prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL)", lambda r: r.samples[0].value == 80)
        before = query_requests(prom)
        result = scorer.run_cycle()
        assert query_requests(prom) - before == len(POLICY.spec.dimensions)
        assert len(result.nodes) == 40
        assert result.plan.node("node-40").labels["kube-steer.github.io/score-util"] == "100"  # type: ignore[union-attr]
    finally:
        for name in extra:
            cluster.remove_node(name)
        prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL)", lambda r: r.samples[0].value == 6)


def test_flapping_metric_within_the_hysteresis_margin_writes_nothing(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    cluster, prom = scraped
    stub_nodes(apistub, NODES)
    scorer = make_scorer(apistub, tmp_path, prom.url)
    for _ in range(2):  # steady state, gpu-hot debounced in
        scorer.run_cycle()
    apistub.clear_requests()
    try:
        # ±2 % on every gauge at every scrape. Power is a gauge too: node-2's power score
        # (500 - 400) / (500 - 300) moves within 45..55 ((490-408)/(490-306) .. (510-392)/
        # (510-294)), inside bucket 50's 42..58 (half a step and the margin either side).
        cluster.noise_pct = 2.0
        for util in (53, 47, 52, 48):  # node-2 around 50: score 47..53, bucket 50, margin 3
            cluster.set_gpu_util("node-2", util)
            prom.wait_for(
                'avg by (hostname) (DCGM_FI_DEV_GPU_UTIL{hostname="node-2"})',
                near(util),
            )
            result = scorer.run_cycle()
            assert result.plan.changes == ()
    finally:
        cluster.noise_pct = 0.0
        cluster.set_gpu_util("node-2", 50)
    assert apistub.count("PATCH") == 0
    assert apistub.count("PUT") == 0


def test_two_scorers_with_one_lease_only_one_writes(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    _cluster, prom = scraped
    stub_nodes(apistub, NODES)
    electors = [
        LeaseElector(
            KubeJson(client_for(apistub, tmp_path / f"kc-{i}")),
            namespace="default",
            identity=f"scorer-{i}",
        )
        for i in range(2)
    ]
    scorers = [make_scorer(apistub, tmp_path, prom.url, elector=e) for e in electors]
    assert [e.try_acquire_or_renew() for e in electors] == [True, False]
    apistub.clear_requests()
    follower = scorers[1].run_cycle()
    assert follower.report is None and not follower.leader
    assert apistub.count("PATCH", "/api/v1/nodes") == 0
    assert len(follower.plan.changes) == 3  # it computes (and explains) the same plan
    leader = scorers[0].run_cycle()
    assert leader.report is not None and leader.report.nodes_written == 3
    follower = scorers[1].run_cycle()
    assert follower.report is None
    # Per node: labels in the metadata, and the gpu-hot gate in the status (another endpoint).
    assert apistub.count("PATCH", "/api/v1/nodes") == leader.report.requests == 6
    assert scorers[1].metrics.registry.get_sample_value("steer_scorer_leader") == 0


def test_a_series_that_disappears_is_withdrawn_after_its_ttl(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    cluster, prom = scraped
    stub_nodes(apistub, NODES)
    policy = parse_policy(SMALL_POLICY.replace("ttlSeconds: 60", "ttlSeconds: 2"))
    scorer = make_scorer(apistub, tmp_path, prom.url, policy)
    first = scorer.run_cycle()
    assert owned_labels(apistub.get("nodes", "node-1"))["kube-steer.github.io/score-util"] == "80"
    try:
        cluster.hide("node-1", "DCGM_FI_DEV_GPU_UTIL")
        prom.wait_for(
            'count(DCGM_FI_DEV_GPU_UTIL{hostname="node-1"}) or vector(0)',
            lambda r: r.samples[0].value == 0,
        )
        node1 = first.plan.node("node-1")
        assert node1 is not None and node1.dimensions["util"].observed_at is not None
        observed = node1.dimensions["util"].observed_at
        time.sleep(max(0.0, observed + 2.2 - time.time()))
        result = scorer.run_cycle()
    finally:
        cluster.show("node-1", "DCGM_FI_DEV_GPU_UTIL")
    assert result.plan.node("node-1").dimensions["util"].status is DataStatus.STALE  # type: ignore[union-attr]
    labels = owned_labels(apistub.get("nodes", "node-1"))
    assert (
        "kube-steer.github.io/score-util" not in labels
        and "kube-steer.github.io/score-class-gpu" not in labels
    )
    assert labels["kube-steer.github.io/score"] == "100"  # power alone
    assert owned_labels(apistub.get("nodes", "node-2"))["kube-steer.github.io/score-util"] == "50"


def test_prometheus_stopped_keeps_labels_until_the_ttl_then_withdraws_them(
    apistub: ApiStub, tmp_path: Path
) -> None:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    stub_nodes(apistub, NODES)
    offset = [0.0]
    with backfilled_prometheus(cluster) as prom:
        scorer = make_scorer(apistub, tmp_path, prom.url, clock=lambda: time.time() + offset[0])
        scorer.run_cycle()
        scorer.run_cycle()
        written = {n: owned_labels(apistub.get("nodes", n)) for n in NODES}
        assert written["node-3"]["kube-steer.github.io/gpu-hot"] == "true"
    # Prometheus is stopped now
    apistub.clear_requests()
    down = scorer.run_cycle()
    assert {d.error_kind for d in down.plan.dimensions} == {"unavailable"}
    assert not any(d.stale for d in down.plan.dimensions)
    assert down.plan.changes == () and apistub.count("PATCH") == 0
    assert {n: owned_labels(apistub.get("nodes", n)) for n in NODES} == written
    offset[0] = 61.0  # past the 60 s TTL of every dimension
    gone = scorer.run_cycle()
    assert set(gone.plan.stale_dimensions) == {"util", "power", "overcommit-pct"}
    for name in NODES:
        node = apistub.get("nodes", name)
        assert owned_labels(node) == {}
        assert "kube-steer.github.io/observed-at" not in (node["metadata"].get("annotations") or {})
    node1 = apistub.get("nodes", "node-1")
    assert node1["spec"]["taints"] == list(FOREIGN_TAINTS)
    assert node1["metadata"]["labels"].items() >= FOREIGN_LABELS.items()
    assert not apistub.get("nodes", "node-3")["spec"].get("taints")
    metrics = scorer.metrics.registry
    assert metrics.get_sample_value("steer_scorer_stale_dimensions") == 3
    assert (
        metrics.get_sample_value(
            "steer_scorer_query_errors_total", {"dimension": "util", "kind": "unavailable"}
        )
        == 2
    )


def test_an_injected_conflict_during_a_cycle_is_retried(apistub: ApiStub, tmp_path: Path) -> None:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    stub_nodes(apistub, NODES)
    # No class avoids gpu-hot: its gate would take the 409 in the status write, before the taint.
    policy = parse_policy(SMALL_POLICY.replace("      avoid: [gpu-hot]\n", ""))
    with backfilled_prometheus(cluster) as prom:
        scorer = make_scorer(apistub, tmp_path, prom.url, policy, writer_sleep=lambda _s: None)
        scorer.run_cycle()
        apistub.fail_next_writes(1, status=409, path_contains="/nodes/node-3")
        result = scorer.run_cycle()  # node-3's taint write meets the 409
    assert result.report is not None and result.report.conflicts == 1 and not result.report.errors
    node3 = apistub.get("nodes", "node-3")
    assert node3["spec"]["taints"] == [
        {"key": "kube-steer.github.io/gpu-hot", "value": "true", "effect": "NoSchedule"}
    ]
    assert node3["metadata"]["labels"]["kube-steer.github.io/gpu-hot"] == "true"


def test_kepler_010_watts_and_ip_port_instances_map_to_nodes(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """Kepler >= 0.10 names the node in `node_name`; Kepler 0.7's `instance`, when it is the
    scrape target `IP:port`, resolves through the Node's InternalIP. A cluster in the middle of
    the upgrade serves both."""
    cluster = SyntheticCluster(nodes=3, gpus_per_node=1, kepler_styles=("0.7", "0.10"))
    for name, watts in zip(NODES, (100, 150, 200), strict=True):
        cluster.set_power(name, package_watts=watts, platform_watts=watts * 2)
    for i, name in enumerate(NODES, start=1):
        node = synthetic_node(name, gpus=1)
        node["status"]["addresses"].insert(0, {"type": "InternalIP", "address": f"10.0.0.{i}"})
        apistub.add_node(node)
    query_07 = "sum by (instance) (irate(kepler_node_platform_joules_total[5m]))"
    assert query_07 in POWER_KEPLER_07  # the preset's query, rewritten to name scrape targets
    as_target = f'label_replace({query_07}, "instance", "10.0.0.$1:9102", "instance", "node-(.*)")'
    text = (
        "apiVersion: kube-steer.github.io/v1alpha1\nkind: SteeringPolicy\nmetadata: {name: kepler}\nspec:\n"
        "  dimensions:\n"
        # The presets weigh power 0 (the cluster score reads it); here they are the score.
        + POWER_KEPLER_010.replace("name: power", "name: cpu-power").replace(
            "weight: 0", "weight: 1"
        )
        + POWER_KEPLER_07.replace("name: power", "name: node-power")
        .replace("weight: 0", "weight: 1")
        .replace(query_07, as_target)
    )
    policy = parse_policy(text)
    with backfilled_prometheus(cluster) as prom:
        result = make_scorer(apistub, tmp_path, prom.url, policy).run_cycle(dry_run=True)
    by_node = {p.node: p for p in result.plan.nodes}
    # cpu-power: package + dram = the CPU watts set; node-power: the platform's, twice that.
    assert [by_node[n].dimensions["cpu-power"].raw for n in NODES] == [100.0, 150.0, 200.0]
    node_power = [by_node[n].dimensions["node-power"].raw for n in NODES]
    assert node_power == pytest.approx([200.0, 300.0, 400.0])
    assert [by_node[n].labels["kube-steer.github.io/score-cpu-power"] for n in NODES] == [
        "100",
        "50",
        "0",
    ]
    assert [by_node[n].labels["kube-steer.github.io/score-node-power"] for n in NODES] == [
        "100",
        "50",
        "0",
    ]
    summary = {d.dimension: d for d in result.plan.dimensions}
    assert summary["node-power"].unknown == 0 and summary["node-power"].samples == 3


def test_a_shutdown_ends_a_paced_cycle_after_the_node_being_written(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """At 2 writes/s, 30 nodes take 15 s to write; the shutdown (SIGTERM in `steer scorer
    run`) ends the cycle within a second or two, and every node written is written whole: its
    gates (written first, for every node) and then its labels and record, never one without
    the other."""
    names = [f"slow-{i}" for i in range(30)]
    stub_nodes(apistub, names)
    policy = parse_policy(
        SMALL_POLICY.replace(
            "intervalSeconds: 30}",
            "intervalSeconds: 30, writeQps: 2, writeBurst: 1, resourceWriteQps: 2,"
            " resourceWriteBurst: 1}",
        )
    )
    ledger = PodLedger()
    ledger.replace([])
    scorer = make_scorer(apistub, tmp_path, "http://127.0.0.1:9", policy, ledger=ledger)
    threading.Timer(1.0, scorer.request_stop).start()
    started = time.monotonic()
    result = scorer.run_cycle()
    assert time.monotonic() - started < 3.0
    assert result.report is not None
    written = [r.node for r in result.report.results]
    assert 0 < len(written) < len(names)
    for name in names:
        node = apistub.get("nodes", name)
        gates = "kube-steer.github.io/avoid-gpu-hot" in node["status"].get("allocatable", {})
        record = "kube-steer.github.io/managed" in (node["metadata"].get("annotations") or {})
        assert gates == record == (name in written), name


def node_lists(stub: ApiStub) -> int:
    """LISTs of the node collection (a watch of it is a GET with watch=true, not counted)."""
    return sum(
        1
        for r in stub.requests
        if r.method == "GET" and r.path == "/api/v1/nodes" and "watch=true" not in r.query
    )


def streaming_node_lists(stub: ApiStub) -> int:
    """Watches of the node collection that start with every node (sendInitialEvents)."""
    return sum(
        1
        for r in stub.requests
        if r.method == "GET" and r.path == "/api/v1/nodes" and "sendInitialEvents=true" in r.query
    )


def test_with_the_node_watch_cycles_list_no_node_and_follow_nodes_added_changed_and_removed(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    cluster, prom = scraped
    stub_nodes(apistub, NODES)
    cache = NodeCache()
    watcher = NodeWatcher(
        client_for(apistub, tmp_path / "kubeconfig-watch"), cache, timeout_s=5, backoff_s=0.05
    )
    watcher.start()
    try:
        scorer = make_scorer(apistub, tmp_path, prom.url, node_cache=cache)
        first = scorer.run_cycle()
        assert [n.name for n in first.nodes] == list(NODES)
        # The watcher's own list is a streaming one: one watch that starts with every node.
        assert (node_lists(apistub), streaming_node_lists(apistub)) == (0, 1)
        # What the cycle wrote is in the cache at once, and the watch's later events of the
        # same writes do not move it back.
        written = apistub.get("nodes", "node-3")
        wait_until("the write's event", lambda: cache.generation > 0, timeout=10, interval=0.02)
        held = cache.get("node-3")
        assert held is not None
        assert held.resource_version == written["metadata"]["resourceVersion"]
        assert held.labels["kube-steer.github.io/score-util"] == "10"

        # Another client labels node-2; a node joins; one leaves.
        KubeJson(client_for(apistub, tmp_path / "kc-other")).request(
            "PATCH",
            "/api/v1/nodes/node-2",
            body={"metadata": {"labels": {"team.example.com/late": "yes"}}},
            content_type=MERGE_PATCH,
        )
        cluster.add_node("node-4", gpus=2)
        stub_nodes(apistub, ["node-4"])
        prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL)", lambda r: r.samples[0].value == 8)
        wait_until(
            "node-4 watched", lambda: cache.get("node-4") is not None, timeout=10, interval=0.02
        )
        wait_until(
            "the label watched",
            lambda: "team.example.com/late" in getattr(cache.get("node-2"), "labels", {}),
            timeout=10,
            interval=0.02,
        )
        result = scorer.run_cycle()
        assert [n.name for n in result.nodes] == [*NODES, "node-4"]
        assert owned_labels(apistub.get("nodes", "node-4"))["kube-steer.github.io/score-util"]
        assert apistub.get("nodes", "node-2")["metadata"]["labels"]["team.example.com/late"]

        apistub.delete("nodes", "node-4")
        wait_until("node-4 gone", lambda: cache.get("node-4") is None, timeout=10, interval=0.02)
        assert [n.name for n in scorer.run_cycle().nodes] == list(NODES)
        # Four cycles, still only the watcher's streaming list.
        assert (node_lists(apistub), streaming_node_lists(apistub)) == (0, 1)
    finally:
        watcher.stop()
        if "node-4" in cluster.node_names:
            cluster.remove_node("node-4")
            prom.wait_for("count(DCGM_FI_DEV_GPU_UTIL)", lambda r: r.samples[0].value == 6)


def test_without_a_synced_node_watch_a_cycle_lists_the_nodes(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    _cluster, prom = scraped
    stub_nodes(apistub, NODES)
    cache = NodeCache()  # never filled: no watcher reads a list into it, so none is awaited
    scorer = make_scorer(apistub, tmp_path, prom.url, node_cache=cache)
    started = time.monotonic()
    result = scorer.run_cycle()
    assert [n.name for n in result.nodes] == list(NODES)
    assert node_lists(apistub) == 1
    assert time.monotonic() - started < 5
    scorer.run_cycle()
    assert node_lists(apistub) == 2


def test_the_node_cache_keeps_the_newer_of_two_states() -> None:
    cache = NodeCache()
    cache.replace([NodeState("a", resource_version="10"), NodeState("b", resource_version="5")])
    assert cache.synced
    assert cache.offer(NodeState("a", labels={"x": "1"}, resource_version="12"))
    # An event from before that write arrives after it: ignored.
    assert not cache.offer(NodeState("a", resource_version="11"))
    assert cache.get("a") == NodeState("a", labels={"x": "1"}, resource_version="12")
    # A list taken before the write keeps the written state; nodes not listed are gone.
    cache.replace([NodeState("a", resource_version="11")])
    assert [(n.name, n.resource_version) for n in cache.nodes()] == [("a", "12")]
    # Versions that are not integers are not compared: the last to arrive wins.
    assert cache.offer(NodeState("a", resource_version="v2"))
    assert cache.offer(NodeState("a", resource_version="v1"))
    cache.desync()
    assert not cache.synced
