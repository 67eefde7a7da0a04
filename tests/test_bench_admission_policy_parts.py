"""The admission-policy parts bench's pure parts (bench/admission_policy_parts.py): each variant
is steer-mutation as compiled, changed only where its name says, under a name the apiserver
takes; the parts it measures are the parts the compiled patch is made of."""

from __future__ import annotations

import re
from typing import Any

import pytest

from bench.admission_latency import constant_trace_patch, mutating_policy_objects
from bench.admission_policy_parts import (
    PART_VIA,
    derived,
    markdown,
    variants,
)
from steer.adapters.policy_file import load_policy_file
from steer.core.admission_policy.mutating import (
    MUTATION_PARTS,
    STEERING_PARTS,
    mutation_parts,
)
from steer.core.steering import trace_annotation_key
from tests.conftest import EXAMPLE_POLICY

POLICY = load_policy_file(str(EXAMPLE_POLICY))
COMPILED = mutating_policy_objects()
RFC_1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _spec(objects: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = next(o for o in objects if o["kind"] == "MutatingAdmissionPolicy")[
        "spec"
    ]
    return spec


def test_the_compiled_patch_is_its_parts_in_the_webhooks_order() -> None:
    parts = mutation_parts(POLICY)
    assert tuple(parts) == MUTATION_PARTS
    (mutation,) = _spec(COMPILED)["mutations"]
    steering = " + ".join(parts[name] for name in STEERING_PARTS)
    assert mutation["jsonPatch"]["expression"] == (
        f"(variables.audit ? [] : {steering}) + {parts['trace']}"
    )


def test_every_variant_has_its_own_valid_name_and_a_policy_with_its_binding() -> None:
    built = variants(POLICY, COMPILED)
    names = [v.name for v in built]
    assert len(set(names)) == len(names)
    assert {"none", "floor", "policy", *(f"part-{p}" for p in MUTATION_PARTS)} <= set(names)
    for variant in built:
        if variant.name == "none":
            assert variant.objects == [] and variant.steered_by is None
            continue
        policy, binding = variant.objects
        assert policy["kind"] == "MutatingAdmissionPolicy"
        assert binding["spec"]["policyName"] == policy["metadata"]["name"]
        assert RFC_1123.match(policy["metadata"]["name"]), policy["metadata"]["name"]
        # Every variant matches the pods steer-mutation matches.
        assert policy["spec"]["matchConstraints"] == _spec(COMPILED)["matchConstraints"]


def test_derived_changes_only_what_it_is_told() -> None:
    compiled = _spec(COMPILED)
    same = _spec(derived(COMPILED, "same"))
    assert same == compiled  # the name aside, a copy
    never = _spec(derived(COMPILED, "never", condition=None, reinvocation="Never"))
    assert "matchConditions" not in never and never["reinvocationPolicy"] == "Never"
    assert never["variables"] == compiled["variables"]
    assert compiled["reinvocationPolicy"] == "IfNeeded"  # the original is left alone
    replaced = _spec(derived(COMPILED, "true", expression="[]", condition="true"))
    assert replaced["matchConditions"] == [{"name": "bench-condition", "expression": "true"}]
    assert replaced["mutations"][0]["jsonPatch"]["expression"] == "[]"


def test_a_part_variant_writes_the_constant_trace_beside_its_part() -> None:
    by_name = {v.name: v for v in variants(POLICY, COMPILED)}
    parts = mutation_parts(POLICY)
    constant = constant_trace_patch(trace_annotation_key(POLICY), PART_VIA)
    resources = _spec(by_name["part-resources"].objects)
    assert resources["mutations"][0]["jsonPatch"]["expression"] == (
        f"{parts['resources']} + {constant}"
    )
    assert by_name["part-resources"].steered_by == PART_VIA
    trace = _spec(by_name["part-trace"].objects)
    assert trace["mutations"][0]["jsonPatch"]["expression"] == parts["trace"]
    assert "~1" in constant and "/" not in constant.split("annotations/")[1].split('"')[0]


def test_the_table_gives_each_variant_over_none_and_over_floor() -> None:
    doc = {
        "args": {"creates": 100, "repeats": 2},
        "loadavg_before": [0.1, 0.2, 0.3],
        "variants": [
            {"name": "none", "about": "no policy", "each_ms": [1.0, 1.2], "cpu_ms": 1.1},
            {"name": "floor", "about": "mechanism", "each_ms": [3.0, 3.2], "cpu_ms": 3.1},
            {"name": "policy", "about": "compiled", "each_ms": [5.0, 5.4], "cpu_ms": 5.2},
        ],
    }
    rows = [line for line in markdown(doc).splitlines() if line.startswith("| ")][1:]
    assert rows[2] == "| policy | compiled | 5.00 / 5.40 | 5.20 | +4.10 | +2.10 |"


def test_an_unknown_variant_is_named() -> None:
    from bench.admission_policy_parts import chosen

    with pytest.raises(SystemExit, match="unknown \\['nope'\\]"):
        chosen(variants(POLICY, COMPILED), "none,nope")
