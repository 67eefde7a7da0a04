"""What every data source gives the scorer: one reading or one failure per dimension.

A source reads the dimensions of the policy that name it, for the nodes listed this cycle,
and maps its answer onto them (`NodeIndex`, scorer/cycle/observe.py). The scorer counts, times and
plans the same way whatever the source; a new source is one module under `scorer/cycle/sources/`,
a variant of `Dimension` with its settings (steer/core/policy/dimensions.py), and its line in
the registry (`scorer/cycle/sources/__init__.py`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

from scorer.cycle.observe import DimensionFailure, DimensionReading, NodeIndex
from scorer.model import NodeState
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import KubeJson
from steer.core.policy import Dimension, Policy

_In = TypeVar("_In")
_Out = TypeVar("_Out")
# Requests in flight at once per source (and sources at once per cycle).
MAX_CONCURRENT = 8


def concurrently(fn: Callable[[_In], _Out], items: Iterable[_In], name: str) -> list[_Out]:
    """`fn` over `items`, at most MAX_CONCURRENT at a time, results in order: a cycle waits for
    its slowest request, not for the sum of them. One item runs on the caller's thread."""
    items = list(items)
    if len(items) <= 1:
        return [fn(item) for item in items]
    workers = min(MAX_CONCURRENT, len(items))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix=name) as pool:
        return list(pool.map(fn, items))


@dataclass
class Readings:
    """`requests` counts what was sent to the source's backend (PromQL queries, HTTP GETs)."""

    readings: dict[str, DimensionReading] = field(default_factory=dict)
    failures: dict[str, DimensionFailure] = field(default_factory=dict)
    requests: int = 0


@dataclass(frozen=True)
class SourceContext:
    """What the scorer offers the sources: the `--prometheus` override, the pod ledger its
    watch keeps (None when nothing watches pods, e.g. `steer scorer once`), and a client for
    the cluster's API."""

    prometheus_url: str | None = None
    ledger: PodLedger | None = None
    kube: Callable[[], KubeJson] | None = None


@dataclass(frozen=True)
class SourceRequest:
    """What a cycle asks of one source: its `dimensions` of `policy`, mapped onto `nodes`
    (`index` finds a node by any name a series may give it); `at` (unix seconds) asks for the
    values at a past moment where the source can (Prometheus), else it is the observation
    time."""

    policy: Policy
    dimensions: Sequence[Dimension]
    nodes: Sequence[NodeState]
    index: NodeIndex
    at: float | None = None


class Source(Protocol):
    def read(self, request: SourceRequest) -> Readings:
        """One reading or one failure per dimension asked."""
        ...

    def close(self) -> None: ...


class NodeValue:
    """A value already keyed by node name (what `read_dimension` takes as a sample)."""

    __slots__ = ("labels", "value")

    def __init__(self, label: str, node: str, value: float) -> None:
        self.labels = {label: node}
        self.value = value


class SourceFailed(Exception):
    """One dimension could not be read; `kind` is `unavailable`, `query`, `auth` or
    `response`, as for a PromQL query."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind
