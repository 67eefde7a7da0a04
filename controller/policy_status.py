"""The SteeringPolicy's `status.admissionPolicies`, written by the controller's leader: whether
the admission policies on the apiserver are those compiled from the running policy.

A field of its own, not a condition beside the scorer's: the scorer writes `status` with merge
patches whose `conditions` list replaces the whole list, so a second writer's condition there
would be dropped by the scorer's next write. A merge patch naming only `admissionPolicies`
touches nothing else, and the scorer's never names it: each field has one writer.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

from steer.adapters.kubejson import MERGE_PATCH, KubeApiError, KubeJson
from steer.adapters.periodic import Periodic
from steer.adapters.policy_resource import PolicyResourceWatcher, object_path

log = logging.getLogger(__name__)

FIELD = "admissionPolicies"
TYPE = "AdmissionPolicies"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def admission_status(
    told: tuple[str, str, str], generation: int, before: Mapping[str, Any], now: str
) -> dict[str, Any]:
    """The field's value: metav1.Condition's shape, its transition time moved only when the
    status flips."""
    status, reason, message = told
    same = before.get("status") == status and before.get("lastTransitionTime")
    return {
        "type": TYPE,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": str(before["lastTransitionTime"]) if same else now,
    }


class AdmissionStatusWriter:
    """One merge patch of `/status` per new outcome (or new leadership), retried every
    `retry_s` while it fails."""

    def __init__(
        self,
        kube: KubeJson,
        watcher: PolicyResourceWatcher,
        outcome: Callable[[], tuple[str, str, str] | None],
        *,
        is_leader: Callable[[], bool] = lambda: True,
        retry_s: float = 10.0,
    ) -> None:
        self.kube = kube
        self.watcher = watcher
        self.outcome = outcome
        self.is_leader = is_leader
        self.writes = 0
        self._written: tuple[Any, ...] | None = None
        self._lock = threading.Lock()
        self._retry = Periodic("admission-status", retry_s, self.sync, at_once=True)

    def on_leadership(self, _leading: bool) -> None:
        self.sync()

    def sync(self) -> bool:
        """Write the field if it changed and this replica leads; True when written."""
        with self._lock:
            if not self.is_leader():
                self._written = None
                return False
            told = self.outcome()
            verdict = self.watcher.verdict
            if told is None or verdict.absent is not None:
                return False
            key = (told, verdict.generation)
            if key == self._written:
                return False
            before = (self.watcher.object_status or {}).get(FIELD) or {}
            body = {"status": {FIELD: admission_status(told, verdict.generation, before, _now())}}
            try:
                self.kube.request(
                    "PATCH",
                    f"{object_path(self.watcher.name)}/status",
                    body=body,
                    content_type=MERGE_PATCH,
                )
            except KubeApiError as exc:
                log.warning("SteeringPolicy %s: %s not written: %s", self.watcher.name, FIELD, exc)
                return False
            self._written = key
            self.writes += 1
            return True

    def start(self) -> None:
        self._retry.start()

    def stop(self) -> None:
        self._retry.stop(timeout_s=5)
