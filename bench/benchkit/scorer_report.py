"""The scorer bench's markdown tables: each goal, the value measured, met or not."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

GOAL_RSS_MIB = 300.0
GOAL_CPU_S = 1.0
GOAL_PUBLISH_S = 60.0


def _met(value: float | None, goal: float) -> str:
    if value is None:
        return "not measured"
    return "met" if value <= goal else "**not met**"


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f} s"


def report(doc: Mapping[str, Any]) -> str:
    args = doc.get("args", {})
    lines = [
        f"### Scorer at {args.get('nodes', 0):,} nodes, {args.get('pods', 0):,} bound pods "
        f"({doc.get('source')}, {doc.get('runtime_s', 0) / 60:.1f} min)",
        "",
    ]
    if "error" in doc:
        lines += [f"**Run failed:** {doc['error']}", ""]
    mem = doc.get("memory") or {}
    steady = doc.get("steady") or {}
    pub = doc.get("publication") or {}
    lines += [
        "| goal | measured | |",
        "|---|---|---|",
        f"| peak RSS (VmHWM) <= {GOAL_RSS_MIB:.0f} MiB | {mem.get('peak_hwm_mib')} MiB | "
        f"{_met(mem.get('peak_hwm_mib'), GOAL_RSS_MIB)} |",
        f"| steady RSS (VmRSS, median / max over steady cycles) <= {GOAL_RSS_MIB:.0f} MiB | "
        f"{mem.get('steady_rss_median_mib')} / {mem.get('steady_rss_max_mib')} MiB | "
        f"{_met(mem.get('steady_rss_max_mib'), GOAL_RSS_MIB)} |",
        f"| CPU per steady cycle <= {GOAL_CPU_S:.0f} s (median / max over cycles "
        f"{steady.get('cycles')}) | {steady.get('cpu_median_s')} / {steady.get('cpu_max_s')} s "
        f"| {_met(steady.get('cpu_max_s'), GOAL_CPU_S)} |",
        f"| Prometheus's CPU over the same cycles (median / max) | "
        f"{steady.get('prometheus_cpu_median_s')} / {steady.get('prometheus_cpu_max_s')} s "
        f"| reported |",
        f"| steady cycle wall time (median, from the log; histogram mean; of which compute, "
        f"queries summed) | {steady.get('duration_median_s')} s; "
        f"{steady.get('histogram_cycle_duration_mean_s')} s; {steady.get('compute_mean_s')} s, "
        f"{steady.get('query_sum_per_cycle_s')} s | reported |",
        f"| all nodes carry pool and gates <= {GOAL_PUBLISH_S:.0f} s after start | "
        f"{pub.get('all_pools_s')} s (first {pub.get('first_pool_s')} s, p50 "
        f"{pub.get('pools_p50_s')} s; ledger synced {pub.get('ledger_synced_s')} s) "
        f"| {_met(pub.get('all_pools_s'), GOAL_PUBLISH_S)} |",
        f"| all nodes carry their composite label | {pub.get('all_labels_s')} s (p50 "
        f"{pub.get('labels_p50_s')} s) | reported |",
    ]
    for b in doc.get("bursts") or ():
        if "error" in b:
            lines.append(f"| burst {b['name']} | {b['error']} | not measured |")
            continue
        one = b["max_status_writes_one_node"] <= 1
        lists = b["apiserver_node_lists"]
        note = " (a periodic cycle overlapped)" if b["periodic_cycle_overlapped"] else ""
        lines.append(
            f"| burst: {b['name']}: <= 1 status write per node, no node LIST | "
            f"{b['scorer_write_requests']:.0f} scorer writes "
            f"({b['scorer_write_requests'] / max(b['pods'], 1):.2f} per pod; "
            f"{b['apiserver_node_status_patches']:.0f} "
            f"status, {b['apiserver_node_patches']:.0f} metadata) on {b['nodes_written']} nodes; "
            f"max {b['max_status_writes_one_node']} status / {b['max_metadata_writes_one_node']} "
            f"metadata writes on one node; {lists:.0f} node LISTs; {b['window_s']} s{note} | "
            f"{'met' if one and lists == 0 else '**not met**'} |"
        )
    setup = doc.get("setup") or {}
    prom = doc.get("prometheus") or {}
    lines += [
        "",
        f"Setup: {setup.get('nodes_create_s')} s for the nodes, {setup.get('pods_create_s')} s "
        f"to create the pods ({setup.get('pods_per_s')}/s), {setup.get('pods_status_s')} s for "
        f"their statuses; object sizes {setup.get('object_bytes')}; Prometheus "
        f"{prom.get('series', 0):,} series rendered in {prom.get('render_s', 0):.0f} s, "
        f"backfilled in {prom.get('backfill_s', 0):.0f} s. Load average "
        f"{doc.get('machine', {}).get('loadavg_start')} -> {doc.get('machine', {}).get('loadavg_end')}.",
    ]
    scorer = doc.get("scorer") or {}
    if scorer.get("problems_count"):
        lines.append(f"Scorer log problems: {scorer['problems_count']}.")
    cycles = doc.get("cycles") or []
    if cycles:
        lines += [
            "",
            "| cycle | ended (s after start) | wall | written | CPU since previous "
            "| Prometheus CPU since previous | RSS |",
            "|---:|---:|---:|---:|---:|---:|---:|",
        ]
        lines += [
            f"| {c['cycle']} | {c['end_s']:.0f} | {c['duration_s']:.2f} s | {c['written']} | "
            f"{c['cpu_s']:.2f} s | {_seconds(c.get('prometheus_cpu_s'))} | "
            f"{c['rss_mib']:.0f} MiB |"
            for c in cycles
        ]
    return "\n".join(lines)
