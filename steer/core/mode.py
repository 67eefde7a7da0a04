"""Enforce or audit: whether the policy changes what the scheduler reads, or only says what it
would change.

`spec.mode` sets it for the whole policy and `tenants[].mode` for one tenant's pods (unset: the
spec's). In audit mode:
- the webhook computes the same mutation as in enforce mode but patches only the pod's trace
  annotation, which says `"mode": "audit"` and what the webhook would have added
  (steer/core/mutation.py); nothing the scheduler reads changes;
- the validating webhook allows what it would deny and says why in an admission warning; the
  budget's admission policy treats the audited tenants' pods as pods outside every budget
  (steer/core/admission_policy/budget.py): they need no pool request, and may still not forge
  one, which would take room from the enforced tenants;
- the rules of a taint rule marked `security: true` hold in every mode: a toleration of a
  reserved taint is denied in audit mode too, by the webhook and by the apiserver's policy;
- with `spec.mode: audit` the scorer writes labels, gates and pools but no taint (a taint acts
  on every pod, steered or not): scorer/cycle/plan/node.py.

Pods of no tenant follow `spec.mode`.
"""

from __future__ import annotations

from steer.core.policy import Policy, Tenant
from steer.core.policy.spec import Mode

AUDIT: Mode = "audit"
ENFORCE: Mode = "enforce"


def mode_for(policy: Policy, tenant: Tenant | None) -> Mode:
    """The mode for a pod of `tenant` (None: of no tenant)."""
    if tenant is not None and tenant.mode is not None:
        return tenant.mode
    return policy.spec.mode


def audits(policy: Policy, tenant: Tenant | None) -> bool:
    return mode_for(policy, tenant) == AUDIT


def audited_tenants(policy: Policy) -> tuple[str, ...]:
    """The names of the tenants in audit mode; `''` stands for pods of no tenant when the whole
    policy audits (the tenant variable of the admission policies is `''` for them)."""
    names = tuple(t.name for t in policy.spec.tenants if audits(policy, t))
    return (*names, "") if policy.spec.mode == AUDIT else names


def taints_written(policy: Policy) -> bool:
    """Whether the scorer sets the taint rules' taints (not in audit mode)."""
    return policy.spec.mode == ENFORCE
