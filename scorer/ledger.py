"""Which pods hold resources on which node: the input of the budget pools (steer/core/budget.py).

A pool's capacity is a node's room for limits minus the limits of the pods on it that take
nothing from the pool, so the scorer must know every pod bound to every node, the way the scheduler does:
a pod counts from its binding until it is deleted or reaches a terminal phase (the
scheduler's own pod informer excludes Succeeded and Failed pods). The ledger keeps, per pod
uid, its node and its containers' resources, nothing else (a pod is a few hundred bytes here
instead of kilobytes).

It is fed by the scorer's pod watch (`scorer.hot.PodBindingWatcher`): one list, then a watch
from the list's resourceVersion. Until that list has been applied the ledger is not `synced`
and the scorer publishes no pool: capacities computed from a partial ledger would be too
generous. `generation` bumps on every change that can move a pool, so the scorer knows when
to republish.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from steer.core.budget import Amount, PodUsage, pod_limits, pod_usage
from steer.core.quantity import QuantityError
from steer.core.scheduling import pod_amount

TERMINAL_PHASES = ("Succeeded", "Failed")


@dataclass(frozen=True)
class BoundPod:
    """A pod as the pools see it: its node and a pod spec reduced to containers' resources."""

    node: str
    spec: Mapping[str, Any]

    @classmethod
    def of(cls, pod: Mapping[str, Any]) -> BoundPod | None:
        """None for a pod that holds nothing on a node: unbound, or in a terminal phase."""
        spec = pod.get("spec") or {}
        node = spec.get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if not node or phase in TERMINAL_PHASES:
            return None
        reduced: dict[str, Any] = {}
        for part in ("containers", "initContainers"):
            containers = spec.get(part)
            if containers:
                reduced[part] = tuple(_container(c) for c in containers if isinstance(c, Mapping))
        return cls(str(node), MappingProxyType(reduced))


def _container(container: Mapping[str, Any]) -> Mapping[str, Any]:
    out: dict[str, Any] = {"resources": container.get("resources") or {}}
    if container.get("restartPolicy"):  # a sidecar init container: runs next to the app
        out["restartPolicy"] = container["restartPolicy"]
    return MappingProxyType(out)


class PodLedger:
    """Bound pods by uid, thread-safe: the watch thread writes, cycles read."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, BoundPod] = {}
        self._synced = False
        self.generation = 0  # bumps on every change that can move a pool
        self.relists = 0
        # What each pod reduces to (its pool share, limits, requests), computed once per pod
        # version: uid -> key -> value, dropped when the pod changes or goes.
        self._derived: dict[str, dict[Hashable, Any]] = {}

    @property
    def synced(self) -> bool:
        return self._synced

    def __len__(self) -> int:
        return len(self._pods)

    def replace(self, pods: Iterable[Mapping[str, Any]]) -> set[str]:
        """Start over from a full list of bound pods; the ledger is synced afterwards.
        Returns the nodes whose pods changed."""
        fresh: dict[str, BoundPod] = {}
        for pod in pods:
            uid = (pod.get("metadata") or {}).get("uid")
            entry = BoundPod.of(pod)
            if uid and entry is not None:
                fresh[str(uid)] = entry
        with self._lock:
            changed = {p.node for uid, p in self._pods.items() if fresh.get(uid) != p}
            changed.update(p.node for uid, p in fresh.items() if self._pods.get(uid) != p)
            self._derived = {
                uid: derived
                for uid, derived in self._derived.items()
                if uid in fresh and self._pods.get(uid) == fresh[uid]
            }
            self._pods = fresh
            self.relists += 1
            if changed or not self._synced:
                self.generation += 1
            self._synced = True
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
            self._derived.pop(uid, None)
            self.generation += 1
        return {p.node for p in (old, entry) if p is not None}

    def desync(self) -> None:
        """The watch broke: until the next full list the ledger may miss changes."""
        with self._lock:
            if self._synced:
                self._synced = False
                self.generation += 1

    def usages(self) -> dict[str, tuple[PodUsage, ...]] | None:
        """Each node's pods as the gates and pools count them; None until the ledger is
        synced."""
        key = "usage"  # pod_usage() does not depend on the policy
        with self._lock:
            if not self._synced:
                return None
            grouped: dict[str, list[PodUsage]] = {}
            for uid, pod in self._pods.items():
                usage = self._derive(uid, key, lambda p: pod_usage(p.spec))
                grouped.setdefault(pod.node, []).append(usage)
        return {node: tuple(usages) for node, usages in grouped.items()}

    def _derive(self, uid: str, key: Hashable, compute: Callable[[BoundPod], Any]) -> Any:
        """`compute(pod)` for pod `uid`, cached until the pod changes (call with the lock)."""
        derived = self._derived.setdefault(uid, {})
        if key not in derived:
            derived[key] = compute(self._pods[uid])
        return derived[key]

    def limits(self) -> dict[str, Amount] | None:
        """Per node, the cpu and memory limits of its bound pods (a container without a limit
        counts its request); None until the ledger is synced. A malformed quantity counts as
        nothing (the apiserver accepted the pod)."""
        out: dict[str, Amount] = {}
        with self._lock:
            if not self._synced:
                return None
            for uid, pod in self._pods.items():
                limits = self._derive(uid, "limits", lambda p: _limits(p.spec))
                out[pod.node] = out.get(pod.node, Amount()) + limits
        return out

    def requested(self, resources: Sequence[str]) -> dict[str, dict[str, Fraction]] | None:
        """Per node, the requests of `resources` summed over its bound pods, as the scheduler
        counts them (cores for cpu, bytes for memory); None until the ledger is synced. A
        malformed quantity counts as nothing (the apiserver accepted the pod)."""
        wanted = tuple(resources)
        key = ("requests", wanted)
        with self._lock:
            if not self._synced:
                return None
            out: dict[str, dict[str, Fraction]] = {}
            for uid, pod in self._pods.items():
                amounts = self._derive(
                    uid, key, lambda p: tuple(_request(p.spec, name) for name in wanted)
                )
                node = out.setdefault(pod.node, dict.fromkeys(wanted, Fraction(0)))
                for name, amount in zip(wanted, amounts, strict=True):
                    node[name] += amount
        return out


def _limits(spec: Mapping[str, Any]) -> Amount:
    try:
        return pod_limits(spec)
    except QuantityError:
        return Amount()


def _request(spec: Mapping[str, Any], resource: str) -> Fraction:
    try:
        return pod_amount(spec, "requests", resource)
    except QuantityError:
        return Fraction(0)
