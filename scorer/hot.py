"""Anti-herding between cycles: how many pods each node received in the last window.

Labels change at most once per cycle, so a burst of pods created right after a cycle would all
rank the same node first. The scorer watches pods (`spec.nodeName` set) and lowers the
composite score of a node by `hotPenaltyPerPod` per pod bound to it within
`hotWindowSeconds`; the loop rewrites the composites from memory as soon as bindings arrive.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from kubernetes import client, watch

from scorer.model import parse_rfc3339

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


def binding_time(pod: Mapping[str, Any]) -> float | None:
    """When the scheduler bound the pod: its PodScheduled condition's transition time."""
    for cond in (pod.get("status") or {}).get("conditions") or ():
        if cond.get("type") == "PodScheduled" and cond.get("status") == "True":
            return parse_rfc3339(str(cond.get("lastTransitionTime") or ""))
    return None


class PodBindingWatcher:
    """Feeds a `BindingWindow` from a watch of bound pods (`fieldSelector=spec.nodeName!=`).

    The watch's initial list replays every bound pod; those count only if their PodScheduled
    time falls in the window. Pods seen later count at their binding time, or now.
    """

    def __init__(
        self,
        api_client: client.ApiClient,
        window: BindingWindow,
        *,
        window_s: Callable[[], float],
        on_binding: Callable[[], None] | None = None,
        timeout_s: int = 300,
    ) -> None:
        self.core = client.CoreV1Api(api_client)
        self.window = window
        self.window_s = window_s
        self.on_binding = on_binding
        self.timeout_s = timeout_s
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: watch.Watch | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="pod-bindings", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._watch is not None:
            self._watch.stop()
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def handle(self, event_type: str, pod: Mapping[str, Any]) -> bool:
        """Apply one watch event; True when it recorded a new binding."""
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

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            self._watch = watch.Watch()
            try:
                for event in self._watch.stream(
                    self.core.list_pod_for_all_namespaces,
                    field_selector="spec.nodeName!=",
                    timeout_seconds=self.timeout_s,
                ):
                    if self._stop.is_set():
                        break
                    if (
                        self.handle(str(event.get("type")), event.get("raw_object") or {})
                        and self.on_binding
                    ):
                        self.on_binding()
                backoff = 0.5
            except Exception as exc:  # a dropped watch is normal; re-list and go on
                log.info("pod watch ended (%s); restarting in %.1fs", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 30.0)
