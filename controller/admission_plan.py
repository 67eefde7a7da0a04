"""What the controller's leader writes so the apiserver enforces the running policy: the
admission policies compiled from it (steer/core/admission_policy) compared with what the
apiserver holds.

Only the policies, never their bindings: a binding is where the scope of a policy is decided
(`matchResources`, intersected by the apiserver with the policy's own `matchConstraints`), and
the install creates them (manifests/controller/admission-bindings.yaml) for no kube-steer
identity to edit. Nor the node-writes policy: it is one of the guards the install makes
(manifests/guards/), which confine the scorer, and the controller has no verb on it.

Pure: the objects wanted for a policy and a scope, and, given the live objects as read, which
to apply and which already match. The job that reads and writes them is
controller/admission_sync.py.

An object matches when its `<labelPrefix>admission-digest` annotation is the digest of the
object as compiled now, not only when its policy-version annotation is the policy's version:
a new kube-steer release compiles the same policy into other CEL, which must reach the
apiserver though the policy did not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from steer.core.admission_policy import admission_policies
from steer.core.admission_policy.mutating import mutating_admission_policy
from steer.core.admission_policy.node_writes import NODE_WRITES_POLICY_NAME
from steer.core.policy import Policy

Json = dict[str, Any]
Scope = Literal["validating", "all"]

API = "/apis/admissionregistration.k8s.io/v1"
FIELD_MANAGER = "kube-steer"  # the server-side apply manager the leader writes as (0.3: the scorer)
# What the controller writes: policies. Bindings are the install's.
POLICY_KINDS = ("ValidatingAdmissionPolicy", "MutatingAdmissionPolicy")
PLURALS = {
    "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings",
    "MutatingAdmissionPolicy": "mutatingadmissionpolicies",
    "MutatingAdmissionPolicyBinding": "mutatingadmissionpolicybindings",
}


@dataclass(frozen=True, order=True)
class AdmissionRef:
    """One cluster-scoped admission object, by kind and name."""

    kind: str
    name: str

    @property
    def path(self) -> str:
        return f"{API}/{PLURALS[self.kind]}/{self.name}"

    def __str__(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class WantedObject:
    ref: AdmissionRef
    body: Json  # as applied: the compiled object with its digest annotation
    digest: str


def digest_key(policy: Policy) -> str:
    return policy.label_key("admission-digest")


def version_key(policy: Policy) -> str:
    """The annotation every compiled object carries (steer/core/admission_policy/objects.py)."""
    return policy.label_key("policy-version")


def object_digest(body: Mapping[str, Any]) -> str:
    """sha256 of the object's canonical JSON, first 16 hex digits."""
    return hashlib.sha256(orjson.dumps(body, option=orjson.OPT_SORT_KEYS)).hexdigest()[:16]


def wanted_objects(policy: Policy, scope: Scope) -> tuple[WantedObject, ...]:
    """The policies `steer policy admission-policy` prints for `policy` (with `--mutating` for
    scope `all`), without their bindings and without the node-writes guard, each annotated
    with its digest."""
    compiled = [
        obj
        for obj in admission_policies(policy)
        if obj["kind"] in POLICY_KINDS and obj["metadata"]["name"] != NODE_WRITES_POLICY_NAME
    ]
    if scope == "all":
        compiled += [
            obj for obj in mutating_admission_policy(policy).objects if obj["kind"] in POLICY_KINDS
        ]
    out = []
    for obj in compiled:
        digest = object_digest(obj)
        meta = obj["metadata"]
        body = {
            **obj,
            "metadata": {
                **meta,
                "annotations": {**meta.get("annotations", {}), digest_key(policy): digest},
            },
        }
        out.append(WantedObject(AdmissionRef(obj["kind"], meta["name"]), body, digest))
    return tuple(out)


@dataclass(frozen=True)
class SyncPlan:
    apply: tuple[WantedObject, ...]
    unchanged: tuple[AdmissionRef, ...]

    @property
    def writes(self) -> bool:
        return bool(self.apply)


def plan_sync(
    policy: Policy,
    wanted: Sequence[WantedObject],
    live: Mapping[AdmissionRef, Mapping[str, Any] | None],
) -> SyncPlan:
    """`live`: each ref's object as read, None when absent. An object is applied when absent
    or its digest annotation differs."""
    key = digest_key(policy)
    apply, unchanged = [], []
    for obj in wanted:
        current = live.get(obj.ref)
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        if current is not None and annotations.get(key) == obj.digest:
            unchanged.append(obj.ref)
        else:
            apply.append(obj)
    return SyncPlan(tuple(apply), tuple(unchanged))


def live_version(
    policy: Policy,
    wanted: Sequence[WantedObject],
    live: Mapping[AdmissionRef, Mapping[str, Any] | None],
) -> str | None:
    """The policy version the apiserver's objects were compiled from: their policy-version
    annotation when every wanted object is there and all agree; None when one is missing or
    they name different versions (an apply half done, a hand edit)."""
    versions = set()
    for obj in wanted:
        current = live.get(obj.ref)
        if current is None:
            return None
        annotations = (current.get("metadata") or {}).get("annotations") or {}
        versions.add(annotations.get(version_key(policy)))
    if len(versions) != 1:
        return None
    (version,) = versions
    return str(version) if version else None
