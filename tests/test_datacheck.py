"""steer/core/datacheck: units, coverage, node names, metric names and the diagnosis, pure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scorer.cycle.observe import DimensionFailure, DimensionReading, vet
from scorer.model import NodeState
from steer.core.datacheck import (
    MetricFacts,
    ProblemKind,
    PrometheusFacts,
    ReadingFacts,
    diagnose,
    expected_nodes,
    vet_reading,
)
from steer.core.datacheck.identities import IdentityKind, classify
from steer.core.datacheck.promql import label_names, metric_names
from steer.core.datacheck.units import check_unit
from steer.core.policy import PrometheusDimension, parse_policy
from steer.presets import example_policy_text

POLICY = parse_policy(example_policy_text())


def dim(name: str) -> PrometheusDimension:
    found = next(d for d in POLICY.spec.dimensions if d.name == name)
    assert isinstance(found, PrometheusDimension)
    return found


def made(**fields: object) -> PrometheusDimension:
    base: dict[str, object] = {"name": "d", "query": "m", "unit": "pct"}
    base.update(fields)
    return PrometheusDimension.model_validate(base)


# -- units -------------------------------------------------------------------------------------


def test_a_percent_dimension_whose_values_all_lie_in_0_1_is_held_back_as_a_ratio() -> None:
    check = check_unit(dim("gpu-util"), {"gpu-1": 0.95, "gpu-2": 0.1, "gpu-3": 0.0})
    assert check.blocking
    (problem,) = check.problems
    assert problem.kind == ProblemKind.UNIT
    assert "ratio" in problem.message and "0.95" in problem.message
    assert "multiply by 100" in problem.fix


def test_an_idle_clusters_zeros_and_whole_percents_say_nothing_about_the_scale() -> None:
    assert not check_unit(dim("gpu-util"), {"a": 0.0, "b": 0.0}).problems
    assert not check_unit(dim("gpu-util"), {"a": 0.0, "b": 1.0, "c": 95.0}).problems


def test_a_ratio_dimension_fed_percents_is_held_back_and_a_stray_value_only_dropped() -> None:
    frag = dim("gpu-frag")
    held = check_unit(frag, {"a": 40.0, "b": 95.0, "c": 0.2})
    assert held.blocking and held.problems[0].kind == ProblemKind.UNIT
    assert "percent" in held.problems[0].message
    stray = check_unit(frag, {"a": 0.5, "b": 0.2, "c": 7.0})
    assert not stray.blocking
    assert dict(stray.dropped) == {"c": 7.0} and set(stray.kept) == {"a", "b"}
    assert stray.problems[0].kind == ProblemKind.OUT_OF_RANGE


def test_mib_that_are_bytes_and_bytes_that_are_mib() -> None:
    mib = made(unit="mib", normalization={"method": "minMax"})
    assert check_unit(mib, {"a": 8.5e10, "b": 4e10}).blocking
    assert not check_unit(mib, {"a": 81920.0, "b": 512.0}).problems
    byte = made(unit="bytes", normalization={"method": "minMax"})
    assert check_unit(byte, {"a": 40204.0, "b": 0.0}).blocking
    assert not check_unit(byte, {"a": 4.2e10, "b": 0.0}).problems


def test_negative_watts_are_dropped_and_an_unknown_unit_is_not_judged() -> None:
    check = check_unit(dim("idle-power"), {"a": -3.0, "b": 150.0, "c": 120.0})
    assert dict(check.dropped) == {"a": -3.0} and not check.blocking
    assert not check_unit(made(unit="furlongs"), {"a": -1e30}).problems


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.floats(0, 1), max_size=20))
def test_a_ratio_in_0_1_is_always_accepted_whole(values: dict[str, float]) -> None:
    check = check_unit(dim("gpu-frag"), values)
    assert dict(check.kept) == values and not check.problems


# -- coverage ----------------------------------------------------------------------------------

NODES = [
    NodeState(name="gpu-1", allocatable={"nvidia.com/gpu": "8", "cpu": "64"}),
    NodeState(name="gpu-2", allocatable={"nvidia.com/gpu": "8", "cpu": "64"}),
    NodeState(name="cpu-1", allocatable={"cpu": "16"}),
]


def test_expected_nodes_follow_the_coverage() -> None:
    assert expected_nodes(POLICY, dim("gpu-util"), NODES) == {"gpu-1", "gpu-2"}
    assert expected_nodes(POLICY, dim("idle-power"), NODES) == {"gpu-1", "gpu-2", "cpu-1"}
    assert expected_nodes(POLICY, dim("core-power"), NODES) is None


def test_fewer_expected_nodes_than_min_percent_holds_the_reading_back_with_the_cause() -> None:
    facts = ReadingFacts(
        values={"gpu-1": 10.0},
        samples=2,
        unknown=1,
        unknown_examples=("dcgm-exporter-cmhft",),
    )
    vetted = vet_reading(dim("gpu-util"), facts, frozenset({"gpu-1", "gpu-2", "gpu-3"}))
    (problem,) = vetted.problems
    assert problem.kind == ProblemKind.COVERAGE and problem.blocking
    assert "1 of 3 expected nodes" in problem.message and "gpu-2, gpu-3" in problem.message
    assert "pod names" in problem.message and "__meta_kubernetes_pod_node_name" in problem.fix


def test_a_shortfall_above_min_percent_is_reported_and_published() -> None:
    facts = ReadingFacts(values={"a": 1.0, "b": 2.0, "c": 3.0}, samples=3)
    vetted = vet_reading(dim("idle-power"), facts, frozenset({"a", "b", "c", "d"}))
    assert not vetted.blocking and vetted.expected == 4
    assert set(vetted.values) == {"a", "b", "c"}
    assert "3 of 4" in vetted.problems[0].message


def test_unlabelled_samples_of_a_dimension_that_expects_no_node_are_reported() -> None:
    vetted = vet_reading(dim("core-power"), ReadingFacts(values={}, samples=1, unlabelled=1), None)
    (problem,) = vetted.problems
    assert problem.kind == ProblemKind.NODE_LABEL and "node_name" in problem.message


def test_the_scorer_turns_a_held_reading_into_a_failure_and_keeps_a_source_diagnosis_first() -> (
    None
):
    diagnosis = diagnose(dim("gpu-util"), PrometheusFacts(frozenset(), (MetricFacts("X", False),)))
    reading = DimensionReading(
        "gpu-util", "q", 0.0, {"gpu-1": 0.9, "gpu-2": 0.5}, samples=2, problems=diagnosis
    )
    held = vet(dim("gpu-util"), reading, frozenset({"gpu-1", "gpu-2"}))
    assert isinstance(held, DimensionFailure) and held.kind == "unit"
    assert held.problems[0] == diagnosis[0] and held.problems[-1].kind == ProblemKind.UNIT
    fine = DimensionReading("gpu-util", "q", 0.0, {"gpu-1": 90.0, "gpu-2": 5.0}, samples=2)
    assert vet(dim("gpu-util"), fine, frozenset({"gpu-1", "gpu-2"})).problems == ()


# -- identities and PromQL ---------------------------------------------------------------------


def test_identities_that_name_no_node() -> None:
    assert classify("dcgm-exporter-cmhft") == IdentityKind.POD_NAME
    assert classify("10.244.1.7:9400") == IdentityKind.ADDRESS
    assert classify("[fd00::7]:9400") == IdentityKind.ADDRESS
    assert classify("ip-10-0-1-7.ec2.internal") == IdentityKind.OTHER
    assert classify("node-1") == IdentityKind.OTHER


def test_metric_and_label_names_of_the_example_queries() -> None:
    assert metric_names(dim("core-power").query) == (
        "node_name:kepler_node_cpu_watts_per_core:slope1h",  # the recording rule's, if installed
        "kepler_node_cpu_watts",
        "kepler_node_cpu_usage_ratio",
        "kube_node_status_capacity",
        "kepler_node_package_joules_total",
        "kepler_node_dram_joules_total",
        "kube_pod_container_resource_requests",
    )
    assert metric_names(dim("gpu-frag").query) == (
        "DCGM_FI_DEV_FB_FREE_BYTES",
        "DCGM_FI_DEV_FB_USED_BYTES",
        "DCGM_FI_DEV_FB_FREE",
        "DCGM_FI_DEV_FB_USED",
    )
    assert metric_names('rate(a_total{x="y"}[5m] offset 1h) > bool 1e3 and {__name__="b"}') == (
        "b",
        "a_total",
    )
    assert label_names(dim("gpu-util").query) == {"pod", "hostname", "Hostname"}


# -- diagnosis ---------------------------------------------------------------------------------


def test_an_absent_recording_rule_beside_the_expression_it_records_is_no_cause() -> None:
    facts = PrometheusFacts(
        frozenset({"kepler_node_cpu_watts", "kepler_node_cpu_usage_ratio"}),
        (
            MetricFacts("node_name:kepler_node_cpu_watts_per_core:slope1h", False),
            MetricFacts("kepler_node_cpu_watts", True),
            MetricFacts("kepler_node_cpu_usage_ratio", True),
        ),
    )
    assert not [p for p in diagnose(dim("core-power"), facts) if p.kind == ProblemKind.ABSENT]
    alone = PrometheusFacts(frozenset(), (MetricFacts("level:metric:rate5m", False),))
    (problem,) = diagnose(dim("core-power"), alone)
    assert problem.kind == ProblemKind.ABSENT


def test_an_absent_kepler_metric_names_the_family_found_instead() -> None:
    old = made(
        name="power",
        unit="watts",
        node_label="instance",
        query="sum by (instance) (irate(kepler_node_platform_joules_total[5m]))",
    )
    facts = PrometheusFacts(
        frozenset({"kepler_node_cpu_watts", "kepler_node_cpu_idle_watts", "up"}),
        (MetricFacts("kepler_node_platform_joules_total", False),),
    )
    (problem,) = diagnose(old, facts)
    assert problem.kind == ProblemKind.ABSENT
    assert "Kepler >= 0.10 series found: kepler_node_cpu_idle_watts, kepler_node_cpu_watts" in (
        problem.message
    )
    assert "Kepler >= 0.10" in problem.fix


def test_a_node_label_spelled_otherwise_is_named_with_the_fix() -> None:
    facts = PrometheusFacts(
        frozenset({"DCGM_FI_DEV_GPU_UTIL"}),
        (MetricFacts("DCGM_FI_DEV_GPU_UTIL", True, frozenset({"gpu", "UUID", "Hostname"})),),
    )
    one_spelling = made(
        name="gpu-util",
        unit="pct",
        node_label="hostname",
        query='avg by (hostname) (DCGM_FI_DEV_GPU_UTIL{pod=""})',
    )
    (problem,) = diagnose(one_spelling, facts)
    assert problem.kind == ProblemKind.NODE_LABEL
    assert problem.fix.startswith("set nodeLabel: Hostname")


def test_a_label_the_query_reads_renamed_by_the_scrape_is_found_even_in_a_whole_answer() -> None:
    labels = frozenset({"gpu", "hostname", "pod", "exported_pod", "namespace"})
    facts = PrometheusFacts(
        frozenset({"DCGM_FI_DEV_GPU_UTIL"}), (MetricFacts("DCGM_FI_DEV_GPU_UTIL", True, labels),)
    )
    (problem,) = diagnose(dim("gpu-util"), facts, short=False)
    assert problem.kind == ProblemKind.RENAMED_LABEL and "pod -> exported_pod" in problem.message
    assert "honor" in problem.fix


def test_a_query_that_writes_its_node_label_is_not_blamed_for_it() -> None:
    facts = PrometheusFacts(
        frozenset({"kepler_node_cpu_watts", "kube_node_status_capacity"}),
        (
            MetricFacts("kepler_node_cpu_watts", True, frozenset({"node_name", "zone"})),
            MetricFacts("kube_node_status_capacity", True, frozenset({"node"})),
        ),
    )
    assert diagnose(dim("core-power"), facts) == ()


def test_a_field_renamed_with_its_unit_is_named_with_the_unit_to_declare() -> None:
    facts = PrometheusFacts(
        frozenset({"DCGM_FI_DEV_GPU_UTIL_RATIO", "DCGM_FI_DEV_FB_USED"}),
        (MetricFacts("DCGM_FI_DEV_GPU_UTIL", False),),
    )
    (problem,) = diagnose(dim("gpu-util"), facts)
    assert problem.kind == ProblemKind.ABSENT
    assert problem.message.endswith("similar names found: DCGM_FI_DEV_GPU_UTIL_RATIO")
    assert "_RATIO is 0..1" in problem.fix


def test_dra_gpu_nodes_are_expected_by_the_gpu_dimensions() -> None:
    dra = NodeState(name="dra-1", allocatable={"cpu": "64"}, devices={"nvidia.com/gpu": 8})
    assert expected_nodes(POLICY, dim("gpu-util"), [*NODES, dra]) == {"gpu-1", "gpu-2", "dra-1"}
