"""`steer controller run --admission-policies=validating|all`: the controller's leader keeps the
admission policies compiled from the running policy (steer/core/admission_policy) on the
apiserver, so a policy edit reaches them without a `steer policy admission-policy | kubectl
apply` step. Their bindings, which decide what they apply to, are the install's
(controller/admission_plan.py says why).

Every replica reads the objects (a GET each) at start, on each accepted policy version, on a
change of leadership and every `--admission-policies-interval` seconds; only the Lease holder
writes, and says what it found in its metrics and, with `--policy-resource`, in the
SteeringPolicy's `status.admissionPolicies`. What to write is decided in
controller/admission_plan.py: an object whose digest annotation differs from the compiled
one's (or that is missing) is applied, an unchanged one is not written.

Writes are server-side apply as the field manager `kube-steer`, with `force=true`: the objects
are the project's by name, and an earlier `kubectl apply` (or a hand edit) owns fields the
next version changes; without force the apply would conflict on them and the apiserver would
keep enforcing a version nobody runs. Every object to write is first applied with
`dryRun=All`: a version the apiserver refuses (CEL it does not compile) writes nothing, so the
objects of the previous version keep serving together, and that version is not tried again
until the policy changes or another replica leads; the refusal is logged and counted, and
`/explain` says so. Other failures (unreachable, forbidden, throttled) are retried with a
backoff of 1 s doubling to the interval, on the job's own thread (steer.adapters.periodic, woken
by each of those events).

`validating` writes no MutatingAdmissionPolicy and reads none (a webhook-only install grants
nothing about them); a `steer-mutation` left from an earlier `all` is inert once the install's
binding is gone (docs/install.md, "Which admission mode"). `off` (the default of a controller
run by hand) touches no admission object.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from controller.admission_plan import (
    FIELD_MANAGER,
    AdmissionRef,
    Scope,
    WantedObject,
    live_version,
    plan_sync,
    wanted_objects,
)
from controller.metrics import ControllerMetrics
from steer.adapters.kubejson import KubeApiError, KubeJson
from steer.adapters.periodic import Periodic
from steer.core.policy import Policy

log = logging.getLogger(__name__)

APPLY_PATCH = "application/apply-patch+yaml"
DEFAULT_INTERVAL_S = 60.0
FIRST_BACKOFF_S = 1.0  # a failed run is tried again after this, doubling up to the interval
# The apiserver's answers to an object it will not store: its CEL does not compile (422
# Invalid) or the body is malformed (400). Trying the same object again gives the same answer.
REFUSED = (400, 422)


@dataclass(frozen=True)
class AdmissionSyncSettings:
    scope: Scope
    interval_s: float = DEFAULT_INTERVAL_S


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group(
        "the admission policies",
        "The leader applies the admission policies compiled from the running policy (what "
        "`steer policy admission-policy` prints) on each accepted policy version, by "
        "server-side apply as the field manager kube-steer; a version the apiserver refuses "
        "leaves the previous objects in place (docs/policy.md, Admission policies).",
    )
    group.add_argument(
        "--admission-policies",
        choices=("off", "validating", "all"),
        default="off",
        help="validating: the ValidatingAdmissionPolicies steer-security and steer-budget; "
        "all: those and the MutatingAdmissionPolicy steer-mutation (Kubernetes >= 1.36); "
        "off (default): none written. Their bindings are the install's",
    )
    group.add_argument(
        "--admission-policies-interval",
        type=float,
        default=DEFAULT_INTERVAL_S,
        metavar="SECONDS",
        help="how often each replica reads the objects (the leader puts back one changed or "
        f"deleted by hand; default: {DEFAULT_INTERVAL_S:g})",
    )


def settings_from(args: argparse.Namespace) -> AdmissionSyncSettings | None:
    """The settings, None with --admission-policies=off; ValueError naming a wrong flag."""
    if args.admission_policies == "off":
        return None
    if not args.admission_policies_interval > 0:
        raise ValueError(
            "--admission-policies-interval: must be more than 0 seconds, got "
            f"{args.admission_policies_interval:g}"
        )
    scope: Scope = "all" if args.admission_policies == "all" else "validating"
    return AdmissionSyncSettings(scope, args.admission_policies_interval)


@dataclass(frozen=True)
class AdmissionStatus:
    """What the controller found of the admission policies (as this replica last read them)."""

    scope: Scope
    version: str | None  # the version the live objects were compiled from, None: not one
    current: bool  # every object is the one compiled from the running policy
    refused: str | None = None  # the running version, when the apiserver refused it
    last_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "scope": self.scope,
            "version": self.version,
            "current": self.current,
            "refusedVersion": self.refused,
            "lastError": self.last_error,
        }

    def condition(self) -> tuple[str, str, str]:
        """(status, reason, message) of the SteeringPolicy's `status.admissionPolicies`."""
        if self.refused is not None:
            kept = self.version or "the objects in place"
            return (
                "False",
                "Refused",
                f"the apiserver refuses the admission policies of {self.refused} ({self.scope}); "
                f"those of {kept} keep serving: {self.last_error}",
            )
        if self.current:
            return (
                "True",
                "Applied",
                f"the admission policies ({self.scope}) on the apiserver are compiled from "
                f"{self.version}",
            )
        why = f": {self.last_error}" if self.last_error else ""
        return "False", "NotApplied", f"the admission policies ({self.scope}) are not current{why}"


class _Failed(Exception):
    """A run that did not finish: retried after the backoff."""


class _Refused(Exception):
    """The apiserver will not store this object (400/422)."""


class AdmissionPolicySync:
    def __init__(
        self,
        kube: KubeJson,
        policy: Callable[[], Policy],
        metrics: ControllerMetrics,
        settings: AdmissionSyncSettings,
        *,
        is_leader: Callable[[], bool],
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.kube = kube
        self.policy = policy
        self.metrics = metrics
        self.settings = settings
        self.is_leader = is_leader
        self._wall = wall
        self._periodic = Periodic(
            "admission-policies", settings.interval_s, self.run_once, retry_s=FIRST_BACKOFF_S
        )
        self._lock = threading.Lock()
        self._refused: tuple[str, ...] | None = None  # digests of the set the apiserver refused
        self._refused_version: str | None = None
        self._leading = False
        self._version_label: str | None = None  # the admission_version series exported
        self.writes = 0
        self._ran = False  # a run has ended (its outcome is in the status)
        self._told: tuple[str, str, str] | None = None
        self._listeners: list[Callable[[], object]] = []
        self._status = AdmissionStatus(settings.scope, None, False)

    # ---------------------------------------------------------------- what others see

    def status(self) -> AdmissionStatus:
        with self._lock:
            return self._status

    def condition(self) -> tuple[str, str, str] | None:
        """The SteeringPolicy's `status.admissionPolicies`; None before the first run."""
        if not self._ran:
            return None
        return self.status().condition()

    def wake(self, _why: object = None) -> None:
        """Run now (a new policy version, a change of leadership)."""
        self._periodic.wake()

    # ---------------------------------------------------------------- one run

    def run_once(self) -> bool:
        """Read, and when leading write, once; False when it must be tried again soon (a
        refused version is not: it is tried again when the policy or the leader changes)."""
        try:
            self._run()
        except _Failed as exc:
            self._set_status(last_error=str(exc))
            return False
        except Exception as exc:  # say what broke; the next run is the backoff's
            log.exception("admission policies: run failed")
            self._set_status(last_error=f"{type(exc).__name__}: {exc}")
            return False
        finally:
            self._ran = True
            self._tell()
        return True

    def on_change(self, listener: Callable[[], object]) -> None:
        """Call `listener()` after a run whose outcome (`condition`) differs from the last."""
        self._listeners.append(listener)

    def _tell(self) -> None:
        told = self.condition()
        if told == self._told:
            return
        self._told = told
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                log.exception("admission policies: a listener failed")

    def _run(self) -> None:
        policy = self.policy()
        scope = self.settings.scope
        wanted = wanted_objects(policy, scope)
        live = self._read([w.ref for w in wanted])
        plan = plan_sync(policy, wanted, live)
        leading = self.is_leader()
        if leading and not self._leading:
            self._refused = None  # a new leader tries a refused version once more
        self._leading = leading
        version = live_version(policy, wanted, live)
        if not leading:
            self._clear_leader_metrics()
            self._publish(version, current=not plan.apply)
            return
        digests = tuple(w.digest for w in wanted)
        if plan.apply and self._refused == digests:
            self._publish(version, current=False, error=self.status().last_error)
            return
        if plan.apply:
            refusals = self._dry_run(plan.apply)
            if refusals:
                self._refused, self._refused_version = digests, policy.version
                log.error(
                    "admission policies: the apiserver refuses those of %s; %s keep serving:\n  %s",
                    policy.version,
                    version or "the objects in place",
                    "\n  ".join(refusals),
                )
                self._publish(version, current=False, error="; ".join(refusals))
                return
            for obj in plan.apply:
                self._apply(obj, dry_run=False)
                self.writes += 1
            log.info(
                "admission policies: applied %s for %s",
                ", ".join(str(o.ref) for o in plan.apply),
                policy.version,
            )
            version = policy.version
        self._refused = None
        self.metrics.admission_applied.labels(scope=scope).set(self._wall())
        self._publish(version, current=True)

    def _read(self, refs: list[AdmissionRef]) -> dict[AdmissionRef, Mapping[str, Any] | None]:
        live: dict[AdmissionRef, Mapping[str, Any] | None] = {}
        for ref in refs:
            try:
                live[ref] = self.kube.request("GET", ref.path)
            except KubeApiError as exc:
                if exc.status != 404:
                    raise _Failed(f"{ref} not read: {exc}") from exc
                live[ref] = None
        return live

    def _dry_run(self, objects: tuple[WantedObject, ...]) -> list[str]:
        """Every object through the apiserver's validation before any is written: what it
        refuses (`_Failed` when it could not say)."""
        refusals = []
        for obj in objects:
            try:
                self._apply(obj, dry_run=True)
            except _Refused as exc:
                refusals.append(str(exc))
        return refusals

    def _apply(self, obj: WantedObject, *, dry_run: bool) -> None:
        query: dict[str, str | int] = {"fieldManager": FIELD_MANAGER, "force": "true"}
        if dry_run:
            query["dryRun"] = "All"
        try:
            self.kube.request(
                "PATCH", obj.ref.path, query=query, body=obj.body, content_type=APPLY_PATCH
            )
        except KubeApiError as exc:
            self.metrics.admission_apply_failures.labels(object=str(obj.ref)).inc()
            if exc.status in REFUSED:
                raise _Refused(f"{obj.ref}: {exc.message or exc}") from exc
            log.warning("admission policies: %s not applied: %s", obj.ref, exc)
            raise _Failed(f"{obj.ref} not applied: {exc}") from exc

    # ---------------------------------------------------------------- reporting

    def _publish(self, version: str | None, *, current: bool, error: str | None = None) -> None:
        refused = self._refused_version if self._refused is not None else None
        self._set_status(version=version, current=current, refused=refused, last_error=error)
        if not self._leading:
            return
        m, scope = self.metrics, self.settings.scope
        m.admission_current.labels(scope=scope).set(1 if current else 0)
        m.admission_refused.labels(scope=scope).set(1 if refused else 0)
        label = version or ""
        if label != self._version_label:
            m.admission_version.clear()
            m.admission_version.labels(version=label).set(1)
            self._version_label = label

    def _set_status(self, **changes: Any) -> None:
        with self._lock:
            self._status = dataclasses.replace(self._status, **changes)

    def _clear_leader_metrics(self) -> None:
        """A replica that does not lead exports none of these, so a max() is the leader's."""
        m = self.metrics
        for gauge in (m.admission_current, m.admission_refused, m.admission_applied):
            gauge.clear()
        m.admission_version.clear()
        self._version_label = None

    # ---------------------------------------------------------------- the thread

    def start(self) -> None:
        self._periodic.start()

    def stop(self, timeout_s: float = 10.0) -> None:
        self._periodic.stop(timeout_s)
