"""What values a unit accepts, and what a contradiction says about the source's real scale.

A unit is a claim about the source, and sources change theirs: DCGM names the same quantity as a
percent or as a 0..1 ratio in different fields (`DCGM_FI_DEV_GPU_UTIL` "in %", the profiling
`DCGM_FI_PROF_*` ratios), its framebuffer fields are MiB where other exporters give bytes, and
a query edited for one form reads the other wrong (docs/exporters.md). A value the unit cannot take (negative watts,
a ratio of 40) is dropped from the reading; when most values are such, or all of them fit
another scale better, the whole reading is held back: normalised as declared it would rank a
95 %-busy GPU as 0.95 % busy and send jobs to it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from steer.core.datacheck.problems import DataProblem, ProblemKind
from steer.core.policy import Dimension

MIB = 2.0**20
# More than a pebibyte on one node, read as MiB, is bytes read as MiB.
MIB_CEILING = 2.0**30


@dataclass(frozen=True)
class UnitRange:
    """`low`/`high` bound what the unit can take (None: unbounded); `above` says what values
    over `high` most likely are, with the fix."""

    low: float | None
    high: float | None
    above: str = ""
    above_fix: str = ""


_NON_NEGATIVE = UnitRange(0.0, None)
RANGES: Mapping[str, UnitRange] = {
    "ratio": UnitRange(
        0.0,
        1.0,
        "a percent (0..100), e.g. DCGM_FI_DEV_GPU_UTIL, which is in %",
        "divide by 100 in the query, or declare unit: pct with normalization fixed 0..100",
    ),
    # Percentages of change go below 0 (overcommit-pct: -100 on an empty node), never below -100.
    "pct": UnitRange(-100.0, None),
    "watts": UnitRange(
        0.0,
        100_000.0,
        "milliwatts or microwatts (no node draws 100 kW)",
        "scale the query to watts (e.g. / 1e3 or / 1e6)",
    ),
    "mib": UnitRange(
        0.0,
        MIB_CEILING,
        "bytes (no node holds a pebibyte of MiB)",
        "divide by 1048576 in the query, or declare unit: bytes",
    ),
    "bytes": _NON_NEGATIVE,
    "joules": _NON_NEGATIVE,
    "gpus": _NON_NEGATIVE,
    "count": _NON_NEGATIVE,
    "cores": _NON_NEGATIVE,
    "seconds": _NON_NEGATIVE,
    "ms": _NON_NEGATIVE,
    "celsius": UnitRange(-60.0, 150.0),
}
# Rounding noise of a ratio computed by division (sum/sum) must not count as out of range.
_TOLERANCE = 1e-9


@dataclass(frozen=True)
class UnitCheck:
    """`kept`: the values the unit accepts; `dropped`: node → value it cannot take;
    `problems`: at most one out-of-range report and one scale contradiction."""

    kept: Mapping[str, float]
    dropped: Mapping[str, float]
    problems: tuple[DataProblem, ...]

    @property
    def blocking(self) -> bool:
        return any(p.blocking for p in self.problems)


def check_unit(dim: Dimension, values: Mapping[str, float]) -> UnitCheck:
    unit = dim.raw_unit
    rule = RANGES.get(unit or "")
    if unit is None or rule is None or not values:
        return UnitCheck(values, {}, ())
    kept: dict[str, float] = {}
    dropped: dict[str, float] = {}
    for node, value in values.items():
        low_ok = rule.low is None or value >= rule.low - _TOLERANCE
        high_ok = rule.high is None or value <= rule.high + _TOLERANCE
        (kept if low_ok and high_ok else dropped)[node] = value
    problems: list[DataProblem] = []
    if dropped:
        problems.append(_out_of_range(dim.name, unit, rule, values, dropped))
    scale = _scale_contradiction(dim, unit, kept)
    if scale is not None:
        problems.append(scale)
    return UnitCheck(kept, dropped, tuple(problems))


def _out_of_range(
    name: str,
    unit: str,
    rule: UnitRange,
    values: Mapping[str, float],
    dropped: Mapping[str, float],
) -> DataProblem:
    bounds = f"{_num(rule.low) if rule.low is not None else '-inf'}..{_num(rule.high) if rule.high is not None else 'inf'}"
    node, value = max(dropped.items(), key=lambda kv: abs(kv[1]))
    most = len(dropped) * 2 > len(values)
    high = rule.high is not None and value > rule.high
    if most and high and rule.above:
        return DataProblem(
            name,
            ProblemKind.UNIT,
            f"{len(dropped)} of {len(values)} values lie above {_num(rule.high)} {unit} "
            f"(e.g. {_num(value)} on {node}): the source reports {rule.above}",
            rule.above_fix,
            blocking=True,
        )
    return DataProblem(
        name,
        ProblemKind.OUT_OF_RANGE,
        f"{len(dropped)} of {len(values)} values lie outside {bounds} {unit} "
        f"(e.g. {_num(value)} on {node}); those nodes get no value",
        f"check the query and the exporter on those nodes; a {unit} value must lie in {bounds}",
        blocking=most,
    )


def _scale_contradiction(
    dim: Dimension, unit: str, values: Mapping[str, float]
) -> DataProblem | None:
    """All values fit another scale better than the declared one. Judged only where the data
    can tell: a percent dimension normalised on a percent scale whose values all lie in 0..1
    with at least one strictly between (an idle cluster's zeros say nothing), and a byte
    dimension whose non-zero values are all under 1 MiB (no GPU or node holds less)."""
    if not values:
        return None
    top = max(values.values())
    norm = dim.normalization
    percent_scale = norm.method == "fixed" and norm.max is not None and norm.max > 1
    if (
        unit == "pct"
        and percent_scale
        and all(0 <= v <= 1 for v in values.values())
        and any(0 < v < 1 for v in values.values())
    ):
        return DataProblem(
            dim.name,
            ProblemKind.UNIT,
            f"every value lies in 0..1 (max {_num(top)}) although the unit is pct and the "
            f"normalization runs to {_num(norm.max)}: the source reports a ratio "
            "(e.g. a DCGM_FI_PROF_* field, or a release that changed the unit)",
            "multiply by 100 in the query, or declare unit: ratio with normalization fixed 0..1",
            blocking=True,
        )
    if unit == "bytes":
        nonzero = [v for v in values.values() if v > 0]
        if nonzero and max(nonzero) < MIB:
            return DataProblem(
                dim.name,
                ProblemKind.UNIT,
                f"every non-zero value is under 1 MiB (max {_num(top)}) although the unit is "
                "bytes: the source reports MiB (as DCGM exporter's framebuffer fields do)",
                "multiply by 1048576 in the query, or declare unit: mib",
                blocking=True,
            )
    return None


def _num(value: float | None) -> str:
    if value is None:
        return "none"
    return f"{value:g}"
