"""`steer policy check` and the scorer against a real Prometheus holding exporters' own output.

The fixtures (tests/fixtures/exporters/, README.md there) are the expositions of dcgm-exporter,
Kepler, kube-state-metrics and the blackbox exporter in the forms a cluster meets: the releases
the example policy reads (dcgm-exporter 3.x with `Hostname`, 4.8 with `hostname` and the
ratio/bytes names reported for 4.9, Kepler 0.7-0.9 and >= 0.10, each alone and mixed across and
within nodes; the scorer's cycle and its DataReady condition name the form of each), and the misconfigured ones
that make it read nothing (a `hostname` that names the exporter pod, a ratio where a percent is
declared, a scrape without honor_labels). Each Prometheus is filled with promtool before it
starts (samples of the last ten minutes, so instant queries see them), one per fixture family
and module; only the honor_labels case is scraped, because the renaming is the scrape's doing.
"""

from __future__ import annotations

import dataclasses
import json
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.net import free_port
from kits.prometheus_server import PrometheusServer
from launcher.commands import main
from scorer.check import CheckReport, check_policy
from scorer.cycle.service import Scorer
from scorer.cycle.sources.prometheus import read_device_heat
from scorer.cycle.writer import NodeApi
from scorer.model import NodeState
from steer.adapters.kubejson import KubeJson
from steer.adapters.policy_file import load_policy_file
from steer.core.policy.crd import data_condition
from steer.presets import ENERGY_KEPLER_07, POWER_KEPLER_07
from tests.apistub_fixtures import client_for
from tests.conftest import EXAMPLE_POLICY, FIXTURES
from tests.json_server import json_server

EXPORTERS = FIXTURES / "exporters"
GPU_NODES = ("ip-10-0-1-11.ec2.internal", "ip-10-0-1-12.ec2.internal")
CPU_NODES = ("ip-10-0-2-21.ec2.internal", "ip-10-0-2-22.ec2.internal")
NODES = GPU_NODES + CPU_NODES
# The nodes as `--kubeconfig` would list them: GPU nodes offer what pod class gpu requests.
NODE_STATES = tuple(
    NodeState(name=n, allocatable={"cpu": "48", "nvidia.com/gpu": "4"}) for n in GPU_NODES
) + tuple(NodeState(name=n, allocatable={"cpu": "16"}) for n in CPU_NODES)
# Each node's CPU capacity (cores), idle watts and watts per busy core: over the history, its
# usage ratio is 0.5 in the first half and 1.0 in the second, and Kepler reports package + DRAM
# watts = idle + per core x usage x capacity. The real v0.11.4 scrape comes from Kepler's fake
# CPU meter (microwatt magnitudes); its series are scaled to these draws per node.
MACHINES = {
    NODES[0]: (48, 180.0, 5.0),
    NODES[1]: (48, 200.0, 3.75),
    NODES[2]: (16, 100.0, 5.0),
    NODES[3]: (16, 110.0, 2.5),
}
USAGE = (0.5, 1.0)
KEPLER_WATTS = {
    n: idle + per_core * USAGE[1] * cap for n, (cap, idle, per_core) in MACHINES.items()
}
KEPLER_PODS = {
    NODES[0]: "10.0.1.17:28282",
    NODES[1]: "10.0.1.23:28282",
    NODES[2]: "10.0.2.41:28282",
    NODES[3]: "10.0.2.58:28282",
}
GPU_DIMENSIONS = ("gpu-util", "gpu-free", "gpu-frag")
ENERGY_DIMENSIONS = ("power", "core-power", "idle-power")
# Ten minutes of samples, 15 s apart, ending at backfill time: the latest within every lookback
# window, and enough minutes for core-power's slope over the hour (steps of 1 m) to see both
# halves of the Kepler history.
HISTORY_S, STEP_S = 600, 15


# --- expositions --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Family:
    """One metric family of a text exposition. `name` is as exposed (a counter's ends in
    `_total`); label values stay escaped as written, so they are written back unchanged."""

    name: str
    kind: str
    help: str
    samples: tuple[tuple[Mapping[str, str], float], ...] = ()


_SAMPLE = re.compile(
    r"^(?P<name>[a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)$"
)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text: str) -> list[Family]:
    """The families of a Prometheus text exposition (comments other than HELP/TYPE skipped)."""
    helps: dict[str, str] = {}
    families: dict[str, Family] = {}
    for line in text.splitlines():
        if line.startswith("# HELP "):
            name, _, help_text = line[len("# HELP ") :].partition(" ")
            helps[name] = help_text
        elif line.startswith("# TYPE "):
            name, _, kind = line[len("# TYPE ") :].partition(" ")
            families[name] = Family(name, kind, helps.get(name, ""))
        elif line and not line.startswith("#"):
            match = _SAMPLE.match(line)
            assert match is not None, f"not a sample line: {line!r}"
            family = families[match["name"]]
            labels = dict(_LABEL.findall(match["labels"] or ""))
            families[family.name] = dataclasses.replace(
                family, samples=(*family.samples, (labels, float(match["value"])))
            )
    return list(families.values())


def exposition(name: str) -> list[Family]:
    return parse_exposition((EXPORTERS / name).read_text())


def scraped_as(families: Sequence[Family], **target: str) -> list[Family]:
    """The families as Prometheus stores them after a scrape with honor_labels: true: the
    target's labels (`job`, `instance`) are added where the exporter does not set its own."""
    return [
        dataclasses.replace(f, samples=tuple(({**target, **ls}, v) for ls, v in f.samples))
        for f in families
    ]


def scaled(families: Sequence[Family], name: str, factor: float) -> list[Family]:
    return [
        dataclasses.replace(f, samples=tuple((ls, v * factor) for ls, v in f.samples))
        if f.name == name
        else f
        for f in families
    ]


def package_and_dram(families: Sequence[Family], name: str) -> float:
    """The sum of family `name` over the zones the example policy reads (they do not overlap)."""
    (family,) = (f for f in families if f.name == name)
    return sum(v for labels, v in family.samples if labels["zone"] in ("package", "dram"))


def kepler_cluster(scrape: Sequence[Family], usage: float) -> list[Family]:
    """The real one-node Kepler scrape once per node at CPU usage `usage`: `node_name` set to
    the node; each zone's watts and joules scaled so that package + DRAM draw what `MACHINES`
    says at that usage, the `_active_` part usage x that and the `_idle_` part the rest, as
    Kepler splits them; its scrape target in `instance` (which keeps the families without
    `node_name` apart)."""
    out = []
    for family in scrape:
        energy = family.name.endswith(("_watts", "_joules_total"))
        part = usage if "_active_" in family.name else 1 - usage if "_idle_" in family.name else 1
        samples = []
        for node, (cores, idle, per_core) in MACHINES.items():
            draw = idle + per_core * usage * cores
            factor = draw * part / package_and_dram(scrape, family.name) if energy else 1.0
            for labels, value in family.samples:
                labels = {**labels, "job": "kepler", "instance": KEPLER_PODS[node]}
                if "node_name" in labels:
                    labels["node_name"] = node
                if family.name == "kepler_node_cpu_usage_ratio":
                    value = usage
                samples.append((labels, value * factor))
        out.append(dataclasses.replace(family, samples=tuple(samples)))
    return out


# Kepler 0.7's joule counters grow by this share of their fixture value per second over the
# history: 38605 J of a package's dynamic energy reads as 38.6 W.
COUNTER_GROWTH = 1e-3


def counter_watts(value: float) -> float:
    return value * COUNTER_GROWTH


def openmetrics(
    families: Sequence[Family], timestamps: Sequence[float], *, growing: bool = False
) -> str:
    """OpenMetrics text for `promtool tsdb create-blocks-from openmetrics`: each series held
    at its value over `timestamps`; with `growing`, counters rise from their value by
    `COUNTER_GROWTH` of it per second (Kepler 0.7's, which the queries read as a rate)."""
    lines = []
    for family in families:
        name = family.name.removesuffix("_total") if family.kind == "counter" else family.name
        lines += [f"# HELP {name} {family.help}", f"# TYPE {name} {family.kind}"]
        grows = growing and family.kind == "counter"
        for labels, value in family.samples:
            text = ",".join(f'{k}="{v}"' for k, v in labels.items())
            lines += [
                f"{family.name}{{{text}}} "
                f"{value + (counter_watts(value) * (ts - timestamps[0]) if grows else 0.0)!r} "
                f"{ts:.3f}"
                for ts in timestamps
            ]
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@contextmanager
def backfilled(
    families: Sequence[Family],
    kepler: tuple[Sequence[Family], Sequence[Family]] | None = None,
    counters: Sequence[Family] = (),
) -> Iterator[PrometheusServer]:
    """`families` held over the whole history; `kepler`'s first part over its first half and
    its second part over the rest; `counters` rising over the whole history."""
    now = time.time()
    timestamps = [now - HISTORY_S + i * STEP_S for i in range(HISTORY_S // STEP_S + 1)]
    half = len(timestamps) // 2
    text = openmetrics(families, timestamps)
    if counters:
        text = text.removesuffix("# EOF\n") + openmetrics(counters, timestamps, growing=True)
    if kepler is not None:
        first, second = kepler
        text = text.removesuffix("# EOF\n") + _merged(
            openmetrics(first, timestamps[:half]), openmetrics(second, timestamps[half:])
        )
    prom = PrometheusServer([])
    prom.backfill(text)
    with prom:
        yield prom


def _merged(first: str, second: str) -> str:
    """Two OpenMetrics texts of the same families over consecutive times, as one: each
    family's samples once under its HELP/TYPE, in time order per series."""
    blocks: dict[str, list[str]] = {}
    heads: dict[str, list[str]] = {}
    for text in (first, second):
        current = ""
        for line in text.splitlines():
            if line.startswith("# HELP "):
                current = line.split()[2]
                heads.setdefault(current, [line])
            elif line.startswith("# TYPE "):
                if len(heads[current]) == 1:
                    heads[current].append(line)
            elif line and line != "# EOF":
                blocks.setdefault(current, []).append(line)
    out: list[str] = []
    for name, head in heads.items():
        series: dict[str, list[str]] = {}
        for line in blocks.get(name, []):
            series.setdefault(line.rsplit(" ", 2)[0], []).append(line)
        out += head + [line for lines in series.values() for line in lines]
    return "\n".join([*out, "# EOF"]) + "\n"


# --- what each Prometheus holds -------------------------------------------------------------------


def dcgm(name: str) -> list[Family]:
    return scraped_as(exposition(name), job="nvidia-dcgm-exporter")


def kepler_010() -> tuple[list[Family], list[Family]]:
    """The first and the second half of the Kepler >= 0.10 history (usage 0.5, then 1.0)."""
    scrape = exposition("kepler-v0.11.4-node.prom")
    return kepler_cluster(scrape, USAGE[0]), kepler_cluster(scrape, USAGE[1])


def kepler_07() -> list[Family]:
    return scraped_as(exposition("kepler-0.7-node.prom"), job="kepler")


def on_nodes(families: Sequence[Family], label: str, nodes: Sequence[str]) -> list[Family]:
    """Only the series whose `label` names one of `nodes`."""
    return [
        dataclasses.replace(f, samples=tuple(s for s in f.samples if s[0].get(label) in nodes))
        for f in families
    ]


def tenancy_and_health() -> list[Family]:
    ksm = scraped_as(
        exposition("kube-state-metrics.prom"), job="kube-state-metrics", instance="10.0.2.9:8080"
    )
    return ksm + exposition("blackbox-node-health.prom")


@pytest.fixture(scope="module")
def current() -> Iterator[PrometheusServer]:
    """The current releases: dcgm-exporter 4.8 (`hostname` = node), Kepler >= 0.10."""
    families = dcgm("dcgm-exporter-4.8-hostname.prom") + tenancy_and_health()
    with backfilled(families, kepler_010()) as prom:
        yield prom


@pytest.fixture(scope="module")
def capital_hostname() -> Iterator[PrometheusServer]:
    families = dcgm("dcgm-exporter-3.x-Hostname.prom") + tenancy_and_health()
    with backfilled(families, kepler_010()) as prom:
        yield prom


@pytest.fixture(scope="module")
def pod_hostname() -> Iterator[PrometheusServer]:
    families = dcgm("dcgm-exporter-pod-hostname.prom") + tenancy_and_health()
    with backfilled(families, kepler_010()) as prom:
        yield prom


@pytest.fixture(scope="module")
def ratio_bytes() -> Iterator[PrometheusServer]:
    """The ratio/bytes names reported for dcgm-exporter 4.9, with Kepler >= 0.10."""
    families = dcgm("dcgm-exporter-4.9-ratio-bytes.prom") + tenancy_and_health()
    with backfilled(families, kepler_010()) as prom:
        yield prom


@pytest.fixture(scope="module")
def ratio_name_in_percent() -> Iterator[PrometheusServer]:
    """DCGM_FI_DEV_GPU_UTIL_RATIO holding the integer percent, as DCGM's own code still fills
    field 203 under that name (docs/exporters.md)."""
    gpus = scaled(dcgm("dcgm-exporter-4.9-ratio-bytes.prom"), "DCGM_FI_DEV_GPU_UTIL_RATIO", 100)
    with backfilled(gpus + tenancy_and_health(), kepler_010()) as prom:
        yield prom


@pytest.fixture(scope="module")
def old_kepler() -> Iterator[PrometheusServer]:
    families = dcgm("dcgm-exporter-4.8-hostname.prom") + tenancy_and_health()
    with backfilled(families, counters=kepler_07()) as prom:
        yield prom


@pytest.fixture(scope="module")
def older() -> Iterator[PrometheusServer]:
    """The older releases together: dcgm-exporter 3.x (`Hostname`) and Kepler 0.7."""
    families = dcgm("dcgm-exporter-3.x-Hostname.prom") + tenancy_and_health()
    with backfilled(families, counters=kepler_07()) as prom:
        yield prom


# A cluster in the middle of upgrading both exporters: dcgm-exporter 4.8 on the first GPU node
# and 3.x on the second, and on the first the 3.x exporter's series still there (renamed
# `Hostname`); Kepler >= 0.10 on the first GPU node and the first CPU node, 0.7 on the other two
# and on the first GPU node too.
BOTH_FORMS_GPU, BOTH_FORMS_CPU = GPU_NODES[0], NODES[0]
KEPLER_NEW = (NODES[0], NODES[2])
KEPLER_OLD = (NODES[0], NODES[1], NODES[3])


@pytest.fixture(scope="module")
def mixed() -> Iterator[PrometheusServer]:
    new = on_nodes(dcgm("dcgm-exporter-4.8-hostname.prom"), "hostname", GPU_NODES[:1])
    old = dcgm("dcgm-exporter-3.x-Hostname.prom")
    # The 3.x exporter on the first node read its GPUs otherwise (all idle, all free): were it
    # counted beside the 4.8 exporter's, the first node's values would move.
    old = [
        dataclasses.replace(
            f,
            samples=tuple(
                (
                    ls,
                    0.0
                    if ls["Hostname"] == GPU_NODES[0] and f.name != "DCGM_FI_DEV_FB_FREE"
                    else v,
                )
                for ls, v in f.samples
            ),
        )
        for f in old
    ]
    first, second = kepler_010()
    kepler = (on_nodes(first, "node_name", KEPLER_NEW), on_nodes(second, "node_name", KEPLER_NEW))
    kepler_old = on_nodes(kepler_07(), "instance", KEPLER_OLD)
    with backfilled(new + old + tenancy_and_health(), kepler, kepler_old) as prom:
        yield prom


@pytest.fixture(scope="module")
def ratio_util() -> Iterator[PrometheusServer]:
    """A source whose GPU utilisation turned into a 0..1 ratio (no dcgm-exporter release does
    that to DCGM_FI_DEV_GPU_UTIL; DCGM's profiling fields are ratios)."""
    gpus = scaled(dcgm("dcgm-exporter-4.8-hostname.prom"), "DCGM_FI_DEV_GPU_UTIL", 0.01)
    with backfilled(gpus + tenancy_and_health(), kepler_010()) as prom:
        yield prom


# The labels a prometheus-operator ServiceMonitor gives the dcgm-exporter target (its own pod).
EXPORTER_POD_TARGET = {
    "namespace": "gpu-operator",
    "pod": "nvidia-dcgm-exporter-wwwjh",
    "container": "nvidia-dcgm-exporter",
}


class HonorLabelsFalse(PrometheusServer):
    """Scrapes as a ServiceMonitor does by default (honorLabels: false): the target's own
    `namespace`/`pod`/`container` win, and the exporter's are renamed `exported_*`."""

    def config(self) -> dict[str, Any]:
        config = super().config()
        (job,) = config["scrape_configs"]
        job["honor_labels"] = False
        job["static_configs"] = [{"targets": self.targets, "labels": EXPORTER_POD_TARGET}]
        return config


@contextmanager
def serving(text: str) -> Iterator[str]:
    """A static /metrics target; yields its address (`127.0.0.1:PORT`)."""
    body = text.encode()
    exposition_type = "text/plain; version=0.0.4; charset=utf-8"
    with json_server(lambda _path, _headers: (200, body), exposition_type) as url:
        yield url.removeprefix("http://")


@pytest.fixture(scope="module")
def renamed_labels() -> Iterator[PrometheusServer]:
    text = (EXPORTERS / "dcgm-exporter-4.8-hostname.prom").read_text()
    with serving(text) as target, HonorLabelsFalse([target]) as prom:
        prom.wait_for('DCGM_FI_DEV_GPU_UTIL{exported_pod!=""}', timeout_s=30)
        yield prom


# --- running the check --------------------------------------------------------------------------


def policy_check(
    capsys: pytest.CaptureFixture[str],
    prom: PrometheusServer,
    *args: str,
    policy: Path = EXAMPLE_POLICY,
) -> tuple[int, str]:
    code = main(["policy", "check", str(policy), "--prometheus", prom.url, *args])
    return code, capsys.readouterr().out


def lines_of(out: str, dimension: str) -> list[str]:
    return [line for line in out.splitlines() if line.startswith(f"{dimension}: ")]


def report_for(prom: PrometheusServer, nodes: Sequence[NodeState] | None) -> CheckReport:
    with prom.client() as client:
        return check_policy(load_policy_file(EXAMPLE_POLICY), client, nodes)


ALL_NODES = ("--nodes", ",".join(NODES))


def read_example(prom: PrometheusServer, dimension: str) -> dict[str, float]:
    """A dimension of the example policy, read through its own query, by its node label."""
    (dim,) = (d for d in load_policy_file(EXAMPLE_POLICY).spec.dimensions if d.name == dimension)
    with prom.client() as client:
        return client.query(dim.query).values_by(dim.node_label)


# --- the current releases ---------------------------------------------------------------------


def test_example_policy_passes_on_the_current_exporters(
    current: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = policy_check(capsys, current, *ALL_NODES)

    assert out.splitlines() == [
        "read dcgm-exporter hostname (2 nodes): gpu-util, gpu-free, gpu-frag",
        "read kepler >= 0.10 (4 nodes): power, core-power, idle-power",
        f"8 dimensions checked against {current.url}: 0 problems",
    ]
    assert code == 0


def test_names_alone_judge_every_node_coverage_but_not_which_nodes_have_gpus(
    current: PrometheusServer,
) -> None:
    """`--nodes` gives names, not allocatable: `coverage: offering` is not judged (no expected
    count), `all` is."""
    names = [NodeState(name=n) for n in NODES]
    with current.client() as client:
        report = check_policy(
            load_policy_file(EXAMPLE_POLICY), client, names, resources_known=False
        )
    expected = {d.dimension: d.expected for d in report.dimensions}
    assert expected["gpu-util"] is None and expected["power"] == len(NODES)


def test_every_dimension_resolves_the_nodes_it_should(current: PrometheusServer) -> None:
    report = report_for(current, NODE_STATES)

    resolved = {d.dimension: (d.nodes, d.expected) for d in report.dimensions}
    assert resolved == {
        "gpu-util": (2, 2),  # coverage: the nodes offering nvidia.com/gpu
        "gpu-free": (2, 2),
        "gpu-frag": (2, 2),
        "power": (4, 4),  # coverage: all
        "core-power": (4, None),  # every node's usage moved over the history
        "idle-power": (4, 4),
        "overcommit-pct": (4, None),
        "health": (4, 4),
    }
    assert report.problems == () and report.errors == ()


def test_fixture_values_reach_the_queries(current: PrometheusServer) -> None:
    """The fixtures' numbers, read through the example policy's own queries."""
    policy = load_policy_file(EXAMPLE_POLICY)
    queries = {d.name: (d.query, d.node_label) for d in policy.spec.dimensions}
    with current.client() as client:

        def read(dimension: str) -> dict[str, float]:
            query, label = queries[dimension]
            return client.query(query).values_by(label)

        # GPUs no pod holds: 0 %, 24 %, 0 % on the first node; 0 %, 12 % on the second.
        assert read("gpu-util") == pytest.approx({GPU_NODES[0]: 8.0, GPU_NODES[1]: 6.0})
        assert read("gpu-free") == {GPU_NODES[0]: 2.0, GPU_NODES[1]: 2.0}
        assert read("power") == pytest.approx(KEPLER_WATTS)
        # The slope of watts over usage, per core of capacity: each machine's watts per core.
        assert read("core-power") == pytest.approx({n: m[2] for n, m in MACHINES.items()})
        # Kepler's idle share at the end of the history (usage 1.0): none of the draw.
        assert read("idle-power") == pytest.approx(dict.fromkeys(NODES, 0.0), abs=1e-6)
        assert read("overcommit-pct")[CPU_NODES[0]] == pytest.approx(100 * 6 / 15.89 - 100)
        assert read("health") == dict.fromkeys(NODES, 1.0)


# --- dcgm-exporter: the node label ----------------------------------------------------------------


def test_example_policy_reads_dcgm_exporter_3x_with_its_capital_hostname(
    capital_hostname: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = policy_check(capsys, capital_hostname, *ALL_NODES)

    assert out.splitlines() == [
        "read dcgm-exporter Hostname (2 nodes): gpu-util, gpu-free, gpu-frag",
        "read kepler >= 0.10 (4 nodes): power, core-power, idle-power",
        f"8 dimensions checked against {capital_hostname.url}: 0 problems",
    ]
    assert code == 0
    report = report_for(capital_hostname, NODE_STATES)
    assert {d.dimension: (d.nodes, d.expected) for d in report.dimensions if d.forms} == {
        **dict.fromkeys(GPU_DIMENSIONS, (2, 2)),
        "power": (4, 4),
        "core-power": (4, None),
        "idle-power": (4, 4),
    }
    # The same GPUs as the 4.8 fixture: the same values.
    assert read_example(capital_hostname, "gpu-util") == pytest.approx(
        {GPU_NODES[0]: 8.0, GPU_NODES[1]: 6.0}
    )
    assert read_example(capital_hostname, "gpu-free") == dict.fromkeys(GPU_NODES, 2.0)


@pytest.mark.parametrize("cluster", ["ratio_bytes", "ratio_name_in_percent"])
def test_example_policy_reads_the_ratio_and_bytes_names_in_its_own_units(
    request: pytest.FixtureRequest, current: PrometheusServer, cluster: str
) -> None:
    """The same GPUs as the 4.8 fixture, under the ratio/bytes names (utilisation as a 0..1
    ratio, or as the percent DCGM still fills field 203 with): the same values, gpu-util in
    percent (that nothing is held back, and the form named: the scorer's test below)."""
    prom: PrometheusServer = request.getfixturevalue(cluster)
    for dimension in GPU_DIMENSIONS:
        assert read_example(prom, dimension) == pytest.approx(read_example(current, dimension)), (
            dimension
        )
    assert read_example(prom, "gpu-util") == pytest.approx({GPU_NODES[0]: 8.0, GPU_NODES[1]: 6.0})
    # Each GPU's heat (spec.devices.heat), in percent from either form.
    policy = load_policy_file(EXAMPLE_POLICY)
    with prom.client() as new, current.client() as released:
        heat, expected = read_device_heat(new, policy), read_device_heat(released, policy)
    assert heat.problems == () and len(heat.values) == 8
    assert heat.values == pytest.approx(dict(expected.values))


@pytest.mark.parametrize("node_list", [ALL_NODES, ()], ids=["nodes", "no-node-list"])
def test_hostname_holding_the_exporter_pod_name_says_so_and_names_the_relabelling(
    pod_hostname: PrometheusServer, capsys: pytest.CaptureFixture[str], node_list: tuple[str, ...]
) -> None:
    code, out = policy_check(capsys, pod_hostname, *node_list)

    assert code == 1
    for dimension in GPU_DIMENSIONS:
        (line,) = lines_of(out, dimension)
        assert line.startswith(
            f"{dimension}: values of hostname are pod names, not node names (e.g. dcgm-exporter-"
        ), line
        assert "dcgm-exporter-wwwjh" in line and "dcgm-exporter-cmhft" in line
        assert "sourceLabels [__meta_kubernetes_pod_node_name], targetLabel node" in line
        assert "set nodeLabel: node" in line and "hostNetwork: true" in line


def test_pod_name_hostname_reports_gpu_dimensions_below_their_coverage(
    pod_hostname: PrometheusServer,
) -> None:
    report = report_for(pod_hostname, NODE_STATES)

    for d in report.dimensions:
        if d.dimension not in GPU_DIMENSIONS:
            assert d.problems == (), d
            continue
        (coverage,) = (p for p in d.problems if p.kind == "coverage")
        assert not coverage.blocking  # nothing resolved: nothing to hold back
        assert coverage.message.startswith(
            "resolves 0 of 2 expected nodes (0 %, coverage: the nodes of pod class gpu); "
            f"missing: {', '.join(GPU_NODES)}; values of hostname are pod names"
        ), coverage.message
        assert "__meta_kubernetes_pod_node_name" in coverage.fix


# --- Kepler: the release line -------------------------------------------------------------------


def test_example_policy_reads_kepler_09_as_watts(
    old_kepler: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = policy_check(capsys, old_kepler, *ALL_NODES)

    assert out.splitlines() == [
        "read dcgm-exporter hostname (2 nodes): gpu-util, gpu-free, gpu-frag",
        "read kepler <= 0.9 (4 nodes): power, core-power, idle-power",
        f"8 dimensions checked against {old_kepler.url}: 0 problems",
    ]
    assert code == 0
    # The counters' rates: package (every mode, every socket) for power, its idle mode for
    # idle-power, its dynamic mode per requested core for core-power.
    joules = {n: kepler_07_joules(n) for n in NODES}
    assert read_example(old_kepler, "power") == pytest.approx(
        {n: counter_watts(sum(j.values())) for n, j in joules.items()}, rel=1e-3
    )
    assert read_example(old_kepler, "idle-power") == pytest.approx(
        {n: counter_watts(j["idle"]) for n, j in joules.items()}, rel=1e-3
    )
    requested = read_example(old_kepler, "overcommit-pct")  # every node: a value
    core = read_example(old_kepler, "core-power")
    assert set(core) == set(requested) == set(NODES)
    assert all(0 < v < counter_watts(joules[n]["dynamic"]) + 1e-9 for n, v in core.items())


def kepler_07_joules(node: str) -> dict[str, float]:
    """The fixture's package joules of `node`, summed by mode."""
    (package,) = (f for f in kepler_07() if f.name == "kepler_node_package_joules_total")
    out = {"dynamic": 0.0, "idle": 0.0}
    for labels, value in package.samples:
        if labels["instance"] == node:
            out[labels["mode"]] += value
    return out


# --- every release, through the scorer's cycle ----------------------------------------------


@pytest.mark.parametrize(
    ("cluster", "gpu_form", "energy_form"),
    [
        ("capital_hostname", "dcgm-exporter Hostname", "kepler >= 0.10"),
        ("current", "dcgm-exporter hostname", "kepler >= 0.10"),
        ("ratio_bytes", "dcgm-exporter ratio/bytes", "kepler >= 0.10"),
        ("old_kepler", "dcgm-exporter hostname", "kepler <= 0.9"),
        ("older", "dcgm-exporter Hostname", "kepler <= 0.9"),
    ],
)
def test_the_scorer_resolves_every_node_of_each_release_and_data_ready_names_its_form(
    request: pytest.FixtureRequest,
    apistub: ApiStub,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    cluster: str,
    gpu_form: str,
    energy_form: str,
) -> None:
    """The unmodified example policy in a scoring cycle (the nodes as the apiserver lists them):
    every dimension resolves every node it covers, from the one form the cluster runs, and
    the DataReady condition built from that cycle says True with the forms; `steer policy
    check` names the same."""
    prom: PrometheusServer = request.getfixturevalue(cluster)
    for name in GPU_NODES:
        apistub.add_node(synthetic_node(name, cpu="48", gpus=4))
    for name in CPU_NODES:
        apistub.add_node(synthetic_node(name, cpu="16"))
    kube = KubeJson(client_for(apistub, tmp_path / "kubeconfig"))
    scorer = Scorer(
        lambda: load_policy_file(EXAMPLE_POLICY), NodeApi(kube), prometheus_url=prom.url
    )

    plan = scorer.run_cycle().plan

    assert plan.data_problems == ()
    read = {d.dimension: (d.nodes, d.forms) for d in plan.dimensions}
    assert read == {
        **dict.fromkeys(GPU_DIMENSIONS, (2, ((gpu_form, 2),))),
        **dict.fromkeys(ENERGY_DIMENSIONS, (4, ((energy_form, 4),))),
        "overcommit-pct": (4, ()),
        "health": (4, ()),
    }
    (condition,) = data_condition(plan.data_problems, generation=1, now="T", forms=plan.data_forms)
    assert (condition["status"], condition["reason"]) == ("True", "Resolved")
    assert condition["message"] == (
        "every dimension resolves the nodes it expects, in the unit it declares; "
        f"read {gpu_form}: gpu-util, gpu-free, gpu-frag; "
        f"read {energy_form}: power, core-power, idle-power"
    )
    code, out = policy_check(capsys, prom, *ALL_NODES)
    assert code == 0 and out.splitlines()[:2] == [
        f"read {gpu_form} (2 nodes): gpu-util, gpu-free, gpu-frag",
        f"read {energy_form} (4 nodes): power, core-power, idle-power",
    ]


# --- mid-upgrade: both forms, across nodes and on one node ------------------------------------


def test_a_cluster_mid_upgrade_resolves_every_node_once_by_its_newest_form(
    mixed: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = policy_check(capsys, mixed, *ALL_NODES)

    assert out.splitlines() == [
        "read dcgm-exporter Hostname (1 node), dcgm-exporter hostname (1 node): "
        "gpu-util, gpu-free, gpu-frag",
        "read kepler <= 0.9 (2 nodes), kepler >= 0.10 (2 nodes): power, core-power, idle-power",
        f"8 dimensions checked against {mixed.url}: 0 problems",
    ]
    assert code == 0
    report = report_for(mixed, NODE_STATES)
    assert report.problems == () and report.errors == ()
    resolved = {d.dimension: (d.nodes, d.expected) for d in report.dimensions}
    assert resolved == {
        **dict.fromkeys(GPU_DIMENSIONS, (2, 2)),
        "power": (4, 4),
        "core-power": (4, None),
        "idle-power": (4, 4),
        "overcommit-pct": (4, None),
        "health": (4, 4),
    }
    with mixed.client() as client:
        policy = load_policy_file(EXAMPLE_POLICY)
        for dim in policy.spec.dimensions:
            if dim.name in GPU_DIMENSIONS + ENERGY_DIMENSIONS:
                answer = client.query(dim.query)
                names = [s.labels[dim.node_label] for s in answer.samples]
                assert sorted(names) == sorted(set(names)), (dim.name, names)  # once each
                forms = {s.labels[dim.node_label]: s.labels["form"] for s in answer.samples}
                both = BOTH_FORMS_GPU if dim.name in GPU_DIMENSIONS else BOTH_FORMS_CPU
                assert forms[both] in ("dcgm-exporter hostname", "kepler >= 0.10"), dim.name
    # The node with both forms reads as its new exporter reports it, the other as its old one.
    assert read_example(mixed, "gpu-util") == pytest.approx({GPU_NODES[0]: 8.0, GPU_NODES[1]: 6.0})
    assert read_example(mixed, "gpu-free") == dict.fromkeys(GPU_NODES, 2.0)
    power = read_example(mixed, "power")
    assert power[BOTH_FORMS_CPU] == pytest.approx(KEPLER_WATTS[BOTH_FORMS_CPU])
    assert power[NODES[1]] == pytest.approx(
        counter_watts(sum(kepler_07_joules(NODES[1]).values())), rel=1e-3
    )
    assert read_example(mixed, "core-power")[BOTH_FORMS_CPU] == pytest.approx(
        MACHINES[BOTH_FORMS_CPU][2]
    )


def kepler_07_policy(path: Path) -> Path:
    """The example policy with its energy dimensions in their Kepler 0.7 .. 0.9 forms."""
    policy = yaml.safe_load(EXAMPLE_POLICY.read_text())
    old = {d["name"]: d for d in yaml.safe_load(POWER_KEPLER_07 + ENERGY_KEPLER_07)}
    policy["spec"]["dimensions"] = [old.get(d["name"], d) for d in policy["spec"]["dimensions"]]
    path.write_text(yaml.safe_dump(policy, sort_keys=False))
    return path


def test_kepler_09_queries_on_kepler_010_data_name_the_new_form(
    current: PrometheusServer, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    policy = kepler_07_policy(tmp_path / "kepler-07.yaml")

    code, out = policy_check(capsys, current, *ALL_NODES, policy=policy)

    assert code == 1
    new_form = (
        "Kepler >= 0.10 series found: kepler_node_cpu_active_joules_total, "
        "kepler_node_cpu_active_watts, kepler_node_cpu_idle_joules_total, "
        "kepler_node_cpu_idle_watts, kepler_node_cpu_joules_total, kepler_node_cpu_usage_ratio, "
        "kepler_node_cpu_watts; fix: the cluster runs Kepler >= 0.10: use its form of this "
        "dimension (the example policy's energy dimensions"
    )
    absent = {
        "power": "kepler_node_platform_joules_total",
        "core-power": "kepler_node_package_joules_total",
        "idle-power": "kepler_node_platform_joules_total",
    }
    for dimension, metric in absent.items():
        assert (
            f"{dimension}: metric {metric} has no current series in Prometheus; {new_form}"
        ) in "\n".join(lines_of(out, dimension)), out


# --- units --------------------------------------------------------------------------------------


def test_gpu_utilisation_as_a_ratio_is_held_back_with_the_scale_to_apply(
    ratio_util: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = policy_check(capsys, ratio_util, *ALL_NODES)

    assert code == 1
    assert lines_of(out, "gpu-util") == [
        "gpu-util: every value lies in 0..1 (max 0.08) although the unit is pct and the "
        "normalization runs to 100: the source reports a ratio (e.g. a DCGM_FI_PROF_* field, "
        "or a release that changed the unit) (not published); fix: multiply by 100 in the "
        "query, or declare unit: ratio with normalization fixed 0..1"
    ]
    assert len(out.splitlines()) == 4  # that line, the two forms read and the summary


# --- the scrape ---------------------------------------------------------------------------------


def test_honor_labels_false_reports_the_renamed_pod_label(
    renamed_labels: PrometheusServer, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out = policy_check(capsys, renamed_labels, *ALL_NODES)

    assert code == 1
    assert (
        "gpu-util: Prometheus renamed labels the query reads (pod -> exported_pod): the "
        "scrape's target labels took their names (honor_labels: false), so the query reads the "
        "exporter's pod or address instead of the exporter's values; fix: scrape the exporter "
        "with honor_labels: true (ServiceMonitor honorLabels: true), or read exported_pod in "
        "the query"
    ) in lines_of(out, "gpu-util"), out
    # The memory dimensions read no renamed label: their answer stands.
    assert lines_of(out, "gpu-free") == lines_of(out, "gpu-frag") == []


# --- output -------------------------------------------------------------------------------------


def test_json_output_has_one_entry_per_dimension_with_its_problems(
    current: PrometheusServer,
    pod_hostname: PrometheusServer,
    capsys: pytest.CaptureFixture[str],
) -> None:
    clean_code, clean_out = policy_check(capsys, current, *ALL_NODES, "--output", "json")
    code, out = policy_check(capsys, pod_hostname, *ALL_NODES, "--output", "json")

    clean, report = json.loads(clean_out), json.loads(out)
    for doc in (clean, report):
        assert set(doc) == {"prometheus", "nodeList", "problems", "dimensions"}
        assert doc["nodeList"] is True
        assert [d["dimension"] for d in doc["dimensions"]] == [
            *GPU_DIMENSIONS,
            *ENERGY_DIMENSIONS,
            "overcommit-pct",
            "health",
        ]
        for d in doc["dimensions"]:
            assert set(d) == {
                "dimension",
                "checked",
                "samples",
                "nodes",
                "expectedNodes",
                "error",
                "problems",
                "forms",
            }
            assert d["checked"] is True and d["error"] is None
    assert (clean_code, clean["problems"], clean["prometheus"]) == (0, 0, current.url)
    assert {d["dimension"]: d["nodes"] for d in clean["dimensions"]} == {
        **dict.fromkeys(GPU_DIMENSIONS, 2),
        **dict.fromkeys([*ENERGY_DIMENSIONS, "overcommit-pct", "health"], 4),
    }
    assert {d["dimension"]: d["forms"] for d in clean["dimensions"]} == {
        **{d: [{"form": "dcgm-exporter hostname", "nodes": 2}] for d in GPU_DIMENSIONS},
        **{d: [{"form": "kepler >= 0.10", "nodes": 4}] for d in ENERGY_DIMENSIONS},
        "overcommit-pct": [],
        "health": [],
    }

    assert code == 1
    gpu_util = report["dimensions"][0]
    # One sample per exporter pod, whose name is no node's.
    assert (gpu_util["samples"], gpu_util["nodes"], gpu_util["forms"]) == (2, 0, [])
    assert [p["kind"] for p in gpu_util["problems"]] == ["not-node-names"]
    assert all(
        set(p) == {"dimension", "kind", "message", "fix", "blocking"} for p in gpu_util["problems"]
    )
    assert report["problems"] == sum(len(d["problems"]) for d in report["dimensions"])


def test_an_unreachable_prometheus_cannot_be_checked(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"http://127.0.0.1:{free_port()}"

    code = main(["policy", "check", str(EXAMPLE_POLICY), "--prometheus", url, *ALL_NODES])

    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == "" and captured.err.startswith("steer policy check: ")
