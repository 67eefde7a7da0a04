"""Fixed-width text of a cycle's plan for `steer scorer once`: the raw readings with their
units, a legend of the label contract, the labels, taints, gates and pools per node and what
changes against the nodes as read."""

from __future__ import annotations

from collections.abc import Sequence

from scorer.cycle.plan import CyclePlan
from scorer.explain.nodes import rounded
from scorer.model import NodeState
from steer.core.policy import RESERVED_PREFIX, SCORE_PREFIX, Dimension, Policy, composite_suffix


def plan_table(
    cycle: CyclePlan,
    policy: Policy,
    nodes: Sequence[NodeState] = (),
    *,
    changes_only: bool = False,
) -> str:
    """Fixed-width text for `steer scorer once`: the raw readings with their units, a legend of
    the label contract, then the labels and taints planned per node and what changes (`old→new`
    against `nodes` as read; a node getting its first labels shows only how many)."""
    before = {n.name: n.labels for n in nodes}
    plans = [p for p in cycle.nodes if p.changed or not changes_only]
    prefix = policy.spec.label_prefix
    readings = [("NODE", *(_reading_header(d) for d in policy.spec.dimensions))]
    for plan in plans:
        cells = [plan.node]
        for dim in policy.spec.dimensions:
            entry = plan.dimensions.get(dim.name)
            cells.append("-" if entry is None or entry.raw is None else f"{rounded(entry.raw):g}")
        readings.append(tuple(cells))
    rows = [("NODE", "LABELS", "TAINTS", "GATES AND POOL", "CHANGES")]
    resource_prefix = policy.spec.resource_prefix
    for plan in plans:
        labels = ",".join(f"{_short(k, prefix)}={v}" for k, v in sorted(plan.labels.items()))
        resources = ",".join(
            [
                f"{_short(g.resource, resource_prefix)}:{'open' if g.open else 'closed'}"
                for g in plan.gates
            ]
            + [f"{_short(p.resource, resource_prefix)}={p.capacity}" for p in plan.pools]
        )
        taints = ",".join(f"{_short(t.key, prefix)}:{t.effect}" for t in plan.taints)
        changes = []
        had = before.get(plan.node, {})
        first = all(v is not None and k not in had for k, v in plan.label_changes.items())
        if plan.label_changes and first and not any(k in had for k in plan.labels):
            changes.append(f"+{len(plan.label_changes)} labels (first write)")
        else:
            for key, value in plan.label_changes.items():
                short, old = _short(key, prefix), had.get(key)
                if value is None:
                    changes.append(f"-{short}")
                else:
                    changes.append(f"{short}={value}" if old is None else f"{short}={old}→{value}")
        if plan.taints_changed:
            changes.append("taints")
        if plan.annotation_changed and not plan.label_changes:
            changes.append("observed-at")
        if plan.resource_changes:
            changes.append(f"status: {len(plan.resource_changes)} resources")
        rows.append(
            (
                plan.node,
                labels or "-",
                taints or "-",
                resources or "-",
                " ".join(changes) or "(none)",
            )
        )
    stale = cycle.stale_dimensions
    footer = [
        f"policy {cycle.policy_version}: {len(cycle.nodes)} nodes, {len(cycle.changes)} to write"
        + (f"; stale dimensions: {', '.join(stale)}" if stale else "")
    ]
    # Every problem with its fix, a failed read among them (`unreadable`).
    footer += [f"data: {p.line()}" for p in cycle.data_problems]
    lines = [
        "raw readings (unit in brackets; `steer explain node NAME` shows each query and time):",
        *_columns(readings),
        "",
        *_label_legend(policy),
        *_columns(rows),
        *footer,
    ]
    return "\n".join(line.rstrip() for line in lines)


def _reading_header(dim: Dimension) -> str:
    unit = dim.raw_unit
    return f"{dim.name} [{unit}]" if unit else dim.name


def _short(key: str, prefix: str) -> str:
    return key.removeprefix(prefix)


def _columns(rows: Sequence[tuple[str, ...]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)) for row in rows]


def _label_legend(policy: Policy) -> list[str]:
    """What the labels mean, in the words of the label contract."""
    spec = policy.spec
    raw = [d.name for d in spec.dimensions if d.publish == "raw"]
    lines = [
        f"labels under {spec.label_prefix} (shown without it):",
        f"  {SCORE_PREFIX}<dimension>, {composite_suffix(spec.scoring, None)}, "
        f"{composite_suffix(spec.scoring, '<class>')}: 0..100, higher is better for placement",
    ]
    if raw:
        lines.append(
            f"  {', '.join(raw)}: the raw value, its unit ending the name (rounded up, never below 0)"
        )
    if spec.taints:
        lines.append(
            f"  {', '.join(r.name for r in spec.taints)}: true while the rule's condition holds "
            "(the node carries the taint of that name)"
        )
    reserving = [c.name for c in spec.pod_classes if c.reserve_nodes != "none"]
    if reserving:
        lines.append(
            f"  {', '.join(RESERVED_PREFIX + c for c in reserving)}: kept for pods of that class"
        )
    lines.append(
        f"gates and pool in the node's status under {spec.resource_prefix} (hard rules: a pod "
        "the rule applies to requests one unit; closed = only what bound pods hold)"
    )
    return lines
