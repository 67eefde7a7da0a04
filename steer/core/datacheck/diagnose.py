"""Why a Prometheus dimension resolves no node (or too few), from what Prometheus holds: which
of its metrics are absent and which related families are there instead, and whether the series
it reads carry its node label or another spelling of it.

The facts come from `steer.adapters.prometheus_probe` (the metric names Prometheus knows, and
the label names of a few series of each metric the query reads).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from steer.core.datacheck.exporters import FAMILIES, Family, family_of, present_related
from steer.core.datacheck.problems import DataProblem, ProblemKind
from steer.core.datacheck.promql import label_names, metric_names
from steer.core.policy import PrometheusDimension

# Labels exporters and relabellings use for the node, in the order a fix suggests them.
NODE_LABELS = (
    "node",
    "node_name",
    "nodename",
    "kubernetes_node",
    "hostname",
    "Hostname",
    "host",
    "instance",
)


@dataclass(frozen=True)
class MetricFacts:
    """One metric a query reads: whether Prometheus holds series of it, and the label names a
    sample of its series carry."""

    name: str
    present: bool
    label_names: frozenset[str] = frozenset()


@dataclass(frozen=True)
class PrometheusFacts:
    names: frozenset[str]  # every metric name Prometheus holds
    metrics: tuple[MetricFacts, ...]


def metrics_of(dim: PrometheusDimension) -> tuple[str, ...]:
    return metric_names(dim.query)


def diagnose(
    dim: PrometheusDimension, facts: PrometheusFacts, *, short: bool = True
) -> tuple[DataProblem, ...]:
    """What Prometheus shows is wrong with the dimension's data. `short`: its answer resolves no
    node, or fewer than its coverage expects; then absent metrics and the node label are
    causes. A whole answer can still read renamed labels (the exporter pod's `pod`), and an
    absent metric is then only the alternative of an `or`."""
    present = [m for m in facts.metrics if m.present]
    if not short:
        return tuple(_renamed(dim, present))
    problems: list[DataProblem] = []
    read = {f for f in (family_of(m.name) for m in present) if f is not None}
    for metric in facts.metrics:
        if metric.present or _other_form_read(metric.name, read):
            continue
        if ":" in metric.name and present:
            # A recording rule's series (level:metric:operations) beside the expression it
            # records: a rule not installed, which the query's other side covers.
            continue
        problems.append(_absent(dim, metric.name, facts.names))
    label = _node_label(dim, present)
    if label is not None:
        problems.append(label)
    problems.extend(_renamed(dim, present))
    return tuple(problems)


def _other_form_read(metric: str, read: set[Family]) -> bool:
    """The query also reads another release line of the metric's exporter, which Prometheus
    holds (the example policy's `or` of Kepler's two forms): the absent one is not a cause."""
    own = family_of(metric)
    return own is not None and any(f.exporter == own.exporter and f != own for f in read)


def _renamed(dim: PrometheusDimension, present: list[MetricFacts]) -> list[DataProblem]:
    """Labels the query reads that Prometheus renamed to `exported_<label>`: the scrape's own
    target label of that name won (honor_labels false, a ServiceMonitor's default), so the
    query reads the exporter pod's `pod` or `instance`, not the exporter's."""
    carried = frozenset().union(*(m.label_names for m in present)) if present else frozenset()
    renamed = sorted(n for n in label_names(dim.query) if f"exported_{n}" in carried)
    if not renamed:
        return []
    shown = ", ".join(f"{n} -> exported_{n}" for n in renamed)
    return [
        DataProblem(
            dim.name,
            ProblemKind.RENAMED_LABEL,
            f"Prometheus renamed labels the query reads ({shown}): the scrape's target labels "
            "took their names (honor_labels: false), so the query reads the exporter's pod or "
            "address instead of the exporter's values",
            "scrape the exporter with honor_labels: true (ServiceMonitor honorLabels: true), "
            f"or read exported_{renamed[0]} in the query",
        )
    ]


def _absent(dim: PrometheusDimension, metric: str, names: frozenset[str]) -> DataProblem:
    similar = sorted(n for n in names if n != metric and n.startswith(metric))
    if similar:
        # A field renamed with its unit in its name (DCGM's `..._RATIO`, `..._BYTES`).
        shown = ", ".join(similar[:5])
        return DataProblem(
            dim.name,
            ProblemKind.ABSENT,
            f"metric {metric} has no current series in Prometheus; similar names found: {shown}",
            f"if {similar[0]} is the same quantity renamed, read it in the query and declare the "
            "unit it reports (a name ending _RATIO is 0..1, _BYTES is bytes)",
        )
    related = present_related(metric, names)
    own = family_of(metric)
    found = "; ".join(f"{title} series found: {', '.join(hits)}" for title, hits in related.items())
    if related:
        other = next((t for t in related if own is None or t != own.title), None)
        fix = (
            f"the cluster runs {other}: use its form of this dimension "
            f"({_preset(other) or 'docs/exporters.md'})"
            if other is not None
            else "check the query's label filters and the exporter's configuration"
        )
        message = f"metric {metric} has no current series in Prometheus; {found}"
    else:
        exporter = own.title if own is not None else "its exporter"
        message = (
            f"metric {metric} has no current series in Prometheus, nor does any related family"
        )
        fix = (
            f"check that {exporter} is installed and scraped (a ServiceMonitor or scrape job "
            f"whose targets are up) and that its release exports {metric}"
        )
    return DataProblem(dim.name, ProblemKind.ABSENT, message, fix)


def _preset(title: str) -> str | None:
    for family in FAMILIES:
        if family.title == title:
            return family.preset
    return None


def _node_label(dim: PrometheusDimension, present: list[MetricFacts]) -> DataProblem | None:
    """The node label is on none of the series read (and the query does not make it)."""
    wanted = dim.node_label
    if not present or any(wanted in m.label_names for m in present):
        return None
    if re.search(r"label_(replace|join)\s*\([^;]*?[\"']" + re.escape(wanted) + r"[\"']", dim.query):
        return None  # the query writes the label itself
    carried = frozenset().union(*(m.label_names for m in present))
    same = [n for n in carried if n.lower() == wanted.lower()]
    candidates = same or [n for n in NODE_LABELS if n in carried]
    metrics = ", ".join(m.name for m in present)
    if candidates:
        pick = candidates[0]
        return DataProblem(
            dim.name,
            ProblemKind.NODE_LABEL,
            f"none of the series it reads ({metrics}) carries label {wanted}; they carry "
            f"{', '.join(sorted(candidates))}",
            f"set nodeLabel: {pick} and group the query by it (`by ({pick})`)",
        )
    return DataProblem(
        dim.name,
        ProblemKind.NODE_LABEL,
        f"none of the series it reads ({metrics}) carries label {wanted}, nor any label that "
        f"usually names the node (labels: {', '.join(sorted(carried)) or 'none'})",
        "add the node with a relabelling in the scrape config (sourceLabels "
        "[__meta_kubernetes_pod_node_name], targetLabel node) and set nodeLabel: node",
    )
