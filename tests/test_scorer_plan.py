"""Pure tests of the planner: hand-computed labels, hysteresis, TTL withdrawal, debounce, hot nodes."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st

from scorer.cycle.plan import DataStatus, ScorerMemory, plan_cycle
from scorer.model import NodeState
from steer.core.policy import parse_policy
from steer.core.scheduling import Taint
from steer.core.steering import owned_label_keys, owned_taint_keys
from tests.scorer_support import (
    SMALL_POLICY,
    apply_plan,
    observed_times,
    readings_for,
    small_policy,
)

POLICY = small_policy()
T0 = 1_800_000_000.0
FOREIGN = {"kubernetes.io/hostname": "x", "kube-steer.github.io/not-ours": "7", "team/owner": "ml"}


def nodes(*names: str, labels: dict[str, str] | None = None) -> list[NodeState]:
    return [NodeState(n, labels=dict(labels or FOREIGN)) for n in names]


VALUES = {
    "util": {"a": 20.0, "b": 50.0, "c": 95.0},
    "power": {"a": 100.0, "b": 200.0, "c": 300.0},
    "overcommit-pct": {"a": 3.2, "b": -10.0, "c": 12.0},
}


def test_labels_match_hand_computed_values() -> None:
    cluster = nodes("a", "b", "c")
    plan, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, VALUES, T0), ScorerMemory(), T0
    )
    labels = {p.node: dict(p.labels) for p in plan.nodes}
    # util: fixed 0..100, lower is better → scores 80/50/5 → buckets 80/50/10.
    # power: min-max, lower is better → 100/50/0. Composite (3*util + 1*power)/4:
    # a = (240+100)/4 = 85 → 90, b = 50 → 50, c = (15+0)/4 = 3.75 → 0.
    # overcommit-pct: raw, rounded up to step 1, floored at 0 → 4 / 0 / 12.
    assert labels["a"] == {
        "kube-steer.github.io/score-util": "80",
        "kube-steer.github.io/score-power": "100",
        "kube-steer.github.io/overcommit-pct": "4",
        "kube-steer.github.io/score": "90",
        "kube-steer.github.io/score-class-gpu": "80",
    }
    assert labels["b"] == {
        "kube-steer.github.io/score-util": "50",
        "kube-steer.github.io/score-power": "50",
        "kube-steer.github.io/overcommit-pct": "0",
        "kube-steer.github.io/score": "50",
        "kube-steer.github.io/score-class-gpu": "50",
    }
    assert labels["c"]["kube-steer.github.io/score-util"] == "10"
    assert labels["c"]["kube-steer.github.io/score"] == "0"
    assert labels["c"]["kube-steer.github.io/overcommit-pct"] == "12"
    # the condition needs two cycles before the taint is set
    assert "kube-steer.github.io/gpu-hot" not in labels["c"]
    assert plan.node("c").taints == ()  # type: ignore[union-attr]


def test_taint_is_debounced_then_set_and_cleared() -> None:
    cluster = nodes("a", "c")
    memory = ScorerMemory()
    hot = {"util": {"a": 10.0, "c": 95.0}}
    history = []
    for i, values in enumerate(
        [hot, hot, hot, {"util": {"a": 10.0, "c": 50.0}}, {"util": {"a": 10.0, "c": 50.0}}]
    ):
        plan, memory = plan_cycle(
            POLICY, cluster, readings_for(POLICY, cluster, values, T0 + i), memory, T0 + i
        )
        cluster = apply_plan(POLICY, cluster, plan)
        history.append(any(t.key == "kube-steer.github.io/gpu-hot" for t in cluster[1].taints))
    assert history == [False, True, True, True, False]  # clearAfterCycles: 2
    assert cluster[1].labels.get("kube-steer.github.io/gpu-hot") is None
    assert cluster[1].taints == ()


def test_condition_margin_keeps_a_taint_on_a_node_hovering_at_the_threshold() -> None:
    text = SMALL_POLICY.replace("operator: Gt, value: 90}", "operator: Gt, value: 90, margin: 5}")
    policy = parse_policy(text)
    cluster = nodes("c")
    memory = ScorerMemory()
    hovering = [95.0, 95.0, 89.0, 91.0, 88.0, 92.0, 89.5, 84.0, 84.0]
    history = []
    for i, util in enumerate(hovering):
        readings = readings_for(policy, cluster, {"util": {"c": util}}, T0 + i)
        plan, memory = plan_cycle(policy, cluster, readings, memory, T0 + i)
        cluster = apply_plan(policy, cluster, plan)
        history.append(bool(cluster[0].taints))
    # Set after two cycles over 90; kept while util stays above 85; cleared after two below.
    assert history == [False, True, True, True, True, True, True, True, False]


def test_retained_data_does_not_advance_the_debounce() -> None:
    cluster = nodes("c")
    plan, memory = plan_cycle(
        POLICY,
        cluster,
        readings_for(POLICY, cluster, {"util": {"c": 95.0}}, T0),
        ScorerMemory(),
        T0,
    )
    for i in range(1, 4):  # queries failing: the data is retained, the streak must not grow
        plan, memory = plan_cycle(POLICY, cluster, {}, memory, T0 + i)
    assert plan.node("c").conditions["gpu-hot"].streak == 1  # type: ignore[union-attr]
    assert not plan.node("c").conditions["gpu-hot"].active  # type: ignore[union-attr]


def test_node_without_a_sample_gets_no_label_not_zero() -> None:
    cluster = nodes("a", "b")
    plan, _ = plan_cycle(
        POLICY,
        cluster,
        readings_for(POLICY, cluster, {"util": {"a": 30.0}}, T0),
        ScorerMemory(),
        T0,
    )
    b = plan.node("b")
    assert b is not None
    assert "kube-steer.github.io/score-util" not in b.labels
    assert "kube-steer.github.io/score" not in b.labels
    assert b.dimensions["util"].status is DataStatus.MISSING
    assert b.label_changes == {}


def test_composite_is_recomputed_without_a_withdrawn_dimension() -> None:
    cluster = nodes("a", "b")
    values = {"util": {"a": 20.0, "b": 60.0}, "power": {"a": 100.0, "b": 300.0}}
    plan, memory = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, values, T0), ScorerMemory(), T0
    )
    cluster = apply_plan(POLICY, cluster, plan)
    assert cluster[1].labels["kube-steer.github.io/score"] == "30"  # (3*40 + 0)/4
    # util keeps answering, power's query fails from now on: after the TTL only util counts
    later = T0 + 61
    plan, _ = plan_cycle(
        POLICY,
        cluster,
        readings_for(POLICY, cluster, {"util": {"a": 20.0, "b": 60.0}}, later),
        memory,
        later,
    )
    b = plan.node("b")
    assert b is not None
    assert b.dimensions["power"].status is DataStatus.STALE
    assert b.label_changes["kube-steer.github.io/score-power"] is None
    assert b.labels["kube-steer.github.io/score"] == "40"  # util alone
    assert [d.dimension for d in plan.dimensions if d.stale] == ["power", "overcommit-pct"]


def test_prometheus_down_keeps_labels_until_the_ttl_then_withdraws_them() -> None:
    cluster = nodes("c")
    memory = ScorerMemory()
    for i in range(2):  # two cycles of util 95: labels plus the gpu-hot taint
        at = T0 + i
        plan, memory = plan_cycle(
            POLICY, cluster, readings_for(POLICY, cluster, VALUES, at), memory, at
        )
        cluster = apply_plan(POLICY, cluster, plan)
    assert cluster[0].taints == (Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule"),)
    # No readings at all: Prometheus is down. The last observation is from T0+1, TTL 60 s.
    plan, memory = plan_cycle(POLICY, cluster, {}, memory, T0 + 61)
    assert not plan.changes
    plan, memory = plan_cycle(POLICY, cluster, {}, memory, T0 + 62)
    cluster = apply_plan(POLICY, cluster, plan)
    node = cluster[0]
    assert {k for k in node.labels if k.startswith("kube-steer.github.io/")} == {
        "kube-steer.github.io/not-ours"
    }
    assert node.taints == ()
    assert observed_times(POLICY, node) == {}
    assert dict(node.labels).items() >= FOREIGN.items()


def test_dimensions_read_in_one_cycle_expire_in_one_cycle() -> None:
    """util's answer evaluated 1.5 s after power's (it waited for a connection): when Prometheus
    goes down, both are withdrawn by the same cycle, in one write a node; the composite is never
    rewritten from util alone for the cycle between (tests/faults, the down fault)."""
    cluster = nodes("a", "b")
    values = {"util": {"a": 20.0, "b": 60.0}, "power": {"a": 100.0, "b": 300.0}}
    readings = readings_for(POLICY, cluster, values, T0)
    readings["util"] = replace(readings["util"], observed_at=T0 + 1.5)
    plan, memory = plan_cycle(POLICY, cluster, readings, ScorerMemory(), T0 + 1.5)
    cluster = apply_plan(POLICY, cluster, plan)
    assert cluster[1].labels["kube-steer.github.io/score"] == "30"
    assert {d.dimension: d.last_success for d in plan.dimensions if d.ok} == {
        "util": T0,
        "power": T0,
    }
    # Down from here; TTL 60 s. One cycle a second: the first past power's TTL takes all.
    plan, memory = plan_cycle(POLICY, cluster, {}, memory, T0 + 60)
    assert not plan.changes
    plan, memory = plan_cycle(POLICY, cluster, {}, memory, T0 + 61)
    b = plan.node("b")
    assert b is not None
    assert {d.status for d in b.dimensions.values()} == {DataStatus.STALE, DataStatus.MISSING}
    assert "kube-steer.github.io/score" not in b.labels
    cluster = apply_plan(POLICY, cluster, plan)
    plan, _ = plan_cycle(POLICY, cluster, {}, memory, T0 + 62)
    assert not plan.changes


def test_restart_carries_labels_by_their_annotation_until_the_ttl() -> None:
    cluster = nodes("a")
    plan, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, VALUES, T0), ScorerMemory(), T0
    )
    cluster = apply_plan(POLICY, cluster, plan)
    assert set(observed_times(POLICY, cluster[0])) == {"util", "power", "overcommit-pct"}
    # a new process (empty memory) while Prometheus is down
    plan, _ = plan_cycle(POLICY, cluster, {}, ScorerMemory(), T0 + 50)
    assert not plan.changes
    assert plan.node("a").dimensions["util"].status is DataStatus.CARRIED  # type: ignore[union-attr]
    plan, _ = plan_cycle(POLICY, cluster, {}, ScorerMemory(), T0 + 61)
    changes = plan.node("a").label_changes  # type: ignore[union-attr]
    assert set(changes) == {
        "kube-steer.github.io/score-util",
        "kube-steer.github.io/score-power",
        "kube-steer.github.io/overcommit-pct",
        "kube-steer.github.io/score",
        "kube-steer.github.io/score-class-gpu",
    }
    assert set(changes.values()) == {None}


def test_observed_at_changes_only_with_the_value() -> None:
    cluster = nodes("a", "b")
    plan, memory = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, VALUES, T0), ScorerMemory(), T0
    )
    cluster = apply_plan(POLICY, cluster, plan)
    shifted = {**VALUES, "util": {"a": 20.5, "b": 71.0}}  # a: same bucket; b: 50 → 30
    plan, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, shifted, T0 + 30), memory, T0 + 30
    )
    assert not plan.node("a").changed  # type: ignore[union-attr]
    b = plan.node("b")
    assert b is not None and b.annotation_changed
    after = observed_times(POLICY, apply_plan(POLICY, cluster, plan)[1])
    assert after["util"] == "2027-01-15T08:00:30Z"
    assert after["power"] == "2027-01-15T08:00:00Z"


def test_hot_nodes_lose_composite_points_per_recent_pod() -> None:
    cluster = nodes("a", "b")
    values = {"util": {"a": 10.0, "b": 10.0}}
    plain, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, values, T0), ScorerMemory(), T0
    )
    hot, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, values, T0), ScorerMemory(), T0, hot={"a": 4}
    )
    assert plain.node("a").labels["kube-steer.github.io/score"] == "90"  # type: ignore[union-attr]
    a = hot.node("a")
    assert a is not None
    assert a.composites[0].penalty == 20
    assert a.labels["kube-steer.github.io/score"] == "70"  # 90 - 4 * 5
    assert a.labels["kube-steer.github.io/score-util"] == "90"  # dimension labels are not penalised
    assert hot.node("b").labels["kube-steer.github.io/score"] == "90"  # type: ignore[union-attr]


def test_taint_write_keeps_foreign_taints_in_the_plan_view() -> None:
    foreign = Taint("dedicated", "ml", "NoSchedule")
    cluster = [NodeState("c", labels=dict(FOREIGN), taints=(foreign,))]
    memory = ScorerMemory()
    for i in range(2):
        plan, memory = plan_cycle(
            POLICY, cluster, readings_for(POLICY, cluster, VALUES, T0 + i), memory, T0 + i
        )
        cluster = apply_plan(POLICY, cluster, plan)
    assert plan.node("c").current_taints == ()  # type: ignore[union-attr]
    assert plan.node("c").taints == (Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule"),)  # type: ignore[union-attr]
    assert foreign in cluster[0].taints


def test_a_new_leader_keeps_an_existing_taint_while_the_condition_holds() -> None:
    cluster = [
        NodeState(
            "c",
            labels={"kube-steer.github.io/gpu-hot": "true"},
            taints=(Taint("kube-steer.github.io/gpu-hot", "true", "NoSchedule"),),
        )
    ]
    plan, _ = plan_cycle(
        POLICY,
        cluster,
        readings_for(POLICY, cluster, {"util": {"c": 95.0}}, T0),
        ScorerMemory(),
        T0,
    )
    assert plan.node("c").taints == cluster[0].taints  # type: ignore[union-attr]


# ------------------------------------------------------------------------ properties

# below the gpu-hot threshold (90) even with noise: that rule changes labels by design
scores = st.floats(min_value=0, max_value=86, allow_nan=False)


@settings(max_examples=150, deadline=None)
@given(
    first=st.lists(scores, min_size=1, max_size=8),
    noise=st.lists(
        st.lists(st.floats(min_value=-3, max_value=3), min_size=8, max_size=8),
        min_size=1,
        max_size=6,
    ),
)
def test_noise_within_the_hysteresis_margin_writes_nothing(
    first: list[float], noise: list[list[float]]
) -> None:
    """After the first cycle, values within ±hysteresis of the first ones change no label."""
    names = [f"n{i}" for i in range(len(first))]
    cluster = nodes(*names)
    base = dict(zip(names, first, strict=True))
    plan, memory = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, {"util": base}, T0), ScorerMemory(), T0
    )
    cluster = apply_plan(POLICY, cluster, plan)
    for i, deltas in enumerate(noise, start=1):
        util = {n: min(100.0, max(0.0, v + deltas[j])) for j, (n, v) in enumerate(base.items())}
        plan, memory = plan_cycle(
            POLICY, cluster, readings_for(POLICY, cluster, {"util": util}, T0 + i), memory, T0 + i
        )
        assert plan.changes == ()


@settings(max_examples=100, deadline=None)
@given(
    foreign=st.dictionaries(
        st.sampled_from(
            [
                "app",
                "kube-steer.github.io/other",
                "kube-steer.github.io/score-old",
                "kubernetes.io/os",
                "zone",
            ]
        ),
        st.sampled_from(["1", "x", "true", "90"]),
    ),
    foreign_taints=st.lists(
        st.builds(
            Taint,
            st.sampled_from(
                ["dedicated", "kube-steer.github.io/maintenance", "node.kubernetes.io/not-ready"]
            ),
            st.sampled_from(["", "true"]),
            st.sampled_from(["NoSchedule", "NoExecute", "PreferNoSchedule"]),
        ),
        max_size=3,
        unique_by=lambda t: t.key,
    ),
    util=st.floats(min_value=0, max_value=100),
    cycles=st.integers(min_value=1, max_value=4),
)
def test_changes_only_ever_touch_owned_keys(
    foreign: dict[str, str], foreign_taints: list[Taint], util: float, cycles: int
) -> None:
    cluster = [NodeState("a", labels=dict(foreign), taints=tuple(foreign_taints))]
    memory = ScorerMemory()
    owned = owned_label_keys(POLICY)
    for i in range(cycles):
        plan, memory = plan_cycle(
            POLICY,
            cluster,
            readings_for(POLICY, cluster, {"util": {"a": util}}, T0 + i),
            memory,
            T0 + i,
        )
        node_plan = plan.node("a")
        assert node_plan is not None
        assert set(node_plan.label_changes) <= owned
        assert all(t.key in owned_taint_keys(POLICY) for t in node_plan.taints)
        cluster = apply_plan(POLICY, cluster, plan)
        assert {k: v for k, v in cluster[0].labels.items() if k not in owned} == foreign
        assert [
            t for t in cluster[0].taints if t.key not in owned_taint_keys(POLICY)
        ] == foreign_taints


@settings(max_examples=100, deadline=None)
@given(
    st.dictionaries(st.sampled_from("abcdef"), st.floats(min_value=-1e6, max_value=1e6), min_size=1)
)
def test_every_label_is_a_valid_bucket(power: dict[str, float]) -> None:
    cluster = nodes(*power)
    plan, _ = plan_cycle(
        POLICY, cluster, readings_for(POLICY, cluster, {"power": power}, T0), ScorerMemory(), T0
    )
    for node_plan in plan.nodes:
        assert int(node_plan.labels["kube-steer.github.io/score-power"]) in range(0, 101, 10)
        assert int(node_plan.labels["kube-steer.github.io/score"]) in range(0, 101, 10)
