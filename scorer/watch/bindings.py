"""Between cycles: what the scheduler has bound since, from one watch of bound pods.

- Anti-herding. Labels change at most once per cycle, so a burst of pods created right after
  a cycle would all rank the same node first. The scorer lowers the composite score of a node
  by `hotPenaltyPerPod` per pod bound to it within `hotWindowSeconds` (`BindingWindow`).
- Budget pools. Every bound pod goes into the `PodLedger` (scorer/watch/ledger.py), from which the
  pools' capacities follow; a pod that lands, ends or leaves moves them.

In both cases the loop rewrites the nodes from memory as soon as the watch reports a change.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import Any, ClassVar

from kubernetes import client

from scorer.model import binding_time
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import BOUND_PODS, PODS_PATH
from steer.adapters.listwatch import ListWatcher

log = logging.getLogger(__name__)


class BindingWindow:
    """Binding times per node; thread-safe. Each pod counts once (by uid)."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self._lock = threading.Lock()
        self._clock = clock
        self._events: deque[tuple[float, str]] = deque()
        self._seen: dict[str, float] = {}
        self.generation = 0  # bumps on every new binding, so the loop knows when to recompute

    def record(self, node: str, at: float | None = None, uid: str | None = None) -> bool:
        """Note a pod bound to `node` at `at` (default now). False if that pod was seen already."""
        when = self._clock() if at is None else at
        with self._lock:
            if uid is not None:
                if uid in self._seen:
                    return False
                self._seen[uid] = when
            self._events.append((when, node))
            self.generation += 1
            return True

    def counts(self, window_s: float, now: float | None = None) -> dict[str, int]:
        """Pods bound per node within the last `window_s` seconds (older entries are dropped)."""
        moment = self._clock() if now is None else now
        out: dict[str, int] = {}
        with self._lock:
            while self._events and moment - self._events[0][0] > window_s:
                self._events.popleft()
            for when, node in self._events:
                if moment - when <= window_s:
                    out[node] = out.get(node, 0) + 1
            horizon = moment - max(window_s, 60.0) * 10
            self._seen = {u: t for u, t in self._seen.items() if t >= horizon}
        return out


class PodBindingWatcher(ListWatcher):
    """Feeds a `BindingWindow` and, when given, a `PodLedger` from bound pods
    (`fieldSelector=spec.nodeName!=`), by list + watch (`steer.adapters.listwatch`); until a list
    completes the ledger is not synced.

    The list replays every bound pod into the window; those count only if their PodScheduled
    time falls in the window. Pods seen later count at their binding time, or now.
    `on_binding` runs after each list or event that counted a recent binding or changed the
    pods of a node.
    """

    path = PODS_PATH
    query: ClassVar[Mapping[str, str]] = {"fieldSelector": BOUND_PODS}
    thread_name = "pod-bindings"
    # The ledger's pools must never be published from a stream it cannot prove complete: a
    # resumed watch says nothing when it has caught up, so a failed watch costs one list.
    resume_after_failure = False

    def __init__(
        self,
        api_client: client.ApiClient,
        window: BindingWindow,
        *,
        window_s: Callable[[], float],
        on_binding: Callable[[], None] | None = None,
        ledger: PodLedger | None = None,
        timeout_s: int = 300,
        page_size: int = 500,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
    ) -> None:
        super().__init__(
            api_client,
            timeout_s=timeout_s,
            page_size=page_size,
            backoff_s=backoff_s,
            max_backoff_s=max_backoff_s,
        )
        self.window = window
        self.window_s = window_s
        self.on_binding = on_binding
        self.ledger = ledger

    def before_start(self) -> None:
        if self.ledger is not None and not self.ledger.synced:
            self.ledger.listing = True  # a first cycle now waits for this list

    def handle(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Apply one watch event; True when it counted a recent binding or changed the pods
        of a node."""
        moved = bool(self.ledger.apply(event_type, pod)) if self.ledger is not None else False
        return self._count(event_type, pod) or moved

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        if self.handle(kind, obj) and self.on_binding is not None:
            self.on_binding()

    def on_restart(self) -> None:
        if self.ledger is not None:
            self.ledger.desync()

    def _count(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Record a binding in the window; True when it is a new one within the window."""
        if event_type not in ("ADDED", "MODIFIED"):
            return False
        node = (pod.get("spec") or {}).get("nodeName")
        uid = (pod.get("metadata") or {}).get("uid")
        if not node or not uid:
            return False
        now = time.time()
        at = binding_time(pod) or now
        # Old bindings are still recorded (by uid) so a later MODIFIED event does not count them.
        return self.window.record(node, at, uid) and now - at <= self.window_s()

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        """Every bound pod, page by page: refill the ledger (synced afterwards) and the
        window. Only the reduced entries are kept, so memory follows the ledger, not the
        pods' JSON."""
        counted = False
        seen = 0

        def each(pod: Mapping[str, Any]) -> None:
            nonlocal counted, seen
            seen += 1
            counted = self._count("ADDED", pod) or counted

        moved = False
        if self.ledger is not None:
            before = self.ledger.generation
            self.ledger.listing = True
            try:
                self.ledger.replace(items, each)
            finally:
                self.ledger.listing = False
            moved = self.ledger.generation != before  # pods changed, or synced just now
        else:
            for pod in items:
                each(pod)
        log.info("pod list: %d bound pods", seen)
        if (counted or moved) and self.on_binding is not None:
            self.on_binding()
