"""`steer policy check`: every Prometheus dimension of a policy against a Prometheus, before
install or at any time, each problem on one line with its fix.

The same pure checks as the scorer's cycle (steer/core/datacheck: units, coverage, node names)
over the same mapping of samples onto nodes (scorer/cycle/observe.py), plus the diagnosis from what
Prometheus holds for every dimension, not only the silent ones. Without a node list (no
`--kubeconfig`, no `--nodes`) the label values that look like node names stand for the nodes;
values that are plainly a pod's name or a scrape address are reported.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from scorer.cycle.observe import DimensionFailure, NodeIndex, read_dimension, vet
from scorer.model import NodeState
from steer.adapters.prometheus import PrometheusClient, PrometheusError
from steer.adapters.prometheus_probe import metric_index, probe
from steer.core.datacheck import DataProblem, diagnose, expected_nodes
from steer.core.datacheck.diagnose import metrics_of
from steer.core.datacheck.exporters import forms_text
from steer.core.datacheck.identities import IdentityKind, classify
from steer.core.policy import Policy, PrometheusDimension


@dataclass(frozen=True)
class DimensionCheck:
    dimension: str
    checked: bool  # False: not a Prometheus dimension (read from the cluster or over HTTP)
    samples: int = 0
    nodes: int = 0  # nodes it resolves
    expected: int | None = None
    problems: tuple[DataProblem, ...] = ()
    error: str | None = None  # the query failed
    forms: tuple[tuple[str, int], ...] = ()  # the exporter forms read, with their nodes


@dataclass(frozen=True)
class CheckReport:
    prometheus: str
    node_list: bool  # the nodes came from the cluster or --nodes (else from the answers)
    dimensions: tuple[DimensionCheck, ...] = field(default=())

    @property
    def problems(self) -> tuple[DataProblem, ...]:
        return tuple(p for d in self.dimensions for p in d.problems)

    @property
    def errors(self) -> tuple[DimensionCheck, ...]:
        return tuple(d for d in self.dimensions if d.error)

    def to_json(self) -> dict[str, Any]:
        return {
            "prometheus": self.prometheus,
            "nodeList": self.node_list,
            "problems": len(self.problems) + len(self.errors),
            "dimensions": [
                {
                    "dimension": d.dimension,
                    "checked": d.checked,
                    "samples": d.samples,
                    "nodes": d.nodes,
                    "expectedNodes": d.expected,
                    "error": d.error,
                    "problems": [p.to_json() for p in d.problems],
                    "forms": [{"form": f, "nodes": n} for f, n in d.forms],
                }
                for d in self.dimensions
            ],
        }

    def lines(self) -> list[str]:
        out = []
        for d in self.dimensions:
            if not d.checked:
                out.append(f"{d.dimension}: not checked (its source is not Prometheus)")
            elif d.error:
                out.append(f"{d.dimension}: query failed: {d.error}")
            else:
                out.extend(p.line() for p in d.problems)
        return out

    def form_lines(self) -> list[str]:
        """`read dcgm-exporter hostname (2 nodes): gpu-util, gpu-free, gpu-frag`: which exporter
        form the dimensions that read more than one found, one line per set of forms."""
        by_forms: dict[str, list[str]] = {}
        for d in self.dimensions:
            if d.forms:
                by_forms.setdefault(forms_text(d.forms), []).append(d.dimension)
        return [f"read {forms}: {', '.join(dims)}" for forms, dims in by_forms.items()]

    def summary(self) -> str:
        count = len(self.problems) + len(self.errors)
        checked = sum(1 for d in self.dimensions if d.checked)
        where = "" if self.node_list else " (no node list: label values stood for the nodes)"
        return (
            f"{checked} dimensions checked against {self.prometheus}{where}: "
            f"{count} problem{'s' if count != 1 else ''}"
        )


def check_policy(
    policy: Policy,
    client: PrometheusClient,
    nodes: Sequence[NodeState] | None,
    *,
    resources_known: bool = True,
) -> CheckReport:
    """Raises `PrometheusError` when Prometheus cannot be asked at all (its metric index).
    `resources_known` False: `nodes` are names only (`--nodes`), so which of them offer a pod
    class's resources is unknown and `coverage.nodes: offering` is not judged."""
    names = metric_index(client)
    checks = []
    for dim in policy.spec.dimensions:
        if not isinstance(dim, PrometheusDimension):
            checks.append(DimensionCheck(dim.name, checked=False))
            continue
        try:
            answer = client.query(dim.query)
        except PrometheusError as exc:
            checks.append(DimensionCheck(dim.name, checked=True, error=str(exc)))
            continue
        known = nodes
        if known is None:  # the values that may be node names stand for the nodes
            seen = {s.labels.get(dim.node_label) for s in answer.samples}
            known = [
                NodeState(name=v)
                for v in seen
                if v is not None and classify(v) == IdentityKind.OTHER
            ]
        reading = read_dimension(
            dim, answer.samples, observed_at=answer.evaluated_at, index=NodeIndex(known)
        )
        expected = None
        if nodes is not None and (resources_known or dim.coverage.nodes != "offering"):
            expected = expected_nodes(policy, dim, nodes)
        short = not reading.values or (
            expected is not None and not expected.issubset(reading.values)
        )
        found = diagnose(dim, probe(client, metrics_of(dim), names), short=short)
        vetted = vet(dim, dataclasses.replace(reading, problems=found), expected)
        resolved = 0 if isinstance(vetted, DimensionFailure) else len(vetted.values)
        checks.append(
            DimensionCheck(
                dim.name,
                checked=True,
                samples=reading.samples,
                nodes=resolved,
                expected=None if expected is None else len(expected),
                problems=vetted.problems,
                forms=reading.forms,
            )
        )
    return CheckReport(client.url, nodes is not None, tuple(checks))
