"""Prometheus samples → one raw value per known node, for one dimension.

Exporters name the node in different labels (`Hostname` for DCGM, `instance` for Kepler 0.7,
`node_name` for Kepler 0.10, `node` for kube-state-metrics), and `instance` is often the scrape
target `IP:port` rather than a name. `NodeIndex` maps every name and address a Node object
publishes back to the node, so one query for the whole cluster lands on the right nodes.
Samples for nodes the API does not know are ignored and counted, never guessed.
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from scorer.model import NodeState
from steer.core.datacheck import DataProblem, ProblemKind, ReadingFacts, vet_reading
from steer.core.datacheck.exporters import FORM_LABEL
from steer.core.policy import Dimension

# How many unmatched identities a reading keeps for /explain; the count is always exact.
UNKNOWN_EXAMPLES = 10
# A raw label is compared with Gt/Lt, which Kubernetes parses as an int64; from 2^63 on the
# value would be refused by the apiserver (over 63 characters) or match nothing, and the
# whole node's write with it.
RAW_LIMIT = 2.0**63


class SampleLike(Protocol):
    """What the planner needs of a Prometheus sample (the adapter's `Sample` fits)."""

    @property
    def labels(self) -> Mapping[str, str]: ...

    @property
    def value(self) -> float: ...


class NodeIndex:
    """Resolves a sample's node identity (name, IP, `IP:port`, `[IPv6]:port`) to a node name."""

    def __init__(self, nodes: Iterable[NodeState]) -> None:
        listed = tuple(nodes)
        self._names: set[str] = {node.name for node in listed}
        self._by_address: dict[str, str] = {}
        for node in listed:
            for address in node.addresses:
                # A name always wins over another node's address (hostnames can collide).
                if address not in self._names:
                    self._by_address.setdefault(address, node.name)

    def __contains__(self, name: str) -> bool:
        return name in self._names

    def resolve(self, identity: str) -> str | None:
        if identity in self._names:
            return identity
        if identity in self._by_address:
            return self._by_address[identity]
        host = _strip_port(identity)
        if host is None:
            return None
        if host in self._names:
            return host
        return self._by_address.get(host)


def _strip_port(identity: str) -> str | None:
    """`10.0.0.1:9100` → `10.0.0.1`, `[fd00::1]:9100` → `fd00::1`; None when there is no port."""
    if identity.startswith("["):
        end = identity.find("]")
        if end > 0 and identity[end + 1 : end + 2] == ":":
            return identity[1:end]
        return None
    host, sep, port = identity.rpartition(":")
    if not sep or not port.isdigit() or ":" in host:
        return None
    return host


@dataclass(frozen=True)
class DimensionReading:
    """One successful query of one dimension, mapped onto nodes.

    `observed_at` is Prometheus' evaluation time (unix seconds): ages and TTLs count from it.
    `duplicates` counts nodes that two series resolved to (say, `node-1` and `10.0.0.1:9102`);
    the larger value is kept, so a budget check (`overcommit-pct`) never understates.
    `too_large` counts raw values no label can carry (see RAW_LIMIT): no value, like NaN.
    """

    dimension: str
    query: str
    observed_at: float
    values: Mapping[str, float]
    samples: int = 0
    unknown: int = 0
    unknown_examples: tuple[str, ...] = ()
    unlabelled: int = 0
    non_finite: int = 0
    duplicates: int = 0
    too_large: int = 0
    duration_s: float = 0.0
    warnings: tuple[str, ...] = field(default=())
    # The exporter forms the nodes were read from (a sample's `form` label, which a query
    # reading more than one form sets: docs/exporters.md), each with its count of nodes.
    forms: tuple[tuple[str, int], ...] = ()
    # Set by vetting (steer/core/datacheck): values dropped as out of their unit's range, the
    # nodes the coverage expects (None: any) and what the data lacks.
    out_of_range: int = 0
    expected: int | None = None
    problems: tuple[DataProblem, ...] = ()


@dataclass(frozen=True)
class DimensionFailure:
    """A reading that is not published this cycle; `kind` is `unavailable`, `query`, `auth` or
    `response` for a failed read, `unit` or `coverage` for data vetting held back
    (`problems` says why)."""

    dimension: str
    query: str
    kind: str
    message: str
    duration_s: float = 0.0
    expected: int | None = None
    problems: tuple[DataProblem, ...] = ()


def read_dimension(
    dim: Dimension,
    samples: Iterable[SampleLike],
    *,
    observed_at: float,
    index: NodeIndex,
    duration_s: float = 0.0,
    warnings: tuple[str, ...] = (),
) -> DimensionReading:
    values: dict[str, float] = {}
    forms: dict[str, str] = {}
    unknown_examples: list[str] = []
    count = unknown = unlabelled = non_finite = duplicates = too_large = 0
    raw = dim.publish == "raw"
    for sample in samples:
        count += 1
        identity = sample.labels.get(dim.node_label)
        if identity is None:
            unlabelled += 1
            continue
        node = index.resolve(identity)
        if node is None:
            unknown += 1
            if len(unknown_examples) < UNKNOWN_EXAMPLES:
                unknown_examples.append(identity)
            continue
        value = float(sample.value)
        if not math.isfinite(value):
            # NaN from 0/0 (a node with no GPU memory at all) is "no value", not a score.
            non_finite += 1
            continue
        if raw and value >= RAW_LIMIT:
            too_large += 1
            continue
        if node in values:
            duplicates += 1
            value = max(value, values[node])
        values[node] = value
        form = sample.labels.get(FORM_LABEL)
        if form:
            forms[node] = min(form, forms.get(node, form))
    return DimensionReading(
        dimension=dim.name,
        query=dim.what,
        observed_at=observed_at,
        values=values,
        samples=count,
        unknown=unknown,
        unknown_examples=tuple(unknown_examples),
        unlabelled=unlabelled,
        non_finite=non_finite,
        duplicates=duplicates,
        too_large=too_large,
        duration_s=duration_s,
        warnings=warnings,
        forms=form_counts(forms.values()),
    )


def form_counts(forms: Iterable[str]) -> tuple[tuple[str, int], ...]:
    """Each form with the number of nodes read from it, most nodes first."""
    counts = Counter(forms)
    return tuple(sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def vet(
    dim: Dimension, reading: DimensionReading, expected: frozenset[str] | None
) -> DimensionReading | DimensionFailure:
    """The reading as it may be published: values its unit cannot take dropped, its problems
    attached; a `DimensionFailure` (kind `unit` or `coverage`) when a problem holds it back."""
    vetted = vet_reading(
        dim,
        ReadingFacts(
            values=reading.values,
            samples=reading.samples,
            unlabelled=reading.unlabelled,
            unknown=reading.unknown,
            unknown_examples=reading.unknown_examples,
        ),
        expected,
    )
    # The reading's own problems (a source's diagnosis) come first: they say the cause, and
    # replace the reading's generic guess of the same kind (a node label, names of no node).
    diagnosed = {p.kind for p in reading.problems}
    problems = reading.problems + tuple(
        p
        for p in vetted.problems
        if p.kind not in diagnosed or p.kind in (ProblemKind.COVERAGE, ProblemKind.UNIT)
    )
    if vetted.blocking:
        held = [p for p in vetted.problems if p.blocking]
        return DimensionFailure(
            dim.name,
            reading.query,
            "unit" if any(p.kind != ProblemKind.COVERAGE for p in held) else "coverage",
            "; ".join(p.message for p in held),
            reading.duration_s,
            expected=vetted.expected,
            problems=problems,
        )
    if not problems and vetted.expected is None:
        return reading
    return dataclasses.replace(
        reading,
        values=vetted.values,
        out_of_range=len(vetted.dropped),
        expected=vetted.expected,
        problems=problems,
    )
