"""The MutatingAdmissionPolicy (steer/core/admission_policy/mutating.py): its shape.

What the CEL does to a pod is checked where CEL runs, on the real apiserver, against the
webhook's decision (tests/e2e/test_mutating_policy.py); here: the two objects and what they
match, that the expressions are well formed and refer only to variables declared before them,
that every piece the webhook's plan holds is in the CEL, what is listed as not covered, and
the command line.
"""

from __future__ import annotations

import re
from typing import Any

import orjson
import pytest
import yaml

from launcher.commands import main
from steer.core.admission_policy import admission_policies
from steer.core.admission_policy.cel import Cel, cel_empty_list, cel_value
from steer.core.admission_policy.mutating import (
    MATCH_CONDITION,
    POLICY_NAME,
    TRACE_VIA,
    MutatingPolicies,
    mutating_admission_policy,
    not_covered,
)
from steer.core.infrastructure import exempt_cel
from steer.core.mutation import MutationPlan, trace_text
from steer.core.policy import Policy, parse_policy
from steer.core.steering import excluded_namespace_list
from tests.conftest import EXAMPLE_POLICY, ROOT

EXAMPLE_TEXT = EXAMPLE_POLICY.read_text()
# The policy docs/install.md starts from: no tenant, class, taint or spread rule, so no gate.
STARTER_TEXT = (ROOT / "manifests" / "policy" / "starter-policy.yaml").read_text()


def edited(**changes: Any) -> Policy:
    """The example policy with `spec` entries replaced (a callable gets the old value)."""
    doc = yaml.safe_load(EXAMPLE_TEXT)
    for key, value in changes.items():
        doc["spec"][key] = value(doc["spec"][key]) if callable(value) else value
    return parse_policy(yaml.safe_dump(doc))


@pytest.fixture
def policy() -> Policy:
    return parse_policy(EXAMPLE_TEXT)


@pytest.fixture
def compiled(policy: Policy) -> MutatingPolicies:
    return mutating_admission_policy(policy)


def spec_of(compiled: MutatingPolicies) -> dict[str, Any]:
    return compiled.objects[0]["spec"]


def variables(compiled: MutatingPolicies) -> dict[str, str]:
    return {v["name"]: v["expression"] for v in spec_of(compiled)["variables"]}


def expressions(compiled: MutatingPolicies) -> list[str]:
    spec = spec_of(compiled)
    return [
        *(c["expression"] for c in spec["matchConditions"]),
        *(v["expression"] for v in spec["variables"]),
        *(m["jsonPatch"]["expression"] for m in spec["mutations"]),
    ]


def outside_strings(expression: str) -> str:
    """The expression with its string literals blanked (both quote styles, escapes)."""
    return re.sub(r"'(?:[^'\\]|\\.)*'|\"(?:[^\"\\]|\\.)*\"", "''", expression)


# -- the objects ---------------------------------------------------------------------------------


def test_a_policy_and_its_binding_that_mutate_pod_creation_only(
    compiled: MutatingPolicies, policy: Policy
) -> None:
    mutating, binding = compiled.objects
    assert (mutating["apiVersion"], mutating["kind"]) == (
        "admissionregistration.k8s.io/v1",
        "MutatingAdmissionPolicy",
    )
    assert (binding["kind"], binding["spec"]) == (
        "MutatingAdmissionPolicyBinding",
        {"policyName": POLICY_NAME, "matchResources": mutating["spec"]["matchConstraints"]},
    )
    for obj in compiled.objects:
        assert obj["metadata"]["name"] == POLICY_NAME
        assert obj["metadata"]["annotations"] == {
            "kube-steer.github.io/policy-version": policy.version
        }
    spec = mutating["spec"]
    assert spec["failurePolicy"] == "Ignore"  # steering is optional, as the webhook's
    assert spec["reinvocationPolicy"] == "IfNeeded"
    (rule,) = spec["matchConstraints"]["resourceRules"]
    assert (rule["operations"], rule["resources"], rule["apiGroups"]) == (
        ["CREATE"],
        ["pods"],
        [""],
    )
    (mutation,) = spec["mutations"]
    assert mutation["patchType"] == "JSONPatch"
    assert set(mutation) == {"patchType", "jsonPatch"}


def test_it_matches_opted_in_namespaces_the_webhook_does_not_skip(
    compiled: MutatingPolicies, policy: Policy
) -> None:
    selector = spec_of(compiled)["matchConstraints"]["namespaceSelector"]
    assert selector["matchLabels"] == {"kube-steer.github.io/enabled": "true"}
    assert selector["matchExpressions"] == [
        {
            "key": "kubernetes.io/metadata.name",
            "operator": "NotIn",
            "values": list(excluded_namespace_list(policy)),
        }
    ]
    assert {"kube-system", "kube-steer"} <= set(selector["matchExpressions"][0]["values"])


def test_an_opt_in_selector_with_expressions_keeps_them_beside_the_exclusions() -> None:
    policy = edited(
        optIn={
            "namespaceSelector": {
                "matchExpressions": [
                    {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true"]}
                ]
            }
        }
    )
    selector = spec_of(mutating_admission_policy(policy))["matchConstraints"]["namespaceSelector"]
    assert "matchLabels" not in selector
    assert selector["matchExpressions"][1:] == [
        {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true"]}
    ]


def test_infrastructure_and_dra_lookups_are_left_out_by_match_conditions(
    compiled: MutatingPolicies, policy: Policy
) -> None:
    (condition,) = spec_of(compiled)["matchConditions"]
    assert condition["name"] == MATCH_CONDITION
    # Steered already first (the cheapest, and false on a first pass), then infrastructure,
    # then the DRA lookups.
    steered, rest = condition["expression"].split(f" && !({exempt_cel(policy)}) && ")
    assert steered.startswith("!(object.metadata.?annotations[?")
    dra = rest
    assert "object.spec.?resourceClaims" in dra
    assert "'deviceclass.resource.kubernetes.io/'" in dra
    assert "'kube-steer.github.io/'" in dra  # the project's own resources are never a device
    # Without DeviceClasses in any class, no pod needs a DRA lookup.
    without = edited(podClasses=lambda classes: [{**c, "deviceClasses": []} for c in classes])
    (alone,) = spec_of(mutating_admission_policy(without))["matchConditions"]
    assert "resourceClaims" not in alone["expression"]
    assert alone["expression"].endswith(f" && !({exempt_cel(policy)})")


def test_a_pod_steered_already_is_not_evaluated_again(
    compiled: MutatingPolicies, policy: Policy
) -> None:
    """The reinvocation after the policy's own change: the pod carries this version's trace and
    its pool requests, and the one matchCondition stops there, before the infrastructure and
    DRA checks and before the mutation (steer/core/admission_policy/mutating.py `_steered`)."""
    (condition,) = spec_of(compiled)["matchConditions"]
    expression = condition["expression"]
    prefix = '{"policy":' + orjson.dumps(policy.version).decode() + ","
    assert expression.startswith(
        "!(object.metadata.?annotations[?'kube-steer.github.io/trace'].orValue('')"
        f".startsWith('{prefix}') && "
    )
    # Every container, init containers too, holds its pool units: a sidecar added by a later
    # webhook holds none, and the policy steers the pod again.
    assert "(object.spec.containers + object.spec.?initContainers.orValue([])).all(c, " in (
        expression
    )
    for pool, suffix in (("pool-cpu", "m"), ("pool-memory", "Mi")):
        held = f"c.resources.requests['kube-steer.github.io/{pool}']"
        assert f"quantity({held} + '{suffix}').compareTo(" in expression
        assert f"quantity(string(int({held}) - 1) + '{suffix}').compareTo(" in expression
    # A policy without pools checks the trace alone.
    starter = parse_policy(STARTER_TEXT)
    (alone,) = spec_of(mutating_admission_policy(starter))["matchConditions"]
    version = orjson.dumps(starter.version).decode()
    assert alone["expression"].startswith(
        "!(object.metadata.?annotations[?'kube-steer.github.io/trace'].orValue('')"
        f".startsWith('{{\"policy\":{version},')) && "
    )
    assert "pool-cpu" not in alone["expression"]


# -- the CEL ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "policy_text",
    [
        EXAMPLE_TEXT,
        EXAMPLE_TEXT.replace("reserveNodes: prefer", "reserveNodes: require"),
        EXAMPLE_TEXT.replace("enforcement: scheduler", "enforcement: labels"),
        STARTER_TEXT,
    ],
)
def test_expressions_are_balanced_and_read_only_variables_declared_before(
    policy_text: str,
) -> None:
    compiled = mutating_admission_policy(parse_policy(policy_text))
    declared: list[str] = []
    for variable in spec_of(compiled)["variables"]:
        name = variable["name"]
        assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name), name
        assert name not in declared, f"{name} declared twice"
        used = set(
            re.findall(r"variables\.([A-Za-z0-9]+)", outside_strings(variable["expression"]))
        )
        assert used <= set(declared), f"{name} reads {used - set(declared)} before they exist"
        declared.append(name)
    patch = spec_of(compiled)["mutations"][0]["jsonPatch"]["expression"]
    assert set(re.findall(r"variables\.([A-Za-z0-9]+)", outside_strings(patch))) <= set(declared)
    for expression in expressions(compiled):
        code = outside_strings(expression)
        for opening, closing in ("()", "[]", "{}"):
            assert code.count(opening) == code.count(closing), expression[:200]
        assert "\n" not in expression
    # matchConditions run before variables exist (the API's rule).
    for condition in spec_of(compiled)["matchConditions"]:
        assert "variables." not in outside_strings(condition["expression"])


def test_every_piece_of_the_webhooks_plan_is_in_the_cel(
    compiled: MutatingPolicies, policy: Policy
) -> None:
    """Terms, tolerations, schedulers, gates and trace notes of every (tenant, class) the
    webhook precomputes appear, literally, in the policy's variables."""
    text = "\n".join(variables(compiled).values())
    plan = MutationPlan.from_policy(policy)
    for pieces in plan.pieces.values():
        for term in pieces.preferred:
            assert cel_value(term) in text
        for rule, toleration in pieces.tolerations:
            assert cel_value(toleration) in text
            assert orjson.dumps(f"tolerate:{rule}").decode() in text
        if pieces.scheduler:
            assert f"'{pieces.scheduler}'" in text
        for gate in pieces.resources.gates:
            assert f"'{gate.resource}', '{gate.rule}'" in text
        terms = orjson.dumps(list(pieces.term_notes)).decode()
        assert terms.replace("\\", "\\\\").replace("'", "\\'") in text


def test_the_trace_is_the_webhooks_text_with_its_via(
    compiled: MutatingPolicies, policy: Policy
) -> None:
    """The CEL assembles the trace from pieces; joined as it joins them they give the webhook's
    `trace_text` byte for byte (the policy adds `via` before the closing brace)."""
    found = variables(compiled)
    assert found["traceBody"].startswith(
        "'{\"policy\":' + '" + orjson.dumps(policy.version).decode() + "' + ',\"rules\":[' + "
        "variables.inEffect.join(',') + '],\"terms\":' + variables.terms + "
    )
    assert found["trace"] == f'variables.traceBody + \',"via":"{TRACE_VIA}"}}\''
    rules = ("prefer:kube-steer.github.io/score", "budget:pool", "spread:order-chain")
    terms = ("kube-steer.github.io/score In-bits 10/20/40/80",)
    joined = (
        '{"policy":'
        + orjson.dumps(policy.version).decode()
        + ',"rules":['
        + ",".join(orjson.dumps(r).decode() for r in rules)
        + '],"terms":'
        + orjson.dumps(list(terms)).decode()
    )
    assert joined + "}" == trace_text(policy.version, rules, terms)
    audit = joined + ',"mode":"audit","wouldAdd":[' + orjson.dumps("budget:pool").decode() + "]"
    assert audit + "}" == trace_text(policy.version, rules, terms, ("budget:pool",))
    # Both forms are taken as traced already: the webhook's rewrite is kept (both installed).
    assert "variables.traceBody + '}'" in found["traced"]


def test_audited_tenants_get_the_trace_alone() -> None:
    policy = edited(
        tenants=lambda tenants: [{**tenants[0], "mode": "audit"}, *tenants[1:]],
    )
    compiled = mutating_admission_policy(policy)
    assert variables(compiled)["audit"] == "variables.tenant in ['dept-a']"
    patch = spec_of(compiled)["mutations"][0]["jsonPatch"]["expression"]
    assert patch.startswith("(variables.audit ? [] : ")
    whole = edited(mode="audit")
    assert variables(mutating_admission_policy(whole))["audit"] == (
        "variables.tenant in ['dept-a', 'dept-b', '']"
    )


def test_pool_requests_are_ceilings_checked_exactly_without_multiplication(
    compiled: MutatingPolicies,
) -> None:
    """CEL's quantity library has no multiplication or division: millicores and MiB are
    estimated in floating point and confirmed by comparing quantities."""
    changes = variables(compiled)["containerChanges"]
    for suffix in ("m", "Mi"):
        assert f"quantity(string(t) + '{suffix}').compareTo(q) >= 0 ? (" in changes
        assert f"[t + 2].filter(n, quantity(string(n) + '{suffix}').compareTo(q) >= 0)[0]" in (
            changes
        )
    # A limit first, the request without one (container_pool_units).
    assert "c.?resources.?limits[?'cpu'].orValue(c.?resources.?requests[?'cpu'].orValue('0'))" in (
        changes
    )
    # Extended resources get the limit as well as the request.
    assert "'ul': dyn(w.filter(" in changes
    assert "'kube-steer.github.io/pool-cpu'" in changes


def test_native_resource_names_set_requests_only() -> None:
    policy = edited(
        resourcePrefix="steer.kubernetes.io/", formerResourcePrefixes=[], nativeResourceNames=True
    )
    changes = variables(mutating_admission_policy(policy))["containerChanges"]
    assert "'ul': dyn([])" in changes
    assert "'steer.kubernetes.io/pool-cpu'" in changes


def test_owned_resources_under_former_prefixes_are_removed(compiled: MutatingPolicies) -> None:
    changes = variables(compiled)["containerChanges"]
    assert "'kube-steer.kubernetes.io/pool-cpu'" in changes
    assert "'kube-steer.github.io/avoid-gpu-hot'" in changes


def test_a_require_class_is_spared_for_pods_that_ask_for_its_resources() -> None:
    policy = edited(
        podClasses=lambda classes: [
            *classes,
            {"name": "fpga", "requestsAny": ["example.com/fpga"], "reserveNodes": "require"},
        ]
    )
    found = variables(mutating_admission_policy(policy))
    assert "variables.podClass != 'fpga'" in found["spared"]
    # Gates by combination: a gpu pod asking for an FPGA too is spared the unreserved gate.
    assert "'gpu|fpga'" not in found["gates"]
    assert "'dept-a|gpu|fpga'" in found["gates"]
    assert "'kube-steer.github.io/unreserved-fpga', 'reserved:fpga'" in found["gates"]


def test_a_policy_without_gates_still_types_them_as_lists_of_strings() -> None:
    """The apiserver checks list literals as homogeneous, `dyn` apart from `string`, and types a
    variable holding `[]` as `list(dyn)`: over such gates the first container's `[g[0], '1']`
    does not compile (v1.36.2 refused the starter policy's containerChanges so). Gate-less
    combinations give an empty list of string lists instead (the apiserver's verdict on every
    shipped policy is in tests/e2e/test_mutating_policy.py)."""
    typed = cel_empty_list("['', '', '']")
    assert typed == "[['', '', '']].filter(x, false)"
    starter = variables(mutating_admission_policy(parse_policy(STARTER_TEXT)))
    assert starter["gates"] == f"({typed})"
    assert "[g[0], '1']" in starter["containerChanges"]
    # With gates in some combinations only, the others are typed the same way.
    example = variables(mutating_admission_policy(parse_policy(EXAMPLE_TEXT)))["gates"]
    assert typed in example
    assert "'kube-steer.github.io/avoid-gpu-hot'" in example
    assert "[]" not in outside_strings(example)


def test_schedulers_are_routed_as_the_policy_says() -> None:
    keeps = variables(mutating_admission_policy(parse_policy(EXAMPLE_TEXT)))["setScheduler"]
    assert "variables.currentScheduler == 'default-scheduler'" in keeps
    strict = edited(
        schedulerProfiles=lambda p: {**p, "defaultSchedulerIsUnset": False},
    )
    found = variables(mutating_admission_policy(strict))["setScheduler"]
    assert "default-scheduler" not in found
    assert "'steer-binpack'" in variables(mutating_admission_policy(strict))["scheduler"]


def test_cel_values_wrap_mixed_maps_in_dyn() -> None:
    assert cel_value({"a": "x", "b": "y"}) == "{'a': 'x', 'b': 'y'}"
    assert cel_value({"weight": 10, "key": "k"}) == "{'weight': dyn(10), 'key': dyn('k')}"
    assert cel_value(["a", 1]) == "[dyn('a'), dyn(1)]"
    assert cel_value({"m": Cel("variables.x")}) == "{'m': dyn(variables.x)}"
    assert cel_value([True, None]) == "[dyn(true), dyn(null)]"


# -- not covered ------------------------------------------------------------------------------


def test_the_example_lists_what_it_leaves_to_the_webhook(policy: Policy) -> None:
    items = {item.rule: item for item in not_covered(policy)}
    # Every pod the example steers takes from the budget pool (pods of no tenant too), so none
    # is left with no pool and no gate (`trace-resources-removed`).
    assert set(items) == {
        "dra-claims",
        "dra-extended-resources",
        "device-counter",
        "quantity-range",
        "steered-already",
    }
    assert items["dra-claims"].covered_by == "webhook"
    # A GPU pod's counter units are the policy's own for nvidia.com/gpu and the implicit name.
    assert items["device-counter"].covered_by == "webhook"
    assert "gpu" in items["device-counter"].pods
    assert "gpu" in items["dra-claims"].why
    # Only a pod of no class can be put in the gpu class by a DeviceClass mapping.
    assert "(no class)" in items["dra-extended-resources"].pods
    assert "gpu" not in items["dra-extended-resources"].pods.split("is ")[-1]
    assert items["quantity-range"].covered_by == "none"
    for item in items.values():
        assert item.text().startswith(f"{item.rule}: ")


def test_pods_with_no_pool_and_no_gate_are_listed_where_a_policy_has_them() -> None:
    labels = edited(overcommit={"enforcement": "labels"})
    assert "trace-resources-removed" in {i.rule for i in not_covered(labels)}


def test_a_policy_without_device_classes_leaves_nothing_of_dra() -> None:
    policy = edited(
        podClasses=lambda classes: [{**c, "deviceClasses": []} for c in classes],
    )
    assert not {i.rule for i in not_covered(policy)} & {
        "dra-claims",
        "dra-extended-resources",
        "device-counter",
    }


def test_a_class_with_device_classes_after_others_makes_their_pods_uncertain() -> None:
    policy = edited(
        podClasses=lambda classes: [
            {"name": "fpga", "requestsAny": ["example.com/fpga"]},
            *classes,
            {"name": "late", "requestsAny": ["example.com/late"]},
        ]
    )
    (item,) = [i for i in not_covered(policy) if i.rule == "dra-extended-resources"]
    assert item.pods.endswith("is late, (no class)")


def test_duplicate_spread_rules_are_listed() -> None:
    policy = edited(
        spread=lambda rules: [*rules, {**rules[0], "name": "order-chain-again"}],
    )
    (item,) = [i for i in not_covered(policy) if i.rule == "spread-duplicates"]
    assert "order-chain and order-chain-again" in item.why


def test_no_pool_no_quantity_limit() -> None:
    policy = edited(overcommit={"enforcement": "labels"})
    assert "quantity-range" not in {i.rule for i in not_covered(policy)}


# -- the command line -------------------------------------------------------------------------


def test_the_cli_prints_the_mutating_policy_after_the_validating_ones(
    capsys: pytest.CaptureFixture[str], policy: Policy, compiled: MutatingPolicies
) -> None:
    assert main(["policy", "admission-policy", "-f", str(EXAMPLE_POLICY), "--mutating"]) == 0
    out = capsys.readouterr().out
    docs = list(yaml.safe_load_all(out))
    assert docs == [*admission_policies(policy), *compiled.objects]
    comments = [line for line in out.splitlines() if line.startswith("#   - ")]
    assert [line.split(":")[0] for line in comments] == [
        f"#   - {item.rule}" for item in compiled.not_covered
    ]
    assert "no --mutating" in out
    # Without --mutating (the default: the webhook steers), the validating policies alone.
    assert main(["policy", "admission-policy", "-f", str(EXAMPLE_POLICY)]) == 0
    only = list(yaml.safe_load_all(capsys.readouterr().out))
    assert only == admission_policies(policy)


def test_an_empty_opt_in_selector_stands_for_the_install_opt_in_label() -> None:
    """The starter policy opts every namespace in and leaves the choice to the webhook
    configuration's label; the mutating policy, which has no such configuration, must not
    steer more: it selects the install's default opt-in label instead."""
    starter = parse_policy(STARTER_TEXT)
    (mutating, _binding) = mutating_admission_policy(starter).objects
    expressions = mutating["spec"]["matchConstraints"]["namespaceSelector"]["matchExpressions"]
    assert {"key": "kube-steer.github.io/enabled", "operator": "In", "values": ["true"]} in (
        expressions
    )
    # A policy with its own selector is taken as it is.
    example = parse_policy(EXAMPLE_POLICY.read_text())
    selector = mutating_admission_policy(example).objects[0]["spec"]["matchConstraints"][
        "namespaceSelector"
    ]
    assert all(e["key"] != "kube-steer.github.io/enabled" for e in selector["matchExpressions"])
    assert selector["matchLabels"] == {"kube-steer.github.io/enabled": "true"}
