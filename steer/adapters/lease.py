"""Leader election on a coordination.k8s.io/v1 Lease, so two replicas of a service (the scorer,
the controller) never both write.

The algorithm is client-go's: a candidate takes the Lease when it is free or its holder has
not renewed it for `leaseDurationSeconds` *as measured on the candidate's own clock* (it
notes when it last saw the record change, so clocks need not agree); every write of the
Lease carries its resourceVersion, so of two candidates racing for it one gets a 409. A
leader that cannot renew within `renew_deadline_s` stops calling itself leader before any
other replica may take over (`renew_deadline_s < lease_duration_s`).

A term is counted from when the round that won it *began* (before its GET), not from when its
answer arrived: a replica frozen (SIGSTOP, a paused VM) with a renewal in flight hears "renewed"
only once thawed, long after another replica may have taken over, and counting from that moment
let it write for another `renew_deadline_s` beside the new leader (tests/faults/
test_leader_failover.py: before this, a leader thawed after 21 s wrote three nodes the new
leader had just written).
"""

from __future__ import annotations

import argparse
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.periodic import Periodic

log = logging.getLogger(__name__)

DEFAULT_LEASE_NAME = "steer-scorer"  # the name manifests/scorer/scorer.yaml grants get/update on


def add_lease_flags(parser: argparse.ArgumentParser, default_name: str) -> None:
    """The flags of a leader-elected service's Lease, `default_name` its Lease's name."""
    parser.add_argument(
        "--lease-namespace",
        help="namespace of the leader-election Lease (default: $POD_NAMESPACE, else the "
        "policy's projectNamespace)",
    )
    parser.add_argument(
        "--lease-name", default=default_name, help=f"Lease name (default: {default_name})"
    )
    parser.add_argument(
        "--identity",
        help="this replica's identity in the Lease (default: hostname + random suffix)",
    )
    parser.add_argument(
        "--no-leader-election",
        action="store_true",
        help="write without a Lease (only ever run one replica then)",
    )


@dataclass(frozen=True)
class LeaseSettings:
    """A service's Lease as its flags set it (`add_lease_flags`); `namespace` None: the pod's
    namespace ($POD_NAMESPACE), else the policy's projectNamespace."""

    name: str
    namespace: str | None = None
    identity: str | None = None
    election: bool = True

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LeaseSettings:
        return cls(
            name=args.lease_name,
            namespace=args.lease_namespace,
            identity=args.identity,
            election=not args.no_leader_election,
        )

    def namespace_in(self, project_namespace: str) -> str:
        """The Lease's namespace: the flag's, else the pod's, else the policy's project one."""
        return self.namespace or os.environ.get("POD_NAMESPACE") or project_namespace

    def elector(self, kube: KubeJson, project_namespace: str) -> LeaseElector | None:
        """The election these settings ask for, not started; None without one."""
        if not self.election:
            return None
        namespace = self.namespace_in(project_namespace)
        return LeaseElector(kube, namespace=namespace, name=self.name, identity=self.identity)


def lease_path(namespace: str, name: str = "") -> str:
    base = f"/apis/coordination.k8s.io/v1/namespaces/{quote(namespace, safe='')}/leases"
    return f"{base}/{quote(name, safe='')}" if name else base


def _micro_time(ts: float) -> str:
    """A Lease's MicroTime: RFC 3339 with exactly six fractional digits."""
    return datetime.fromtimestamp(ts, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def default_identity() -> str:
    """Pod name (the hostname in a pod) plus a random suffix: a restarted pod is a new candidate."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}-{uuid.uuid4().hex[:6]}"


class LeaseElector:
    def __init__(
        self,
        kube: KubeJson,
        *,
        namespace: str,
        name: str = DEFAULT_LEASE_NAME,
        identity: str | None = None,
        lease_duration_s: float = 15.0,
        renew_deadline_s: float = 10.0,
        retry_period_s: float = 2.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not retry_period_s < renew_deadline_s < lease_duration_s:
            raise ValueError(
                "leader election: need retry_period_s < renew_deadline_s < lease_duration_s, got "
                f"{retry_period_s} / {renew_deadline_s} / {lease_duration_s}"
            )
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity or default_identity()
        self.lease_duration_s = lease_duration_s
        self.renew_deadline_s = renew_deadline_s
        self.retry_period_s = retry_period_s
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._renewed_at: float | None = None  # our clock, last successful acquire/renew
        self._told = False  # what the listeners (and the log) last heard
        self._observed: tuple[str, str] | None = None  # (holder, renewTime) last seen
        self._observed_at = 0.0
        self.holder: str | None = None
        self.transitions = 0
        # The election thread survives anything a round throws (logged by Periodic).
        self._rounds = Periodic("lease-election", retry_period_s, self.try_acquire_or_renew)
        self._listeners: list[Callable[[bool], None]] = []

    # ---------------------------------------------------------------- state

    @property
    def is_leader(self) -> bool:
        with self._lock:
            return (
                self._renewed_at is not None
                and self._clock() - self._renewed_at < self.renew_deadline_s
            )

    def on_change(self, listener: Callable[[bool], None]) -> None:
        self._listeners.append(listener)

    def _set_leader(self, renewed: bool, asked_at: float | None = None) -> None:
        with self._lock:
            if renewed:
                self._renewed_at = self._clock() if asked_at is None else asked_at
            elif (
                self._renewed_at is not None
                and self._clock() - self._renewed_at >= self.renew_deadline_s
            ):
                self._renewed_at = None
        self._tell()

    def _lost(self) -> None:
        with self._lock:
            self._renewed_at = None
        self._tell()

    def _tell(self) -> None:
        """Log a change and tell the listeners, measured against what they last heard: a
        leadership that lapsed by the clock between two rounds (renewals failing past the
        deadline) is a change too, though no round saw it end."""
        leading = self.is_leader
        with self._lock:
            if leading == self._told:
                return
            self._told = leading
        log.info(
            "leader election %s/%s: %s %s",
            self.namespace,
            self.name,
            self.identity,
            "became leader" if leading else "lost leadership",
        )
        for listener in self._listeners:
            listener(leading)

    # ---------------------------------------------------------------- one step

    def try_acquire_or_renew(self) -> bool:
        """One round of the election; True when this candidate holds the Lease afterwards."""
        path = lease_path(self.namespace, self.name)
        now_wall = self._wall()
        asked_at = self._clock()  # the term a win gives is counted from here
        try:
            lease = self.kube.request("GET", path)
        except KubeApiError as exc:
            if exc.status != 404:
                log.warning(
                    "leader election: cannot read Lease %s/%s: %s", self.namespace, self.name, exc
                )
                self._set_leader(False)
                return self.is_leader
            return self._create(now_wall, asked_at)
        spec: dict[str, Any] = dict(lease.get("spec") or {})
        holder = str(spec.get("holderIdentity") or "")
        record = (holder, str(spec.get("renewTime") or ""))
        if record != self._observed:
            self._observed, self._observed_at = record, self._clock()
        self.holder = holder or None
        duration = float(spec.get("leaseDurationSeconds") or self.lease_duration_s)
        if holder and holder != self.identity and self._clock() - self._observed_at < duration:
            self._lost()
            return False
        if holder != self.identity:
            spec["acquireTime"] = _micro_time(now_wall)
            spec["leaseTransitions"] = int(spec.get("leaseTransitions") or 0) + (1 if holder else 0)
        spec.update(
            holderIdentity=self.identity,
            leaseDurationSeconds=round(self.lease_duration_s),
            renewTime=_micro_time(now_wall),
        )
        lease["spec"] = spec
        try:
            updated = self.kube.request("PUT", path, body=lease)
        except KubeApiError as exc:
            if exc.conflict:
                log.info(
                    "leader election: another candidate updated Lease %s/%s first",
                    self.namespace,
                    self.name,
                )
                self._lost()
                return False
            log.warning(
                "leader election: cannot update Lease %s/%s: %s", self.namespace, self.name, exc
            )
            self._set_leader(False)
            return self.is_leader
        self._accept(updated, asked_at)
        return True

    def _create(self, now_wall: float, asked_at: float) -> bool:
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": {
                "holderIdentity": self.identity,
                "leaseDurationSeconds": round(self.lease_duration_s),
                "acquireTime": _micro_time(now_wall),
                "renewTime": _micro_time(now_wall),
                "leaseTransitions": 0,
            },
        }
        try:
            created = self.kube.request("POST", lease_path(self.namespace), body=body)
        except KubeApiError as exc:
            if exc.status != 409:
                log.warning(
                    "leader election: cannot create Lease %s/%s: %s", self.namespace, self.name, exc
                )
            self._lost()
            return False
        self._accept(created, asked_at)
        return True

    def _accept(self, lease: dict[str, Any], asked_at: float) -> None:
        spec = lease.get("spec") or {}
        self._observed = (str(spec.get("holderIdentity") or ""), str(spec.get("renewTime") or ""))
        self._observed_at = self._clock()
        self.holder = self.identity
        self.transitions = int(spec.get("leaseTransitions") or 0)
        self._set_leader(True, asked_at)

    def release(self) -> None:
        """Give the Lease up on shutdown so another replica takes over without waiting it out."""
        if not self.is_leader:
            return
        path = lease_path(self.namespace, self.name)
        try:
            lease = self.kube.request("GET", path)
            spec = dict(lease.get("spec") or {})
            if spec.get("holderIdentity") == self.identity:
                spec.update(
                    holderIdentity="", leaseDurationSeconds=1, renewTime=_micro_time(self._wall())
                )
                lease["spec"] = spec
                self.kube.request("PUT", path, body=lease)
        except KubeApiError as exc:
            log.warning(
                "leader election: could not release Lease %s/%s: %s", self.namespace, self.name, exc
            )
        self._lost()

    # ------------------------------------------------------------ background

    def start(self, *, round_first: bool = False) -> None:
        """Renew in the background; `round_first`: one round now, so a lone replica leads
        from the start (its first cycle or job writes)."""
        if round_first:
            self.try_acquire_or_renew()
        self._rounds.start()

    def stop(self, *, release: bool = True) -> None:
        self._rounds.stop()
        if release:
            self.release()
