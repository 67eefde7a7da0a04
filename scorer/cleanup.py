"""`steer scorer cleanup`: take every label, taint, annotation and extended resource the
scorer wrote off every node (scorer/cycle/retire.py decides what), with the scorer's own writer, so
the writes are the same as in a cycle: resources through `/status` first, then one metadata
patch whose taint list keeps every foreign taint and carries `resourceVersion` (retried on 409).

Run it with the scorer stopped: a running leader would write its labels again next cycle.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from scorer.cycle.retire import Removal, cleanup_removal, removal_plan
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter, WriteResult
from scorer.model import parse_rfc3339
from scorer.watch.ledger import BoundPod
from steer.adapters.kubejson import BOUND_PODS, PODS_PATH, KubeApiError
from steer.adapters.lease import DEFAULT_LEASE_NAME, lease_path
from steer.core.policy import Policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CleanupReport:
    nodes: int  # nodes read
    removals: tuple[Removal, ...]  # nodes that carried something of ours
    results: tuple[WriteResult, ...]  # empty on a dry run

    @property
    def errors(self) -> tuple[WriteResult, ...]:
        return tuple(r for r in self.results if not r.ok)


def clean_nodes(
    policy: Policy,
    api: NodeApi,
    *,
    dry_run: bool = False,
    on_node: Callable[[Removal, WriteResult | None], None] = lambda _r, _w: None,
) -> CleanupReport:
    """Remove what the scorer wrote from every node; `KubeApiError` when the list fails."""
    nodes = api.list_nodes()
    held = held_resources(api)
    limiter = RateLimiter(policy.spec.scoring.write_qps, policy.spec.scoring.write_burst)
    writer = NodeWriter(api, limiter)
    removals = []
    results = []
    for node in nodes:
        gone = cleanup_removal(policy, node, held.get(node.name, {}))
        if gone.empty:
            continue
        removals.append(gone)
        result = None if dry_run else writer.write_node(policy, removal_plan(node, gone), node)
        if result is not None:
            results.append(result)
        on_node(gone, result)
    return CleanupReport(len(nodes), tuple(removals), tuple(results))


def held_resources(api: NodeApi) -> dict[str, dict[str, int]]:
    """Per node, what its bound pods request of every scalar resource: a resource they hold
    stays published at that, or a kubelet restart would refuse them."""
    out: dict[str, dict[str, int]] = {}
    query = {"fieldSelector": BOUND_PODS}
    for pod in api.kube.list_all(PODS_PATH, page_size=api.page_size, query=query):
        entry = BoundPod.of(pod)
        if entry is None:
            continue
        node = out.setdefault(entry.node, {})
        for name, amount in entry.usage.held.items():
            node[name] = node.get(name, 0) + amount
    return out


def live_leader(api: NodeApi, policy: Policy, now: datetime | None = None) -> str | None:
    """The holder of the scorer's Lease when it renewed within its duration (a scorer is
    running), else None; None too when the Lease cannot be read."""
    try:
        lease: dict[str, Any] = api.kube.request(
            "GET", lease_path(policy.spec.project_namespace, DEFAULT_LEASE_NAME)
        )
    except KubeApiError:
        return None
    spec = lease.get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = parse_rfc3339(str(spec.get("renewTime") or ""))
    if not holder or renewed is None:
        return None
    age = (now or datetime.now(UTC)).timestamp() - renewed
    return str(holder) if age <= float(spec.get("leaseDurationSeconds") or 15) else None
