"""The pods the scheduler cannot place, from one watch of unbound pods, and the Events that say
which kube-steer rule keeps a steered one Pending.

`PendingPodWatcher` keeps the unbound pods whose PodScheduled condition is False with reason
Unschedulable and which the webhook steered (their trace, not in audit mode); a pod leaves as
soon as it is bound or deleted. After each cycle the leader explains some of them against the
plan (scorer/explain/blocked.py), the longest waiting first, each at most once a `REJUDGE_S`.
An explanation reads every node (about 80 ms at 5,000 nodes), so a cycle explains
`NODE_VISITS` / nodes pods at most (4 at 5,000 nodes, `MAX_JUDGED` on a small cluster).
`SteeringEvents` writes a Warning Event on each pod a kube-steer rule blocks: one per pod and
message, again after `REPEAT_S` if it still waits, at most `MAX_EVENTS` a cycle.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar

from kubernetes import client

from scorer.cycle.service import Scorer
from scorer.explain.blocked import blocking_message
from scorer.explain.pod import explain_pod
from steer.adapters.kubejson import PODS_PATH, KubeApiError, KubeJson
from steer.adapters.listwatch import ListWatcher
from steer.core.infrastructure import presumed_requester
from steer.core.mutation import read_trace
from steer.core.pod_shape import UninterpretablePod
from steer.core.policy import AUDIT
from steer.core.steering import owned_taint_keys

log = logging.getLogger(__name__)

UNBOUND_PODS = "spec.nodeName="
EVENT_REASON = "BlockedBySteering"
EVENT_COMPONENT = "kube-steer-scorer"
MAX_JUDGED = 50  # pods explained after a cycle, at most
NODE_VISITS = 20_000  # nodes read by the explanations after one cycle, at most
REJUDGE_S = 60.0  # a pod is explained again this long after its last explanation
MAX_EVENTS = 20  # Events written after a cycle
REPEAT_S = 600.0  # the same message again for a pod that still waits
MAX_PENDING = 10_000  # pods kept; beyond, the oldest are dropped (counted, logged)


def _unschedulable_since(pod: Mapping[str, Any]) -> str | None:
    """The PodScheduled=False/Unschedulable condition's time, if the pod has it."""
    for condition in (pod.get("status") or {}).get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            return str(condition.get("lastTransitionTime") or "")
    return None


def _steered(pod: Mapping[str, Any], trace_key: str) -> bool:
    """Whether the webhook steered the pod: it wrote a trace, not in audit mode."""
    trace = read_trace(pod, trace_key)
    return trace is not None and trace.get("mode") != AUDIT


class PendingPods:
    """Unschedulable steered pods by uid, as (since, pod); thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pods: dict[str, tuple[str, dict[str, Any]]] = {}
        self._judged: dict[str, float] = {}  # uid -> when last explained
        self.dropped = 0

    def __len__(self) -> int:
        return len(self._pods)

    def apply(self, event_type: str, pod: Mapping[str, Any], trace_key: str) -> None:
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid:
            return
        since = _unschedulable_since(pod)
        with self._lock:
            if event_type == "DELETED" or since is None or not _steered(pod, trace_key):
                self._pods.pop(uid, None)
                self._judged.pop(uid, None)
                return
            if uid not in self._pods and len(self._pods) >= MAX_PENDING:
                self.dropped += 1  # the longest waiting are kept: they matter most
                return
            kept = {"metadata": pod.get("metadata") or {}, "spec": pod.get("spec") or {}}
            self._pods[uid] = (since, kept)

    def replace(self, pods: Iterable[Mapping[str, Any]], trace_key: str) -> None:
        with self._lock:
            self._pods.clear()
            self._judged.clear()
        for pod in pods:
            self.apply("ADDED", pod, trace_key)

    def uids(self) -> set[str]:
        with self._lock:
            return set(self._pods)

    def due(self, count: int, now: float, every_s: float = REJUDGE_S) -> list[dict[str, Any]]:
        """Up to `count` pods to explain now, the longest waiting first, skipping those
        explained less than `every_s` ago; they count as explained now."""
        with self._lock:
            ordered = sorted(self._pods.items(), key=lambda item: item[1][0])
            chosen = [
                (uid, pod)
                for uid, (_, pod) in ordered
                if now - self._judged.get(uid, float("-inf")) >= every_s
            ][:count]
            for uid, _ in chosen:
                self._judged[uid] = now
        return [pod for _, pod in chosen]


class PendingPodWatcher(ListWatcher):
    """The unbound pods (`spec.nodeName=`), into `PendingPods`."""

    path = PODS_PATH
    query: ClassVar[Mapping[str, str]] = {"fieldSelector": UNBOUND_PODS}
    thread_name = "pending-pods"

    def __init__(
        self,
        api_client: client.ApiClient,
        pending: PendingPods,
        trace_key: Callable[[], str],
        **kwargs: Any,
    ) -> None:
        super().__init__(api_client, **kwargs)
        self.pending = pending
        self.trace_key = trace_key

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        self.pending.replace(items, self.trace_key())

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.pending.apply(kind, obj, self.trace_key())


def _rfc3339(at: float) -> str:
    return datetime.fromtimestamp(at, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class SteeringEvents:
    """Writes the Warning Events on pods a kube-steer rule blocks, deduplicated and limited."""

    def __init__(
        self,
        kube: KubeJson,
        *,
        instance: str,
        clock: Callable[[], float] = time.time,
        repeat_s: float = REPEAT_S,
        max_events: int = MAX_EVENTS,
    ) -> None:
        self.kube = kube
        self.instance = instance
        self.clock = clock
        self.repeat_s = repeat_s
        self.max_events = max_events
        self._sent: dict[str, tuple[str, float]] = {}  # pod uid -> (message, when)
        self.written = 0
        self.failed = 0

    def due(self, uid: str, message: str) -> bool:
        """Whether this pod gets an Event with this message now."""
        sent = self._sent.get(uid)
        return sent is None or sent[0] != message or self.clock() - sent[1] >= self.repeat_s

    def emit(self, blocked: Iterable[tuple[Mapping[str, Any], str]]) -> int:
        """Write an Event for each (pod, message) that is due, up to `max_events`; returns how
        many were written. A failed write is logged and retried at the next cycle."""
        written = 0
        live: set[str] = set()
        for pod, message in blocked:
            metadata = pod.get("metadata") or {}
            uid = str(metadata.get("uid") or "")
            live.add(uid)
            if written >= self.max_events or not self.due(uid, message):
                continue
            try:
                self._write(metadata, message)
            except KubeApiError as exc:
                self.failed += 1
                log.warning(
                    "event for pod %s/%s not written: %s",
                    metadata.get("namespace"),
                    metadata.get("name"),
                    exc,
                )
                continue
            self._sent[uid] = (message, self.clock())
            written += 1
        self.written += written
        return written

    def forget(self, uids: set[str]) -> None:
        """Drop what was sent for pods no longer pending (bound or deleted)."""
        for uid in list(self._sent):
            if uid not in uids:
                del self._sent[uid]

    def _write(self, metadata: Mapping[str, Any], message: str) -> None:
        namespace = str(metadata.get("namespace") or "default")
        name = str(metadata.get("name") or "")
        now = _rfc3339(self.clock())
        event = {
            "apiVersion": "v1",
            "kind": "Event",
            # As kubectl's recorders name theirs: the object's name and a unique suffix.
            "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": namespace,
                "name": name,
                "uid": metadata.get("uid"),
            },
            "reason": EVENT_REASON,
            "message": message,
            "type": "Warning",
            "source": {"component": EVENT_COMPONENT},
            "reportingComponent": EVENT_COMPONENT,
            "reportingInstance": self.instance,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        }
        self.kube.request("POST", f"/api/v1/namespaces/{namespace}/events", body=event)


def report_blocked(scorer: Scorer, pending: PendingPods, events: SteeringEvents) -> int:
    """After a cycle, on the leader: explain the longest-waiting steered pods against the
    plan and write an Event on each one kube-steer's rules block. Returns the Events written.
    Namespaces are read once each per call, for the pods judged only."""
    last = scorer.last
    if last is None or scorer.dry_run or not scorer.is_leader:
        return 0
    policy = scorer.policy
    owned = owned_taint_keys(policy)
    labels: dict[str, dict[str, str] | None] = {}
    blocked: list[tuple[Mapping[str, Any], str]] = []
    count = max(1, min(MAX_JUDGED, NODE_VISITS // max(1, len(last.nodes))))
    # The DRA snapshot, to classify claim pods as the webhook did.
    devices = scorer.inventory() if scorer.devices is not None else None
    for pod in pending.due(count, time.time()):
        namespace = str((pod.get("metadata") or {}).get("namespace") or "")
        if namespace not in labels:
            try:
                labels[namespace] = scorer.node_api.namespace_labels(namespace)
            except KubeApiError as exc:
                log.warning("namespace %s not read: %s", namespace, exc)
                labels[namespace] = None
        ns_labels = labels[namespace]
        if ns_labels is None:
            continue
        try:
            explained = explain_pod(
                policy,
                last.plan,
                last.nodes,
                pod,
                ns_labels,
                namespace,
                devices=devices,
                user_info=presumed_requester(policy, pod),  # as it was admitted
            )
        except UninterpretablePod:
            continue
        message = blocking_message(explained, owned)
        if message is not None:
            blocked.append((pod, message))
    events.forget(pending.uids())
    before = events.failed
    written = events.emit(blocked)
    scorer.metrics.blocked_events.labels("written").inc(written)
    scorer.metrics.blocked_events.labels("failed").inc(events.failed - before)
    return written
