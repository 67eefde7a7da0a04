"""The policy's security rules as a ValidatingAdmissionPolicy the apiserver enforces itself.

A taint rule marked `security: true` reserves its taint: only namespaces of a tenant whose
`allowedTolerations` names the rule may run pods that tolerate it. That is the one rule worth
failing closed for, and a webhook can only fail closed by refusing every pod it cannot judge,
so a down webhook would stop pod creation in every namespace it selects. The same rule written
in CEL (admissionregistration.k8s.io/v1, GA since Kubernetes 1.30) is evaluated inside the
apiserver and holds with no kube-steer pod running; the webhooks can then all fail open.

Pure: policy in, two Kubernetes objects (as JSON-ready dicts) out. The CEL mirrors the
webhook's `reserved-toleration` rule (steer/core/admission.py) exactly, and the end-to-end suite
compares the two verdicts on the real apiserver:
- the namespace's tenant is the first tenant whose namespaceSelector matches its labels
  (`steer.core.steering.tenant_for`), read from `namespaceObject.metadata.labels`;
- a toleration tolerates a taint as the scheduler decides it: an empty effect matches every
  effect, an empty key every key (`operator: Exists` with no key tolerates everything),
  `Exists` ignores the value, `Equal` (or no operator) compares it, anything else does not
  match;
- on UPDATE only tolerations the old pod did not have are judged, so a pod admitted under an
  older policy can still be updated;
- namespaces the webhook never validates (kube-system, the project namespace,
  `optIn.excludedNamespaces`) are outside `matchConstraints`.
"""

from __future__ import annotations

from dataclasses import dataclass

from steer.core.admission_policy.cel import cel_list, cel_string, choose, tenant_variables
from steer.core.admission_policy.objects import (
    Json,
    not_infrastructure,
    pods_constraints,
    policy_and_binding,
    resource_rule,
)
from steer.core.policy import Policy
from steer.core.steering import CONDITION_VALUE, condition_key

DEFAULT_NAME = "steer-security"
RULE_TOLERATION = "reserved-toleration"  # the webhook's rule name, so denials read the same


@dataclass(frozen=True)
class SecurityTaint:
    """One reserved taint the admission policy protects, and who may tolerate it."""

    rule: str
    key: str
    value: str
    effect: str
    allowed_tenants: tuple[str, ...]


def security_taints(policy: Policy) -> tuple[SecurityTaint, ...]:
    return tuple(
        SecurityTaint(
            rule=rule.name,
            key=condition_key(policy, rule),
            value=CONDITION_VALUE,
            effect=rule.effect,
            allowed_tenants=tuple(
                t.name for t in policy.spec.tenants if rule.name in t.allowed_tolerations
            ),
        )
        for rule in policy.spec.taints
        if rule.security
    )


TOLERATION_FIELDS = ("key", "operator", "value", "effect")


def normalized_tolerations(tolerations: str) -> str:
    """The list `tolerations` as maps with all four fields, '' where a field is unset, so the
    rules below read like the webhook's (`toleration.get("key") or ""`)."""
    fields = ", ".join(f"'{f}': has(t.{f}) ? t.{f} : ''" for f in TOLERATION_FIELDS)
    return f"{tolerations}.map(t, {{{fields}}})"


def toleration_described(var: str) -> str:
    """`{key=..., operator=..., value=..., effect=...}` with empty fields left out, as the
    webhook writes it: the identity of a toleration across an UPDATE, and the denial text."""
    parts = " + ".join(
        f"({var}.{f} != '' ? [{cel_string(f + '=')} + {var}.{f}] : [])" for f in TOLERATION_FIELDS
    )
    return f"'{{' + ({parts}).join(', ') + '}}'"


def tolerates_cel(var: str, taint: SecurityTaint) -> str:
    """The scheduler's ToleratesTaint for the normalized toleration `var` and one taint."""
    return (
        f"({var}.effect == '' || {var}.effect == {cel_string(taint.effect)})"
        f" && ({var}.key == '' || {var}.key == {cel_string(taint.key)})"
        f" && ({var}.operator == 'Exists'"
        f" || ({var}.operator in ['', 'Equal'] && {var}.value == {cel_string(taint.value)}))"
    )


def _variables(policy: Policy) -> list[Json]:
    tenants = policy.spec.tenants
    described = toleration_described("t")
    return [
        *tenant_variables(policy),
        {
            # What the denial says the tenant may tolerate (every rule it may, as the webhook).
            "name": "mayTolerate",
            "expression": choose(
                [
                    (
                        f"variables.tenant == {cel_string(t.name)}",
                        cel_string(", ".join(sorted(set(t.allowed_tolerations))) or "none"),
                    )
                    for t in tenants
                ],
                "'none'",
            ),
        },
        {
            "name": "who",
            "expression": "variables.tenant == '' ? 'namespace \"' + "
            "namespaceObject.metadata.name + '\" (in no tenant)' : 'tenant \"' + "
            "variables.tenant + '\" (namespace \"' + namespaceObject.metadata.name + '\")'",
        },
        {
            # The old pod's tolerations (UPDATE), described: these are not judged again.
            "name": "oldTolerations",
            "expression": "request.operation == 'UPDATE' && oldObject != null && "
            "has(oldObject.spec.tolerations) ? "
            f"{normalized_tolerations('oldObject.spec.tolerations')}.map(t, {described}) : []",
        },
        {
            # The tolerations to judge: on UPDATE only those the old pod did not have.
            "name": "tolerations",
            "expression": "has(object.spec.tolerations) ? "
            f"{normalized_tolerations('object.spec.tolerations')}.filter(t, "
            f"!({described} in variables.oldTolerations)) : []",
        },
    ]


def _validation(taint: SecurityTaint) -> Json:
    tolerating = f"variables.tolerations.exists(t, {tolerates_cel('t', taint)})"
    expression = f"!{tolerating}"
    if taint.allowed_tenants:
        expression = f"variables.tenant in {cel_list(taint.allowed_tenants)} || {expression}"
    # The first offending toleration, described; map() binds it to `t` once.
    offending = (
        f"variables.tolerations.filter(t, {tolerates_cel('t', taint)}).map(t, "
        f"{toleration_described('t')} + (t.key == '' ? "
        "' (an empty key tolerates every taint)' : ''))[0]"
    )
    reserved = f"{taint.key}={taint.value}:{taint.effect}"
    message = (
        f"{cel_string(f'rule {RULE_TOLERATION}: spec.tolerations ')} + {offending} + "
        f"{cel_string(f' tolerates the taint {reserved} reserved by taint rule ')} + "
        f"{cel_string(chr(34) + taint.rule + chr(34) + '; ')} + variables.who + "
        "' may tolerate only: ' + variables.mayTolerate"
    )
    allowed = ", ".join(taint.allowed_tenants) or "none"
    return {
        "expression": expression,
        "message": (
            f"rule {RULE_TOLERATION}: a toleration of {reserved}, reserved by taint rule "
            f'"{taint.rule}" (security), is allowed only in namespaces of tenants: {allowed}'
        ),
        "messageExpression": message,
        "reason": "Forbidden",
    }


def security_admission_policy(policy: Policy, name: str = DEFAULT_NAME) -> tuple[Json, Json]:
    """The ValidatingAdmissionPolicy and its binding for `policy`'s security taint rules.

    A policy without security rules still gets both objects (one validation that always
    holds), so applying the output after any policy change replaces the previous rules."""
    taints = security_taints(policy)
    validations = [_validation(t) for t in taints] or [
        {
            "expression": "true",
            "message": f"policy {policy.name} has no security taint rules",
        }
    ]
    return policy_and_binding(
        policy,
        name,
        match_constraints=pods_constraints(policy, [resource_rule(["CREATE", "UPDATE"], ["pods"])]),
        match_conditions=not_infrastructure(policy),
        # Variables are evaluated only when a validation reads them.
        variables=_variables(policy) if taints else [],
        validations=validations,
    )
