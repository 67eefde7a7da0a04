"""The placement bench's markdown scoreboard: one row per run (its seed beside it), per mode the
median and the worst run of every column, a line per mode saying whether every goal held in
every run, per-node detail, and the scorer's audit report of each audit run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from scorer.explain.render import audit_text
from scorer.explain.view import AuditReport, Served

# The example policy's taint rules: their condition labels carry the rule's name.
TAINT_RULES = ("gpu-hot", "unhealthy")

Worse = Literal["max", "min"]


@dataclass(frozen=True)
class Column:
    """One figure of a run. `worse`: which end of the runs is the worst case ("max": more is
    worse, "min": less is; None: neither, the range is shown). `goal`: the scoreboard's goal
    for it, the most a run may show (None: not a goal)."""

    key: str
    title: str
    get: Callable[[dict[str, Any]], float]
    fmt: str
    worse: Worse | None
    goal: float | None = None

    def worst(self, values: Sequence[float]) -> float:
        return min(values) if self.worse == "min" else max(values)


COLUMNS: tuple[Column, ...] = (
    Column("bound", "bound", lambda r: r["bound"], "{:.0f}", "min"),
    Column("pending", "pend", lambda r: r["pending"], "{:.0f}", "max"),
    Column("shop_pending", "shop pend", lambda r: r.get("pending_shop", 0), "{:.0f}", "max"),
    Column("rejected", "rej", lambda r: r["rejected_count"], "{:.0f}", "max"),
    Column("cores", "cores", lambda r: r["cores"], "{:.1f}", "min"),
    Column("a_over", "A>5%", lambda r: r["over_budget_team-a"], "{:.0f}", "max", 0),
    Column("a_bind", "A@bind", lambda r: r["over_budget_at_bind_team-a"], "{:.0f}", "max"),
    Column("b_over", "B>0%", lambda r: r["over_budget_team-b"], "{:.0f}", "max", 0),
    Column("b_bind", "B@bind", lambda r: r["over_budget_at_bind_team-b"], "{:.0f}", "max"),
    Column("gpu_hot", "GPU@hot", lambda r: r["gpu_on_hot"], "{:.0f}", "max", 0),
    Column("skew", "skew", lambda r: r["chain_skew"], "{:.0f}", "max", 1),
    Column("gpu8", "8G pend", lambda r: r["gpu8_pending"], "{:.0f}", "max", 0),
    Column("whole", "whole", lambda r: r["whole_gpu_nodes"], "{:.0f}", "min"),
    Column("strand", "strand", lambda r: r["stranded_gpus"], "{:.0f}", "max", 0),
    Column("cpu_gpu", "CPU@GPU", lambda r: r["cpu_pods_on_gpu_nodes"], "{:.0f}", "max"),
    Column(
        "cpu_gpu_cores", "CPU@GPU cores", lambda r: r["cpu_cores_on_gpu_nodes"], "{:.1f}", "max"
    ),
    Column("active", "active", lambda r: r["active_nodes"], "{:.0f}", None),
    Column("kw", "kW", lambda r: r["active_kw"], "{:.2f}", None),
    Column("wcore", "W/core", lambda r: r["w_per_core"], "{:.1f}", "max"),
    Column("idle", "idleW", lambda r: r["idle_w"], "{:.0f}", None),
    Column("dyn", "dyn W/core", lambda r: r.get("dyn_w_per_core", 0.0), "{:.2f}", "max"),
    Column("empty", "empty", lambda r: r.get("empty_nodes", 0), "{:.0f}", "min"),
    Column("c2b", "c→b s", lambda r: r["create_to_last_bind_s"], "{:.1f}", "max"),
)
GOALS = tuple(c for c in COLUMNS if c.goal is not None)


def seed_of(r: Mapping[str, Any]) -> Any:
    """A run's trace seed (results written before seeds varied: the invocation's one seed)."""
    return r.get("seed", "-")


def run_row(r: dict[str, Any]) -> str:
    cells = [r["mode"], str(r["run"]), str(seed_of(r))]
    for col in COLUMNS:
        value = col.fmt.format(col.get(r))
        if col.key == "a_over":
            value += f"/{r['bound_team-a']}"
        elif col.key == "b_over":
            value += f"/{r['bound_team-b']}"
        elif col.key == "skew":
            chains = r.get("chains") or {"checkout": r["chain_per_zone"]}
            value += " (" + ", ".join("/".join(map(str, z)) for z in chains.values()) + ")"
        cells.append(value)
    return "| " + " | ".join(cells) + " |"


def goal_failures(rows: Sequence[dict[str, Any]]) -> dict[str, list[Any]]:
    """Per goal column (by title) that some run missed, the seeds of those runs."""
    out: dict[str, list[Any]] = {}
    for col in GOALS:
        assert col.goal is not None
        missed = [seed_of(r) for r in rows if col.get(r) > col.goal]
        if missed:
            out[col.title] = missed
    return out


def goal_line(mode: str, rows: Sequence[dict[str, Any]]) -> str:
    """Whether every goal held in every run of a mode, and if not, which goal, in which runs,
    by how much at worst."""
    goals = ", ".join(
        f"{c.title} {'0' if c.goal == 0 else f'<= {c.goal:g}'}" for c in GOALS if c.goal is not None
    )
    failures = goal_failures(rows)
    if not failures:
        runs = f"{len(rows)} run{'s' if len(rows) > 1 else ''}"
        return f"- {mode}: every goal held in every run ({runs}: {goals})."
    by_title = {c.title: c for c in GOALS}
    parts = []
    for title, seeds in failures.items():
        col = by_title[title]
        worst = col.fmt.format(col.worst([float(col.get(r)) for r in rows]))
        parts.append(
            f"{title} missed in {len(seeds)} of {len(rows)} "
            f"(seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}; worst {worst})"
        )
    return f"- {mode}: NOT every goal in every run: " + "; ".join(parts) + "."


def table(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> str:
    head = ["mode", "run", "seed", *(c.title for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 3 + "---:|" * len(COLUMNS)]
    ordered = sorted(results, key=lambda r: (modes.index(r["mode"]), r["run"]))
    lines += [run_row(r) for r in ordered]
    lines.append("")
    lines.append(
        "Summary per mode: the median over runs, and the worst run of each column (goals: the "
        "largest violation; bound, cores, whole, empty: the fewest; active, kW, idleW: min-max)."
    )
    lines.append("")
    lines.append("| mode | runs | | " + " | ".join(c.title for c in COLUMNS) + " |")
    lines.append("|---|---:|---|" + "---:|" * len(COLUMNS))
    per_mode = {mode: [r for r in results if r["mode"] == mode] for mode in modes}
    for mode, rows in per_mode.items():
        if not rows:
            continue
        median = [mode, str(len(rows)), "median"]
        worst = ["", "", "**worst**"]
        for col in COLUMNS:
            values = [float(col.get(r)) for r in rows]
            median.append(col.fmt.format(statistics.median(values)))
            if col.worse is None:
                worst.append(f"{col.fmt.format(min(values))}-{col.fmt.format(max(values))}")
            else:
                cell = col.fmt.format(col.worst(values))
                worst.append(
                    f"**{cell}**" if col.goal is not None and col.worst(values) > col.goal else cell
                )
        lines.append("| " + " | ".join(median) + " |")
        lines.append("| " + " | ".join(worst) + " |")
    lines.append("")
    lines.append("Goals, every run:")
    lines.append("")
    lines += [goal_line(mode, rows) for mode, rows in per_mode.items() if rows]
    return "\n".join(lines)


def summary(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    """Per mode and column: min, median, max and the worst run (the results file's `summary`)."""
    out: dict[str, Any] = {}
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if rows:
            out[mode] = {}
            for col in COLUMNS:
                values = [float(col.get(r)) for r in rows]
                out[mode][col.key] = {
                    "min": min(values),
                    "median": statistics.median(values),
                    "max": max(values),
                    "worst": col.worst(values),
                }
    return out


def goals(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    """Per mode: whether every goal held in every run, and the seeds of the runs that missed
    each goal missed (the results file's `goals`)."""
    out: dict[str, Any] = {}
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if rows:
            failures = goal_failures(rows)
            out[mode] = {
                "runs": len(rows),
                "every_goal_every_run": not failures,
                "missed": failures,
                "limits": {c.title: c.goal for c in GOALS},
            }
    return out


def node_table(result: dict[str, Any]) -> str:
    """Where things went in one run: per node, its labels at trace start and the final state."""
    start = (result.get("priming") or {}).get("labels_at_start") or {}
    lines = [
        f"Nodes, {result['mode']} run {result['run']}: steer labels at trace start "
        "(score / score-class-gpu / overcommit-pct, taints; a taint rule's condition label "
        "without its taint, as audit mode writes it, reads `(label)`) and the final state.",
        "",
        "| node | zone | at start | end labels | overcommit % | cores req | GPUs alloc | trace pods |",
        "|---|---|---|---|---:|---:|---:|---|",
    ]

    def short(labels: Mapping[str, str]) -> str:
        if not labels:
            return "-"
        parts = [
            f"{labels.get('score', '·')}/{labels.get('score-class-gpu', '·')}/"
            f"{labels.get('overcommit-pct', '·')}"
        ]
        parts += [k.removeprefix("taint:") for k in labels if k.startswith("taint:")]
        parts += [
            f"{rule} (label)"
            for rule in TAINT_RULES
            if rule in labels and f"taint:{rule}" not in labels
        ]
        return " ".join(parts)

    def gpus_before(n: Mapping[str, Any]) -> str:
        before = n.get("gpus_before_trace", 0)
        return f" ({before} before the trace)" if before else ""

    for name, n in result["nodes"].items():
        pods = ", ".join(f"{k} {v}" for k, v in sorted(n["trace_pods"].items())) or "-"
        lines.append(
            f"| {name}{' (DRA)' if n.get('dra') else ''}{' (hot)' if n['hot'] else ''} | "
            f"{n['zone']} | {short(start.get(name, {}))} | "
            f"{short(n['labels'])} | {n['overcommit_pct']:.1f} | {n['cores_requested']:g} | "
            f"{n['gpus_allocated']}{gpus_before(n)} | {pods} |"
        )
    return "\n".join(lines)


def audit_section(result: dict[str, Any]) -> str:
    """The scorer's audit report of one audit run, as `steer audit report` prints it."""
    body = result["audit"]
    lines = [
        f"Audit report, {result['mode']} run {result['run']}: `GET /explain/audit` once binding "
        f"settled; the webhook audited {result['audited']} trace pods and mutated "
        f"{result['mutated']}.",
        "",
    ]
    if "error" in body:
        lines.append(f"Not read: {body['error']}")
    else:
        lines += ["```text", audit_text(AuditReport.from_json(body), Served.from_json(body)), "```"]
    return "\n".join(lines)
