"""Waiting until the scorer has published every node (pool resources and composite label)."""

from __future__ import annotations

import subprocess
import time
from typing import Any

from .node_watch import NodeWatch
from .progress import log
from .scorer_process import ScorerProcess
from .stats import quantile


def stack_dump(py_spy: str, pid: int) -> str:
    """Every thread's Python stack in the scorer now (py-spy dump; needs ptrace, as root)."""
    done = subprocess.run(
        [py_spy, "dump", "--nonblocking", "--pid", str(pid)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return (done.stdout or done.stderr)[-6000:]


def wait_publication(
    scorer: ScorerProcess,
    watch: NodeWatch,
    nodes: int,
    timeout: float,
    dumps: list[dict[str, Any]],
    py_spy: str | None = None,
    dump_every_s: float = 0.0,
) -> dict[str, Any]:
    """Until every node has its pool and its composite label (or the timeout); with py-spy,
    the scorer's stacks every `dump_every_s` meanwhile."""
    t0 = scorer.started
    deadline = time.monotonic() + timeout
    last_report = 0.0
    last_dump = t0
    while time.monotonic() < deadline and scorer.alive():
        pools, labels = watch.counts()
        now = time.monotonic()
        if py_spy and dump_every_s > 0 and now - last_dump >= dump_every_s:
            last_dump = now
            dumps.append({"t_s": round(now - t0, 1), "stacks": stack_dump(py_spy, scorer.pid)})
        if now - last_report >= 10:
            last_report = now
            rss = scorer.last.rss_mib if scorer.last else 0
            log(
                f"   t+{now - t0:.0f} s: {pools:,}/{nodes:,} nodes with pools, "
                f"{labels:,}/{nodes:,} labelled; scorer RSS {rss:.0f} MiB, "
                f"{len(scorer.cycles)} cycles done"
            )
        if pools >= nodes and labels >= nodes:
            break
        time.sleep(0.5)
    pool_times, label_times = watch.times()

    def rel(values: list[float], q: float) -> float | None:
        v = quantile(values, q) if len(values) >= nodes else None
        return None if v is None else round(v - t0, 2)

    pools, labels = watch.counts()
    out = {
        "nodes": nodes,
        "nodes_with_pool": pools,
        "nodes_labelled": labels,
        # /readyz answers 200 once the first cycle is done: its log line, not polled (each
        # poll would be a log line and CPU in the process measured).
        "first_cycle_done_s": round(scorer.cycles[0].at - t0, 2) if scorer.cycles else None,
        "ledger_synced_s": None if scorer.pod_list is None else round(scorer.pod_list[0] - t0, 2),
        "ledger_pods": None if scorer.pod_list is None else scorer.pod_list[1],
        "first_pool_s": round(min(pool_times) - t0, 2) if pool_times else None,
        "all_pools_s": rel(pool_times, 1.0),
        "pools_p50_s": rel(pool_times, 0.5),
        "pools_p90_s": rel(pool_times, 0.9),
        "first_label_s": round(min(label_times) - t0, 2) if label_times else None,
        "all_labels_s": rel(label_times, 1.0),
        "labels_p50_s": rel(label_times, 0.5),
        "labels_p90_s": rel(label_times, 0.9),
        "scorer_rss_mib": round(scorer.last.rss_mib, 1) if scorer.last else None,
        "scorer_hwm_mib": round(scorer.last.hwm_mib, 1) if scorer.last else None,
        "cycles_done": len(scorer.cycles),
    }
    # One LIST, as a client would check: every node's status.allocatable.
    items, _ = watch.api.pages("/api/v1/nodes")
    out["list_nodes_with_pool"] = sum(
        1 for n in items if watch.pool_key in ((n.get("status") or {}).get("allocatable") or {})
    )
    out["list_nodes_labelled"] = sum(
        1 for n in items if watch.label_key in ((n.get("metadata") or {}).get("labels") or {})
    )
    return out
