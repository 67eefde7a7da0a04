"""Pod validation: the policy's denial rules, each denial naming the rule, the field and values.

Pure, in the core: the admission decision (steer/core/decision.py) applies it for the webhook's
`/validate` and for `/explain`, with the exemptions, audit mode and the UPDATE rule. Three rules, one per tenant field that limits a pod
(steer/core/policy/tenants.py: `allowedSchedulerNames`, `allowedTolerations`,
`overcommitPercent`):
- `scheduler-name`: the namespace's tenant may use only its allowed schedulerNames;
- `reserved-toleration`: a toleration that tolerates a taint the scorer owns needs the
  tenant's permission (a pod outside every tenant has none); for rules the policy marks
  `security: true` the apiserver enforces the same check itself, webhook up or down, as the
  ValidatingAdmissionPolicy steer/core/admission_policy/security.py writes in CEL;
- `overcommit`: for a tenant with budget b %, each container's limit/request ratio for cpu and
  memory is at most 1 + b/100 (b = 0: limits equal requests). A container without a limit is
  unbounded and denied. Init containers count, and pod-level resources when the pod sets them.

No rule is skipped because a field is unusual: a tenant's pod with a field the rules cannot read
(`UninterpretablePod`) is denied as `uninterpretable`, naming the field (`uninterpretable_denial`);
the webhook allows such a pod, with a warning, only outside every tenant.

For an UPDATE only what the update introduces is denied: a pod admitted under an older policy
can still have its labels changed.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

from steer.core.pod_shape import UninterpretablePod, pod_object, pod_objects
from steer.core.policy import DEFAULT_SCHEDULER, Policy, Tenant
from steer.core.quantity import QuantityError, format_ratio, parse_quantity
from steer.core.scheduling import Taint, tolerates
from steer.core.steering import CONDITION_VALUE, condition_key, excluded_namespaces

Scope = Literal["all", "security"]
RULE_SCHEDULER = "scheduler-name"
RULE_TOLERATION = "reserved-toleration"
RULE_OVERCOMMIT = "overcommit"
RULE_UNINTERPRETABLE = "uninterpretable"
BUDGETED_RESOURCES = ("cpu", "memory")


@dataclass(frozen=True)
class Denial:
    """One violated rule; `subject` identifies the violation across an UPDATE's old and new pod."""

    rule: str
    message: str
    subject: tuple[str, ...]
    # A security taint rule's: denied in every mode, audit too (Spec.mode_for).
    security: bool = False


@dataclass(frozen=True)
class ReservedTaint:
    """A taint the scorer owns, and the taint rule (and its `security` flag) behind it."""

    rule: str
    taint: Taint
    security: bool


@dataclass(frozen=True)
class ValidationPlan:
    """What validation needs from a policy, computed once per policy version."""

    policy: Policy
    reserved: tuple[ReservedTaint, ...]
    excluded_namespaces: frozenset[str]

    @classmethod
    def from_policy(cls, policy: Policy) -> ValidationPlan:
        reserved = tuple(
            ReservedTaint(
                rule=rule.name,
                taint=Taint(condition_key(policy, rule), CONDITION_VALUE, rule.effect),
                security=rule.security,
            )
            for rule in policy.spec.taints
        )
        return cls(
            policy=policy, reserved=reserved, excluded_namespaces=excluded_namespaces(policy)
        )

    @property
    def has_security_rules(self) -> bool:
        return any(t.security for t in self.reserved)


def _describe_toleration(toleration: Mapping[str, Any]) -> str:
    parts = [
        f"{k}={toleration[k]}" for k in ("key", "operator", "value", "effect") if toleration.get(k)
    ]
    return "{" + ", ".join(parts) + "}"


def _tenant_name(tenant: Tenant | None, namespace: str) -> str:
    if tenant is None:
        return f'namespace "{namespace}" (in no tenant)'
    return f'tenant "{tenant.name}" (namespace "{namespace}")'


def check_scheduler(
    spec: Mapping[str, Any], tenant: Tenant | None, namespace: str
) -> Iterable[Denial]:
    if tenant is None:
        return
    name = spec.get("schedulerName") or DEFAULT_SCHEDULER
    if name not in tenant.allowed_scheduler_names:
        allowed = ", ".join(tenant.allowed_scheduler_names) or "none"
        yield Denial(
            rule=RULE_SCHEDULER,
            message=(
                f'rule {RULE_SCHEDULER}: spec.schedulerName "{name}" is not allowed for '
                f"{_tenant_name(tenant, namespace)}; allowed: {allowed}"
            ),
            subject=(RULE_SCHEDULER, str(name)),  # hashable whatever the pod holds there
        )


def check_tolerations(
    plan: ValidationPlan,
    spec: Mapping[str, Any],
    tenant: Tenant | None,
    namespace: str,
    scope: Scope,
) -> Iterable[Denial]:
    allowed = set(tenant.allowed_tolerations) if tenant else set()
    taints = [t for t in plan.reserved if t.rule not in allowed and (scope == "all" or t.security)]
    if not taints:
        return
    for i, toleration in enumerate(pod_objects(spec, "tolerations", "spec.tolerations")):
        for reserved in taints:
            taint = reserved.taint
            if not tolerates(toleration, taint):
                continue
            wildcard = " (an empty key tolerates every taint)" if not toleration.get("key") else ""
            may = ", ".join(sorted(allowed)) if allowed else "none"
            yield Denial(
                rule=RULE_TOLERATION,
                message=(
                    f"rule {RULE_TOLERATION}: spec.tolerations[{i}] {_describe_toleration(toleration)}"
                    f"{wildcard} tolerates the taint {taint} reserved by taint rule "
                    f'"{reserved.rule}"; {_tenant_name(tenant, namespace)} may tolerate only: {may}'
                ),
                subject=(RULE_TOLERATION, _describe_toleration(toleration), reserved.rule),
                security=reserved.security,
            )


def _quantity(
    resources: Mapping[str, Any], part: str, resource: str, field: str
) -> Fraction | None:
    values = pod_object(resources, part, f"{field}.{part}")
    raw = values.get(resource)
    if raw is None:
        return None
    try:
        return parse_quantity(raw)
    except QuantityError as exc:
        raise UninterpretablePod(f"{field}.{part}.{resource}", str(exc)) from None


def check_overcommit(
    spec: Mapping[str, Any], tenant: Tenant | None, namespace: str
) -> Iterable[Denial]:
    if tenant is None or tenant.overcommit_percent is None:
        return
    percent = Fraction(str(tenant.overcommit_percent))
    cap = 1 + percent / 100
    budget = f"{_tenant_name(tenant, namespace)} allows at most {format_ratio(cap)} (overcommitPercent {tenant.overcommit_percent:g})"
    pod_resources = pod_object(spec, "resources", "spec.resources")
    pod_limited = {
        r
        for r in BUDGETED_RESOURCES
        if _quantity(pod_resources, "limits", r, "spec.resources") is not None
    }

    subjects: list[tuple[str, str, Mapping[str, Any], str]] = []
    if pod_resources:
        subjects.append(("pod-level resources", "spec.resources", pod_resources, "pod"))
    for field in ("initContainers", "containers"):
        for i, container in enumerate(pod_objects(spec, field, f"spec.{field}")):
            name = str(container.get("name") or f"#{i}")
            where = f"spec.{field}[{i}]"
            resources = pod_object(container, "resources", f"{where}.resources")
            subjects.append(
                (f'container "{name}" ({where})', f"{where}.resources", resources, name)
            )

    for label, field, resources, subject in subjects:
        for resource in BUDGETED_RESOURCES:
            request = _quantity(resources, "requests", resource, field)
            limit = _quantity(resources, "limits", resource, field)
            if limit is None:
                if subject != "pod" and resource in pod_limited:
                    continue  # bounded by the pod-level limit, which is checked on its own
                what = (
                    "no request or limit"
                    if request is None
                    else f"a request of {_raw(resources, 'requests', resource)} but no limit"
                )
                yield Denial(
                    rule=RULE_OVERCOMMIT,
                    message=(
                        f"rule {RULE_OVERCOMMIT}: {label} sets {what} for {resource}, so its "
                        f"{resource} use is unbounded; {budget} limit/request, so set "
                        f"resources.limits.{resource}"
                    ),
                    subject=(RULE_OVERCOMMIT, subject, resource, "unbounded"),
                )
                continue
            if request is None:
                request = limit  # the apiserver defaults a missing request to the limit
            if request <= 0:
                ratio_text = "unbounded (request 0)"
                over = limit > 0
            else:
                ratio = limit / request
                ratio_text = format_ratio(ratio)
                over = ratio > cap
            if over:
                yield Denial(
                    rule=RULE_OVERCOMMIT,
                    message=(
                        f"rule {RULE_OVERCOMMIT}: {label} {resource} limit "
                        f"{_raw(resources, 'limits', resource)} / request "
                        f"{_raw(resources, 'requests', resource) or _raw(resources, 'limits', resource)}"
                        f" = {ratio_text} exceeds the limit/request ratio {budget}"
                    ),
                    subject=(RULE_OVERCOMMIT, subject, resource, str(limit), str(request)),
                )


def _raw(resources: Mapping[str, Any], part: str, resource: str) -> str:
    value = (resources.get(part) or {}).get(resource)
    return "" if value is None else str(value)


def validate_pod(
    plan: ValidationPlan,
    pod: Mapping[str, Any],
    tenant: Tenant | None,
    namespace: str,
    *,
    scope: Scope = "all",
) -> list[Denial]:
    """Every rule `pod` breaks (in `scope`); empty when it may be admitted."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        raise UninterpretablePod("spec", "a pod needs a spec object")
    denials = list(check_tolerations(plan, spec, tenant, namespace, scope))
    if scope == "all":
        denials += check_scheduler(spec, tenant, namespace)
        denials += check_overcommit(spec, tenant, namespace)
    return denials


def uninterpretable_denial(exc: UninterpretablePod, tenant: Tenant, namespace: str) -> Denial:
    """The denial of a tenant's pod whose field `exc` names cannot be read: none of the
    tenant's rules could be judged. The field and the fix come first; the reason (which may
    quote the value) last, where `denial_message` cuts a long one."""
    return Denial(
        rule=RULE_UNINTERPRETABLE,
        message=(
            f"{exc.field} cannot be read, so no rule of {_tenant_name(tenant, namespace)} "
            f"can be judged and the pod is not admitted; fix {exc.field}: {exc.reason}"
        ),
        subject=(RULE_UNINTERPRETABLE, exc.field),
    )


def introduced_denials(new: Sequence[Denial], old: Sequence[Denial]) -> list[Denial]:
    """Denials of an UPDATE's new pod that its old pod did not already have."""
    had = {d.subject for d in old}
    return [d for d in new if d.subject not in had]


# A denial names the first problems and counts the rest: its size must not grow with the pod
# (a 2 MB pod of many bad containers once got a 30 MB answer).
MAX_DENIALS_SHOWN = 5
MAX_DENIAL_CHARS = 512


def denial_message(denials: Sequence[Denial]) -> str:
    """One message for the apiserver (kubectl prints it after 'admission webhook ... denied'),
    at most MAX_DENIALS_SHOWN problems of MAX_DENIAL_CHARS each."""

    def short(text: str) -> str:
        return text if len(text) <= MAX_DENIAL_CHARS else text[: MAX_DENIAL_CHARS - 3] + "..."

    if len(denials) == 1:
        return short(denials[0].message)
    shown = "; ".join(short(d.message) for d in denials[:MAX_DENIALS_SHOWN])
    more = len(denials) - MAX_DENIALS_SHOWN
    tail = f"; and {more} more" if more > 0 else ""
    return f"{len(denials)} policy violations: {shown}{tail}"


def audit_warnings(denials: Sequence[Denial]) -> list[str]:
    """What audit mode would deny, a warning a rule (kubectl prints each; the apiserver keeps
    256 characters of each): at most MAX_DENIALS_SHOWN, then how many more."""
    shown = [f"kube-steer audit: would deny: {d.message}" for d in denials[:MAX_DENIALS_SHOWN]]
    more = len(denials) - MAX_DENIALS_SHOWN
    return shown + ([f"kube-steer audit: would deny {more} more"] if more > 0 else [])
