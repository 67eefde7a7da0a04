"""A dimension: one per-node value (from Prometheus, the Kubernetes API or an HTTP document),
how it is normalised to 0..100, and the label it is published as.

`source:` picks the model (`PrometheusDimension` without it): `Dimension` is their
discriminated union, each variant with its own settings beside `source:` as the policy format
has them (`query`, `kubernetes:`, `http:`), and the fields they share in `DimensionBase`.
`SOURCES` says the union's errors in the source's words ("required for source: http", "not
used by source: prometheus"; steer/core/policy/issues.py). The settings of a source check
themselves as they are validated, so their problems come with the other field errors.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from enum import StrEnum
from typing import Annotated, Any, Literal, Self

from pydantic import Field, Tag, field_validator, model_validator
from pydantic.alias_generators import to_camel

from steer.core.k8s_names import is_dns1123_label
from steer.core.policy.contract import KNOWN_UNITS, SCORE_PREFIX
from steer.core.policy.fields import (
    Hysteresis,
    Name,
    Percent,
    PolicyModel,
    PositiveSeconds,
    Step,
    Weight,
)
from steer.core.policy.issues import PolicyIssue, Variants, nested, raise_issues

_PROM_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_UNIT_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")


class Direction(StrEnum):
    HIGHER_IS_BETTER = "higherIsBetter"
    LOWER_IS_BETTER = "lowerIsBetter"


class Normalization(PolicyModel):
    """How raw values map onto 0..100 before the direction is applied.

    `minMax` spreads the cluster's current range over 0..100 (relative: the best node is always
    100); `fixed` uses absolute bounds (a 50 % loaded GPU scores the same in any cluster).
    """

    method: Literal["minMax", "fixed"] = "minMax"
    min: float | None = None
    max: float | None = None

    def issues(self) -> Iterator[PolicyIssue]:
        if self.method == "fixed":
            if self.min is None or self.max is None:
                yield PolicyIssue("", "method fixed needs both min and max")
            elif not self.min < self.max:
                yield PolicyIssue("max", f"must be greater than min ({self.min}), got {self.max}")
        elif self.min is not None or self.max is not None:
            yield PolicyIssue("", "min/max are only used with method: fixed")


class KubernetesSource(PolicyModel):
    """A value computed from the Kubernetes API (scorer/cycle/sources/kubernetes.py).

    `limitOvercommit`: max over cpu and memory of the node's pods' limits / allocatable - 1, in
    % (a node without pods reads -100). `endpointReadiness`: % of the endpoints of Service
    `namespace/service` on the node that are ready (no value where it has none).
    """

    kind: Literal["limitOvercommit", "endpointReadiness"]
    namespace: str | None = None
    service: str | None = None

    @model_validator(mode="after")
    def _checked(self) -> Self:
        raise_issues(self.issues())
        return self

    def issues(self) -> Iterator[PolicyIssue]:
        """`namespace` and `service` name the Service of `endpointReadiness`, and only there."""
        for name in ("namespace", "service"):
            value = getattr(self, name)
            if self.kind == "endpointReadiness":
                if not value or not is_dns1123_label(value):
                    yield PolicyIssue(
                        name,
                        f"required for endpointReadiness: the Service's {name} "
                        f"(lower-case RFC 1123 label), got {value!r}",
                    )
            elif value is not None:
                yield PolicyIssue(name, f"not used by {self.kind}")


class HttpSource(PolicyModel):
    """A JSON document fetched over HTTP (a service registry's REST API), mapped to nodes.

    `items` is the dotted path to the list of entries (empty: the document itself); each entry
    names its node in `nodeField` (a name or an address) and its value in `valueField`, read as
    a number, or looked up in `statusValues` (e.g. Consul's `passing: 100`). Several entries on
    one node combine by `aggregate`.
    """

    url: str
    items: str = ""
    node_field: str
    value_field: str
    status_values: dict[str, float] | None = None
    aggregate: Literal["min", "max", "mean"] = "min"
    timeout_seconds: PositiveSeconds = 10.0
    # Sent as `Authorization: Bearer <token>` (Consul accepts an ACL token so).
    bearer_token_file: str | None = None
    ca_file: str | None = None

    @model_validator(mode="after")
    def _checked(self) -> Self:
        raise_issues(self.issues())
        return self

    def issues(self) -> Iterator[PolicyIssue]:
        if not self.url.startswith(("http://", "https://")):
            yield PolicyIssue("url", f"must be an http(s) URL, got {self.url!r}")
        for name in ("node_field", "value_field"):
            if not getattr(self, name).strip():
                yield PolicyIssue(to_camel(name), "must name a field")


class Coverage(PolicyModel):
    """Which nodes should have a value, so a dimension that resolves fewer is reported with its
    cause (scorer /readyz, the policy's status, `steer policy check`) instead of steering on a
    part of the cluster in silence.

    `any` (the default): at least one node; `all`: every node; `offering`: every node that
    offers what pod class `podClass` requests (its GPU nodes). A reading that resolves some but
    fewer than `minPercent` of the expected nodes is not published (kept until its TTL, then
    withdrawn, as when the source is down): scores normalised over a small, biased part of the
    cluster would rank it wrongly. Between that and all of them it is published for the nodes it
    resolves and reported; one that resolves none is reported (it has nothing to publish, and
    the power model still stands in for an energy dimension's nodes).
    """

    nodes: Literal["any", "all", "offering"] = "any"
    pod_class: str | None = None
    min_percent: Percent = 50.0

    @model_validator(mode="after")
    def _checked(self) -> Self:
        raise_issues(self.issues())
        return self

    def issues(self) -> Iterator[PolicyIssue]:
        if self.nodes == "offering" and not self.pod_class:
            yield PolicyIssue(
                "podClass", "required with nodes: offering: the pod class whose nodes to expect"
            )
        elif self.nodes != "offering" and self.pod_class is not None:
            yield PolicyIssue("podClass", f"only used with nodes: offering, not {self.nodes}")


class DimensionBase(PolicyModel):
    """What every dimension has, whatever its source."""

    name: Name
    node_label: str = "node"
    direction: Direction = Direction.HIGHER_IS_BETTER
    normalization: Normalization = Field(default_factory=Normalization)
    weight: Weight = 1.0
    # `score` publishes the normalised 0..100 bucket as `<prefix>score-<name>`; `raw` publishes
    # the raw value rounded to an integer as `<prefix><name>`, and the name must end with the
    # unit (e.g. overcommit-pct, which the webhook compares with `Lt` against a budget).
    publish: Literal["score", "raw"] = "score"
    # The unit of the raw value (`pct`, `watts`, `gpus`, `ratio`, ...), shown by /explain and
    # `steer scorer once`. A raw dimension's unit is the last part of its name unless set.
    unit: str | None = None
    step: Step | None = None
    hysteresis: Hysteresis | None = None
    ttl_seconds: PositiveSeconds | None = None
    coverage: Coverage = Field(default_factory=Coverage)

    @model_validator(mode="before")
    @classmethod
    def _null_is_absent(cls, data: Any) -> Any:
        """`kubernetes: null` and `http: null` read as absent, whatever the source (a dumped
        policy of the time when every dimension had both, read back)."""
        if isinstance(data, dict):
            return {
                k: v for k, v in data.items() if v is not None or k not in ("kubernetes", "http")
            }
        return data

    @property
    def label_suffix(self) -> str:
        """The label this dimension writes, after the prefix (steer/core/policy/contract.py)."""
        return self.name if self.publish == "raw" else SCORE_PREFIX + self.name

    @property
    def raw_unit(self) -> str | None:
        """`unit`, else (a raw dimension) the last part of its name if it is a known unit."""
        if self.unit is not None:
            return self.unit
        suffix = self.name.rsplit("-", 1)[-1]
        if self.publish == "raw" and "-" in self.name and suffix in KNOWN_UNITS:
            return suffix
        return None

    def issues(self) -> Iterator[PolicyIssue]:
        yield from nested("normalization", self.normalization.issues())
        yield from self._unit_issues()
        if not _PROM_LABEL_RE.match(self.node_label):
            yield PolicyIssue(
                "nodeLabel",
                f"must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), got {self.node_label!r}",
            )

    def _unit_issues(self) -> Iterator[PolicyIssue]:
        """A unit is one lower-case word, and a raw label says its unit in its name."""
        if self.unit is not None and not _UNIT_RE.match(self.unit):
            yield PolicyIssue(
                "unit",
                f"must be one lower-case word such as pct, watts, gpus or ratio, got {self.unit!r}",
            )
        if self.publish != "raw":
            return
        unit = self.raw_unit
        if unit is None or not self.name.endswith(f"-{unit}") or not _UNIT_RE.match(unit):
            example = f"{self.name}-{self.unit or 'pct'}"
            known = (
                ""
                if self.unit
                else f", or set unit: (known without it: {', '.join(sorted(KNOWN_UNITS))})"
            )
            yield PolicyIssue(
                "name",
                f"publish: raw writes the value itself as label {self.name!r}, so the name must "
                f"end with its unit (e.g. {example!r}) and read apart from the 0..100 scores"
                f"{known}, got {self.name!r}",
            )


class PrometheusDimension(DimensionBase):
    """Values from a PromQL query, one sample per node (the source when `source:` is absent)."""

    source: Literal["prometheus"] = "prometheus"
    query: str

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a PromQL expression, got an empty string")
        return value

    @property
    def what(self) -> str:
        """What the values are read from, for traces and /explain."""
        return self.query


class KubernetesDimension(DimensionBase):
    """Values computed from the Kubernetes API (`kubernetes:` says which)."""

    source: Literal["kubernetes"]
    kubernetes: KubernetesSource

    @property
    def what(self) -> str:
        k = self.kubernetes
        target = f" {k.namespace}/{k.service}" if k.kind == "endpointReadiness" else ""
        return f"kubernetes: {k.kind}{target}"


class HttpDimension(DimensionBase):
    """Values read from a JSON document fetched over HTTP (`http:` says where and how)."""

    source: Literal["http"]
    http: HttpSource

    @property
    def what(self) -> str:
        return f"http: GET {self.http.url}"


SOURCES = Variants(
    key="source",
    default="prometheus",
    models={
        "prometheus": PrometheusDimension,
        "kubernetes": KubernetesDimension,
        "http": HttpDimension,
    },
    name="Dimension",
    not_used="not used by source: {tag}",
    missing={
        "kubernetes": "required for source: kubernetes",
        "http": "required for source: http",
    },
)

Dimension = Annotated[
    Annotated[PrometheusDimension, Tag(SOURCES.label("prometheus"))]
    | Annotated[KubernetesDimension, Tag(SOURCES.label("kubernetes"))]
    | Annotated[HttpDimension, Tag(SOURCES.label("http"))],
    SOURCES.discriminator,
]
