"""What the scorer's leader writes so the apiserver enforces the running policy: the admission
policies compiled from it (steer/core/admission_policy) compared with what the apiserver holds.

Pure: the objects wanted for a policy and a scope, and, given the live objects as read, which
to apply, which to delete and which already match. The job that reads and writes them is
scorer/admission_sync.py.

An object matches when its `<labelPrefix>admission-digest` annotation is the digest of the
object as compiled now, not only when its policy-version annotation is the policy's version:
a new kube-steer release compiles the same policy into other CEL, and `--scorer-user` changes
the node-writes policy; either must reach the apiserver though the policy did not change.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from scorer.model import NodeState
from scorer.plan import recorded_prefixes
from steer.core.admission_policy import admission_policies
from steer.core.admission_policy.mutating import POLICY_NAME as MUTATING_NAME
from steer.core.admission_policy.mutating import mutating_admission_policy
from steer.core.policy import Policy

Json = dict[str, Any]
Scope = Literal["validating", "all"]

API = "/apis/admissionregistration.k8s.io/v1"
PART_OF = ("app.kubernetes.io/part-of", "kube-steer")
FIELD_MANAGER = "kube-steer"  # the server-side apply manager the scorer writes as
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


# The mutation's two objects, deleted by `--admission-policies=validating` when the scorer made
# them: the binding first, so the policy is never bound to nothing that exists.
MUTATING_REFS = (
    AdmissionRef("MutatingAdmissionPolicyBinding", MUTATING_NAME),
    AdmissionRef("MutatingAdmissionPolicy", MUTATING_NAME),
)


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


def recorded_label_prefixes(nodes: Iterable[NodeState]) -> tuple[str, ...]:
    """Every label prefix under which a node still carries the scorer's managed record: after
    a `labelPrefix` change, the old one until the scorer has retired its keys. The node-writes
    policy must let the scorer write under them meanwhile (`steer policy admission-policy
    --also-prefix`), or the apiserver would refuse the retirement."""
    return tuple(sorted({prefix for node in nodes for prefix in recorded_prefixes(node)}))


def wanted_objects(
    policy: Policy,
    scope: Scope,
    *,
    scorer_user: str | None = None,
    also_prefixes: Sequence[str] = (),
) -> tuple[WantedObject, ...]:
    """The objects `steer policy admission-policy [--also-prefix ...]` prints for `policy`
    (with `--mutating` for scope `all`), each policy before its binding, each annotated with its
    digest."""
    compiled = admission_policies(policy, scorer_user=scorer_user, also_prefixes=also_prefixes)
    if scope == "all":
        compiled += list(mutating_admission_policy(policy).objects)
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


def removable_refs(scope: Scope) -> tuple[AdmissionRef, ...]:
    """What this scope deletes when the scorer made it: the mutation's objects unless `all`."""
    return () if scope == "all" else MUTATING_REFS


def made_by_scorer(live: Mapping[str, Any]) -> bool:
    """The project's label and fields applied by the scorer's field manager: an object
    `steer policy admission-policy | kubectl apply` made carries the label too, but not this
    manager, and is left alone."""
    meta = live.get("metadata") or {}
    labels = meta.get("labels") or {}
    if labels.get(PART_OF[0]) != PART_OF[1]:
        return False
    return any(
        entry.get("manager") == FIELD_MANAGER and entry.get("operation") == "Apply"
        for entry in meta.get("managedFields") or ()
    )


@dataclass(frozen=True)
class SyncPlan:
    apply: tuple[WantedObject, ...]
    delete: tuple[AdmissionRef, ...]
    unchanged: tuple[AdmissionRef, ...]

    @property
    def writes(self) -> bool:
        return bool(self.apply or self.delete)


def plan_sync(
    policy: Policy,
    wanted: Sequence[WantedObject],
    live: Mapping[AdmissionRef, Mapping[str, Any] | None],
    removable: Sequence[AdmissionRef] = (),
) -> SyncPlan:
    """`live`: each ref's object as read, None when absent. An object is applied when absent
    or its digest annotation differs; a removable object is deleted when present and made by
    the scorer."""
    key = digest_key(policy)
    apply, unchanged = [], []
    for obj in wanted:
        current = live.get(obj.ref)
        annotations = ((current or {}).get("metadata") or {}).get("annotations") or {}
        if current is not None and annotations.get(key) == obj.digest:
            unchanged.append(obj.ref)
        else:
            apply.append(obj)
    delete = [
        ref for ref in removable if (found := live.get(ref)) is not None and made_by_scorer(found)
    ]
    return SyncPlan(tuple(apply), tuple(delete), tuple(unchanged))


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
