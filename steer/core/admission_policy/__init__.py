"""The policy's rules as ValidatingAdmissionPolicies the apiserver enforces itself, webhook up
or down (`steer policy admission-policy` writes them).

Pure: policy in, Kubernetes objects (as JSON-ready dicts) out, a policy and its binding each:
- `security`: the taint rules marked `security: true` (who may tolerate a reserved taint);
- `budget`: the budget's currency (the pool and gate requests of a pod);
- `node_writes`: the scorer's Node writes, confined to the keys it owns.
They share the CEL text (`cel`) and the shape of the two objects (`objects`).

`mutating` compiles the pod mutation itself into a MutatingAdmissionPolicy and its binding
(Kubernetes >= 1.36), apart from these: `mutating_admission_policy(policy)` returns them with
the list of what they leave to the webhook; `steer policy admission-policy` prints them after
the validating policies.
"""

from __future__ import annotations

from collections.abc import Sequence

from steer.core.admission_policy.budget import budget_admission_policy
from steer.core.admission_policy.node_writes import node_writes_admission_policy
from steer.core.admission_policy.objects import Json
from steer.core.admission_policy.security import DEFAULT_NAME, security_admission_policy
from steer.core.policy import Policy


def admission_policies(
    policy: Policy,
    *,
    security_name: str = DEFAULT_NAME,
    scorer_user: str | None = None,
    also_prefixes: Sequence[str] = (),
) -> list[Json]:
    """Every object `steer policy admission-policy` writes: the security rules, the budget's
    currency and the scorer's node writes, each a policy and its binding."""
    out: list[Json] = []
    out += security_admission_policy(policy, security_name)
    out += budget_admission_policy(policy)
    out += node_writes_admission_policy(policy, scorer_user, also_prefixes=also_prefixes)
    return out
