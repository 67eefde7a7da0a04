"""Bursts of bound pods after the steady state, and what the scorer wrote for them."""

from __future__ import annotations

import math
import random
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .api import Api
from .metrics_text import apiserver_requests, delta
from .node_watch import NodeWatch
from .nodes import FakeNode
from .pods import KINDS, NAMESPACES_PER_PREFIX, PodSpec, Template, create_pods, delete_pods
from .procstat import read_proc
from .scorer_process import CycleLine, ScorerProcess


@dataclass(frozen=True)
class BurstSpec:
    name: str
    action: str  # create | delete
    pods: tuple[PodSpec, ...]


def burst_specs(nodes: Sequence[FakeNode], seed: int) -> list[BurstSpec]:
    """50 pods on 10 nodes (5 each), 600 pods spread over up to 600 nodes, then the 50 deleted."""
    rng = random.Random(seed + 7)
    gpu = [n for n in nodes if n.gpus]
    cpu = [n for n in nodes if not n.gpus]
    few = rng.sample(gpu, min(3, len(gpu))) + rng.sample(cpu, min(10 - min(3, len(gpu)), len(cpu)))
    cycle = ("dept-a", "dept-b", "no-tenant", "plain")

    def pods(targets: Sequence[FakeNode], per_node: int, prefix: str) -> tuple[PodSpec, ...]:
        out = []
        for j in range(len(targets) * per_node):
            node = targets[j % len(targets)]
            kind = cycle[j % len(cycle)]
            if node.gpus and j % 5 == 0:
                kind = "dept-a-gpu"
            ns = f"{KINDS[kind].namespace_prefix}-{j % NAMESPACES_PER_PREFIX}"
            out.append(PodSpec(f"{KINDS[kind].name}-{prefix}{j:05d}", ns, node.name, kind))
        return tuple(out)

    spread_nodes = rng.sample(list(nodes), min(600, len(nodes)))
    per_node = max(1, math.ceil(600 / len(spread_nodes)))
    first = pods(few, 5, "burst-a")
    spread = pods(spread_nodes, per_node, "burst-b")[:600]
    return [
        BurstSpec(f"{len(first)} pods onto {len(few)} nodes", "create", first),
        BurstSpec(f"{len(spread)} pods spread over {len(spread_nodes)} nodes", "create", spread),
        BurstSpec(f"delete the {len(first)} pods of the first burst", "delete", first),
    ]


def run_burst(
    api: Api,
    scorer: ScorerProcess,
    watch: NodeWatch,
    spec: BurstSpec,
    tmpl: Mapping[str, Template],
    quiet_s: float,
    interval_s: float,
) -> dict[str, Any]:
    """Right after a cycle line: the burst, then wait until no node event came for `quiet_s`."""
    line = scorer.wait_cycle(len(scorer.cycles), timeout=interval_s * 4 + 120)
    if line is None:
        return {"name": spec.name, "error": "no scorer cycle to start after"}
    before_api = apiserver_requests(api.metrics())
    before = scorer.metrics()
    proc0 = read_proc(scorer.pid)
    t0 = time.monotonic()
    if spec.action == "create":
        action_s = create_pods(api, spec.pods, tmpl, quiet=True)
    else:
        action_s = delete_pods(api, spec.pods)
    t_done = time.monotonic()
    deadline = t_done + max(120.0, 4 * interval_s)
    while time.monotonic() < deadline:
        last = max(watch.last_event, t_done)
        if time.monotonic() - last >= quiet_s:
            break
        time.sleep(0.2)
    t_end = time.monotonic()
    after = scorer.metrics()
    after_api = apiserver_requests(api.metrics())
    proc1 = read_proc(scorer.pid)
    events = watch.events_between(t0, t_end)
    per_node = Counter(e.node for e in events)
    status_per_node = Counter(e.node for e in events if e.status)
    meta_per_node = Counter(e.node for e in events if e.metadata)
    targets = {p.node for p in spec.pods}
    api_delta = delta(after_api, before_api)
    scorer_delta = delta(after, before)
    result = {
        "name": spec.name,
        "action": spec.action,
        "pods": len(spec.pods),
        "nodes_targeted": len(targets),
        "after_cycle": line.index,
        "started_s_after_cycle": round(t0 - line.at, 2),
        "action_s": round(action_s, 2),
        "window_s": round(t_end - t0, 2),
        "last_node_event_s": round(max((e.at for e in events), default=t0) - t0, 2),
        "scorer_write_requests": scorer_delta.get("steer_scorer_write_requests_total", 0.0),
        "scorer_node_writes_ok": scorer_delta.get("steer_scorer_node_writes_total{result=ok}", 0),
        "scorer_node_writes_error": scorer_delta.get(
            "steer_scorer_node_writes_total{result=error}", 0
        ),
        "scorer_conflicts": scorer_delta.get("steer_scorer_write_conflicts_total", 0.0),
        "apiserver_node_status_patches": api_delta.get("nodes/status PATCH", 0.0),
        "apiserver_node_patches": api_delta.get("nodes PATCH", 0.0),
        "apiserver_node_lists": api_delta.get("nodes LIST", 0.0),
        "apiserver_node_gets": api_delta.get("nodes GET", 0.0),
        "apiserver_pod_lists": api_delta.get("pods LIST", 0.0),
        "node_events": len(events),
        "nodes_written": len(per_node),
        "nodes_written_outside_targets": len(set(per_node) - targets),
        "max_events_one_node": max(per_node.values(), default=0),
        "max_status_writes_one_node": max(status_per_node.values(), default=0),
        "nodes_status_written": len(status_per_node),
        "nodes_status_written_twice_or_more": sum(1 for v in status_per_node.values() if v > 1),
        "nodes_metadata_written": len(meta_per_node),
        "max_metadata_writes_one_node": max(meta_per_node.values(), default=0),
        "scorer_cpu_s": round(proc1.cpu_s - proc0.cpu_s, 2),
        "t0": t0,
        "t_end": t_end,
        "apiserver_delta": api_delta,
        "scorer_delta": {
            k: v for k, v in scorer_delta.items() if not k.startswith("steer_scorer_dimension_age")
        },
    }
    result["periodic_cycle_overlapped"] = overlapped(scorer.cycles, result)
    return result


def overlapped(cycles: Sequence[CycleLine], burst: Mapping[str, Any]) -> bool:
    """A periodic cycle (after the one the burst followed) ran during the burst's window."""
    return any(
        c.index > burst["after_cycle"] and c.at >= burst["t0"] and c.started <= burst["t_end"]
        for c in cycles
    )
