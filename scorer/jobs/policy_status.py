"""The SteeringPolicy's status, written by the scorer's leader: `Accepted` True with the
version it runs, or False with every problem by its field path and the version it keeps
running (steer/core/policy/crd.py builds the body).

One merge patch of `/status` per new verdict (or a new leadership), never per cycle: what was
written last is remembered, and a write that fails is tried again every `retry_s`. The
webhook's replicas do not write it: each serves the policy it holds on its own `/status`, and
both read the same object through the same parser, so they run the version written here once
their watch has seen it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.periodic import Periodic
from steer.adapters.policy_resource import PolicyResourceWatcher, Verdict, object_path
from steer.core.datacheck import DataProblem
from steer.core.policy import Policy, PolicyError
from steer.core.policy.crd import (
    DimensionForms,
    accepted_status,
    previous_condition,
    rejected_status,
)

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


class PolicyStatusWriter:
    def __init__(
        self,
        kube: KubeJson,
        watcher: PolicyResourceWatcher,
        *,
        is_leader: Callable[[], bool] = lambda: True,
        retry_s: float = 10.0,
        data: Callable[[], Sequence[DataProblem] | None] = lambda: None,
        forms: Callable[[], Sequence[DimensionForms]] = lambda: (),
    ) -> None:
        """`data`: what the last cycle found the dimensions' data lacks (None before the first
        cycle), written as the `DataReady` condition; `sync` after each cycle writes it when
        the set of problems (dimension, kind) changes, not when only their figures move.
        `forms`: the exporter forms each dimension's last reading found, named by a True
        condition; a form that appears or goes rewrites it, a node count that moves does not.
        `status.admissionPolicies` is the controller's (controller/policy_status.py): these
        merge patches never name it, so they never overwrite it."""
        self.kube = kube
        self.watcher = watcher
        self.is_leader = is_leader
        self.data = data
        self.forms = forms
        self._written: tuple[Any, ...] | None = None
        self._lock = threading.Lock()
        self.writes = 0
        self.last_error: str | None = None
        self._retry = Periodic("policy-status", retry_s, self.sync, at_once=True)
        watcher.on_verdict(self._on_change)

    def _on_change(self, _what: object) -> None:
        self.sync()

    def on_leadership(self, _leading: bool) -> None:
        self.sync()

    def desired(self, verdict: Verdict) -> dict[str, Any] | None:
        """The status for `verdict`; None when there is no object to write it on."""
        if verdict.absent is not None:
            return None
        policy = self.watcher.current
        before = self.watcher.object_status
        data = self.data()
        return self._policy_status(verdict, policy, before, data, self.forms())

    def _policy_status(
        self,
        verdict: Verdict,
        policy: Policy,
        before: Mapping[str, Any] | None,
        data: Sequence[DataProblem] | None,
        forms: Sequence[DimensionForms] = (),
    ) -> dict[str, Any]:
        if verdict.accepted:
            return accepted_status(
                generation=verdict.generation,
                version=policy.version,
                digest=policy.digest,
                mode=policy.spec.mode,
                now=_now(),
                before=before,
                data=data,
                forms=forms,
            )
        running = {
            "version": policy.version,
            "digest": policy.digest,
            "generation": self.watcher.running_generation,
            "mode": policy.spec.mode,
        }
        return rejected_status(
            generation=verdict.generation,
            issues=verdict.issues,
            running=running,
            now=_now(),
            before=before,
            data=data,
            forms=forms,
        )

    def sync(self) -> bool:
        """Write the status if it changed and this replica leads; True when written."""
        with self._lock:
            if not self.is_leader():
                self._written = None  # a leader again writes at once: another may have
                return False
            verdict = self.watcher.verdict
            key = (
                verdict,
                self.watcher.current.digest,
                _data_key(self.data()),
                tuple((d, tuple(f)) for d, f in self.forms()),
            )
            if key == self._written:
                return False
            body = self.desired(verdict)
            if body is None:
                return False
            try:
                self.kube.request(
                    "PATCH",
                    f"{object_path(self.watcher.name)}/status",
                    body={"status": body},
                    content_type=MERGE_PATCH,
                )
            except KubeApiError as exc:
                self.last_error = str(exc)
                log.warning("SteeringPolicy %s: status not written: %s", self.watcher.name, exc)
                return False
            self._written = key
            self.writes += 1
            self.last_error = None
            state = "accepted" if verdict.accepted else f"rejected ({len(verdict.issues)})"
            log.info(
                "SteeringPolicy %s generation %d %s; status written",
                self.watcher.name,
                verdict.generation,
                state,
            )
            return True

    def start(self) -> None:
        self._retry.start()

    def stop(self) -> None:
        self._retry.stop(timeout_s=5)


def _data_key(problems: Sequence[DataProblem] | None) -> tuple[object, ...] | None:
    if problems is None:
        return None
    return tuple(sorted((p.dimension, str(p.kind), p.blocking) for p in problems))


def report_rejected_at_start(kube: KubeJson, name: str, error: PolicyError) -> None:
    """A scorer that cannot start because the object's spec is invalid says so in its status
    (once: not again if it already reports that generation rejected), so a crash-looping
    replica's reason is on `kubectl get steeringpolicies`. `scorer` keeps what it said: the
    replicas still running that policy, if any, run it."""
    try:
        obj = kube.request("GET", object_path(name))
    except KubeApiError:
        return  # no object (the error says so), or no apiserver: nothing to write on
    generation = int((obj.get("metadata") or {}).get("generation") or 0)
    before = obj.get("status") or {}
    told = previous_condition(before)
    if told.get("status") == "False" and told.get("observedGeneration") == generation:
        return
    body = rejected_status(
        generation=generation, issues=error.issues, running=None, now=_now(), before=before
    )
    try:
        kube.request(
            "PATCH", f"{object_path(name)}/status", body={"status": body}, content_type=MERGE_PATCH
        )
    except KubeApiError as exc:
        log.warning("SteeringPolicy %s: status not written: %s", name, exc)
