"""The placement bench's hour of Kepler history (bench/benchkit/kepler_history.py), backfilled
into a real Prometheus before it starts: the unmodified example policy's core-power, a subquery
over the last hour, reads every node's watts per busy core at the first query, as the scorer's
first cycle does where Kepler has been scraped for an hour; and the mixed-energy scenario's
work, which fits on its efficient nodes."""

from __future__ import annotations

import time

import pytest

from bench.benchkit.kepler_history import HOUR_S, backfill_kepler_history, history_times
from bench.benchkit.placement_scenario import MIXED_PREEXISTING, scenarios, trace_pods
from kits.prometheus_server import PrometheusServer
from steer.core.policy import parse_policy
from steer.presets import example_policy_text

POLICY = parse_policy(example_policy_text())


def test_the_history_ends_a_minute_before_now_and_spans_the_hour() -> None:
    times = history_times(1_800_000_000.0)
    assert times[-1] == 1_800_000_000.0 - 60
    assert times[-1] - times[0] == HOUR_S
    assert times == sorted(times)


def test_core_power_reads_every_node_from_the_backfilled_hour_at_the_first_query() -> None:
    scenario = scenarios()["mixed-energy"]
    # One node of each kind, a hot GPU node among them (its external GPU load is constant).
    specs = [s for s in scenario.nodes if s.name in {"gpu-1", "gpu-3", "eff-1", "leg-1"}]
    prom = PrometheusServer([])
    written = backfill_kepler_history(prom, specs, scenario.power, "127.0.0.1:9")
    assert written["last"] <= time.time() - 59
    core = POLICY.dimension("core-power")
    with prom:
        started = time.monotonic()
        result = prom.wait_for(core.what, lambda r: len(r.values_by("node_name")) == 4)
        # Nothing to wait for: the stored hour answers as soon as the server does.
        assert time.monotonic() - started < 10
    assert result.values_by("node_name") == {
        "gpu-1": pytest.approx(8.0),
        "gpu-3": pytest.approx(8.0),
        "eff-1": pytest.approx(5.0),
        "leg-1": pytest.approx(11.0),
    }
    assert {s.labels["form"] for s in result.samples} == {"kepler >= 0.10"}


def test_the_mixed_energy_work_fits_on_the_efficient_nodes_in_every_seed() -> None:
    scenario = scenarios()["mixed-energy"]
    efficient = sum(s.cpu for s in scenario.nodes if s.instance_type == "cpu-efficient")
    before = sum(float(cpu) for node, cpu, *_ in MIXED_PREEXISTING if node.startswith("eff-"))
    assert efficient == 160
    assert sum(1 for s in scenario.nodes if s.hot) == 2
    assert {node for node, *_ in MIXED_PREEXISTING} >= {"leg-1", "leg-4", "leg-8"}
    for seed in range(1, 6):
        trace = scenario.trace(seed, 4.0)
        cpu_work = sum(a.cpu_m * a.replicas for a in trace if not a.gpus) / 1000
        gpu_cores = sum(a.cpu_m for a in trace if a.gpus) / 1000
        assert gpu_cores == 8 * 4 + 32
        # Room to spare on the efficient nodes: only steering decides where CPU work goes.
        assert cpu_work + before <= efficient - 16, seed
        assert trace_pods(trace) == len(trace) - 2 + 12 + 6
    assert scenario.kepler_history_s == HOUR_S
    assert scenarios()["energy"].kepler_history_s == HOUR_S
    assert scenarios()["default"].kepler_history_s == 0
