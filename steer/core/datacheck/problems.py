"""A problem with a dimension's data: what is wrong, what fixes it, and whether the reading is
kept from publication."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ProblemKind(StrEnum):
    ABSENT = "absent"  # a metric the query reads has no series in Prometheus
    NO_DATA = "no-data"  # the query answered nothing although its metrics exist
    NODE_LABEL = "node-label"  # the answer lacks the node label (missing or spelled otherwise)
    NOT_NODE_NAMES = "not-node-names"  # the node label's values name no node
    RENAMED_LABEL = "renamed-label"  # Prometheus renamed a label the query reads (exported_*)
    COVERAGE = "coverage"  # fewer nodes than the dimension's coverage expects
    UNIT = "unit"  # the values contradict the declared unit (another scale)
    OUT_OF_RANGE = "out-of-range"  # some values the unit cannot take, dropped
    UNREADABLE = "unreadable"  # the source could not be read this cycle


@dataclass(frozen=True)
class DataProblem:
    """`blocking`: this cycle's reading is not published (the labels age out on their TTL, as
    when the source is down), because publishing it would steer pods the wrong way."""

    dimension: str
    kind: ProblemKind
    message: str
    fix: str
    blocking: bool = False

    def line(self) -> str:
        """One line for logs, `steer policy check` and the policy's status."""
        held = " (not published)" if self.blocking else ""
        return f"{self.dimension}: {self.message}{held}; fix: {self.fix}"

    def to_json(self) -> dict[str, Any]:
        return {
            "dimension": self.dimension,
            "kind": str(self.kind),
            "message": self.message,
            "fix": self.fix,
            "blocking": self.blocking,
        }

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> DataProblem:
        return cls(
            dimension=str(obj["dimension"]),
            kind=ProblemKind(obj["kind"]),
            message=str(obj["message"]),
            fix=str(obj["fix"]),
            blocking=bool(obj.get("blocking", False)),
        )


# What to check when a source could not be read, by the failure's kind (scorer/cycle/sources).
_READ_FIXES = {
    "unavailable": "check spec.prometheus.url (or the dimension's url) and that the source is up",
    "query": "correct the query: the source's own error says what it refused",
    "auth": "give the scorer credentials the source accepts (bearerTokenFile, caFile)",
    "response": "check that the URL is the source's API and that its answer fits the mapping",
}


def unreadable(dimension: str, kind: str, message: str) -> DataProblem:
    """A read that failed, as a data problem (for the summaries that list every problem)."""
    return DataProblem(
        dimension,
        ProblemKind.UNREADABLE,
        f"could not be read: {message}",
        _READ_FIXES.get(kind, _READ_FIXES["response"]),
    )
