"""The base of every policy model (camelCase aliases, unknown fields refused, frozen) and the
constrained number types the fields use."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, GetJsonSchemaHandler
from pydantic.alias_generators import to_camel
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema

from steer.core.k8s_names import is_dns1123_label, is_dns1123_subdomain


class PolicyModel(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


def fmt(value: float) -> str:
    """A number as a policy author wrote it: `30`, not `30.0`."""
    return str(int(value)) if float(value).is_integer() else str(value)


@dataclass(frozen=True)
class JsonBounds:
    """What a check below allows, said in the JSON schema too (`minimum`, `maximum`, `enum`),
    so the SteeringPolicy CRD's schema (steer/core/policy/crd.py) refuses it in the apiserver.
    The check itself stays the validator's, with its own message."""

    minimum: float | None = None
    maximum: float | None = None
    enum: tuple[int, ...] = ()

    def __get_pydantic_json_schema__(
        self, schema: CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        out: dict[str, Any] = handler(schema)
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.enum:
            out["enum"] = list(self.enum)
        return out


def _between(lo: float, hi: float) -> AfterValidator:
    def check(value: float) -> float:
        if not lo <= value <= hi:
            raise ValueError(f"must be between {fmt(lo)} and {fmt(hi)}, got {fmt(value)}")
        return value

    return AfterValidator(check)


def _at_least(lo: float) -> AfterValidator:
    def check(value: float) -> float:
        if value < lo:
            raise ValueError(f"must be at least {fmt(lo)}, got {fmt(value)}")
        return value

    return AfterValidator(check)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")
    return value


def _step(value: int) -> int:
    # Buckets are 0, step, 2*step, ..., 100: the top bucket must be exactly 100 so that the
    # binary-weighted preference terms sum to the bucket value at every level.
    if value < 1 or 100 % value:
        raise ValueError(f"must divide 100 (1, 2, 4, 5, 10, 20, 25, 50 or 100), got {value}")
    return value


def _dns_label(value: str) -> str:
    if not is_dns1123_label(value):
        raise ValueError(
            "must be a lower-case RFC 1123 label (at most 63 characters of a-z, 0-9 and '-', "
            f"starting and ending with a letter or digit), got {value!r}"
        )
    return value


def _dns_subdomain(value: str) -> str:
    if not is_dns1123_subdomain(value):
        raise ValueError(
            "must be a lower-case RFC 1123 subdomain (at most 253 characters of a-z, 0-9, '-' "
            f"and '.', each part starting and ending with a letter or digit), got {value!r}"
        )
    return value


Finite = Annotated[float, AfterValidator(_finite)]
# The names the policy gives its parts (tenants, pod classes, dimensions, taint and spread
# rules) become parts of label keys, extended resource names, taint keys, trace annotations and
# CEL string literals in the compiled admission policies: one form fits all of them, and none
# can hold a quote, a backslash or a newline.
Name = Annotated[str, AfterValidator(_dns_label)]
# What Kubernetes requires of the object names the policy refers to: namespaces (a label),
# schedulerName and DeviceClass names (a subdomain).
NamespaceName = Annotated[str, AfterValidator(_dns_label)]
ObjectName = Annotated[str, AfterValidator(_dns_subdomain)]
Percent = Annotated[float, AfterValidator(_finite), _between(0, 100), JsonBounds(0, 100)]
PositiveSeconds = Annotated[float, AfterValidator(_finite), _at_least(0.001), JsonBounds(0.001)]
NonNegative = Annotated[float, AfterValidator(_finite), _at_least(0), JsonBounds(0)]
Cycles = Annotated[int, _between(1, 1000), JsonBounds(1, 1000)]
Weight = Annotated[float, AfterValidator(_finite), _between(0, 1000), JsonBounds(0, 1000)]
Hysteresis = Annotated[float, _between(0, 49), JsonBounds(0, 49)]
STEPS = (1, 2, 4, 5, 10, 20, 25, 50, 100)  # what divides 100
Step = Annotated[int, AfterValidator(_step), JsonBounds(enum=STEPS)]
WriteQps = Annotated[float, _between(0.1, 1000), JsonBounds(0.1, 1000)]
WriteBurst = Annotated[int, _between(1, 1000), JsonBounds(1, 1000)]
MaxSkew = Annotated[int, _between(1, 1000), JsonBounds(1, 1000)]
HotPenalty = Annotated[float, _between(0, 100), JsonBounds(0, 100)]
HotWindow = Annotated[float, _between(0, 3600), JsonBounds(0, 3600)]
EvictionCap = Annotated[int, _between(1, 10_000), JsonBounds(1, 10_000)]
AgeSeconds = Annotated[int, _between(0, 30 * 24 * 3600), JsonBounds(0, 30 * 24 * 3600)]
