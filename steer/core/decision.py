"""The admission decision: what the webhook answers for one pod, decided once.

Pure, in the core. The webhook (webhook/handler.py) decodes an AdmissionReview, asks
`decide_mutation` (its `/mutate`) or `decide_validation` (its `/validate`, `/validate/security`)
and turns the `Verdict` into bytes and metrics; `/explain` (scorer/explain/pod.py) asks `decide`,
the two in the order the apiserver calls them, and reports the same verdict. Neither keeps a
rule of its own, so what `/explain` says the webhook does is what the webhook does.

What is decided here, and nowhere else:
- which requests are left alone: operations other than CREATE (mutation) or CREATE and UPDATE
  (validation), excluded namespaces, infrastructure (steer/core/infrastructure.py), namespaces
  not opted in (mutation only);
- an object that is not a pod (another kind, or none): allowed unjudged, with a warning;
- the patch, its trace and what the pod was classified without (steer/core/mutation.py);
- the denials (steer/core/admission.py), judged in audit mode on the pod enforce mode would have
  made, softened to warnings in audit mode except a security taint rule's (Spec.mode_for);
- for an UPDATE, only the denials the update introduces;
- a pod the rules cannot read: denied, naming the field, for a tenant's pod; allowed with a
  warning outside every tenant and for a field the stored pod already had unreadable.

What is not: a namespace whose labels are not known yet gets `result="namespace-unknown"`; the
caller knows why (its cache has not synced, or has not seen the namespace) and answers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from steer.core.admission import (
    Denial,
    Scope,
    ValidationPlan,
    audit_warnings,
    denial_message,
    introduced_denials,
    uninterpretable_denial,
    validate_pod,
)
from steer.core.dra.catalog import DeviceCatalog
from steer.core.infrastructure import exempt_reason
from steer.core.mutation import Mutation, MutationPlan, UnknownNamespace, steer_pod
from steer.core.pod_shape import UninterpretablePod
from steer.core.policy import Policy, Tenant
from steer.core.policy.spec import Mode

Result = Literal[
    "skipped",  # left alone: an operation, namespace or pod the webhook does not judge
    "mutated",
    "unchanged",  # steered already (a reinvocation): an empty patch
    "audited",  # audit mode: the trace alone, or allowed with warnings of what would be denied
    "allowed",
    "denied",
    "denied-uninterpretable",  # a tenant's pod with a field no rule can read
    "uninterpretable",  # allowed, with a warning, unjudged
    "namespace-unknown",  # the namespace's labels are not known: the caller answers
]


@dataclass(frozen=True)
class AdmissionPlans:
    """What the decision needs from a policy, built once per policy version."""

    mutation: MutationPlan
    validation: ValidationPlan

    @classmethod
    def from_policy(cls, policy: Policy) -> AdmissionPlans:
        return cls(MutationPlan.from_policy(policy), ValidationPlan.from_policy(policy))

    @property
    def policy(self) -> Policy:
        return self.validation.policy


@dataclass(frozen=True)
class PodRequest:
    """One admission of a pod, as the decision reads it.

    `pod` is the request's object (None: it carries none) and `kind` the kind the request
    names; anything but a Pod object is allowed unjudged. `namespace` is the request's (None:
    not known, so only its labels decide); `namespace_labels` None means the labels are not
    known (not: the namespace has none). `mode` overrides the policy's mode for the pod's
    tenant (the audit report asks what enforcing would do); `devices` tells the DRA classes
    the pod's claims request."""

    pod: Mapping[str, Any] | None
    namespace: str | None
    namespace_labels: Mapping[str, str] | None
    user_info: Mapping[str, Any] | None = None
    operation: str = "CREATE"
    old_pod: Mapping[str, Any] | None = None
    devices: DeviceCatalog | None = None
    mode: Mode | None = None
    kind: str = "Pod"


@dataclass(frozen=True)
class Unreadable:
    """A field the decision could not read: `field` (the metric's reason), why, and what the
    log says of the pod."""

    field: str
    reason: str
    log: str


@dataclass(frozen=True)
class Verdict:
    """One webhook's answer. The pod is refused when `denials` is not empty (`message` says
    why); `audited` is what enforce mode would refuse, of which `warnings` speak; `mutation`
    is the patch and its trace when the mutation ran."""

    result: Result
    denials: tuple[Denial, ...] = ()
    audited: tuple[Denial, ...] = ()
    warnings: tuple[str, ...] = ()
    mutation: Mutation | None = None
    unreadable: Unreadable | None = None

    @property
    def allowed(self) -> bool:
        return not self.denials and self.result != "namespace-unknown"

    @property
    def message(self) -> str | None:
        """The denial the apiserver shows (None when allowed)."""
        return denial_message(self.denials) if self.denials else None

    @property
    def ops(self) -> tuple[Any, ...]:
        """The JSON Patch operations the answer carries (none when unjudged or skipped)."""
        return self.mutation.ops if self.mutation is not None else ()


@dataclass(frozen=True)
class Admission:
    """The apiserver's sequence: `/mutate`, the patch applied, then `/validate` of the result."""

    mutation: Verdict
    validation: Verdict
    pod: Mapping[str, Any]  # as validated: the mutation's patch applied

    @property
    def allowed(self) -> bool:
        return self.validation.allowed

    @property
    def denials(self) -> tuple[Denial, ...]:
        return self.validation.denials

    @property
    def message(self) -> str | None:
        return self.validation.message

    @property
    def warnings(self) -> tuple[str, ...]:
        """Every warning the client is shown, the mutating webhook's first."""
        return self.mutation.warnings + self.validation.warnings


SKIPPED = Verdict("skipped")
NAMESPACE_UNKNOWN = Verdict("namespace-unknown")


def _unjudged(exc: UninterpretablePod, text: str) -> Verdict:
    """Allowed unjudged, with a warning saying what could not be read."""
    return Verdict(
        "uninterpretable",
        warnings=(f"kube-steer: {text}",),
        unreadable=Unreadable(exc.field, exc.reason, text),
    )


def _not_a_pod(request: PodRequest, action: str) -> Verdict:
    """Allowed unjudged: the webhook configurations send pods only, so another kind (or no
    object) is a configuration's mistake, and refusing it would block what the policy does not
    govern."""
    reason = f"expected a Pod object, got kind {request.kind!r}"
    return _unjudged(UninterpretablePod("kind", reason), f"{reason}; {action}")


# -- mutation ----------------------------------------------------------------------------------


def decide_mutation(plans: AdmissionPlans, request: PodRequest) -> Verdict:
    """What `/mutate` answers: the patch (in audit mode, of the trace alone), with a warning for
    each claim the pod was classified without; a pod it cannot read is left unsteered, with a
    warning (steering is optional: an unsteered pod beats a failed admission)."""
    if request.operation != "CREATE":
        return SKIPPED
    pod = request.pod
    if pod is None or request.kind != "Pod":
        return _not_a_pod(request, "not steered")
    labels = request.namespace_labels
    try:
        mutation = steer_pod(
            plans.mutation,
            pod,
            request.namespace,
            lambda: labels,
            request.user_info,
            request.mode,
            devices=request.devices,
        )
    except UnknownNamespace:
        return NAMESPACE_UNKNOWN
    except UninterpretablePod as exc:
        return _unjudged(exc, f"pod not steered: {exc}")
    if mutation.skipped is not None:
        return Verdict("skipped", mutation=mutation)
    warnings = device_warnings(mutation.notes, synced=request.devices is not None)
    result: Result = "audited" if mutation.audit else "mutated" if mutation.ops else "unchanged"
    return Verdict(result, warnings=warnings, mutation=mutation)


def device_warnings(notes: tuple[str, ...], *, synced: bool) -> tuple[str, ...]:
    """What the pod was classified without (a claim not known yet), one warning each."""
    why = "" if synced else " (the DRA catalogue has not synced yet)"
    return tuple(
        f"kube-steer: {note}{why}; steered so that no gate keeps it off nodes it may need"
        for note in notes
    )


# -- validation --------------------------------------------------------------------------------


def decide_validation(plans: AdmissionPlans, request: PodRequest, scope: Scope = "all") -> Verdict:
    """What `/validate` (`scope="all"`) or `/validate/security` (`"security"`) answers."""
    if request.operation not in ("CREATE", "UPDATE"):
        return SKIPPED
    pod = request.pod
    if pod is None or request.kind != "Pod":
        return _not_a_pod(request, "not validated")
    plan = plans.validation
    if request.namespace in plan.excluded_namespaces:
        return SKIPPED
    if exempt_reason(plan.policy, pod, request.user_info) is not None:
        return SKIPPED
    labels = request.namespace_labels
    if labels is None:
        # Without the tenant no rule can be judged: the caller lets the failurePolicy decide.
        return NAMESPACE_UNKNOWN
    namespace = request.namespace if request.namespace is not None else "?"
    tenant = plans.mutation.tenant(labels)
    audit = _audits(plans, request, tenant)
    old = request.old_pod if request.operation == "UPDATE" else None
    if request.operation == "CREATE" and audit:
        # Audit mode: judge the pod enforce mode would have made, so a warning names only what
        # enforcing would deny (a routed schedulerName is no violation).
        pod = _as_enforced(plans, request, pod, labels)
    try:
        denials = validate_pod(plan, pod, tenant, namespace, scope=scope)
    except UninterpretablePod as exc:
        # A tenant's rules are never skipped for a field they cannot read. Outside every tenant,
        # and for a field the stored pod already had unreadable (an UPDATE of a pod admitted
        # before), the pod passes with a warning.
        if tenant is None or (
            old is not None and _unreadable_field(plan, old, tenant, namespace, scope) == exc.field
        ):
            return _unjudged(exc, f"pod not validated: {exc}")
        verdict = _deny([uninterpretable_denial(exc, tenant, namespace)], audit)
        unreadable = Unreadable(exc.field, exc.reason, f"pod denied, not validated: {exc}")
        result: Result = "denied-uninterpretable" if verdict.denials else verdict.result
        return replace(verdict, result=result, unreadable=unreadable)
    if denials and old is not None:
        try:
            denials = introduced_denials(
                denials, validate_pod(plan, old, tenant, namespace, scope=scope)
            )
        except UninterpretablePod as exc:
            # A stored pod validation cannot read shows nothing it already had: for a tenant's
            # pod every denial stands.
            if tenant is None:
                return _unjudged(exc, f"pod not validated: oldObject {exc}")
    if not denials:
        return Verdict("allowed")
    return _deny(denials, audit)


def _audits(plans: AdmissionPlans, request: PodRequest, tenant: Tenant | None) -> bool:
    if request.mode is not None:
        return request.mode == "audit"
    return plans.policy.spec.audits(tenant)


def _as_enforced(
    plans: AdmissionPlans, request: PodRequest, pod: Mapping[str, Any], labels: Mapping[str, str]
) -> Mapping[str, Any]:
    """`pod` as the mutation would leave it in enforce mode (as it is where it cannot)."""
    try:
        mutation = steer_pod(
            plans.mutation,
            pod,
            request.namespace,
            lambda: labels,
            request.user_info,
            mode="enforce",
            devices=request.devices,
        )
    except UninterpretablePod:
        return pod  # validation names the field
    return mutation.apply(pod)


def _deny(denials: list[Denial], audit: bool) -> Verdict:
    """Deny; in audit mode (Spec.mode_for) allow, and say in a warning what would be
    denied, unless a security taint rule denies: those hold in every mode."""
    if not audit:
        return Verdict("denied", denials=tuple(denials))
    audited = tuple(d for d in denials if not d.security)
    enforced = tuple(d for d in denials if d.security)  # security rules hold in every mode
    warnings = tuple(audit_warnings(audited))
    if not enforced:
        return Verdict("audited", audited=audited, warnings=warnings)
    return Verdict("denied", denials=enforced, audited=audited, warnings=warnings)


def _unreadable_field(
    plan: ValidationPlan, pod: Mapping[str, Any], tenant: Tenant, namespace: str, scope: Scope
) -> str | None:
    """The field validation cannot read in `pod` (an UPDATE's stored pod), or None."""
    try:
        validate_pod(plan, pod, tenant, namespace, scope=scope)
    except UninterpretablePod as exc:
        return exc.field
    return None


# -- both, in the apiserver's order ----------------------------------------------------------


def decide(plans: AdmissionPlans, request: PodRequest) -> Admission:
    """What the apiserver makes of the request with both webhooks: `/mutate`, its patch
    applied, then `/validate` of the patched pod (the security configuration's checks are a
    part of `/validate`'s)."""
    mutation = decide_mutation(plans, request)
    steered = mutation.mutation
    pod = request.pod
    if pod is not None and steered is not None and steered.ops:
        pod = steered.apply(pod)
    validation = decide_validation(plans, replace(request, pod=pod))
    # No object: nothing validated, nothing to show.
    return Admission(mutation=mutation, validation=validation, pod=pod if pod is not None else {})
