"""`spec.dimensions`: one model per source, and the union's errors in the source's words."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from steer.core.policy import (
    Dimension,
    HttpDimension,
    KubernetesDimension,
    PolicyError,
    PrometheusDimension,
    parse_policy,
)
from steer.core.policy.dimensions import SOURCES
from steer.core.policy.issues import from_pydantic
from tests.scorer_support import SMALL_POLICY

BASE = yaml.safe_load(SMALL_POLICY)
KUBE = {"name": "k", "source": "kubernetes", "kubernetes": {"kind": "limitOvercommit"}}
HTTP = {
    "name": "h",
    "source": "http",
    "http": {"url": "http://registry:8500/v1/health", "nodeField": "Node", "valueField": "S"},
}
PROM = {"name": "p", "query": "up"}


def text(*dimensions: object) -> str:
    doc = copy.deepcopy(BASE)
    doc["spec"]["dimensions"].extend(copy.deepcopy(list(dimensions)))
    return yaml.safe_dump(doc)


def issues(*dimensions: object) -> list[str]:
    with pytest.raises(PolicyError) as info:
        parse_policy(text(*dimensions))
    return [str(i) for i in info.value.issues]


def with_(base: dict[str, Any], **changes: Any) -> dict[str, Any]:
    return {**base, **changes}


def without(base: dict[str, Any], key: str) -> dict[str, Any]:
    return {k: v for k, v in base.items() if k != key}


def test_each_source_is_its_own_model() -> None:
    spec = parse_policy(text(PROM, with_(PROM, name="q", source="prometheus"), KUBE, HTTP)).spec
    prom, explicit, kube, http = spec.dimensions[3:]
    # No `source:` is a prometheus dimension, as before the union.
    assert isinstance(prom, PrometheusDimension) and prom.source == "prometheus"
    assert isinstance(explicit, PrometheusDimension)
    assert isinstance(kube, KubernetesDimension) and kube.kubernetes.kind == "limitOvercommit"
    assert isinstance(http, HttpDimension) and http.http.node_field == "Node"
    assert [d.what for d in (prom, kube, http)] == [
        "up",
        "kubernetes: limitOvercommit",
        "http: GET http://registry:8500/v1/health",
    ]


def test_a_setting_written_out_as_null_is_absent() -> None:
    spec = parse_policy(text(with_(PROM, kubernetes=None, http=None))).spec
    assert isinstance(spec.dimensions[3], PrometheusDimension)


def test_a_dumped_policy_reads_back_the_same() -> None:
    policy = parse_policy(text(PROM, KUBE, HTTP))
    dumped = yaml.safe_dump(policy.doc.model_dump(by_alias=True, mode="json"))
    assert parse_policy(dumped).doc == policy.doc


@pytest.mark.parametrize(
    ("dimension", "expected"),
    [
        (
            with_(PROM, kubernetes={"kind": "limitOvercommit"}),
            "kubernetes: not used by source: prometheus",
        ),
        (with_(PROM, http=HTTP["http"]), "http: not used by source: prometheus"),
        (with_(KUBE, query="up"), "query: not used by source: kubernetes"),
        (with_(KUBE, http=HTTP["http"]), "http: not used by source: kubernetes"),
        (with_(HTTP, query="up"), "query: not used by source: http"),
        (with_(HTTP, kubernetes=KUBE["kubernetes"]), "kubernetes: not used by source: http"),
        (without(KUBE, "kubernetes"), "kubernetes: required for source: kubernetes"),
        (with_(KUBE, kubernetes=None), "kubernetes: required for source: kubernetes"),
        (without(HTTP, "http"), "http: required for source: http"),
        (without(PROM, "query"), "query: required field is missing"),
        (with_(PROM, query=" "), "query: must be a PromQL expression, got an empty string"),
        (with_(KUBE, weigth=1), "weigth: unknown field (check the spelling; fields are camelCase)"),
        (without(KUBE, "name"), "name: required field is missing"),
        (
            with_(KUBE, kubernetes={"kind": "bad"}),
            "kubernetes.kind: input should be 'limitOvercommit' or 'endpointReadiness', got 'bad'",
        ),
        (
            with_(KUBE, kubernetes="x"),
            "kubernetes: input should be a valid dictionary or instance of KubernetesSource, "
            "got 'x'",
        ),
        (
            with_(HTTP, http={**HTTP["http"], "foo": 1}),
            "http.foo: unknown field (check the spelling; fields are camelCase)",
        ),
    ],
)
def test_the_source_settings_errors_read_as_before(dimension: object, expected: str) -> None:
    assert issues(dimension) == [f"spec.dimensions[3].{expected}"]


@pytest.mark.parametrize(
    ("source", "got"), [("foo", "'foo'"), (None, "None"), (5, "5"), (["x"], "['x']")]
)
def test_an_unknown_source_reads_as_a_literal_field(source: object, got: str) -> None:
    assert issues(with_(PROM, source=source)) == [
        f"spec.dimensions[3].source: input should be 'prometheus', 'kubernetes' or 'http', got {got}"
    ]


@pytest.mark.parametrize(("entry", "got"), [("nope", "'nope'"), (["x"], "['x']"), (None, "None")])
def test_an_entry_that_is_not_a_mapping(entry: object, got: str) -> None:
    assert issues(entry) == [
        f"spec.dimensions[3]: input should be a valid dictionary or instance of Dimension, got {got}"
    ]


def test_source_settings_check_themselves_beside_other_field_errors() -> None:
    found = issues(
        with_(KUBE, kubernetes={"kind": "endpointReadiness", "namespace": "Shop"}),
        with_(HTTP, http={**HTTP["http"], "url": "registry:8500", "valueField": " "}),
        without(PROM, "query"),
    )
    assert found == [
        "spec.dimensions[5].query: required field is missing",
        "spec.dimensions[3].kubernetes.namespace: required for endpointReadiness: the Service's "
        "namespace (lower-case RFC 1123 label), got 'Shop'",
        "spec.dimensions[3].kubernetes.service: required for endpointReadiness: the Service's "
        "service (lower-case RFC 1123 label), got None",
        "spec.dimensions[4].http.url: must be an http(s) URL, got 'registry:8500'",
        "spec.dimensions[4].http.valueField: must name a field",
    ]


def test_the_union_alone_has_no_tag_in_its_paths() -> None:
    with pytest.raises(ValidationError) as info:
        TypeAdapter(Dimension).validate_python({"name": "k", "source": "kubernetes", "query": "x"})
    fields, checks = from_pydantic(info.value, (SOURCES,))
    assert [str(i) for i in fields] == [
        "kubernetes: required for source: kubernetes",
        "query: not used by source: kubernetes",
    ]
    assert checks == []


def test_the_settings_of_each_source() -> None:
    assert SOURCES.settings == {"query", "kubernetes", "http"}
    assert list(SOURCES.models) == ["prometheus", "kubernetes", "http"]
