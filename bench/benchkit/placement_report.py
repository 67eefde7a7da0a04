"""The placement bench's markdown scoreboard: one row per run, min / median / max per mode,
per-node detail, and the scorer's audit report of each audit run.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from scorer.explain.render import audit_text
from scorer.explain.view import AuditReport, Served

# The example policy's taint rules: their condition labels carry the rule's name.
TAINT_RULES = ("gpu-hot", "unhealthy")

COLUMNS: tuple[tuple[str, str, Callable[[dict[str, Any]], float], str], ...] = (
    ("bound", "bound", lambda r: r["bound"], "{:.0f}"),
    ("pending", "pend", lambda r: r["pending"], "{:.0f}"),
    ("rejected", "rej", lambda r: r["rejected_count"], "{:.0f}"),
    ("cores", "cores", lambda r: r["cores"], "{:.1f}"),
    ("a_over", "A>5%", lambda r: r["over_budget_team-a"], "{:.0f}"),
    ("a_bind", "A@bind", lambda r: r["over_budget_at_bind_team-a"], "{:.0f}"),
    ("b_over", "B>0%", lambda r: r["over_budget_team-b"], "{:.0f}"),
    ("b_bind", "B@bind", lambda r: r["over_budget_at_bind_team-b"], "{:.0f}"),
    ("gpu_hot", "GPU@hot", lambda r: r["gpu_on_hot"], "{:.0f}"),
    ("skew", "skew", lambda r: r["chain_skew"], "{:.0f}"),
    ("gpu8", "8G pend", lambda r: r["gpu8_pending"], "{:.0f}"),
    ("whole", "whole", lambda r: r["whole_gpu_nodes"], "{:.0f}"),
    ("strand", "strand", lambda r: r["stranded_gpus"], "{:.0f}"),
    ("cpu_gpu", "CPU@GPU", lambda r: r["cpu_pods_on_gpu_nodes"], "{:.0f}"),
    ("cpu_gpu_cores", "CPU@GPU cores", lambda r: r["cpu_cores_on_gpu_nodes"], "{:.1f}"),
    ("active", "active", lambda r: r["active_nodes"], "{:.0f}"),
    ("kw", "kW", lambda r: r["active_kw"], "{:.2f}"),
    ("wcore", "W/core", lambda r: r["w_per_core"], "{:.1f}"),
    ("idle", "idleW", lambda r: r["idle_w"], "{:.0f}"),
    ("dyn", "dyn W/core", lambda r: r.get("dyn_w_per_core", 0.0), "{:.2f}"),
    ("empty", "empty", lambda r: r.get("empty_nodes", 0), "{:.0f}"),
    ("c2b", "c→b s", lambda r: r["create_to_last_bind_s"], "{:.1f}"),
)


def run_row(r: dict[str, Any]) -> str:
    cells = [r["mode"], str(r["run"])]
    for key, _, get, fmt in COLUMNS:
        value = fmt.format(get(r))
        if key == "a_over":
            value += f"/{r['bound_team-a']}"
        elif key == "b_over":
            value += f"/{r['bound_team-b']}"
        elif key == "skew":
            value += " (" + "/".join(map(str, r["chain_per_zone"])) + ")"
        cells.append(value)
    return "| " + " | ".join(cells) + " |"


def table(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> str:
    head = ["mode", "run", *(title for _, title, _, _ in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * 2 + "---:|" * len(COLUMNS)]
    ordered = sorted(results, key=lambda r: (modes.index(r["mode"]), r["run"]))
    lines += [run_row(r) for r in ordered]
    lines.append("")
    lines.append("Summary per mode: min / median / max over runs.")
    lines.append("")
    lines.append("| mode | runs | " + " | ".join(title for _, title, _, _ in COLUMNS) + " |")
    lines.append("|---|---:|" + "---:|" * len(COLUMNS))
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if not rows:
            continue
        cells = [mode, str(len(rows))]
        for _, _, get, fmt in COLUMNS:
            values = [float(get(r)) for r in rows]
            trio = (min(values), statistics.median(values), max(values))
            cells.append(
                " / ".join(fmt.format(v) for v in trio) if len(rows) > 1 else fmt.format(values[0])
            )
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def summary(results: Sequence[dict[str, Any]], modes: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for mode in modes:
        rows = [r for r in results if r["mode"] == mode]
        if rows:
            out[mode] = {
                key: {
                    "min": min(float(get(r)) for r in rows),
                    "median": statistics.median(float(get(r)) for r in rows),
                    "max": max(float(get(r)) for r in rows),
                }
                for key, _, get, _ in COLUMNS
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

    for name, n in result["nodes"].items():
        pods = ", ".join(f"{k} {v}" for k, v in sorted(n["trace_pods"].items())) or "-"
        lines.append(
            f"| {name}{' (DRA)' if n.get('dra') else ''}{' (hot)' if n['hot'] else ''} | "
            f"{n['zone']} | {short(start.get(name, {}))} | "
            f"{short(n['labels'])} | {n['overcommit_pct']:.1f} | {n['cores_requested']:g} | "
            f"{n['gpus_allocated']} | {pods} |"
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
