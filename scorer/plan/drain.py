"""Drain candidates: nodes that could be emptied onto active nodes whose cores cost no more.

A node is a candidate when every movable pod on it (all but DaemonSet and mirror pods) fits, by
its cpu and memory requests, in the room left on active nodes at least as efficient (dynamic
watts per busy core no higher; an equally efficient node only when it already runs more cores),
so that emptying it saves its idle watts and costs no watt per core. The operator, the
cluster-autoscaler or a descheduler consolidation profile selecting `<prefix>drain-candidate`
acts on the mark; kube-steer evicts nothing. The scheduler still decides where each pod lands
(spread, pools and gates are its to check), so the mark says "could", never "will".

Greedy and deterministic: the costliest nodes are tried first, fewest cores first among equals,
each pod (largest first) on the cheapest, fullest target that has room; a node that received
pods in the plan is no candidate itself. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from steer.core.budget import MIB, PodUsage

# The user's own switch for the cluster-autoscaler: kube-steer reads it, never writes it.
SCALE_DOWN_DISABLED = "cluster-autoscaler.kubernetes.io/scale-down-disabled"
GIB = 1024 * MIB


@dataclass(frozen=True)
class DrainNode:
    """What the plan needs of one node: its room (millicores, bytes), its cost per core and idle
    draw (raw watts, measured or from the power model), and its pods."""

    name: str
    cpu_m: int
    memory: int
    watts_per_core: float | None
    idle_watts: float | None
    pods: Sequence[PodUsage]
    schedulable: bool = True
    scale_down_disabled: bool = False
    # Resources other than cpu and memory its pods hold that no move accounts for (GPUs): such
    # a node is never a candidate.
    pinned: tuple[str, ...] = ()

    @property
    def movable(self) -> tuple[PodUsage, ...]:
        return tuple(p for p in self.pods if p.movable)

    @property
    def active(self) -> bool:
        return any(p.movable for p in self.pods)

    @property
    def used(self) -> tuple[int, int]:
        return (
            sum(p.request_cpu_m for p in self.pods),
            sum(p.request_memory for p in self.pods),
        )


def _fmt(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".")


def drain_candidates(nodes: Iterable[DrainNode], min_saved_watts: float = 0.0) -> dict[str, str]:
    """Node name → why it could be emptied, in words, with the numbers."""
    by_name = {n.name: n for n in nodes}
    room: dict[str, list[int]] = {}
    for n in by_name.values():
        cpu, mem = n.used
        room[n.name] = [n.cpu_m - cpu, n.memory - mem]
    received: set[str] = set()
    marked: dict[str, str] = {}

    def eligible(n: DrainNode) -> bool:
        return (
            n.active
            and n.schedulable
            and not n.scale_down_disabled
            and not n.pinned
            and n.watts_per_core is not None
        )

    candidates = sorted(
        (n for n in by_name.values() if eligible(n)),
        key=lambda n: (-(n.watts_per_core or 0.0), n.used[0], n.name),
    )
    for cand in candidates:
        if cand.name in received:
            continue
        cost = cand.watts_per_core or 0.0
        targets = sorted(
            (
                t
                for t in by_name.values()
                if t.name != cand.name
                and t.name not in marked
                and t.active
                and t.schedulable
                and t.watts_per_core is not None
                and (
                    t.watts_per_core < cost
                    or (t.watts_per_core == cost and t.used[0] > cand.used[0])
                )
            ),
            key=lambda t: (t.watts_per_core, -t.used[0], t.name),
        )
        trial = {t.name: list(room[t.name]) for t in targets}
        placed: dict[str, str] = {}
        pods = sorted(cand.movable, key=lambda p: (-p.request_cpu_m, -p.request_memory))
        for i, pod in enumerate(pods):
            for t in targets:
                free = trial[t.name]
                if free[0] >= pod.request_cpu_m and free[1] >= pod.request_memory:
                    free[0] -= pod.request_cpu_m
                    free[1] -= pod.request_memory
                    placed[str(i)] = t.name
                    break
            else:
                break
        if len(placed) < len(pods):
            continue
        used_targets = sorted(set(placed.values()))
        cores = sum(p.request_cpu_m for p in pods) / 1000
        memory = sum(p.request_memory for p in pods) / GIB
        target_costs = [by_name[t].watts_per_core or 0.0 for t in used_targets]
        moved_saving = sum(
            (cost - (by_name[placed[str(i)]].watts_per_core or 0.0)) * p.request_cpu_m / 1000
            for i, p in enumerate(pods)
        )
        idle = cand.idle_watts or 0.0
        saved = idle + moved_saving
        if saved < min_saved_watts:
            continue
        for name in used_targets:
            room[name] = trial[name]
            received.add(name)
        lo, hi = min(target_costs), max(target_costs)
        span = _fmt(lo) if lo == hi else f"{_fmt(lo)}-{_fmt(hi)}"
        idle_text = f"{_fmt(idle)} W idle" if cand.idle_watts is not None else "idle watts unknown"
        pods_text = f"{len(pods)} movable pod{'s' if len(pods) != 1 else ''}"
        marked[cand.name] = (
            f"its {pods_text} ({_fmt(cores)} cores, {_fmt(memory)} GiB requested) "
            f"{'fits' if len(pods) == 1 else 'fit'} on {len(used_targets)} active "
            f"node{'s' if len(used_targets) != 1 else ''} "
            f"({', '.join(used_targets)}) at {span} W per busy core against {_fmt(cost)} W here; "
            f"emptying it saves about {_fmt(saved)} W ({idle_text})"
        )
    return marked


def pinned_resources(pods: Sequence[PodUsage], own_prefix: str) -> tuple[str, ...]:
    """Resources the node's movable pods hold that are not kube-steer's own gates and pools."""
    return tuple(
        sorted(
            {name for p in pods if p.movable for name in p.held if not name.startswith(own_prefix)}
        )
    )


def scale_down_disabled(annotations: Mapping[str, str]) -> bool:
    return annotations.get(SCALE_DOWN_DISABLED, "").lower() == "true"
