"""One reading of one dimension against its unit and the nodes its coverage expects.

The scorer vets every reading each cycle from what the reading already holds (no query more):
values the unit cannot take are dropped, a reading whose scale contradicts the unit or that
resolves some but fewer than `coverage.minPercent` of its expected nodes is held back, and each
shortfall says its cause where the reading shows one (samples without the node label, label
values that name no node).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from steer.core.datacheck.identities import describe
from steer.core.datacheck.problems import DataProblem, ProblemKind
from steer.core.datacheck.units import check_unit
from steer.core.policy import Dimension, Policy
from steer.core.steering import offers

# Nodes a coverage problem names; the count is always exact.
MISSING_EXAMPLES = 5


class NodeLike(Protocol):
    @property
    def name(self) -> str: ...

    @property
    def amounts(self) -> Mapping[str, Fraction]: ...

    @property
    def devices(self) -> Mapping[str, int]: ...


def expected_nodes(
    policy: Policy, dim: Dimension, nodes: Iterable[NodeLike]
) -> frozenset[str] | None:
    """The nodes that should have a value; None for `coverage.nodes: any` (no expectation)."""
    coverage = dim.coverage
    if coverage.nodes == "any":
        return None
    if coverage.nodes == "all":
        return frozenset(n.name for n in nodes)
    pod_class = next(c for c in policy.spec.pod_classes if c.name == coverage.pod_class)
    return frozenset(n.name for n in nodes if offers(pod_class, n.amounts, n.devices))


@dataclass(frozen=True)
class ReadingFacts:
    """What a reading holds: its values by node, and what did not map onto a node."""

    values: Mapping[str, float]
    samples: int
    unlabelled: int = 0
    unknown: int = 0
    unknown_examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class Vetted:
    values: Mapping[str, float]  # what may be published
    dropped: Mapping[str, float]  # node → a value its unit cannot take
    expected: int | None  # nodes the coverage expects (None: any)
    problems: tuple[DataProblem, ...]

    @property
    def blocking(self) -> bool:
        return any(p.blocking for p in self.problems)


def vet_reading(dim: Dimension, facts: ReadingFacts, expected: frozenset[str] | None) -> Vetted:
    units = check_unit(dim, facts.values)
    problems = list(units.problems)
    kept = units.kept
    if expected:
        shortfall = _coverage(dim, facts, kept, expected)
        if shortfall is not None:
            problems.append(shortfall)
    elif facts.samples and not kept and not units.dropped:
        problems.extend(_unmapped(dim, facts))
    return Vetted(kept, units.dropped, None if expected is None else len(expected), tuple(problems))


def _coverage(
    dim: Dimension, facts: ReadingFacts, kept: Mapping[str, float], expected: frozenset[str]
) -> DataProblem | None:
    resolved = sum(1 for node in expected if node in kept)
    if resolved == len(expected):
        return None
    missing = sorted(expected.difference(kept))
    share = 100.0 * resolved / len(expected)
    shown = ", ".join(missing[:MISSING_EXAMPLES]) + (
        ", ..." if len(missing) > MISSING_EXAMPLES else ""
    )
    what = (
        "every node"
        if dim.coverage.nodes == "all"
        else f"the nodes of pod class {dim.coverage.pod_class}"
    )
    cause, fix = _cause(dim, facts)
    return DataProblem(
        dim.name,
        ProblemKind.COVERAGE,
        f"resolves {resolved} of {len(expected)} expected nodes ({share:.0f} %, coverage: "
        f"{what}); missing: {shown}; {cause}",
        fix,
        # Nothing resolved is nothing to hold back: the reading is empty either way, and an
        # empty reading (not a failed one) lets the power model stand in for the nodes.
        blocking=resolved > 0 and share < dim.coverage.min_percent,
    )


def _cause(dim: Dimension, facts: ReadingFacts) -> tuple[str, str]:
    """Why nodes are missing, as far as the reading shows it."""
    if facts.unknown:
        return describe(dim.node_label, facts.unknown_examples)
    if facts.unlabelled:
        return _label_cause(dim, facts)
    if not facts.samples:
        return (
            "the query answered no sample",
            "its metrics are absent or its label filters match nothing: the dimension's "
            "diagnosis (absent, node-label) says which",
        )
    return (
        "no series names them",
        "check that the exporter runs on those nodes (its DaemonSet's node selector and "
        "tolerations) and that Prometheus scrapes it there",
    )


def _label_cause(dim: Dimension, facts: ReadingFacts) -> tuple[str, str]:
    return (
        f"{facts.unlabelled} of {facts.samples} answered samples lack the node label "
        f"{dim.node_label}",
        "make the answer carry the node: group the query by the label that names it and set "
        "nodeLabel to that label (the dimension's node-label diagnosis names the labels the "
        "series carry)",
    )


def _unmapped(dim: Dimension, facts: ReadingFacts) -> list[DataProblem]:
    """A reading with samples of which none maps onto a node, whatever the coverage."""
    if facts.unknown:
        message, fix = describe(dim.node_label, facts.unknown_examples)
        return [DataProblem(dim.name, ProblemKind.NOT_NODE_NAMES, message, fix)]
    if facts.unlabelled:
        message, fix = _label_cause(dim, facts)
        return [DataProblem(dim.name, ProblemKind.NODE_LABEL, message, fix)]
    return []
