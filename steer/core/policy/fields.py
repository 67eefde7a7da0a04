"""The base of every policy model (camelCase aliases, unknown fields refused, frozen) and the
constrained number types the fields use."""

from __future__ import annotations

import math
from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


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


Finite = Annotated[float, AfterValidator(_finite)]
Percent = Annotated[float, AfterValidator(_finite), _between(0, 100)]
PositiveSeconds = Annotated[float, AfterValidator(_finite), _at_least(0.001)]
NonNegative = Annotated[float, AfterValidator(_finite), _at_least(0)]
Cycles = Annotated[int, _between(1, 1000)]
Weight = Annotated[float, AfterValidator(_finite), _between(0, 1000)]
Hysteresis = Annotated[float, _between(0, 49)]
Step = Annotated[int, AfterValidator(_step)]
WriteQps = Annotated[float, _between(0.1, 1000)]
WriteBurst = Annotated[int, _between(1, 1000)]
MaxSkew = Annotated[int, _between(1, 1000)]
HotPenalty = Annotated[float, _between(0, 100)]
HotWindow = Annotated[float, _between(0, 3600)]
EvictionCap = Annotated[int, _between(1, 10_000)]
AgeSeconds = Annotated[int, _between(0, 30 * 24 * 3600)]
