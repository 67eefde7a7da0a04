"""`/explain/pod`: where a pod may go once the webhook has steered it, node by node, and, for a
live pod (`/explain/pod/NS/NAME`), what the kube-scheduler itself said about it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from steer.core.encoding import PreferenceTerm

Json = Mapping[str, Any]  # a JSON object as answered, read back


def _preference_from_k8s(term: Json) -> PreferenceTerm:
    (expr,) = term["preference"]["matchExpressions"]
    operator: Literal["In", "DoesNotExist"] = (
        "DoesNotExist" if expr["operator"] == "DoesNotExist" else "In"
    )
    return PreferenceTerm(
        weight=int(term["weight"]),
        key=str(expr["key"]),
        values=tuple(str(v) for v in expr.get("values") or ()),
        operator=operator,
    )


@dataclass(frozen=True)
class Exclusion:
    """Why one node is not a place for the pod: the rule (a policy rule, a pod field, a taint,
    a resource) and the data behind it (JSON-shaped evidence: a gate, a pool, a label)."""

    rule: str
    reason: str
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"rule": self.rule, "reason": self.reason, "data": dict(self.data)}

    @classmethod
    def from_json(cls, obj: Json) -> Exclusion:
        return cls(obj["rule"], obj["reason"], dict(obj.get("data") or {}))


@dataclass(frozen=True)
class NodeVerdict:
    """One node for the pod: allowed (ranked by the NodeAffinity weight it adds up) or excluded."""

    node: str
    exclusions: tuple[Exclusion, ...]
    steering_weight: int  # of the injected preference terms
    user_weight: int  # of the pod's own preferred terms
    rank: int | None = None  # allowed nodes only; ties share a rank
    soft_taints: tuple[str, ...] = ()  # PreferNoSchedule taints the pod does not tolerate

    @property
    def allowed(self) -> bool:
        return not self.exclusions


@dataclass(frozen=True)
class PodScheduled:
    """The pod's `PodScheduled` condition as the scheduler set it (`False`, `Unschedulable`
    and the scheduler's summary of every node's verdict, while the pod waits)."""

    status: str  # "True" or "False"
    reason: str | None
    message: str | None
    since: str | None  # lastTransitionTime, RFC 3339

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "reason": self.reason,
            "message": self.message,
            "lastTransitionTime": self.since,
        }

    @classmethod
    def from_json(cls, obj: Json) -> PodScheduled:
        return cls(
            obj["status"], obj.get("reason"), obj.get("message"), obj.get("lastTransitionTime")
        )


@dataclass(frozen=True)
class SchedulingEvent:
    """The latest `FailedScheduling` event of the pod."""

    message: str
    count: int  # how often the scheduler reported it (the event's series)
    last_seen: str | None  # RFC 3339
    reporter: str | None  # the component that wrote it (`default-scheduler`)

    def to_json(self) -> dict[str, Any]:
        return {
            "message": self.message,
            "count": self.count,
            "lastSeen": self.last_seen,
            "reporter": self.reporter,
        }

    @classmethod
    def from_json(cls, obj: Json) -> SchedulingEvent:
        return cls(obj["message"], obj["count"], obj.get("lastSeen"), obj.get("reporter"))


@dataclass(frozen=True)
class SchedulerVerdict:
    """What the kube-scheduler says of a live pod: the node it is bound to (if any), its
    `PodScheduled` condition and its latest `FailedScheduling` event; beside kube-steer's own
    verdicts it shows whether the two agree on why a pod waits."""

    node: str | None  # spec.nodeName
    phase: str | None
    pod_scheduled: PodScheduled | None  # None before the scheduler has looked at the pod
    failed_scheduling: SchedulingEvent | None
    events_error: str | None = None  # why the events were not read, if they were not

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "phase": self.phase,
            "podScheduled": self.pod_scheduled.to_json() if self.pod_scheduled else None,
            "failedScheduling": (
                self.failed_scheduling.to_json() if self.failed_scheduling else None
            ),
            "eventsError": self.events_error,
        }

    @classmethod
    def from_json(cls, obj: Json) -> SchedulerVerdict:
        condition, event = obj.get("podScheduled"), obj.get("failedScheduling")
        return cls(
            node=obj.get("node"),
            phase=obj.get("phase"),
            pod_scheduled=PodScheduled.from_json(condition) if condition else None,
            failed_scheduling=SchedulingEvent.from_json(event) if event else None,
            events_error=obj.get("eventsError"),
        )


@dataclass(frozen=True)
class DeviceAskView:
    """One way the pod asks for DRA devices (steer/core/dra/claims.py): a claim template, a
    claim or an extended resource, and the DeviceClasses behind it (None: not known yet)."""

    form: str  # "template", "claim" or "extended"
    name: str  # the template or claim, or the extended resource
    device_classes: tuple[str, ...] | None
    text: str  # "claim template gpu-1 -> gpu.nvidia.com"

    def to_json(self) -> dict[str, Any]:
        return {
            "form": self.form,
            "name": self.name,
            "deviceClasses": None if self.device_classes is None else list(self.device_classes),
            "text": self.text,
        }

    @classmethod
    def from_json(cls, obj: Json) -> DeviceAskView:
        classes = obj.get("deviceClasses")
        return cls(
            obj["form"], obj["name"], None if classes is None else tuple(classes), obj["text"]
        )


@dataclass(frozen=True)
class AdmissionView:
    """What the webhooks answer for the pod (steer/core/decision.py): whether it is admitted,
    the message the apiserver refuses it with, the warnings kubectl prints."""

    allowed: bool = True
    message: str | None = None
    warnings: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"allowed": self.allowed, "message": self.message, "warnings": list(self.warnings)}

    @classmethod
    def from_json(cls, obj: Json) -> AdmissionView:
        return cls(
            allowed=bool(obj.get("allowed", True)),
            message=obj.get("message"),
            warnings=tuple(obj.get("warnings") or ()),
        )


@dataclass(frozen=True)
class PodExplanation:
    """`/explain/pod`: where the pod may go once the webhook has steered it."""

    policy_version: str
    pod_class: str | None
    tenant: str | None
    preferences: tuple[PreferenceTerm, ...]
    gates: tuple[str, ...]  # the gate resources the steered pod requests
    verdicts: tuple[NodeVerdict, ...]  # allowed nodes by rank, then excluded nodes by name
    injected_tolerations: tuple[Mapping[str, Any], ...] = ()
    # Why the apiserver or the webhook's validation refuses the pod (then it goes nowhere).
    problems: tuple[str, ...] = ()
    # False: the webhook leaves the pod (its namespace is not opted in, or audit mode)
    steered: bool = True
    # The rules the webhook puts in effect, as the pod's trace annotation records them.
    rules: tuple[str, ...] = ()
    # Why the webhook leaves the pod as it is (`excluded-namespace`, `not-opted-in`), if it does.
    skipped: str | None = None
    # Audit mode (Spec.mode_for): the webhook records `rules` in the trace, applies none.
    audit: bool = False
    # A live pod only (`/explain/pod/NS/NAME`): what the scheduler said of it.
    scheduler: SchedulerVerdict | None = None
    # The DRA devices the pod asks for, and by which form; and what it was classified without
    # (a claim not known yet: steered so that no gate keeps it off nodes it may need).
    device_asks: tuple[DeviceAskView, ...] = ()
    device_notes: tuple[str, ...] = ()
    # What the webhooks answer (their one decision): admitted, the denial, the warnings.
    admission: AdmissionView = field(default_factory=AdmissionView)

    @property
    def allowed(self) -> tuple[NodeVerdict, ...]:
        return tuple(v for v in self.verdicts if v.allowed)

    @property
    def excluded(self) -> tuple[NodeVerdict, ...]:
        return tuple(v for v in self.verdicts if not v.allowed)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "policyVersion": self.policy_version,
            "podClass": self.pod_class,
            "tenant": self.tenant,
            "steered": self.steered,
            "skipped": self.skipped,
            "audit": self.audit,
            "rules": list(self.rules),
            "preferences": [t.to_k8s() for t in self.preferences],
            "gates": list(self.gates),
            "injectedTolerations": [dict(t) for t in self.injected_tolerations],
            "problems": list(self.problems),
            "deviceAsks": [a.to_json() for a in self.device_asks],
            "deviceNotes": list(self.device_notes),
            "admission": self.admission.to_json(),
            "allowed": [
                {
                    "node": v.node,
                    "rank": v.rank,
                    "steeringWeight": v.steering_weight,
                    "userWeight": v.user_weight,
                    "softTaints": list(v.soft_taints),
                }
                for v in self.allowed
            ],
            "excluded": [
                {"node": v.node, "exclusions": [e.to_json() for e in v.exclusions]}
                for v in self.excluded
            ],
        }
        if self.scheduler is not None:
            out["scheduler"] = self.scheduler.to_json()
        return out

    to_dict = to_json  # the name it had before the view model

    @classmethod
    def from_json(cls, obj: Json) -> PodExplanation:
        """The answer read back; the JSON carries no weights for excluded nodes (0 here)."""
        allowed = tuple(
            NodeVerdict(
                node=a["node"],
                exclusions=(),
                steering_weight=a["steeringWeight"],
                user_weight=a["userWeight"],
                rank=a.get("rank"),
                soft_taints=tuple(a.get("softTaints") or ()),
            )
            for a in obj.get("allowed") or ()
        )
        excluded = tuple(
            NodeVerdict(
                node=e["node"],
                exclusions=tuple(Exclusion.from_json(x) for x in e.get("exclusions") or ()),
                steering_weight=0,
                user_weight=0,
            )
            for e in obj.get("excluded") or ()
        )
        return cls(
            policy_version=obj["policyVersion"],
            pod_class=obj.get("podClass"),
            tenant=obj.get("tenant"),
            preferences=tuple(_preference_from_k8s(t) for t in obj.get("preferences") or ()),
            gates=tuple(obj.get("gates") or ()),
            verdicts=allowed + excluded,
            injected_tolerations=tuple(dict(t) for t in obj.get("injectedTolerations") or ()),
            problems=tuple(obj.get("problems") or ()),
            steered=obj.get("steered", True),
            rules=tuple(obj.get("rules") or ()),
            skipped=obj.get("skipped"),
            audit=bool(obj.get("audit", False)),
            scheduler=SchedulerVerdict.from_json(obj["scheduler"])
            if obj.get("scheduler")
            else None,
            device_asks=tuple(DeviceAskView.from_json(a) for a in obj.get("deviceAsks") or ()),
            device_notes=tuple(obj.get("deviceNotes") or ()),
            admission=AdmissionView.from_json(obj.get("admission") or {}),
        )
