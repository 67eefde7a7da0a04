"""The SteeringPolicy CRD (steer/core/policy/crd.py): the committed manifest is the generator's
output, the schema is structural and keeps every field of a policy, the field types' bounds
reach it, and the status says every problem by its path. The apiserver's own verdict on the
schema is tests/e2e/test_policy_resource.py."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from launcher.commands import main
from launcher.policy import CRD_FILE, crd_yaml
from steer.adapters.policy_resource import parse_policy_object, policy_document
from steer.core.policy import PolicyIssue, parse_policy
from steer.core.policy.crd import (
    CRD_NAME,
    MAX_STATUS_PROBLEMS,
    accepted_status,
    crd_manifest,
    rejected_status,
    spec_schema,
)
from steer.core.policy.fields import STEPS

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "steer" / "presets" / "policy.yaml"
STARTER = ROOT / "manifests" / "policy" / "starter-policy.yaml"
CHART_CRD_FILE = "charts/kube-steer/crds/steeringpolicies.yaml"


def test_the_committed_crd_is_the_generators_output() -> None:
    # The kustomize base's CRD and the chart's copy (Helm installs crds/ before the templates).
    for copy in (CRD_FILE, CHART_CRD_FILE):
        assert (ROOT / copy).read_text() == crd_yaml(), (
            f"{copy} is out of date with the policy model: regenerate it with "
            f"`.venv/bin/steer policy crd > {copy}`"
        )
    kustomization = yaml.safe_load((ROOT / "manifests" / "kustomization.yaml").read_text())
    assert "crd/steeringpolicies.yaml" in kustomization["resources"]


def test_steer_policy_crd_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "launcher", "policy", "crd"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert done.stdout == crd_yaml()
    crd = yaml.safe_load(done.stdout)
    assert crd["metadata"]["name"] == CRD_NAME
    assert crd["spec"]["scope"] == "Cluster"
    (version,) = crd["spec"]["versions"]
    assert version["subresources"] == {"status": {}}
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Accepted", "Mode", "Version", "Data", "Admission", "Reason", "Age"]


def nodes(schema: dict[str, Any], path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    yield path, schema
    for name, sub in schema.get("properties", {}).items():
        yield from nodes(sub, f"{path}.{name}")
    if "items" in schema:
        yield from nodes(schema["items"], f"{path}[]")
    if isinstance(schema.get("additionalProperties"), dict):
        yield from nodes(schema["additionalProperties"], f"{path}{{}}")


def test_the_schema_is_structural() -> None:
    root = crd_manifest()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    for path, node in nodes(root):
        assert "type" in node, f"{path}: every node needs a type"
        for word in ("$ref", "anyOf", "oneOf", "allOf", "const", "title", "default", "$defs"):
            assert word not in node, f"{path}: {word} is not structural here"
        if node["type"] == "object" and "properties" in node:
            assert "additionalProperties" not in node, path
        if node["type"] == "array":
            assert "items" in node, path
        assert "x-kubernetes-preserve-unknown-fields" not in node, path
    assert root["properties"]["metadata"] == {"type": "object"}
    assert root["required"] == ["spec"]


def schema_at(schema: dict[str, Any], value: Any, path: str) -> Iterator[str]:
    """The paths of `value` that `schema` does not declare (the apiserver would prune them)."""
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                yield from schema_at(props[key], sub, f"{path}.{key}")
            elif isinstance(extra, dict):
                yield from schema_at(extra, sub, f"{path}[{key}]")
            else:
                yield f"{path}.{key}"
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from schema_at(schema["items"], item, f"{path}[{i}]")


@pytest.mark.parametrize("policy", [EXAMPLE, STARTER], ids=lambda p: p.name)
def test_every_field_of_a_real_policy_is_declared(policy: Path) -> None:
    spec = yaml.safe_load(policy.read_text())["spec"]
    assert list(schema_at(spec_schema(), spec, "spec")) == []


def test_every_model_field_is_in_the_schema_with_its_bounds() -> None:
    spec = spec_schema()["properties"]
    scoring = spec["scoring"]["properties"]
    # The same values the model's check accepts, no more, no fewer.
    assert scoring["step"]["enum"] == list(STEPS)
    assert [s for s in range(1, 101) if 100 % s == 0] == list(STEPS)
    assert (scoring["hysteresis"]["minimum"], scoring["hysteresis"]["maximum"]) == (0, 49)
    assert scoring["intervalSeconds"]["minimum"] == 0.001
    tenant = spec["tenants"]["items"]["properties"]
    assert tenant["overcommitPercent"] == {
        "type": "number",
        "minimum": 0,
        "maximum": 100,
        "nullable": True,
    }
    assert spec["tenants"]["items"]["required"] == ["name", "namespaceSelector"]
    assert spec["mode"]["enum"] == ["enforce", "audit"]
    assert spec["dimensions"]["minItems"] == 1
    effect = spec["taints"]["items"]["properties"]["effect"]
    assert set(effect["enum"]) >= {"NoSchedule", "PreferNoSchedule"}


def test_a_union_is_one_object_with_a_rule_per_variant() -> None:
    dim = spec_schema()["properties"]["dimensions"]["items"]
    assert dim["properties"]["source"]["enum"] == ["prometheus", "kubernetes", "http"]
    assert dim["required"] == ["name"]  # `source` defaults to prometheus
    assert {"query", "kubernetes", "http", "weight"} <= set(dim["properties"])
    rules = {(r["fieldPath"], r["reason"]): r for r in dim["x-kubernetes-validations"]}
    http = rules[(".http", "FieldValueRequired")]
    assert http["message"] == "required for source: http"
    assert "'prometheus'" in http["rule"]  # the default applies when `source` is absent
    assert rules[(".query", "FieldValueForbidden")]["message"] == "used only by source: prometheus"
    score = spec_schema()["properties"]["clusterScores"]["properties"]["scores"]["items"]
    assert score["properties"]["kind"]["enum"] == ["freeResource", "tenantHeadroom", "powerPerCore"]
    assert "kind" in score["required"]
    # A field optional in one variant and required in another is nullable, and required by
    # the variant's rule only where no variant has it optional (the services check the rest).
    assert score["properties"]["worst"]["nullable"] is True


def test_accepted_then_rejected_status() -> None:
    ok = accepted_status(
        generation=3, version="p@abc", digest="abcdef", mode="enforce", now="2026-01-01T00:00:00Z"
    )
    assert ok["conditions"][0]["status"] == "True"
    assert ok["observedGeneration"] == 3
    assert ok["scorer"] == {
        "version": "p@abc",
        "digest": "abcdef",
        "generation": 3,
        "mode": "enforce",
    }
    issues = [PolicyIssue("spec.tenants[0].name", "required field is missing")]
    bad = rejected_status(
        generation=4, issues=issues, running=ok["scorer"], now="2026-01-02T00:00:00Z", before=ok
    )
    cond = bad["conditions"][0]
    assert (cond["status"], cond["reason"], cond["observedGeneration"]) == ("False", "Invalid", 4)
    assert cond["message"] == (
        "1 problem; still running p@abc: spec.tenants[0].name: required field is missing"
    )
    assert cond["lastTransitionTime"] == "2026-01-02T00:00:00Z"  # it flipped
    assert bad["problems"] == [
        {"path": "spec.tenants[0].name", "message": "required field is missing"}
    ]
    assert bad["scorer"]["generation"] == 3
    again = rejected_status(
        generation=5, issues=issues, running=ok["scorer"], now="2026-01-03T00:00:00Z", before=bad
    )
    assert again["conditions"][0]["lastTransitionTime"] == "2026-01-02T00:00:00Z"  # no flip


def test_a_status_lists_at_most_its_limit_of_problems() -> None:
    issues = [PolicyIssue(f"spec.dimensions[{i}].name", "bad") for i in range(200)]
    bad = rejected_status(generation=1, issues=issues, running=None, now="t")
    assert len(bad["problems"]) == MAX_STATUS_PROBLEMS
    assert bad["conditions"][0]["message"].startswith("200 problems: ")
    assert bad["conditions"][0]["message"].endswith("... and 150 more")
    assert "scorer" not in bad


def test_migrate_prints_the_object_with_the_spec_as_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["policy", "migrate", "--from-file", str(EXAMPLE), "--name", "prod"]) == 0
    obj = yaml.safe_load(capsys.readouterr().out)
    raw = yaml.safe_load(EXAMPLE.read_text())
    assert obj["apiVersion"] == "kube-steer.github.io/v1alpha1"
    assert obj["kind"] == "SteeringPolicy"
    assert obj["metadata"]["name"] == "prod"
    assert obj["spec"] == raw["spec"]  # no defaults filled in, nothing lost
    assert list(schema_at(spec_schema(), obj["spec"], "spec")) == []
    # The services read it as the same policy as the file (labels aside: its document is the
    # object's apiVersion, kind, name and spec).
    from_object = parse_policy_object(obj)
    assert from_object.spec == parse_policy(EXAMPLE.read_text()).spec
    assert from_object.name == "prod"
    assert policy_document(obj) == policy_document(json.loads(json.dumps(obj)))


def test_migrate_refuses_an_invalid_policy_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(EXAMPLE.read_text().replace("overcommitPercent: 5", "overcommitPercent: 500"))
    assert main(["policy", "migrate", "--from-file", str(bad)]) == 1
    err = capsys.readouterr()
    assert err.out == ""
    assert "spec.tenants[0].overcommitPercent" in err.err


def test_the_data_ready_condition_says_every_problem_and_moves_only_when_it_flips() -> None:
    from steer.core.datacheck import DataProblem, ProblemKind
    from steer.core.policy.crd import DATA_READY, accepted_status

    problem = DataProblem("gpu-util", ProblemKind.UNIT, "every value lies in 0..1", "x 100", True)
    first = accepted_status(
        generation=1, version="p@1", digest="d", mode="enforce", now="T1", data=[problem]
    )
    (data,) = [c for c in first["conditions"] if c["type"] == DATA_READY]
    assert (data["status"], data["reason"], data["lastTransitionTime"]) == (
        "False",
        "DataProblems",
        "T1",
    )
    assert data["message"] == f"1 problem: {problem.line()}"
    again = accepted_status(
        generation=1,
        version="p@1",
        digest="d",
        mode="enforce",
        now="T2",
        data=[problem],
        before=first,
    )
    assert (
        next(c for c in again["conditions"] if c["type"] == DATA_READY)["lastTransitionTime"]
        == "T1"
    )
    whole = accepted_status(
        generation=1, version="p@1", digest="d", mode="enforce", now="T3", data=[], before=again
    )
    (data,) = [c for c in whole["conditions"] if c["type"] == DATA_READY]
    assert (data["status"], data["lastTransitionTime"]) == ("True", "T3")
    # True names the exporter forms each dimension read, dimensions grouped by their forms.
    forms = [
        ("gpu-util", ("dcgm-exporter hostname", "dcgm-exporter Hostname")),
        ("gpu-free", ("dcgm-exporter Hostname", "dcgm-exporter hostname")),
        ("power", ("kepler >= 0.10",)),
        ("health", ()),
    ]
    named = accepted_status(
        generation=1, version="p@1", digest="d", mode="enforce", now="T4", data=[], forms=forms
    )
    (data,) = [c for c in named["conditions"] if c["type"] == DATA_READY]
    assert data["message"] == (
        "every dimension resolves the nodes it expects, in the unit it declares; "
        "read dcgm-exporter Hostname, dcgm-exporter hostname: gpu-util, gpu-free; "
        "read kepler >= 0.10: power"
    )
    # Before the first cycle there is nothing to say: only Accepted.
    assert [
        c["type"]
        for c in accepted_status(generation=1, version="p@1", digest="d", mode="enforce", now="T")[
            "conditions"
        ]
    ] == ["Accepted"]
