"""Text for people: the tables `steer explain node|nodes|pod` and `steer audit report` print,
rendered from the view model (scorer/explain/view/) the CLI reads back from the scorer's
answer."""

from __future__ import annotations

import json
from collections.abc import Sequence

from scorer.explain.view import (
    AuditReport,
    NodeDetail,
    NodesTable,
    PodExplanation,
    SchedulerVerdict,
    Served,
)


def short_key(key: str) -> str:
    """A key without its prefix's domain (`kube-steer.github.io/score-power` → `score-power`)."""
    return key.rsplit("/", 1)[-1]


def node_text(detail: NodeDetail, served: Served) -> str:
    lines = [f"node {detail.node}  policy {detail.policy_version}  leader={served.leader}"]
    rows = [("DIMENSION", "STATUS", "RAW", "UNIT", "SCORE", "LABEL", "OBSERVED", "QUERY")]
    for d in detail.dimensions:
        label = f"{short_key(d.label_key)}={d.label}" if d.label is not None else "-"
        rows.append(
            (
                d.dimension,
                d.status,
                _fmt(d.raw),
                d.unit or "-",
                _fmt(d.score),
                label,
                d.observed_at or "-",
                " ".join(d.query.split()),
            )
        )
    lines.append(_table(rows))
    for c in detail.composites:
        lines.append(
            f"composite {c.key} = {c.label or '-'} (score {_fmt(c.score)}, hot penalty {c.hot_penalty})"
        )
    for cond in detail.conditions:
        lines.append(
            f"condition {cond.rule}: {cond.condition} observed {_fmt(cond.observed)} active={cond.active}"
        )
    lines.append(
        "taints: " + (", ".join(f"{t.key}={t.value}:{t.effect}" for t in detail.taints) or "-")
    )
    for pool in detail.budget_pools.pools:
        lines.append(f"pool {pool.resource} = {pool.published or '-'}: {pool.why}")
    for counter in detail.budget_pools.counters:
        lines.append(
            f"device counter {counter.resource} = {counter.published or '-'}: {counter.why}"
        )
    if detail.active is not None:
        lines.append(f"active (runs movable pods): {detail.active}")
    if detail.drain_candidate is not None:
        lines.append(f"drain candidate: {detail.drain_candidate}")
    if detail.devices:
        devices = [("DEVICE", "CLASSES", "PRODUCT", "UUID", "STATE", "READING", "HOT")]
        for v in detail.devices:
            state = "free" if v.free else (f"held by {v.claim}" if v.claim else "blocked")
            if v.pods:
                state += f" ({', '.join(v.pods)})"
            hot = "-" if v.hot is None else ("yes" if v.hot else "no")
            devices.append(
                (
                    v.device,
                    ",".join(v.classes) or "-",
                    v.product or "-",
                    v.uuid or "-",
                    state,
                    _fmt(v.reading),
                    hot,
                )
            )
        lines.append(_table(devices))
    return "\n".join(lines)


def nodes_text(table: NodesTable, served: Served) -> str:
    # Columns named by their labels (`score-gpu-util`, `overcommit-pct`, `score`), not by the
    # metric, so a low number under a `score-` header reads as "worse", as it is.
    keys = [d.label_key for d in table.dimensions]
    composites = list(table.nodes[0].composites) if table.nodes else []
    rows = [("NODE", *(short_key(k) for k in keys + composites), "TAINTS")]
    for n in table.nodes:
        rows.append(
            (
                n.node,
                *(n.labels.get(key, "-") for key in keys + composites),
                ",".join(short_key(str(t)) for t in n.taints) or "-",
            )
        )
    stale = [d.dimension for d in table.dimensions if d.stale]
    footer = f"policy {table.policy_version}, leader={served.leader}" + (
        f", stale: {', '.join(stale)}" if stale else ""
    )
    problems = [f"data: {p.line()}" for d in table.dimensions for p in d.problems]
    devices = [
        f"devices {c.device_class}: {c.free} free of {c.total} ({c.allocated} held"
        + (f", {c.hot_free} free but hot" if c.hot_free else "")
        + f"), {c.whole_free_nodes} whole free nodes, fragmentation {_fmt(c.fragmentation)}"
        for c in table.devices
    ]
    devices += [f"devices: {p}" for p in table.device_problems]
    return "\n".join([_table(rows), footer, *problems, *devices])


def pod_text(pod: PodExplanation, served: Served) -> str:
    lines = [
        f"pod class: {pod.pod_class or '-'}  tenant: {pod.tenant or '-'}  policy {pod.policy_version}"
    ]
    lines += [f"note: {note}" for note in served.notes]
    if pod.skipped is not None:
        lines.append(f"not steered: {pod.skipped}")
    elif pod.audit:
        lines.append(f"not steered: audit mode; enforce mode would apply {', '.join(pod.rules)}")
    elif pod.rules:
        lines.append(f"rules in effect: {', '.join(pod.rules)}")
    if pod.device_asks:
        lines.append(f"devices asked: {'; '.join(a.text for a in pod.device_asks)}")
    lines += [f"note: {note}" for note in pod.device_notes]
    lines += [f"webhook warning: {warning}" for warning in pod.admission.warnings]
    if pod.scheduler is not None:
        lines += scheduler_lines(pod.scheduler)
    rows = [("RANK", "NODE", "STEERING", "USER", "SOFT TAINTS")]
    for a in pod.allowed:
        rows.append(
            (
                str(a.rank),
                a.node,
                str(a.steering_weight),
                str(a.user_weight),
                ",".join(a.soft_taints) or "-",
            )
        )
    lines.append(_table(rows))
    for e in pod.excluded:
        for x in e.exclusions:
            lines.append(
                f"excluded {e.node}: {x.rule}: {x.reason} {json.dumps(x.data, sort_keys=True)}"
            )
    return "\n".join(lines)


def audit_text(report: AuditReport, served: Served) -> str:
    """The audit report: how often the scheduler's choice differs from the policy's, by rule."""
    share = f" ({100 * report.agreed / report.pods:.0f} %)" if report.pods else ""
    lines = [
        f"policy {report.policy_version}, leader={served.leader}: {report.pods} audited pods "
        f"judged, {report.agreed} on the policy's first choice{share}, "
        f"{report.on_excluded} on a node enforce mode would exclude"
    ]
    lines += [f"note: {note}" for note in served.notes]
    if report.left_out:
        lines.append(f"note: {report.left_out} audited pods bound earlier were not judged")
    if report.unjudged:
        lines.append(f"note: {report.unjudged} pods have a field the policy cannot read")
    by_rule = [("RULE", "PODS")] + [(r.rule, str(r.pods)) for r in report.by_rule]
    if len(by_rule) > 1:
        lines.append(_table(by_rule))
    if report.ranks:
        ranks = ", ".join(f"rank {k}: {v}" for k, v in sorted(report.ranks.items()))
        lines.append(f"chosen node's rank among the allowed ones: {ranks}")
    if report.divergent:
        rows = [("POD", "NODE", "TENANT", "EXCLUDED BY", "RANK")]
        for pod in report.divergent:
            rows.append(
                (
                    f"{pod.namespace}/{pod.name}",
                    pod.node,
                    pod.tenant or "-",
                    ", ".join(pod.excluded_by) or "-",
                    f"{pod.rank}/{pod.allowed}" if pod.rank is not None else "-",
                )
            )
        lines.append(_table(rows))
    return "\n".join(lines)


def scheduler_lines(verdict: SchedulerVerdict) -> list[str]:
    """What the kube-scheduler said of a live pod, beside kube-steer's verdicts."""
    if verdict.node is not None:
        lines = [f"scheduler: bound to {verdict.node} ({verdict.phase or '?'})"]
    else:
        lines = [f"scheduler: not bound ({verdict.phase or '?'})"]
    condition = verdict.pod_scheduled
    if condition is not None and condition.status != "True":
        lines.append(
            f"scheduler: PodScheduled={condition.status} {condition.reason or ''}: "
            f"{condition.message or '-'}"
        )
    event = verdict.failed_scheduling
    if event is not None:
        lines.append(
            f"scheduler: FailedScheduling x{event.count} (last {event.last_seen or '?'}): "
            f"{event.message}"
        )
    if verdict.events_error:
        lines.append(f"note: {verdict.events_error}")
    return lines


def _fmt(value: object) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _table(rows: Sequence[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip() for r in rows)
