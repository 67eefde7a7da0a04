"""The scheduler bench: its options change only what they say, its realistic pods are a
Deployment's, its profile lever and placement yardstick follow the scheduler's rules
(bench/benchkit/)."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import pytest

from bench.benchkit.placement_quality import eligible_room, fleet_snapshot, judge_placement
from bench.benchkit.realistic import (
    REALISTIC_BYTES,
    pod_bytes,
    replica_set,
    replica_set_name,
    service,
)
from bench.benchkit.scheduler_profiles import nodes_to_find, with_steer_percentage
from bench.benchkit.shapes import OPTIONS, PREFERRED, SHAPE_BY_NAME, SHAPES, shape_pods, steer
from steer.adapters.policy_file import load_policy_file
from steer.core.mutation import MutationPlan
from steer.core.scheduling import term_matches

ROOT = Path(__file__).resolve().parent.parent
PLAN = MutationPlan.from_policy(load_policy_file(str(ROOT / "examples" / "policy.yaml")))


def normalised(terms: list[dict[str, Any]], nodes: list[dict[str, str]]) -> list[int]:
    """NodeAffinity Score then its NormalizeScore, as kube-scheduler computes them: the sum of
    the weights of the matching terms, times 100 over the largest sum (integer division)."""
    raw = [sum(t["weight"] for t in terms if term_matches(t["preference"], n)) for n in nodes]
    top = max(raw)
    return [100 * r // top if top else 0 for r in raw]


def test_merged_terms_score_every_node_as_the_webhooks_terms_do() -> None:
    pods = shape_pods(PLAN, next(o for o in OPTIONS if o.name == "no-tenant:merged"))
    original = shape_pods(PLAN, SHAPE_BY_NAME["no-tenant"]).steered["spec"]["affinity"]
    terms = original["nodeAffinity"][PREFERRED]
    merged = pods.steered["spec"]["affinity"]["nodeAffinity"][PREFERRED]
    assert len(merged) == len(terms) - 1 and max(t["weight"] for t in merged) <= 100
    buckets = [str(b) for b in range(0, 101, 10)] + [None]
    reserved = [None, "true"]
    # Every set of three nodes a pod could choose between, over every bucket and reservation.
    kinds = []
    for bucket, held in itertools.product(buckets, reserved):
        labels = {}
        if bucket is not None:
            labels["kube-steer.github.io/score"] = bucket
        if held is not None:
            labels["kube-steer.github.io/reserved-for-gpu"] = held
        kinds.append(labels)
    for trio in itertools.combinations(kinds, 3):
        assert normalised(merged, list(trio)) == normalised(terms, list(trio)), trio


@pytest.mark.parametrize("option", [o for o in OPTIONS if not o.twin_spread], ids=lambda o: o.name)
def test_an_option_keeps_its_shapes_twin_and_changes_only_the_steered_pod(option: Any) -> None:
    assert option.option_of in {s.name for s in SHAPES}
    of = shape_pods(PLAN, SHAPE_BY_NAME[option.option_of])
    pods = shape_pods(PLAN, option)
    assert pods.twin == of.twin
    assert pods.steered != of.steered
    # What the option does not touch stays as the webhook made it.
    for key in ("schedulerName", "tolerations"):
        assert pods.steered["spec"].get(key) == of.steered["spec"].get(key)
    assert pods.steered["metadata"] == of.steered["metadata"]


def test_the_own_spread_option_gives_the_twins_the_chains_constraints_as_the_users_own() -> None:
    """a-chain:own-spread: the chain's pods as the shape's, the twins with the constraints the
    webhook adds; the webhook, given that twin as the user's pod, makes exactly the steered pod
    (it adds no constraint that is there already), so the pair measures the rest of steering."""
    (option,) = [o for o in OPTIONS if o.twin_spread]
    of = shape_pods(PLAN, SHAPE_BY_NAME[option.option_of])
    pods = shape_pods(PLAN, option)
    assert (pods.steered, pods.realistic_steered) == (of.steered, of.realistic_steered)
    for twin, steered, plain in (
        (pods.twin, pods.steered, of.twin),
        (pods.realistic_twin, pods.realistic_steered, of.realistic_twin),
    ):
        constraints = twin["spec"]["topologySpreadConstraints"]
        assert [c["topologyKey"] for c in constraints] == [
            "topology.kubernetes.io/zone",
            "kubernetes.io/hostname",
        ]
        assert constraints == steered["spec"]["topologySpreadConstraints"]
        assert {**twin, "spec": {**twin["spec"], "topologySpreadConstraints": None}} == {
            **plain,
            "spec": {**plain["spec"], "topologySpreadConstraints": None},
        }
    assert steer(PLAN, option, pods.realistic_twin).pod == pods.realistic_steered


# -- the realistic pair, the profile lever and the placement yardstick ------------------------


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: s.name)
def test_a_realistic_twin_is_a_deployments_pod_as_the_user_made_it(shape: Any) -> None:
    """5-8 KiB, owned by the shape's ReplicaSet, selected by its Service and ReplicaSet (so the
    scheduler's default spreading applies), no schedulerName (default-scheduler); its steered
    pod is the same pod through the webhook's mutation."""
    pods = shape_pods(PLAN, shape)
    twin = pods.realistic_twin
    low, high = REALISTIC_BYTES
    assert low <= pod_bytes(twin) <= high
    assert "schedulerName" not in twin["spec"]
    (owner,) = twin["metadata"]["ownerReferences"]
    assert owner["controller"] is True and owner["kind"] == "ReplicaSet"
    assert owner["name"] == replica_set_name(shape)
    labels = twin["metadata"]["labels"]
    rs_selector = replica_set(shape, "uid")["spec"]["selector"]["matchLabels"]
    assert labels.items() >= rs_selector.items()
    assert labels.items() >= service(shape)["spec"]["selector"].items()
    assert pods.realistic_steered["spec"].get("schedulerName", "").startswith("steer-")
    prefix = PLAN.policy.spec.resource_prefix
    if shape.name != "no-tenant":  # a tenant's pod takes its limits from the pool
        resources = pods.realistic_steered["spec"]["containers"][0]["resources"]
        assert any(k.startswith(prefix) for k in resources["requests"])
        assert {k for k in resources["requests"] if k.startswith(prefix)} == {
            k for k in resources["limits"] if k.startswith(prefix)
        }


def test_no_pool_removes_every_pool_and_gate_request_and_limit() -> None:
    option = next(o for o in OPTIONS if o.name == "a-burstable:no-pool")
    pods = shape_pods(PLAN, option)
    prefix = PLAN.policy.spec.resource_prefix
    for pod in (pods.steered, pods.realistic_steered):
        for container in pod["spec"]["containers"]:
            for part in ("requests", "limits"):
                assert not [
                    k for k in container["resources"].get(part) or {} if k.startswith(prefix)
                ]


@pytest.mark.parametrize(
    ("name", "softened"),
    [
        ("a-chain:soft-zone", "topology.kubernetes.io/zone"),
        ("a-chain:soft-hosts", "kubernetes.io/hostname"),
    ],
)
def test_a_soft_spread_option_softens_its_topology_only(name: str, softened: str) -> None:
    """The chain's constraints as the example policy makes them (both hard), one made soft."""
    of = shape_pods(PLAN, SHAPE_BY_NAME["a-chain"]).steered["spec"]["topologySpreadConstraints"]
    got = shape_pods(PLAN, next(o for o in OPTIONS if o.name == name)).steered["spec"]
    assert {c["whenUnsatisfiable"] for c in of} == {"DoNotSchedule"}
    assert got["topologySpreadConstraints"] == [
        {**c, "whenUnsatisfiable": "ScheduleAnyway"} if c["topologyKey"] == softened else c
        for c in of
    ]


def test_the_steer_percentage_goes_to_the_steer_profiles_only() -> None:
    config = {
        "profiles": [
            {"schedulerName": "default-scheduler"},
            {"schedulerName": "steer-spread"},
            {"schedulerName": "steer-binpack"},
        ]
    }
    out = with_steer_percentage(config, 5)
    assert [p.get("percentageOfNodesToScore") for p in out["profiles"]] == [None, 5, 5]
    assert "percentageOfNodesToScore" not in config["profiles"][1]  # a copy
    with pytest.raises(ValueError, match="steer-"):
        with_steer_percentage({"profiles": [{"schedulerName": "default-scheduler"}]}, 5)


@pytest.mark.parametrize(
    ("percentage", "nodes", "found"),
    [
        (None, 5000, 500),
        (5, 5000, 250),
        (2, 5000, 100),
        (5, 200, 100),
        (None, 1000, 420),
        (0, 50, 50),
    ],
)
def test_nodes_to_find_follows_the_schedulers_rule(
    percentage: int | None, nodes: int, found: int
) -> None:
    """pkg/scheduler/schedule_one.go numFeasibleNodesToFind: all nodes under 100, never fewer
    than 100, the adaptive default 50 - nodes/125 percent (at least 5)."""
    assert nodes_to_find(percentage, nodes) == found


def test_the_placement_yardstick_counts_pods_on_the_best_nodes() -> None:
    scores = {"a": 90, "b": 90, "c": 80, "d": 10}
    room = {"a": 1, "b": 1, "c": 10, "d": 10}
    preference = {"a": 150, "b": 150, "c": 80, "d": 10}
    quality = judge_placement("score", scores, preference, room, ["a", "b", "c", "d"])
    assert quality is not None
    assert quality.best_share == 0.5 and quality.best_ceiling == 0.5  # a and b hold one each
    assert quality.top2_share == 0.75
    assert quality.off_eligible == 0
    assert judge_placement("score", scores, preference, room, ["x"]).off_eligible == 1  # type: ignore[union-attr]
    assert judge_placement("score", scores, preference, room, []) is None


def test_a_hard_host_spread_caps_what_a_node_holds_of_the_run() -> None:
    chain = shape_pods(PLAN, SHAPE_BY_NAME["a-chain"])
    allocatable = {"cpu": "64", "memory": "256Gi", "pods": "110"}
    prefix = PLAN.policy.spec.resource_prefix
    for container in chain.steered["spec"]["containers"]:
        allocatable |= {
            k: "1000000" for k in container["resources"]["requests"] if k.startswith(prefix)
        }
    node = {
        "metadata": {"name": "n", "labels": {}},
        "spec": {},
        "status": {"allocatable": allocatable},
    }
    fleet = fleet_snapshot([node], keys=())
    hosts = next(
        c
        for c in chain.steered["spec"]["topologySpreadConstraints"]
        if c["topologyKey"] == "kubernetes.io/hostname"
    )
    assert eligible_room(fleet, chain.steered) == {"n": hosts["maxSkew"]}
    soft = shape_pods(PLAN, next(o for o in OPTIONS if o.name == "a-chain:soft-hosts"))
    assert eligible_room(fleet, soft.steered) == {"n": 110}  # 100m of cpu each: pods caps it
