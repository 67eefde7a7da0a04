"""The synthetic exporter's Kepler series: Kepler >= 0.10's families by default, shaped like a
real scrape (tests/fixtures/exporters), with its active/idle split; Kepler 0.7's on request."""

from __future__ import annotations

import io
from collections import defaultdict
from collections.abc import Callable

import pytest
import yaml
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kits.prometheus_server import PrometheusServer, scraped_cluster
from kits.simulated_cluster import SimCluster
from kits.synthetic_exporter import (
    DRAM_SHARE,
    Family,
    FamilySource,
    SyntheticCluster,
    SyntheticCollector,
)
from steer.core.datacheck.exporters import FAMILIES
from steer.presets import example_policy_text
from tests.conftest import FIXTURES

REAL_KEPLER = FIXTURES / "exporters" / "kepler-v0.11.4-node.prom"
# Families of the real scrape the kits do not emit: build and CPU model information.
NOT_EMITTED = {"kepler_build_info", "kepler_node_cpu_info"}
# The families the data checks know as Kepler >= 0.10 (steer/core/datacheck/exporters.py).
KEPLER_010 = set(next(f for f in FAMILIES if f.title == "Kepler >= 0.10").metrics)
KEPLER_07 = {"kepler_node_platform_joules_total", "kepler_node_package_joules_total"}


class Shape:
    """Per family of an exposition text: type, HELP, label names, and (zone, path) pairs."""

    def __init__(self, text: str) -> None:
        self.kind: dict[str, str] = {}
        self.help: dict[str, str] = {}
        self.label_names: dict[str, set[frozenset[str]]] = defaultdict(set)
        self.zones: dict[str, set[tuple[str, str]]] = defaultdict(set)
        for fam in text_string_to_metric_families(text):
            if not fam.name.startswith("kepler_"):
                continue
            name = f"{fam.name}_total" if fam.type == "counter" else fam.name
            self.kind[name], self.help[name] = fam.type, fam.documentation
            for s in fam.samples:
                self.label_names[name].add(frozenset(s.labels))
                if "zone" in s.labels:
                    self.zones[name].add((s.labels["zone"], s.labels["path"]))


def exposition(source: FamilySource) -> str:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SyntheticCollector(source))
    return generate_latest(registry).decode()


def by_zone(families: list[Family], name: str, node: str) -> dict[str, float]:
    return {
        labels["zone"]: value
        for f in families
        if f.name == name
        for labels, value in f.samples
        if labels["node_name"] == node
    }


def simulated() -> SimCluster:
    sim = SimCluster()
    node = {
        "metadata": {"name": "cpu-1"},
        "status": {"allocatable": {"cpu": "16"}, "conditions": [{"type": "Ready"}]},
    }
    sim.update([node], [], now=0)
    return sim


@pytest.mark.parametrize(
    "source",
    [lambda: SyntheticCluster(nodes=2, gpus_per_node=0), simulated],
    ids=["SyntheticCluster", "SimCluster"],
)
def test_kepler_010_families_are_shaped_like_a_real_kepler_scrape(
    source: Callable[[], FamilySource],
) -> None:
    real = Shape(REAL_KEPLER.read_text())
    ours = Shape(exposition(source()))
    assert set(ours.kind) == set(real.kind) - NOT_EMITTED == KEPLER_010
    for name in KEPLER_010:
        assert ours.kind[name] == real.kind[name], name
        assert ours.help[name] == real.help[name], name
        assert ours.label_names[name] == real.label_names[name], name
        # Zones: `package` and `dram` (not `core`, which `package` contains), with real paths.
        assert ours.zones[name] <= real.zones[name], name
    assert {zone for zone, _ in ours.zones["kepler_node_cpu_watts"]} == {"package", "dram"}


def test_kepler_010_splits_each_zone_into_active_and_idle_by_the_usage_ratio() -> None:
    cluster = SyntheticCluster(nodes=1, gpus_per_node=0)
    cluster.set_power("node-1", package_watts=200)
    cluster.set_cpu_usage("node-1", 0.25)
    cluster.families(now=100)
    fams = cluster.families(now=110)  # 10 s at 200 W, a quarter of the CPU in use

    watts = by_zone(fams, "kepler_node_cpu_watts", "node-1")
    assert watts == {
        "package": pytest.approx(200 * (1 - DRAM_SHARE)),
        "dram": pytest.approx(200 * DRAM_SHARE),
    }
    active = by_zone(fams, "kepler_node_cpu_active_watts", "node-1")
    idle = by_zone(fams, "kepler_node_cpu_idle_watts", "node-1")
    for zone, total in watts.items():
        assert active[zone] == pytest.approx(0.25 * total)
        assert idle[zone] == pytest.approx(total - active[zone])
    joules = by_zone(fams, "kepler_node_cpu_joules_total", "node-1")
    active_j = by_zone(fams, "kepler_node_cpu_active_joules_total", "node-1")
    idle_j = by_zone(fams, "kepler_node_cpu_idle_joules_total", "node-1")
    assert sum(joules.values()) == pytest.approx(2000)
    assert sum(active_j.values()) == pytest.approx(500)
    assert sum(idle_j.values()) == pytest.approx(1500)
    ratio = [s for f in fams if f.name == "kepler_node_cpu_usage_ratio" for s in f.samples]
    assert ratio == [({"node_name": "node-1"}, 0.25)]
    assert not {f.name for f in fams} & KEPLER_07


def test_the_counters_split_each_interval_by_the_usage_ratio_of_that_interval() -> None:
    cluster = SyntheticCluster(nodes=1, gpus_per_node=0)
    cluster.set_power("node-1", package_watts=100)
    cluster.set_cpu_usage("node-1", 0.0)
    cluster.families(now=0)
    cluster.families(now=10)  # idle for 10 s
    cluster.set_cpu_usage("node-1", 1.0)
    fams = cluster.families(now=20)  # fully busy for 10 s
    assert sum(by_zone(fams, "kepler_node_cpu_active_joules_total", "node-1").values()) == (
        pytest.approx(1000)
    )
    assert sum(by_zone(fams, "kepler_node_cpu_idle_joules_total", "node-1").values()) == (
        pytest.approx(1000)
    )


def test_the_usage_ratio_follows_cpu_requests_unless_set() -> None:
    cluster = SyntheticCluster(nodes=2, gpus_per_node=0)  # 64 cores each
    cluster.add_container("node-1", "team-a", "a", requests={"cpu": 12})
    cluster.add_container("node-1", "team-a", "b", requests={"cpu": 4})

    def ratios() -> dict[str, float]:
        return {
            labels["node_name"]: value
            for f in cluster.families(now=0)
            if f.name == "kepler_node_cpu_usage_ratio"
            for labels, value in f.samples
        }

    assert ratios() == {"node-1": 0.25, "node-2": 0.0}
    cluster.set_cpu_usage("node-2", 0.6)
    cluster.add_container("node-1", "team-a", "c", requests={"cpu": 100})  # over-requested
    assert ratios() == {"node-1": 1.0, "node-2": 0.6}
    cluster.set_cpu_usage("node-2", None)
    assert ratios()["node-2"] == 0.0
    with pytest.raises(ValueError, match=r"must be 0\.\.1, got 1\.5"):
        cluster.set_cpu_usage("node-1", 1.5)


def test_kepler_07_on_request_and_both_for_a_migration() -> None:
    old = SyntheticCluster(nodes=1, gpus_per_node=0, kepler_styles=("0.7",))
    old.set_power("node-1", platform_watts=300, package_watts=100)
    old.families(now=0)
    names = {f.name for f in old.families(now=10)}
    assert names & (KEPLER_07 | KEPLER_010) == KEPLER_07
    package = {
        labels["mode"]: value
        for f in old.families(now=10)
        if f.name == "kepler_node_package_joules_total"
        for labels, value in f.samples
    }
    assert sum(package.values()) == pytest.approx(1000)
    both = SyntheticCluster(nodes=1, gpus_per_node=0, kepler_styles=("0.7", "0.10"))
    assert {f.name for f in both.families(now=0)} >= KEPLER_07 | KEPLER_010


def test_openmetrics_backfill_carries_the_kepler_010_families() -> None:
    cluster = SyntheticCluster(nodes=1, gpus_per_node=0)
    cluster.set_power("node-1", package_watts=100)
    text = io.StringIO()
    cluster.write_openmetrics(text, [0.0, 15.0])
    shape = Shape(text.getvalue().replace("# EOF\n", ""))
    assert set(shape.kind) == KEPLER_010
    lines = text.getvalue().splitlines()
    assert "# TYPE kepler_node_cpu_joules counter" in lines
    assert any(
        line.startswith('kepler_node_cpu_joules_total{node_name="node-1",path=')
        and line.endswith(" 1275.0 15.000")  # 15 s x 100 W x the package share
        for line in lines
    )


def test_the_example_policy_energy_queries_read_the_synthetic_kepler_series() -> None:
    """The example policy's Kepler queries, as a real Prometheus runs them on a scrape."""
    dims = {d["name"]: d for d in yaml.safe_load(example_policy_text())["spec"]["dimensions"]}
    cluster = SyntheticCluster(nodes=2, gpus_per_node=0)  # 64 cores each
    cluster.set_power("node-1", package_watts=200)
    cluster.set_power("node-2", package_watts=300)
    cluster.add_container("node-1", "team-a", "a", requests={"cpu": 16})  # usage 0.25
    cluster.set_cpu_usage("node-2", 0.5)  # busy, but no pod requests a core
    with scraped_cluster(cluster, scrape_interval_s=1.0) as (_exporter, prom):
        values = {
            name: query(prom, dims[name]["query"], dims[name]["nodeLabel"], count)
            for name, count in (("power", 2), ("idle-power", 2))
        }
        # What a core adds is the slope of watts over usage in the last hour: a load that has
        # not moved says nothing (tests/test_energy_signals.py reads it over a moving one).
        with prom.client() as client:
            steady = client.query(dims["core-power"]["query"])
    assert values["power"] == {"node-1": pytest.approx(200), "node-2": pytest.approx(300)}
    assert steady.samples == ()
    assert values["idle-power"] == {"node-1": pytest.approx(150), "node-2": pytest.approx(150)}


def query(prom: PrometheusServer, promql: str, label: str, count: int) -> dict[str, float]:
    result = prom.wait_for(promql, lambda r: len(r.values_by(label)) == count, timeout_s=30)
    return result.values_by(label)
