"""The Grafana dashboard (manifests/components/prometheus-operator/dashboards/kube-steer.json)
queries what the services really export: every panel's PromQL, run on a real Prometheus that
scrapes the real scorer's and webhook's `/metrics` after they did real work (the demo's
environment: a synthetic exporter, Prometheus and the Kubernetes API stand-in; scorer cycles
that wrote labels and pools; the demo pods through /mutate and /validate, one of them denied),
answers with at least one series.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
import yaml

from kits.demo.environment import demo_environment
from kits.demo.loop import admit, wait_for_cycles
from kits.demo.pods import demo_pods
from kits.prometheus_server import PrometheusServer
from kits.service_processes import RunningScorer, running_scorer, running_webhook
from tests.conftest import ROOT
from tests.test_install_manifests import exported_series

COMPONENT = ROOT / "manifests" / "components" / "prometheus-operator"
DASHBOARD = COMPONENT / "dashboards" / "kube-steer.json"
# Grafana's own variables, as Grafana fills them in before it sends a query.
GRAFANA_VARIABLES = {"$__rate_interval": "30s", "$__interval": "5s", "$__range": "5m"}


def dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return doc


def queries() -> list[tuple[str, str]]:
    """(panel title, PromQL) of every target of every panel."""
    return [
        (panel["title"], target["expr"])
        for panel in dashboard()["panels"]
        for target in panel.get("targets", [])
    ]


def test_the_component_ships_the_dashboard_file_as_a_grafana_configmap() -> None:
    kustomization = yaml.safe_load((COMPONENT / "kustomization.yaml").read_text())
    (generator,) = kustomization["configMapGenerator"]
    assert generator["name"] == "steer-dashboard" and generator["namespace"] == "kube-steer"
    assert generator["files"] == ["kube-steer.json=dashboards/kube-steer.json"]
    assert generator["options"]["labels"]["grafana_dashboard"] == "1"
    assert generator["options"]["disableNameSuffixHash"] is True
    doc = dashboard()
    assert doc["uid"] == "kube-steer"
    titles = {p["title"] for p in doc["panels"]}
    for title in (
        "Last successful cycle",
        "Cycle duration",
        "Cycles by result",
        "Data age per dimension",
        "Node label writes",
        "Budget pools free",
        "Admission latency",
        "Admission decisions",
    ):
        assert title in titles
    # Every panel asks the dashboard's Prometheus variable, not a data source of one Grafana.
    for panel in doc["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}
            assert panel["targets"], panel["title"]


def test_the_panels_use_only_series_the_services_export() -> None:
    used = {name for _title, expr in queries() for name in re.findall(r"\bsteer_[a-z_]+\b", expr)}
    assert used <= exported_series(), sorted(used - exported_series())


@pytest.fixture(scope="module")
def scraped_services() -> Iterator[tuple[PrometheusServer, RunningScorer]]:
    """The scorer and the webhook after cycles and admissions, scraped by a real Prometheus."""
    with (
        demo_environment(interval_seconds=1) as env,
        tempfile.TemporaryDirectory(prefix="steer-dashboard-") as tmp,
    ):
        policy = env.policy
        lease = ["--lease-namespace", "default"]  # the stand-in has no project namespace
        with (
            running_scorer(
                env, env.policy_file, env.prometheus_url, Path(tmp), extra_args=lease
            ) as scorer,
            running_webhook(env, env.policy_file, Path(tmp), workers=2) as hook,
            hook.session() as session,
        ):
            wait_for_cycles(scorer, 2)
            verdicts = [admit(policy, pod, hook, session, scorer) for pod in demo_pods()]
            assert any(not v.allowed for v in verdicts)  # the dept-b pod over its budget
            targets = [urlsplit(scorer.url).netloc, urlsplit(hook.metrics_url).netloc]
            with PrometheusServer(targets, scrape_interval_s=0.5) as prom:
                # Three scrapes of both: rate() over the panels' window has points to use.
                prom.wait_for(
                    "count_over_time(up[1m]) >= 3",
                    lambda r: len(r.samples) == 2,
                    timeout_s=30,
                )
                yield prom, scorer


@pytest.mark.parametrize(("panel", "expr"), queries(), ids=[f"{t}:{e[:40]}" for t, e in queries()])
def test_every_panel_query_answers_with_series(
    scraped_services: tuple[PrometheusServer, RunningScorer], panel: str, expr: str
) -> None:
    prom, _scorer = scraped_services
    query = expr
    for variable, value in GRAFANA_VARIABLES.items():
        query = query.replace(variable, value)
    assert "$" not in query, f"{panel}: a variable the test does not fill: {query}"
    with prom.client() as client:
        result = client.query(query)
    assert result.samples, f"{panel}: no series for {query}"


def test_the_pool_panel_adds_up_what_the_scorer_explains(
    scraped_services: tuple[PrometheusServer, RunningScorer],
) -> None:
    prom, scorer = scraped_services
    nodes = scorer.get("/explain/nodes")["nodes"]
    explained: dict[str, int] = {}
    for node in nodes:
        for resource, usage in (node.get("poolUsage") or {}).items():
            explained[resource] = explained.get(resource, 0) + usage["free"]
    assert explained, "the demo policy publishes budget pools"
    with prom.client() as client:
        result = client.query("sum by (resource) (steer_scorer_pool_free)")
    exported = {s.labels["resource"]: s.value for s in result.samples}
    # Both were read after the scorer's last cycle settled (the demo's pods are never created).
    assert exported == pytest.approx(explained)
    assert all(re.fullmatch(r"[a-z0-9.-]+/pool-(cpu|memory)", r) for r in exported)
