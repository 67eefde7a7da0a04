"""Which pods hold resources on which node: the input of the gates and the budget pool
(steer/core/gates.py, budget.py), of `limitOvercommit` and of the cluster scores.

A pool's capacity is a node's room for limits minus the limits of the pods on it outside the
pool, and a gate never goes below what the node's pods hold, so the scorer must know every pod
bound to every node, the way the scheduler does: a pod counts from its binding until it is
deleted or reaches a terminal phase (the scheduler's own pod informer excludes Succeeded and
Failed pods; so does a kubelet when it re-admits). The ledger keeps, per pod uid, its node and
its `PodUsage`, computed once when the pod arrives: about 300 bytes a pod, so 100,000 pods fit
in a few tens of MiB.

A relist (a first list, or the list after a 410 Gone) builds the new map beside the old one,
so readers see one or the other whole, but files every pod that did not change as the entry
it already has, under the key string it already has: the relist's new map then costs its own
table, not a second copy of the entries and their uids (measured at 100,000 pods: peak growth
during a relist from 0.99x to 0.24x of the ledger; tests/test_scorer_memory.py pins it).

It is fed by the scorer's pod watch (`scorer.watch.bindings.PodBindingWatcher`): one list, read page by
page, then a watch from the list's resourceVersion. Until that list has been applied the ledger
is not `synced` and the scorer publishes no gate or pool: capacities computed from a partial
ledger could be below what the missing pods hold. `generation` bumps on every change that can
move a pool, and the nodes whose pods changed are kept until `take_dirty()`, so the scorer
replans only those.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from steer.core.budget import Amount, PodUsage, pod_usage
from steer.core.infrastructure import has_controller, runs_where_put

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True, slots=True)
class BoundPod:
    """A pod as the ledger keeps it: its node and what it holds there. `uid` is the key the
    ledger files it under, kept so that a relist files an unchanged pod again under that string
    rather than the listed copy (8 bytes a pod); it takes no part in equality."""

    node: str
    usage: PodUsage
    uid: str = field(default="", compare=False)

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> BoundPod | None:
        """None for a pod that holds nothing on a node: unbound, or in a terminal phase."""
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in TERMINAL_PHASES:
            return None
        return cls(
            str(node),
            pod_usage(spec, movable=not runs_where_put(pod), replaced=has_controller(pod)),
            str((pod.get("metadata") or {}).get("uid") or ""),
        )


class PodLedger:
    """Bound pods by uid, thread-safe: the watch thread writes, cycles read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, BoundPod] = {}
        self._synced = False
        self.generation = 0  # bumps on every change that can move a pool
        self.relists = 0
        self._version = 0  # bumps whenever _pods changes: the key of the cached grouping
        self._by_node: tuple[int, Mapping[str, tuple[PodUsage, ...]]] | None = None
        self._dirty: set[str] = set()  # nodes whose pods changed since take_dirty()
        self._all_dirty = True  # a relist or desync: every node
        self._synced_event = threading.Event()
        self.listing = False  # a pod watch is reading its first list into this ledger

    @property
    def synced(self) -> bool:
        return self._synced

    def __len__(self) -> int:
        return len(self._pods)

    def replace(
        self,
        pods: Iterable[Mapping[str, Any]],
        each: Callable[[Mapping[str, Any]], None] | None = None,
    ) -> set[str]:
        """Start over from a full list of bound pods (an iterable read once, page by page:
        only the reduced entries are kept); the ledger is synced afterwards. `each` sees every
        pod as it passes. Returns the nodes whose pods changed.

        A pod that did not change goes into the new map as the entry it has, under its key
        (see the module's docstring); the old map is only read until the swap."""
        held = self._pods
        fresh: dict[str, BoundPod] = {}
        for pod in pods:
            if each is not None:
                each(pod)
            entry = BoundPod.of(pod)
            if entry is None or not entry.uid:
                continue
            kept = held.get(entry.uid)
            if kept == entry:
                entry = kept
            fresh[entry.uid] = entry
        with self._lock:
            changed = {p.node for uid, p in self._pods.items() if fresh.get(uid) != p}
            changed.update(p.node for uid, p in fresh.items() if self._pods.get(uid) != p)
            self._pods = fresh
            self._version += 1
            self.relists += 1
            if changed or not self._synced:
                self.generation += 1
            self._dirty |= changed
            self._all_dirty = self._all_dirty or not self._synced
            self._synced = True
        self._synced_event.set()
        self.listing = False
        return changed

    def apply(self, event_type: str, pod: Mapping[str, Any]) -> set[str]:
        """One watch event (ADDED, MODIFIED, DELETED); returns the nodes whose pods changed."""
        uid = (pod.get("metadata") or {}).get("uid")
        if not uid or event_type not in ("ADDED", "MODIFIED", "DELETED"):
            return set()
        uid = str(uid)
        entry = None if event_type == "DELETED" else BoundPod.of(pod)
        with self._lock:
            old = self._pods.get(uid)
            if old == entry:
                return set()  # a status update that changes nothing the pools count
            if entry is None:
                del self._pods[uid]
            else:
                self._pods[uid] = entry
            self.generation += 1
            self._version += 1
            nodes = {p.node for p in (old, entry) if p is not None}
            self._dirty |= nodes
        return nodes

    def wait_synced(self, timeout_s: float) -> bool:
        """Wait until a full list has been applied (at most `timeout_s`) when one is being
        read; whether the ledger is synced."""
        if not self.listing:
            return self._synced
        return self._synced_event.wait(timeout_s)

    def desync(self) -> None:
        """The watch broke: until the next full list the ledger may miss changes."""
        with self._lock:
            self._synced_event.clear()
            if self._synced:
                self._synced = False
                self.generation += 1
                self._all_dirty = True

    def take_dirty(self) -> set[str] | None:
        """The nodes whose pods changed since the last call (None: every node, after a list)."""
        with self._lock:
            dirty, every = self._dirty, self._all_dirty
            self._dirty, self._all_dirty = set(), False
        return None if every else dirty

    def usages(
        self, nodes: Iterable[str] | None = None
    ) -> Mapping[str, tuple[PodUsage, ...]] | None:
        """Each node's pods (of `nodes`, or all) as the gates and pools count them; None until
        the ledger is synced. The grouping of all pods is kept until the next change (a cycle,
        its cluster scores and the refreshes between two changes share it): do not modify it."""
        with self._lock:
            if not self._synced:
                return None
            grouped = self._grouped()
        if nodes is None:
            return grouped
        return {node: grouped[node] for node in nodes if node in grouped}

    def _grouped(self) -> Mapping[str, tuple[PodUsage, ...]]:
        """Every node's pods, grouped once per change (call with the lock held)."""
        cached = self._by_node
        if cached is not None and cached[0] == self._version:
            return cached[1]
        lists: dict[str, list[PodUsage]] = {}
        for pod in self._pods.values():
            lists.setdefault(pod.node, []).append(pod.usage)
        grouped = MappingProxyType({node: tuple(usages) for node, usages in lists.items()})
        self._by_node = (self._version, grouped)
        return grouped

    def limits(self) -> dict[str, Amount] | None:
        """Per node, the cpu and memory limits of its bound pods (a container without a limit
        counts its request); None until the ledger is synced."""
        with self._lock:
            if not self._synced:
                return None
            grouped = self._grouped()
        return {
            node: Amount(
                Fraction(sum(u.limit_cpu_m for u in usages)),
                Fraction(sum(u.limit_memory for u in usages)),
            )
            for node, usages in grouped.items()
        }

    def requested(self, resources: Sequence[str]) -> dict[str, dict[str, Fraction]] | None:
        """Per node, the requests of `resources` summed over its bound pods, as the scheduler
        counts them (cores for cpu, bytes for memory, units otherwise); None until the ledger
        is synced. Summed in integers (millicores, bytes, units), one Fraction per sum."""
        wanted = tuple(resources)
        with self._lock:
            if not self._synced:
                return None
            grouped = self._grouped()
        out: dict[str, dict[str, Fraction]] = {}
        for node, usages in grouped.items():
            sums = {}
            for name in wanted:
                if name == "cpu":
                    sums[name] = Fraction(sum(u.request_cpu_m for u in usages), 1000)
                elif name == "memory":
                    sums[name] = Fraction(sum(u.request_memory for u in usages))
                else:
                    sums[name] = Fraction(sum(u.held.get(name, 0) for u in usages))
            out[node] = sums
        return out
