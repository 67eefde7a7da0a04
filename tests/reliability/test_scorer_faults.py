"""The scorer under faults: a real Prometheus paused beyond the query timeout, stopped, or
answering NaN, ±Inf, absurd values and partial results; node writes failing with 409, 500 and
timeouts on the API stand-in; the Lease taken over, or no longer renewable, in the middle of a
paced cycle; and policy files that cannot be loaded, under `steer scorer run`.

Each test checks what the docs promise for its fault and that nothing else moved: the cycle
completes, every label stays within the label contract and is kept or withdrawn by its TTL,
the failure is counted, the managed record describes exactly what the node carries, and what
kube-steer does not own on a node stays byte-identical.
"""

from __future__ import annotations

import contextlib
import copy
import json
import math
import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import requests

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.net import free_port
from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.synthetic_exporter import GIB, SyntheticCluster
from scorer.cycle.plan import DataStatus, ManagedRecord, managed_key, observed_at_key
from scorer.cycle.service import Scorer
from scorer.cycle.sources import Readings, SourceContext, SourceRequest
from scorer.cycle.sources.prometheus import PrometheusSource
from scorer.cycle.writer import NodeApi
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import KubeJson
from steer.adapters.lease import LeaseElector
from steer.core.encoding import bucket_values
from steer.core.policy import Policy, parse_policy
from steer.core.steering import (
    composites,
    condition_key,
    dimension_key,
    owned_label_keys,
    owned_resource_keys,
    owned_taint_keys,
)
from tests.apistub_fixtures import client_for
from tests.scorer_support import (
    FOREIGN_LABELS,
    FOREIGN_TAINTS,
    SMALL_POLICY,
    backfilled_prometheus,
    owned_labels,
)
from tests.webhook_harness import ROOT, assert_json_lines

NODES = ("node-1", "node-2", "node-3")
UTILS = (20.0, 50.0, 95.0)
PREFIX = "kube-steer.github.io/"
UTIL, PEAK, SCORE, CLASS_GPU = (
    f"{PREFIX}score-util",
    f"{PREFIX}score-gpu-peak",
    f"{PREFIX}score",
    f"{PREFIX}score-class-gpu",
)
UTIL_QUERY = "avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)"
POWER = "sum by (node_name) (kepler_node_cpu_watts)"
DOWN = "http://127.0.0.1:9"  # nothing listens: every query is refused at once

POLICY = parse_policy(SMALL_POLICY)
# util ages out after 3 s, so TTL expiry is seen in real time; gpu-peak asks for every GPU's
# series without aggregating them: two series per node, the larger one kept.
UTIL_TTL = 3.0
LIVE_TEXT = SMALL_POLICY.replace(
    "      weight: 3\n", f"      weight: 3\n      ttlSeconds: {UTIL_TTL:g}\n", 1
).replace(
    "  taints:\n",
    "    - name: gpu-peak\n"
    "      query: DCGM_FI_DEV_GPU_UTIL\n"
    "      nodeLabel: hostname\n"
    "      unit: pct\n"
    "      direction: lowerIsBetter\n"
    "      normalization: {method: fixed, min: 0, max: 100}\n"
    "      weight: 0\n"
    "  taints:\n",
    1,
)
LIVE = parse_policy(LIVE_TEXT)

# On node-1, next to FOREIGN_LABELS and FOREIGN_TAINTS: keys under our prefixes that are not
# ours, an annotation, an extended resource and a condition of someone else.
FOREIGN_ANNOTATIONS = {
    "node.alpha.kubernetes.io/ttl": "0",
    "team.example.com/note": "racked 2026-11-30",
    f"{PREFIX}not-ours": "x",
}
FOREIGN_RESOURCES = {"example.com/fpga": "2", "kube-steer.github.io/not-ours": "3"}
FOREIGN_CONDITION = {
    "type": "example.com/FpgaHealthy",
    "status": "True",
    "reason": "Probed",
    "message": "all 2 FPGAs answer",
}


# ----------------------------------------------------------------------------- helpers


def shape(cluster: SyntheticCluster) -> None:
    """util 20/50/95 %, CPU 300/400/500 W (Kepler's package and dram zones together), CPU
    limits 70 and 32 of 64 cores on node-1/3."""
    for name, util, watts in zip(NODES, UTILS, (300, 400, 500), strict=True):
        cluster.set_gpu_util(name, util)
        cluster.set_power(name, package_watts=watts)
    cluster.add_container(
        "node-1", "team-a", "big", requests={"cpu": 8}, limits={"cpu": 70, "memory": 128 * GIB}
    )
    cluster.add_container("node-3", "team-a", "small", requests={"cpu": 8}, limits={"cpu": 32})


def add_nodes(stub: ApiStub, names: Sequence[str]) -> None:
    """Nodes for `names`; the first carries everything foreign the tests expect to survive."""
    for i, name in enumerate(names):
        node = synthetic_node(name, gpus=2)
        if i == 0:
            node["metadata"]["labels"].update(FOREIGN_LABELS)
            node["metadata"]["annotations"] = dict(FOREIGN_ANNOTATIONS)
            node["spec"]["taints"] = [dict(t) for t in FOREIGN_TAINTS]
            for status in ("capacity", "allocatable"):
                node["status"][status].update(FOREIGN_RESOURCES)
            node["status"]["conditions"].append(dict(FOREIGN_CONDITION))
        stub.add_node(node)


def synced_ledger() -> PodLedger:
    """A pod watch that has listed no pods: every gate is planned (open)."""
    ledger = PodLedger()
    ledger.replace([])
    return ledger


def make_scorer(
    stub: ApiStub,
    tmp_path: Path,
    prom_url: str,
    policy: Policy | Callable[[], Policy],
    *,
    timeout_s: float = 10.0,
    **kwargs: Any,
) -> Scorer:
    kube = client_for(stub, tmp_path / f"kubeconfig-{time.monotonic_ns()}")
    current = policy if callable(policy) else lambda: policy
    api = NodeApi(KubeJson(kube, timeout_s=timeout_s))
    return Scorer(current, api, prometheus_url=prom_url, **kwargs)


def nodes_of(stub: ApiStub, names: Sequence[str] = NODES) -> dict[str, dict[str, Any]]:
    return {name: stub.get("nodes", name) for name in names}


def foreign_view(policy: Policy, node: Mapping[str, Any]) -> bytes:
    """The node as JSON without what kube-steer owns (and without its resourceVersion): must
    stay byte-identical whatever the scorer does."""
    obj = copy.deepcopy(dict(node))
    meta = obj["metadata"]
    meta.pop("resourceVersion", None)
    meta.pop("managedFields", None)
    labels = meta.get("labels") or {}
    for key in owned_label_keys(policy):
        labels.pop(key, None)
    annotations = meta.get("annotations") or {}
    for key in (observed_at_key(policy), managed_key(policy)):
        annotations.pop(key, None)
    if not annotations:
        meta.pop("annotations", None)
    owned_taints = owned_taint_keys(policy)
    taints = [t for t in obj["spec"].get("taints") or () if t["key"] not in owned_taints]
    obj["spec"].pop("taints", None)
    if taints:
        obj["spec"]["taints"] = taints
    for status in ("capacity", "allocatable"):
        for name in owned_resource_keys(policy):
            obj["status"].get(status, {}).pop(name, None)
    return json.dumps(obj).encode()


RAW_VALUE = re.compile(r"0|[1-9][0-9]*")


def assert_within_contract(policy: Policy, node: Mapping[str, Any]) -> None:
    """Every owned label carries a value the label contract (docs/labels.md) allows."""
    labels = node["metadata"].get("labels") or {}
    name = node["metadata"]["name"]
    for dim in policy.spec.dimensions:
        value = labels.get(dimension_key(policy, dim))
        if value is None:
            continue
        step = policy.step_of(dim)
        if dim.publish == "raw":
            assert RAW_VALUE.fullmatch(value), (name, dim.name, value)
            assert int(value) % step == 0 and int(value) < 2**63, (name, dim.name, value)
        else:
            assert value in {str(v) for v in bucket_values(step)}, (name, dim.name, value)
    for _, key in composites(policy):
        if key in labels:
            assert labels[key] in {str(v) for v in bucket_values(policy.spec.scoring.step)}
    for rule in policy.spec.taints:
        assert labels.get(condition_key(policy, rule), "true") == "true", (name, rule.name)


def assert_whole(policy: Policy, node: Mapping[str, Any]) -> None:
    """The managed record lists exactly the owned labels, taints and resources the node
    carries: no node is left with gates but no labels, or a record claiming what it lacks."""
    meta = node["metadata"]
    record = ManagedRecord.parse((meta.get("annotations") or {}).get(managed_key(policy)))
    owned = owned_label_keys(policy)
    carried = {k for k in meta.get("labels") or {} if k in owned}
    taints = {t["key"] for t in node["spec"].get("taints") or ()} & owned_taint_keys(policy)
    resources = set(node["status"].get("allocatable") or {}) & owned_resource_keys(policy)
    assert (record.labels, record.taints, record.resources) == (carried, taints, resources), meta[
        "name"
    ]


def sample(scorer: Scorer, name: str, labels: Mapping[str, str] | None = None) -> float:
    value = scorer.metrics.registry.get_sample_value(name, dict(labels or {}))
    return 0.0 if value is None else value


def dropped(scorer: Scorer, dimension: str, reason: str) -> float:
    return sample(
        scorer, "steer_scorer_dropped_samples", {"dimension": dimension, "reason": reason}
    )


def node_writes(stub: ApiStub) -> int:
    return stub.count("PATCH", "/api/v1/nodes/")


# ----------------------------------------------------------------------------- Prometheus


@pytest.fixture(scope="module")
def scraped() -> Iterator[tuple[SyntheticCluster, PrometheusServer]]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    with scraped_cluster(cluster, scrape_interval_s=0.5) as (_exporter, prom):
        prom.wait_for(POWER, lambda r: len(r.samples) == 3)
        yield cluster, prom


@contextlib.contextmanager
def disturbed(cluster: SyntheticCluster, prom: PrometheusServer) -> Iterator[None]:
    """Put the module's cluster back as `shape` left it afterwards, and wait until Prometheus
    has scraped it so: the next test starts from there, whatever this one did or failed at."""
    try:
        yield
    finally:
        for name, util in zip(NODES, UTILS, strict=True):
            cluster.show(name, "DCGM_FI_DEV_GPU_UTIL")
            cluster.set_gpu_util(name, util)
        prom.wait_for(
            "DCGM_FI_DEV_GPU_UTIL",
            lambda r: sorted(s.value for s in r.samples) == sorted(UTILS * 2),
        )


def test_nan_and_infinite_readings_keep_the_labels_until_their_ttl(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    """DCGM answering -Inf, NaN and +Inf (a GPU fallen off the bus, 0/0): no value, not a
    score. The nodes keep what they carry until util's TTL, then lose util's labels and their
    composites are recomputed without it; each unusable sample is counted."""
    cluster, prom = scraped
    add_nodes(apistub, NODES)
    scorer = make_scorer(apistub, tmp_path, prom.url, LIVE)
    first = scorer.run_cycle()
    written = nodes_of(apistub)
    assert [owned_labels(written[n])[UTIL] for n in NODES] == ["80", "50", "10"]
    apistub.clear_requests()
    with disturbed(cluster, prom):
        for name, value in zip(NODES, (-math.inf, math.nan, math.inf), strict=True):
            cluster.set_gpu_util(name, value)
        prom.wait_for(
            UTIL_QUERY,
            lambda r: len(r.samples) == 3 and not any(math.isfinite(s.value) for s in r.samples),
        )
        kept = scorer.run_cycle()
        assert kept.plan.changes == () and apistub.count() - apistub.count("GET") == 0
        assert nodes_of(apistub) == written
        for name in NODES:
            plan = kept.plan.node(name)
            assert plan is not None and plan.dimensions["util"].status is DataStatus.RETAINED
        assert dropped(scorer, "util", "non-finite") == 3
        assert dropped(scorer, "gpu-peak", "non-finite") == 6  # two GPUs a node
        util_seen = first.plan.node("node-1").dimensions["util"].observed_at  # type: ignore[union-attr]
        assert util_seen is not None
        time.sleep(max(0.0, util_seen + UTIL_TTL + 0.2 - time.time()))
        expired = scorer.run_cycle()
        for name in NODES:
            plan = expired.plan.node(name)
            assert plan is not None and plan.dimensions["util"].status is DataStatus.STALE
        after = nodes_of(apistub)
        # power alone (300/400/500 W, lower is better, min-max) makes the composite now
        assert [owned_labels(after[n]).get(SCORE) for n in NODES] == ["100", "50", "0"]
        for name in NODES:
            labels = owned_labels(after[name])
            assert UTIL not in labels and CLASS_GPU not in labels
            assert labels[PEAK] == owned_labels(written[name])[PEAK]  # its TTL is 60 s
            assert_within_contract(LIVE, after[name])
            assert_whole(LIVE, after[name])
            assert foreign_view(LIVE, after[name]) == foreign_view(LIVE, written[name])
    scorer.run_cycle()  # DCGM answers numbers again
    assert [owned_labels(apistub.get("nodes", n))[UTIL] for n in NODES] == ["80", "50", "10"]
    assert dropped(scorer, "util", "non-finite") == 0


def test_a_node_missing_from_a_reading_keeps_its_label_and_duplicate_series_are_counted(
    scraped: tuple[SyntheticCluster, PrometheusServer], apistub: ApiStub, tmp_path: Path
) -> None:
    """Partial results: node-2's GPU series vanish (its exporter restarts) while node-1's two
    GPUs diverge under a query that does not aggregate them. node-2 keeps its labels until
    util's TTL; node-1's peak is its busier GPU; the duplicate series are counted."""
    cluster, prom = scraped
    add_nodes(apistub, NODES)
    scorer = make_scorer(apistub, tmp_path, prom.url, LIVE)
    first = scorer.run_cycle()
    written = nodes_of(apistub)
    with disturbed(cluster, prom):
        cluster.hide("node-2", "DCGM_FI_DEV_GPU_UTIL")
        cluster.set_gpu_util("node-1", 80, gpu=1)
        prom.wait_for(
            'count(DCGM_FI_DEV_GPU_UTIL{hostname="node-2"}) or vector(0)',
            lambda r: r.samples[0].value == 0,
        )
        prom.wait_for(
            'max(DCGM_FI_DEV_GPU_UTIL{hostname="node-1"})', lambda r: r.samples[0].value == 80
        )
        partial = scorer.run_cycle()
        node2 = partial.plan.node("node-2")
        assert node2 is not None
        assert node2.dimensions["util"].status is DataStatus.RETAINED
        assert node2.dimensions["gpu-peak"].status is DataStatus.RETAINED
        now = nodes_of(apistub)
        assert owned_labels(now["node-2"]) == owned_labels(written["node-2"])
        labels1 = owned_labels(now["node-1"])
        assert (labels1[UTIL], labels1[PEAK]) == ("50", "20")  # mean 50 %, busier GPU 80 %
        assert dropped(scorer, "gpu-peak", "duplicate") == 2  # node-1's and node-3's second GPU
        assert dropped(scorer, "util", "duplicate") == 0
        util_seen = first.plan.node("node-2").dimensions["util"].observed_at  # type: ignore[union-attr]
        assert util_seen is not None
        time.sleep(max(0.0, util_seen + UTIL_TTL + 0.2 - time.time()))
        scorer.run_cycle()
        after = nodes_of(apistub)
        assert UTIL not in owned_labels(after["node-2"]) and PEAK in owned_labels(after["node-2"])
        assert UTIL in owned_labels(after["node-1"]) and UTIL in owned_labels(after["node-3"])
        for name in NODES:
            assert_within_contract(LIVE, after[name])
            assert_whole(LIVE, after[name])
            assert foreign_view(LIVE, after[name]) == foreign_view(LIVE, written[name])


def test_prometheus_slower_than_its_timeout_then_stopped_keeps_labels_until_the_ttl(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """A Prometheus that accepts connections and answers nothing (SIGSTOP) costs a cycle one
    query timeout, not one per dimension, and changes nothing on any node; stopped, the same;
    past the TTL every label, the taint and the records' labels go, and nothing foreign moves."""
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    add_nodes(apistub, NODES)
    policy = parse_policy(
        SMALL_POLICY.replace("spec:\n", "spec:\n  prometheus: {timeoutSeconds: 0.5}\n", 1)
    )
    offset = [0.0]
    with backfilled_prometheus(cluster) as prom:
        scorer = make_scorer(
            apistub,
            tmp_path,
            prom.url,
            policy,
            ledger=synced_ledger(),
            clock=lambda: time.time() + offset[0],
        )
        scorer.run_cycle()
        scorer.run_cycle()  # gpu-hot holds for two cycles on node-3: tainted, its gate closed
        written = nodes_of(apistub)
        assert written["node-3"]["spec"]["taints"][0]["key"] == f"{PREFIX}gpu-hot"
        apistub.clear_requests()
        prom.pause()
        try:
            started = time.monotonic()
            slow = scorer.run_cycle()
            took = time.monotonic() - started
        finally:
            prom.resume()
        assert took < 0.5 + 1.5, took  # the three queries wait side by side
        assert {d.error_kind for d in slow.plan.dimensions} == {"unavailable"}
        assert all("did not answer" in (d.error or "") for d in slow.plan.dimensions)
        assert slow.plan.changes == () and nodes_of(apistub) == written
        back = scorer.run_cycle()
        assert all(d.ok for d in back.plan.dimensions) and back.plan.changes == ()
    down = scorer.run_cycle()
    assert {d.error_kind for d in down.plan.dimensions} == {"unavailable"}
    assert all("cannot reach" in (d.error or "") for d in down.plan.dimensions)
    assert down.plan.changes == () and nodes_of(apistub) == written
    assert apistub.count() - apistub.count("GET") == 0
    offset[0] = 61.0  # past the 60 s TTL of every dimension
    gone = scorer.run_cycle()
    assert set(gone.plan.stale_dimensions) == {"util", "power", "overcommit-pct"}
    after = nodes_of(apistub)
    for name in NODES:
        assert owned_labels(after[name]) == {}, name
        assert not [
            t for t in after[name]["spec"].get("taints") or () if t["key"].startswith(PREFIX)
        ]
        assert_whole(policy, after[name])
        assert foreign_view(policy, after[name]) == foreign_view(policy, written[name])
    # the gate closed by gpu-hot opens again: no data, no taint, nothing to avoid
    assert after["node-3"]["status"]["allocatable"]["kube-steer.github.io/avoid-gpu-hot"] == "110"
    errors = {"dimension": "util", "kind": "unavailable"}
    assert sample(scorer, "steer_scorer_query_errors_total", errors) == 3
    assert sample(scorer, "steer_scorer_cycles_total", {"result": "ok"}) == 6
    assert sample(scorer, "steer_scorer_stale_dimensions") == 3


def test_a_raw_reading_no_label_can_carry_is_dropped_not_written(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """A raw dimension whose PromQL divides by almost nothing: 1e70 % is finite, but no
    Kubernetes label (63 characters, compared by `Lt` as an int64) can carry it. The node gets
    no value for it, everything else on the node is written, and the sample is counted."""
    spike = (
        'label_replace(vector(1e70), "node", "node-3", "", "")'
        ' or label_replace(vector(12.5), "node", "node-1", "", "")'
    )
    text = SMALL_POLICY.replace(
        "  taints:\n",
        f"    - name: spike-pct\n      query: '{spike}'\n      publish: raw\n      step: 1\n"
        "      weight: 0\n"
        "  taints:\n",
        1,
    )
    policy = parse_policy(text)
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    add_nodes(apistub, NODES)
    with backfilled_prometheus(cluster) as prom:
        scorer = make_scorer(apistub, tmp_path, prom.url, policy)
        result = scorer.run_cycle()
    assert result.report is not None and result.report.errors == ()
    after = nodes_of(apistub)
    assert owned_labels(after["node-1"])[f"{PREFIX}spike-pct"] == "13"
    assert f"{PREFIX}spike-pct" not in owned_labels(after["node-3"])
    assert owned_labels(after["node-3"])[UTIL] == "10"
    for name in NODES:
        assert_within_contract(policy, after[name])
        assert_whole(policy, after[name])
    assert dropped(scorer, "spike-pct", "too-large") == 1


# ----------------------------------------------------------------------------- node writes


class ForeignWriter:
    """The Prometheus source, and another client editing node-3 while the cycle has listed the
    nodes but not written them yet (a kubectl taint, a node-problem-detector label)."""

    def __init__(self, stub: ApiStub, prometheus_url: str) -> None:
        self.stub = stub
        self.inner = PrometheusSource(SourceContext(prometheus_url=prometheus_url))
        self.armed = False
        self.edited: dict[str, Any] | None = None

    def read(self, request: SourceRequest) -> Readings:
        if self.armed:
            self.armed = False

            def edit(node: dict[str, Any]) -> dict[str, Any]:
                node["metadata"]["labels"]["team.example.com/drained"] = "no"
                taint = {"key": "example.com/maintenance", "effect": "PreferNoSchedule"}
                node["spec"]["taints"] = [*(node["spec"].get("taints") or ()), taint]
                return node

            self.edited = self.stub.modify("nodes", "node-3", edit)
        return self.inner.read(request)

    def close(self) -> None:
        self.inner.close()


def test_node_writes_failing_with_500_409_and_timeouts_are_retried_and_nodes_stay_whole(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """Cycle 1 writes every node's gates and labels: node-1's status answers 500 twice, node-2's
    every time, node-3's first status write outlives the client's 0.5 s timeout (and lands
    later anyway). Cycle 2, after a policy edit that moves labels only on node-1 and node-3:
    node-1 meets a 409, node-3 is edited by someone else between list and write and sets
    gpu-hot (taint and gate), with its status write timing out again. Retried writes succeed,
    node-2 is written whole or not at all, and no foreign byte moves."""
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    shape(cluster)
    add_nodes(apistub, NODES)
    before = nodes_of(apistub)
    edited = parse_policy(
        SMALL_POLICY.replace(
            "      nodeLabel: node_name\n      direction: lowerIsBetter\n",
            "      nodeLabel: node_name\n      direction: higherIsBetter\n",
            1,
        )
    )
    current = [POLICY]
    with backfilled_prometheus(cluster) as prom:
        source = ForeignWriter(apistub, prom.url)
        scorer = make_scorer(
            apistub,
            tmp_path,
            prom.url,
            lambda: current[0],
            timeout_s=0.5,
            ledger=synced_ledger(),
            sources={"prometheus": source},
            writer_sleep=time.sleep,
        )
        apistub.fail_next_writes(2, status=500, path_contains="/nodes/node-1")
        apistub.fail_next_writes(6, status=500, path_contains="/nodes/node-2")
        apistub.delay_next_writes(1, 1.5, path_contains="/nodes/node-3")
        first = scorer.run_cycle()
        time.sleep(1.2)  # node-3's abandoned status write lands
        assert first.report is not None
        assert [r.node for r in first.report.errors] == ["node-2"]
        by_node = {r.node: r.requests for r in first.report.results}
        assert by_node == {"node-1": 4, "node-2": 6, "node-3": 3}
        assert node_writes(apistub) == 13
        middle = nodes_of(apistub)
        assert middle["node-2"] == before["node-2"]  # not a byte written
        for name in ("node-1", "node-3"):
            assert (
                owned_labels(middle[name])
                and f"{PREFIX}managed" in middle[name]["metadata"]["annotations"]
            )
        for name in NODES:
            assert_whole(POLICY, middle[name])
            assert foreign_view(POLICY, middle[name]) == foreign_view(POLICY, before[name])

        current[0] = edited
        source.armed = True
        apistub.clear_requests()
        apistub.fail_next_writes(1, status=409, path_contains="/nodes/node-1")
        apistub.delay_next_writes(1, 1.5, path_contains="/nodes/node-3")
        second = scorer.run_cycle()
        time.sleep(1.2)
    assert second.report is not None and second.report.errors == ()
    assert second.report.conflicts == 1  # the injected one: our own status write is no conflict
    by_node = {r.node: r.requests for r in second.report.results}
    assert by_node == {"node-1": 2, "node-2": 2, "node-3": 3}
    after = nodes_of(apistub)
    assert source.edited is not None
    assert after["node-3"]["spec"]["taints"] == [
        {"key": "example.com/maintenance", "effect": "PreferNoSchedule"},
        {"key": f"{PREFIX}gpu-hot", "value": "true", "effect": "NoSchedule"},
    ]
    assert after["node-3"]["status"]["allocatable"]["kube-steer.github.io/avoid-gpu-hot"] == "0"
    assert owned_labels(after["node-1"])[SCORE] == "60"  # power now counts the other way
    for name in NODES:
        assert_within_contract(edited, after[name])
        assert_whole(edited, after[name])
    expected = {**before, "node-3": source.edited}
    for name in NODES:
        assert foreign_view(edited, after[name]) == foreign_view(edited, expected[name]), name
    requests_sent = first.report.requests + second.report.requests
    assert sample(scorer, "steer_scorer_write_requests_total") == requests_sent
    assert sample(scorer, "steer_scorer_write_conflicts_total") == 1
    assert sample(scorer, "steer_scorer_node_writes_total", {"result": "error"}) == 1
    assert sample(scorer, "steer_scorer_node_writes_total", {"result": "ok"}) == 5


# ----------------------------------------------------------------------------- the Lease

LEASE_DURATION_S, RENEW_DEADLINE_S, RETRY_PERIOD_S = 3.0, 2.0, 0.5
WRITE_QPS = 4.0  # per pipeline (status and labels): 8 node writes a second at most
PACED = parse_policy(
    SMALL_POLICY.replace(
        "intervalSeconds: 30}",
        f"intervalSeconds: 30, writeQps: {WRITE_QPS:g}, writeBurst: 1,"
        f" resourceWriteQps: {WRITE_QPS:g}, resourceWriteBurst: 1}}",
    )
)


def _micro_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())


@pytest.mark.parametrize("loss", ["taken", "unrenewable"])
def test_a_lease_lost_mid_cycle_stops_the_writes(
    loss: str, apistub: ApiStub, tmp_path: Path
) -> None:
    """40 nodes at 4 writes/s per pipeline: 10 s of writes. After 8 of them the Lease is lost:
    `taken`, another holder writes it, which the elector sees at its next round (one retry
    period at most); `unrenewable`, every renewal fails, and the scorer stops calling itself
    leader `renewDeadline` after its last renewal, before anyone may take over at
    `leaseDuration`.

    The bound `steer/adapters/lease.py` and the writer promise: until the scorer knows, writes go on
    at the paced rate (2 x 4/s, plus the one in flight per pipeline); from then on no request
    is sent, so only a request already in flight (one per pipeline) may land after. No node
    is left with a record claiming gates it lacks; a later cycle writes nothing at all."""
    names = [f"node-{i}" for i in range(1, 41)]
    add_nodes(apistub, names)
    before = apistub.get("nodes", "node-1")
    elector = LeaseElector(
        KubeJson(client_for(apistub, tmp_path / "kc-elector")),
        namespace="default",
        identity="scorer-a",
        lease_duration_s=LEASE_DURATION_S,
        renew_deadline_s=RENEW_DEADLINE_S,
        retry_period_s=RETRY_PERIOD_S,
    )
    told: list[tuple[float, int]] = []  # when the scorer heard it lost, node writes by then
    elector.on_change(
        lambda leading: None if leading else told.append((time.monotonic(), node_writes(apistub)))
    )
    assert elector.try_acquire_or_renew()
    scorer = make_scorer(apistub, tmp_path, DOWN, PACED, elector=elector, ledger=synced_ledger())
    results = []
    cycle = threading.Thread(target=lambda: results.append(scorer.run_cycle()))
    elector.start()
    try:
        cycle.start()
        deadline = time.monotonic() + 10
        while node_writes(apistub) < 8 and time.monotonic() < deadline:
            time.sleep(0.02)
        lost_at = time.monotonic()
        if loss == "taken":

            def take(lease: dict[str, Any]) -> dict[str, Any]:
                lease["spec"].update(holderIdentity="scorer-b", renewTime=_micro_now())
                return lease

            apistub.modify("leases", "steer-scorer", take, namespace="default")
        else:
            apistub.fail_next_writes(10_000, status=500, path_contains="/leases/")
        writes_lost = node_writes(apistub)
        if loss == "unrenewable":
            # the last renewal was before lost_at: is_leader is false by the clock from here on
            time.sleep(RENEW_DEADLINE_S + 0.05)
            lapsed = (time.monotonic(), node_writes(apistub))
        cycle.join(timeout=20)
        assert not cycle.is_alive()
        ended_at = time.monotonic()
        time.sleep(0.3)  # anything still in flight lands
        writes_final = node_writes(apistub)
        apistub.clear_requests()
        follower = scorer.run_cycle()
        assert follower.report is None and not follower.leader
        assert node_writes(apistub) == 0
    finally:
        elector.stop(release=False)
    assert told, "the scorer was never told it lost the Lease"
    if loss == "taken":
        assert told[0][0] - lost_at <= RETRY_PERIOD_S + 0.5
        known_at, writes_known = told[0]
        paced = math.ceil((known_at - lost_at) * 2 * WRITE_QPS) + 2
        assert writes_known - writes_lost <= paced
    else:
        assert told[0][0] - lost_at <= RENEW_DEADLINE_S + RETRY_PERIOD_S + 0.5
        known_at, writes_known = min(told[0], lapsed)
        assert known_at < lost_at + LEASE_DURATION_S  # before any other replica may take over
    late = writes_final - writes_known
    assert late <= 2, f"{late} node writes after the scorer knew it was no longer the leader"
    assert ended_at - known_at < 8 / WRITE_QPS + 1.0  # writers waiting at the limiter give up
    assert sample(scorer, "steer_scorer_leader") == 0
    result = results[0]
    assert result.report is not None and 0 < len(result.report.results) < len(names)
    nodes = nodes_of(apistub, names)
    for name in names:
        node = nodes[name]
        record = ManagedRecord.parse(
            (node["metadata"].get("annotations") or {}).get(managed_key(PACED))
        )
        gates = set(node["status"]["allocatable"]) & owned_resource_keys(PACED)
        assert record.resources <= gates, name  # never a record of gates not written
    assert foreign_view(PACED, nodes["node-1"]) == foreign_view(PACED, before)


# ----------------------------------------------------------------------------- hot reload


def _swap(root: Path, content: str, generation: int) -> None:
    """What the kubelet does to a ConfigMap volume: a new timestamped directory, `..data`
    swapped to it atomically, `policy.yaml` a symlink through `..data`."""
    target = root / f"..2026_11_30_{generation:02d}"
    target.mkdir()
    (target / "policy.yaml").write_text(content)
    link = root / "..data_tmp"
    link.symlink_to(target.name)
    os.replace(link, root / "..data")


def test_every_policy_file_that_cannot_load_is_counted_logged_once_and_shown_in_readyz(
    tmp_path: Path, apistub: ApiStub
) -> None:
    """`steer scorer run` as deployed, its policy file put through: broken YAML, a document
    nested 5,000 deep, an empty file, a deletion, a ConfigMap `..data` swap to a bad policy,
    that policy's link removed and put back. Each is counted once, logged once with its
    reason, and shown in /readyz until a good policy loads; every valid edit after is served
    (/readyz names it and the next cycle runs it)."""
    apistub.add_node(synthetic_node("node-1", gpus=2))
    base = SMALL_POLICY.replace("intervalSeconds: 30}", "intervalSeconds: 1}")

    def good(weight: int) -> str:
        return base.replace("      weight: 1\n", f"      weight: {weight}\n", 1)

    volume = tmp_path / "volume"
    volume.mkdir()
    policy_file = volume / "policy.yaml"
    policy_file.write_text(good(1))
    kubeconfig = apistub.kubeconfig(tmp_path / "kubeconfig")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log_file = tmp_path / "scorer.log"
    env = {k: v for k, v in os.environ.items() if k != "PROMETHEUS_MULTIPROC_DIR"}
    command = [
        *(sys.executable, "-m", "launcher", "scorer", "run"),
        *("--policy", str(policy_file), "--kubeconfig", str(kubeconfig)),
        *("--prometheus", f"http://127.0.0.1:{free_port()}"),
        *("--listen", f"127.0.0.1:{port}", "--no-leader-election", "--log-format", "json"),
        "--authorization=none",  # the API stand-in reviews no tokens: /metrics answers anyone
    ]
    session = requests.Session()
    session.trust_env = False

    def ready() -> dict[str, Any]:
        reply = session.get(f"{url}/readyz", timeout=5)
        assert reply.status_code == 200, reply.text
        body: dict[str, Any] = reply.json()
        return body

    def until(check: Callable[[dict[str, Any]], bool], timeout: float = 15.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                reply = session.get(f"{url}/readyz", timeout=5)
                last = reply.json()
                if reply.status_code == 200 and check(last):
                    return dict(last)
            except requests.RequestException as exc:  # not listening yet
                last = exc
            time.sleep(0.1)
        raise AssertionError(f"/readyz never got there; last: {last}")

    def rejected(count: int, reason: str) -> None:
        body = until(lambda b: b["policy"]["reloadErrors"] == count)
        assert reason in (body["policy"]["lastError"] or ""), body
        assert body["policy"]["version"] == served[-1]

    def serves(text: str) -> None:
        version = parse_policy(text).version
        served.append(version)
        until(lambda b: b["policy"]["version"] == version and b["policy"]["lastError"] is None)
        metric = f'steer_scorer_policy_info{{version="{version}"}} 1.0'
        deadline = time.monotonic() + 10
        while metric not in session.get(f"{url}/metrics", timeout=5).text:
            assert time.monotonic() < deadline, f"no cycle ran {version}"
            time.sleep(0.1)

    served = [parse_policy(good(1)).version]
    reasons = []
    with log_file.open("wb") as log:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=log, stderr=log)
    try:
        until(lambda b: b["ready"])
        steps: list[tuple[Callable[[], None], str | None]] = [
            (lambda: policy_file.write_text("spec: {dimensions: [\n"), "not valid YAML"),
            (lambda: policy_file.write_text(good(2)), None),
            (
                lambda: policy_file.write_text("spec: " + "[" * 5000 + "]" * 5000),
                "nested too deeply",
            ),
            (lambda: policy_file.write_text(""), "an empty document"),
            (lambda: policy_file.write_text(good(3)), None),
            (lambda: policy_file.unlink(), "cannot read policy file"),
        ]
        for change, reason in steps:
            change()
            if reason is None:
                serves(policy_file.read_text())
            else:
                reasons.append(reason)
                rejected(len(reasons), reason)
                if len(reasons) == 1:
                    time.sleep(2.5)  # polled again: the same content is not a new error
                    assert ready()["policy"]["reloadErrors"] == 1
        # back as a ConfigMap volume: policy.yaml -> ..data/policy.yaml
        _swap(volume, good(4), 1)
        policy_file.symlink_to("..data/policy.yaml")
        serves(good(4))
        bad = good(5).replace("overcommitPercent: 0", "overcommitPercent: 150")
        _swap(volume, bad, 2)
        reasons.append("spec.tenants[0].overcommitPercent: must be between 0 and 100, got 150")
        rejected(len(reasons), reasons[-1])
        policy_file.unlink()  # the key left the ConfigMap
        reasons.append("cannot read policy file")
        rejected(len(reasons), reasons[-1])
        policy_file.symlink_to("..data/policy.yaml")  # and came back, still the bad policy
        reasons.append("spec.tenants[0].overcommitPercent: must be between 0 and 100, got 150")
        rejected(len(reasons), reasons[-1])
        _swap(volume, good(6), 3)
        serves(good(6))
        metrics = session.get(f"{url}/metrics", timeout=5).text
        assert f"steer_scorer_policy_reload_errors_total {float(len(reasons))}" in metrics
    finally:
        process.send_signal(signal.SIGTERM)
        returncode = process.wait(timeout=20)
    assert returncode == 0, log_file.read_text()
    entries = assert_json_lines(log_file.read_text())
    logged = [e["message"] for e in entries if e["message"].startswith("policy not reloaded")]
    assert len(logged) == len(reasons), logged
    for message, reason in zip(logged, reasons, strict=True):
        assert reason in message, (reason, message)
    assert all(e["level"] == "ERROR" for e in entries if e["message"] in logged)
