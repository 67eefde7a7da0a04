"""The scorer's data checks end to end over a real (backfilled) Prometheus and the API
stand-in: a reading whose scale contradicts its unit is held back (the labels stay until their
TTL, never rewritten from it), a dimension that resolves fewer nodes than its coverage says is
reported with its cause, a silent one is diagnosed from Prometheus, and `/readyz`,
`/explain/nodes` and the metrics say so."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from kits.apistub import ApiStub
from kits.prometheus_server import PrometheusServer
from kits.synthetic_exporter import SyntheticCluster
from launcher.commands import main
from scorer.app import create_app
from scorer.cycle.plan import DataStatus
from scorer.cycle.service import Scorer
from scorer.cycle.writer import NodeApi
from steer.adapters.http_server import HttpServer
from steer.adapters.kubejson import KubeJson
from steer.core.datacheck import ProblemKind
from steer.core.policy import Policy, parse_policy
from tests.apistub_fixtures import client_for
from tests.scorer_support import backfilled_prometheus, stub_nodes

NODES = ("node-1", "node-2", "node-3")
UTIL = "avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)"
POLICY = """\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
metadata: {{name: datacheck}}
spec:
  scoring: {{step: 10, hysteresis: 3, ttlSeconds: 600, intervalSeconds: 30}}
  dimensions:
    - name: util
      query: {query}
      nodeLabel: {label}
      unit: pct
      direction: lowerIsBetter
      normalization: {{method: fixed, min: 0, max: 100}}
      weight: 1
      coverage: {{nodes: offering, podClass: gpu, minPercent: {min_percent}}}
  podClasses:
    - name: gpu
      requestsAny: [nvidia.com/gpu]
      dimensions: [util]
"""


def policy(query: str = UTIL, label: str = "hostname", min_percent: int = 50) -> Policy:
    return parse_policy(POLICY.format(query=query, label=label, min_percent=min_percent))


@pytest.fixture(scope="module")
def prom() -> Iterator[PrometheusServer]:
    cluster = SyntheticCluster(nodes=3, gpus_per_node=2)
    for name, util in zip(NODES, (20, 50, 95), strict=True):
        cluster.set_gpu_util(name, util)
    with backfilled_prometheus(cluster, span_s=120) as server:
        yield server


def scorer_for(
    stub: ApiStub, tmp_path: Path, prom: PrometheusServer, current: list[Policy]
) -> Scorer:
    kube = client_for(stub, tmp_path / f"kubeconfig-{time.monotonic_ns()}")
    return Scorer(lambda: current[0], NodeApi(KubeJson(kube)), prometheus_url=prom.url)


def util_label(stub: ApiStub, node: str) -> str | None:
    return stub.get("nodes", node)["metadata"]["labels"].get("kube-steer.github.io/score-util")


def test_a_unit_change_is_held_back_and_the_published_scores_stay(
    apistub: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    stub_nodes(apistub, NODES)
    current = [policy()]
    scorer = scorer_for(apistub, tmp_path, prom, current)
    first = scorer.run_cycle()
    assert first.plan.data_problems == ()
    before = {n: util_label(apistub, n) for n in NODES}
    assert before == {"node-1": "80", "node-2": "50", "node-3": "10"}

    # The exporter now reports a ratio (here: the query divides by 100): 0.95 for the busy GPU.
    current[0] = policy(query=f"{UTIL} / 100")
    held = scorer.run_cycle()
    (summary,) = held.plan.dimensions
    assert not summary.ok and summary.error_kind == "unit"
    (problem,) = summary.problems
    assert problem.kind == ProblemKind.UNIT and problem.blocking and "0.95" in problem.message
    assert {n: util_label(apistub, n) for n in NODES} == before  # not rewritten from it
    node3 = held.plan.node("node-3")
    assert node3 is not None and node3.dimensions["util"].status == DataStatus.RETAINED
    text = scorer.metrics.registry.get_sample_value(
        "steer_scorer_held_readings_total", {"dimension": "util", "reason": "unit"}
    )
    assert text == 1.0
    assert (
        scorer.metrics.registry.get_sample_value(
            "steer_scorer_data_problems", {"dimension": "util", "kind": "unit"}
        )
        == 1.0
    )


def test_fewer_nodes_than_the_coverage_expects_is_reported_with_the_cause_and_diagnosed(
    apistub: ApiStub, tmp_path: Path, prom: PrometheusServer
) -> None:
    stub_nodes(apistub, (*NODES, "node-4", "node-5"))  # two GPU nodes no exporter reports
    current = [policy()]
    scorer = scorer_for(apistub, tmp_path, prom, current)
    result = scorer.run_cycle()
    (summary,) = result.plan.dimensions
    assert summary.ok and summary.expected == 5 and summary.nodes == 3
    (problem,) = summary.problems
    assert problem.kind == ProblemKind.COVERAGE and not problem.blocking
    assert "3 of 5 expected nodes" in problem.message and "node-4, node-5" in problem.message
    assert util_label(apistub, "node-1") == "80"  # published for the nodes it resolves

    # Above minPercent 60 % it is held back: 3 of 5 is 60 %, so 61 % holds it.
    current[0] = policy(min_percent=61)
    held = scorer.run_cycle()
    assert held.plan.dimensions[0].error_kind == "coverage"


def test_a_node_label_spelled_otherwise_is_diagnosed_and_shown_by_readyz_and_explain(
    apistub: ApiStub, tmp_path: Path, prom: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    stub_nodes(apistub, NODES)
    # The exporter (as released now) says `hostname`; the policy reads the old `Hostname`.
    current = [policy(query="avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)", label="Hostname")]
    scorer = scorer_for(apistub, tmp_path, prom, current)
    scorer.run_cycle()
    http = requests.Session()
    http.trust_env = False
    with HttpServer(create_app(scorer)) as server:
        ready = http.get(f"{server.url}/readyz", timeout=10)
        nodes = http.get(f"{server.url}/explain/nodes", timeout=10).json()
        assert main(["explain", "nodes", "--scorer", server.url]) == 0
        text = capsys.readouterr().out
    assert ready.status_code == 200  # data problems do not make the scorer unready
    data = ready.json()["data"]
    kinds = {p["kind"] for p in data["dimensions"]["util"]["problems"]}
    assert {"node-label", "coverage"} <= kinds
    assert any("set nodeLabel: hostname" in line for line in data["lines"])
    (status,) = nodes["dimensions"]
    assert status["expectedNodes"] == 3 and status["nodes"] == 0
    assert any(p["fix"].startswith("set nodeLabel: hostname") for p in status["problems"])
    assert "data: util: none of the series it reads" in text and "set nodeLabel: hostname" in text


def test_a_source_that_cannot_be_read_is_a_data_problem_of_the_cycle(
    apistub: ApiStub, tmp_path: Path
) -> None:
    """The DataReady condition and /readyz list every problem: a failed read counts."""
    stub_nodes(apistub, NODES)
    kube = client_for(apistub, tmp_path / "kubeconfig")
    scorer = Scorer(lambda: policy(), NodeApi(KubeJson(kube)), prometheus_url="http://127.0.0.1:1")
    (problem,) = scorer.run_cycle().plan.data_problems
    assert problem.kind == ProblemKind.UNREADABLE and "127.0.0.1:1" in problem.message
    assert "spec.prometheus.url" in problem.fix
