"""The steered pod: what the policy makes of a pod, as a JSON Patch, the pod it makes and the
trace the pod carries. The webhook's `/mutate` (webhook/handler.py) and `/explain/pod`
(scorer/explain/pod.py) both get it from `steer_pod` through the admission decision
(steer/core/decision.py), so the pod explained is the pod admitted.

Pure. `MutationPlan.from_policy` runs once per policy change and precomputes, for every
(tenant, pod class), the preferred terms, the required rules, the tolerations and the
schedulerName, so a request only looks them up and merges.

Merge, never clobber:
- preferred terms are appended; the user's stay, and terms already present are not repeated;
- hard rules are gates and budget pools (steer/core/gates.py, budget.py), and a GPU pod counts
  its devices in its class's device counter (steer/core/device_counter.py): resource requests
  set on the containers, never required node-affinity terms on labels that move with load
  (a kubelet restart would fail a running pod whose node no longer matched). Each container
  requests its own limits from the pool, the first container one unit of each gate, each
  with an equal limit (they are extended resources); a request or limit of those resources
  (or of their former names) the policy would not make is removed, the pod's others stay;
- tolerations are appended for the reserved taints the tenant may tolerate;
- a spread constraint is added unless the user has one on the same topologyKey;
- schedulerName is set only when the pod left it unset.

Mutation is idempotent: the trace records what is in effect, not what this pass added, so a
reinvocation (reinvocationPolicy: IfNeeded) computes the same pod and an empty patch.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import orjson

from steer.core.dra.catalog import DeviceCatalog
from steer.core.encoding import PreferenceTerm
from steer.core.infrastructure import Exemption, exempt_reason
from steer.core.patch import PatchBuilder, ShapeError, apply_ops
from steer.core.pod_shape import (
    Json,
    UninterpretablePod,
    pod_object,
    pod_objects,
    scalar_fields,
    tolerations_of,
)
from steer.core.policy import AUDIT, PodClass, Policy, SpreadRule, Tenant
from steer.core.policy.spec import Mode
from steer.core.quantity import QuantityError, parse_quantity
from steer.core.scheduling import missing_tolerations
from steer.core.steering import (
    CONTAINER_FIELDS,
    PodClassification,
    ResourceSteering,
    class_preferences,
    excluded_namespaces,
    injected_tolerations,
    pod_classification,
    resource_steering,
    scheduler_after,
    scheduler_for,
    steered_container_requests,
    tenant_for,
    trace_annotation_key,
)

NODE_AFFINITY = ("spec", "affinity", "nodeAffinity")
PREFERRED = (*NODE_AFFINITY, "preferredDuringSchedulingIgnoredDuringExecution")


@dataclass(frozen=True)
class Pieces:
    """What the policy injects into a pod of one (tenant, pod class); shared, never mutated."""

    tenant: str | None
    pod_class: str | None
    preferred: tuple[Json, ...]
    preference_terms: tuple[PreferenceTerm, ...]  # `preferred`, as the scorer's labels read
    preferred_rule: str
    tolerations: tuple[tuple[str, Json], ...]
    scheduler: str | None
    # Short text of each injected term, for the trace annotation.
    term_notes: tuple[str, ...]
    # Budget pools and gates the pod's containers request.
    resources: ResourceSteering
    # Audit mode (Spec.mode_for): only the trace is patched, saying what would be added.
    audit: bool = False


Skip = Literal["excluded-namespace", "not-opted-in"] | Exemption


@dataclass(frozen=True)
class Mutation:
    """The patch for one pod, the rules in effect (its trace) and the rules this pass added;
    or, when `skipped` says why, no patch: the pod is left as it is."""

    ops: tuple[Json, ...]
    in_effect: tuple[str, ...]
    added: tuple[str, ...]
    pieces: Pieces | None = None  # what the policy injects into a pod of its tenant and class
    trace: str | None = None  # the trace annotation's text, None when no rule is in effect
    skipped: Skip | None = None
    # Audit mode (Spec.mode_for): only the trace is patched; `would_add` holds the rules
    # this pass would have added (`added` is empty: nothing is).
    audit: bool = False
    would_add: tuple[str, ...] = ()
    # The pod's class and DRA asks; `notes()` says what it was classified without.
    classification: PodClassification | None = None

    @property
    def notes(self) -> tuple[str, ...]:
        """What the pod was classified without (claims not known yet), for warnings."""
        return self.classification.notes() if self.classification else ()

    @property
    def pod_class(self) -> str | None:
        return self.pieces.pod_class if self.pieces else None

    @property
    def tenant(self) -> str | None:
        return self.pieces.tenant if self.pieces else None

    def patch_bytes(self) -> bytes | None:
        return orjson.dumps(self.ops) if self.ops else None

    def apply(self, pod: Mapping[str, Any]) -> dict[str, Any]:
        """The steered pod: `pod` with this patch applied (`pod` itself is not changed)."""
        return apply_ops(pod, self.ops)


def _skipped(why: Skip) -> Mutation:
    return Mutation(ops=(), in_effect=(), added=(), skipped=why)


# Namespaces whose labels' verdict a MutationPlan keeps (a few hundred bytes each).
MAX_LABEL_SETS = 10_000


class UnknownNamespace(LookupError):
    """The labels of the pod's namespace are not known, so whether it is steered is not known."""

    def __init__(self, namespace: str | None) -> None:
        super().__init__(f"namespace {namespace!r} is not known")
        self.namespace = namespace


def build_pieces(
    policy: Policy,
    tenant: Tenant | None,
    pod_class: PodClass | None,
    spared: frozenset[str] = frozenset(),
) -> Pieces:
    preferred = class_preferences(policy, pod_class)
    resources = resource_steering(policy, tenant, pod_class, spared)
    bits = [t for t in preferred if t.operator == "In"]
    notes = [f"{bits[0].key} In-bits {'/'.join(str(t.weight) for t in bits)}"] if bits else []
    notes += [f"{t.key} {t.operator} w{t.weight}" for t in preferred if t.operator != "In"]
    notes += [f"gate {g.resource}" for g in resources.gates]
    if resources.budget is not None and resources.budget.pools:
        notes.append("pool " + ",".join(name for name, _ in resources.budget.pools))
    return Pieces(
        tenant=tenant.name if tenant else None,
        pod_class=pod_class.name if pod_class else None,
        preferred=tuple(t.to_k8s() for t in preferred),
        preference_terms=preferred,
        preferred_rule=f"prefer:{preferred[0].key}" if preferred else "prefer",
        tolerations=injected_tolerations(policy, tenant, pod_class),
        scheduler=scheduler_for(policy, tenant, pod_class),
        term_notes=tuple(notes),
        resources=resources,
        audit=policy.spec.audits(tenant),
    )


@dataclass(frozen=True)
class MutationPlan:
    """Everything a request needs from the policy, computed once per policy version."""

    policy: Policy
    pieces: Mapping[tuple[str | None, str | None], Pieces]
    spread: tuple[SpreadRule, ...]
    trace_key: str
    excluded_namespaces: frozenset[str]
    version: str  # the policy's, formatted once (every trace carries it)
    # Pieces of pods that spare a reserving class its gate (`PodClassification.spared`), by
    # (tenant, class, spared), built on first use: few pods and few such classes.
    spared_pieces: dict[tuple[str | None, str | None, frozenset[str]], Pieces] = dataclasses.field(
        default_factory=dict, compare=False, repr=False
    )
    # What a namespace's labels say (opted in by the selector, the tenant), by the labels object
    # the namespace watch holds (one per namespace until its labels change): every pod of a
    # namespace asks the same selectors. The entry keeps the object, so its id is not reused,
    # and a copy, so an object changed in place is judged again.
    by_labels: dict[int, tuple[Mapping[str, str], dict[str, str], bool, Tenant | None]] = (
        dataclasses.field(default_factory=dict, compare=False, repr=False)
    )

    @functools.cached_property
    def read_label_keys(self) -> frozenset[str]:
        """The pod labels a mutation reads: each spread rule's key and its matchLabelKeys
        (`spread_constraint`); a pod's other labels change nothing of its patch or trace."""
        return frozenset(k for r in self.spread for k in (r.label_key, *r.match_label_keys))

    @classmethod
    def from_policy(cls, policy: Policy) -> MutationPlan:
        spec = policy.spec
        tenants: list[Tenant | None] = [None, *spec.tenants]
        classes: list[PodClass | None] = [None, *spec.pod_classes]
        pieces = {
            (t.name if t else None, c.name if c else None): build_pieces(policy, t, c)
            for t in tenants
            for c in classes
        }
        return cls(
            policy=policy,
            pieces=pieces,
            spread=spec.spread,
            trace_key=trace_annotation_key(policy),
            excluded_namespaces=excluded_namespaces(policy),
            version=policy.version,
        )

    def opted_in(self, namespace: str | None, labels: Mapping[str, str]) -> bool:
        """Whether the webhook steers pods of this namespace (None: its name is not known, so
        only its labels decide): not an excluded namespace, and its labels match `optIn`."""
        if namespace is not None and namespace in self.excluded_namespaces:
            return False
        return self._labels_say(labels)[2]

    def tenant(self, labels: Mapping[str, str]) -> Tenant | None:
        return self._labels_say(labels)[3]

    def _labels_say(
        self, labels: Mapping[str, str]
    ) -> tuple[Mapping[str, str], dict[str, str], bool, Tenant | None]:
        held = self.by_labels.get(id(labels))
        if held is not None and held[0] is labels and held[1] == labels:
            return held
        said = (
            labels,
            dict(labels),
            self.policy.spec.opt_in.namespace_selector.matches(labels),
            tenant_for(self.policy, labels),
        )
        if len(self.by_labels) >= MAX_LABEL_SETS:
            self.by_labels.clear()  # a bound, whatever churns the namespaces' labels
        self.by_labels[id(labels)] = said
        return said

    def pieces_for(
        self,
        tenant: Tenant | None,
        pod_class: PodClass | None,
        spared: frozenset[str] = frozenset(),
    ) -> Pieces:
        key = (tenant.name if tenant else None, pod_class.name if pod_class else None)
        if not spared:
            return self.pieces[key]
        found = self.spared_pieces.get((*key, spared))
        if found is None:
            # A race builds the same value twice; either copy is right.
            found = build_pieces(self.policy, tenant, pod_class, spared)
            self.spared_pieces[(*key, spared)] = found
        return found


def steer_pod(
    plan: MutationPlan,
    pod: Mapping[str, Any],
    namespace: str | None,
    namespace_labels: Callable[[], Mapping[str, str] | None],
    user_info: Mapping[str, Any] | None = None,
    mode: Mode | None = None,
    *,
    devices: DeviceCatalog | None = None,
) -> Mutation:
    """What the policy makes of a pod created in `namespace` (None: its name is not known, so
    only its labels decide) by `user_info`: nothing for an excluded namespace, infrastructure
    (steer/core/infrastructure.py) or a namespace not opted in; else the patch, the rules in
    effect and the trace. `namespace_labels` gives the namespace's labels; it is called only
    when the answer depends on them. `mode` overrides the policy's mode for the tenant (the
    audit report asks what enforcing would do). `devices` tells the DRA classes the pod's
    claims request (None: none is known; `PodClassification`). Raises UnknownNamespace when
    it has none, UninterpretablePod for a malformed field.
    """
    if namespace in plan.excluded_namespaces:
        return _skipped("excluded-namespace")
    exempt = exempt_reason(plan.policy, pod, user_info)
    if exempt is not None:
        return _skipped(exempt)
    labels = namespace_labels()
    if labels is None:
        raise UnknownNamespace(namespace)
    if not plan.opted_in(namespace, labels):
        return _skipped("not-opted-in")
    return mutate_pod(
        plan, pod, plan.tenant(labels), mode=mode, namespace=namespace, devices=devices
    )


# --- merge functions: pure, each idempotent on its own output -----------------------------


def spread_constraint(rule: SpreadRule, labels: Mapping[str, str]) -> Json | None:
    """The constraint a spread rule asks for a pod with these labels; None if it lacks the key."""
    value = labels.get(rule.label_key)
    if value is None:
        return None
    constraint: Json = {
        "maxSkew": rule.max_skew,
        "topologyKey": rule.topology_key,
        "whenUnsatisfiable": rule.when_unsatisfiable,
        "labelSelector": {"matchLabels": {rule.label_key: value}},
    }
    if rule.node_taints_policy is not None:
        constraint["nodeTaintsPolicy"] = rule.node_taints_policy
    # matchLabelKeys only "fits" for keys the pod has (e.g. pod-template-hash on controller
    # pods, which keeps rollouts from counting the old ReplicaSet's pods).
    keys = [k for k in rule.match_label_keys if k in labels and k != rule.label_key]
    if keys:
        constraint["matchLabelKeys"] = keys
    return constraint


def _same_constraint(ours: Json, theirs: Mapping[str, Any]) -> bool:
    return all(theirs.get(k) == v for k, v in ours.items())


# --- the request path -----------------------------------------------------------------------


_OBJECT_OR_ABSENT = (dict, type(None))


def _check_containers(spec: Mapping[str, Any]) -> None:
    for field in CONTAINER_FIELDS:
        for i, container in enumerate(pod_objects(spec, field, f"spec.{field}")):
            resources = container.get("resources")
            if resources is None or (
                type(resources) is dict
                and type(resources.get("requests")) in _OBJECT_OR_ABSENT
                and type(resources.get("limits")) in _OBJECT_OR_ABSENT
            ):
                continue  # the usual shape, judged without spelling out each field's path
            resources = pod_object(container, "resources", f"spec.{field}[{i}].resources")
            for part in ("requests", "limits"):
                pod_object(resources, part, f"spec.{field}[{i}].resources.{part}")


def mutate_pod(
    plan: MutationPlan,
    pod: Mapping[str, Any],
    tenant: Tenant | None,
    *,
    mode: Mode | None = None,
    namespace: str | None = None,
    devices: DeviceCatalog | None = None,
) -> Mutation:
    """The patch that steers `pod` (already known to be in an opted-in namespace); in audit
    mode (the tenant's, or `mode`), the patch of its trace alone. The pod's claims are looked
    up in `devices` under `namespace` (else the pod's own `metadata.namespace`)."""
    if not isinstance(pod.get("metadata"), dict):
        raise UninterpretablePod("metadata", "a pod needs a metadata object")
    if not isinstance(pod.get("spec"), dict):
        raise UninterpretablePod("spec", "a pod needs a spec object")
    spec: Mapping[str, Any] = pod["spec"]
    metadata: Mapping[str, Any] = pod["metadata"]
    _check_containers(spec)
    if namespace is None and isinstance(metadata.get("namespace"), str):
        namespace = metadata["namespace"]
    classification = pod_classification(plan.policy, spec, namespace=namespace, devices=devices)
    pieces = plan.pieces_for(tenant, classification.pod_class, classification.spared)
    notes = classification.notes()
    audit = pieces.audit if mode is None else mode == AUDIT
    labels = pod_object(metadata, "labels", "metadata.labels")
    affinity = pod_object(spec, "affinity", "spec.affinity")
    node_affinity = pod_object(affinity, "nodeAffinity", "spec.affinity.nodeAffinity")

    builder = PatchBuilder(pod)
    in_effect: list[str] = []
    added: list[str] = []

    def note(rule: str, did_add: bool) -> None:
        in_effect.append(rule)
        if did_add:
            added.append(rule)

    try:
        # Preferred terms: binary-weighted terms on the class's composite score label.
        preferred = pod_objects(
            node_affinity, PREFERRED[-1], "spec.affinity.nodeAffinity.preferred"
        )
        missing = [t for t in pieces.preferred if t not in preferred]
        builder.append(PREFERRED, missing)
        if pieces.preferred:
            note(pieces.preferred_rule, bool(missing))

        # Hard rules as resource requests: budget pools and gates; and the device counter.
        if not pieces.resources.empty or _holds_owned(pieces.resources, spec):
            _merge_resources(pieces.resources, builder, spec, note, classification.device_units)

        # Tolerations of the reserved taints this tenant may tolerate.
        tolerations = tolerations_of(spec)  # read even when none is injected: a bad one is named
        if pieces.tolerations:
            new_tolerations = missing_tolerations(tolerations, (t for _, t in pieces.tolerations))
            for rule, toleration in pieces.tolerations:
                note(f"tolerate:{rule}", any(t is toleration for t in new_tolerations))
            builder.append(("spec", "tolerations"), new_tolerations)

        # Spread constraints; the user's constraint on the same topologyKey wins.
        constraints = pod_objects(
            spec, "topologySpreadConstraints", "spec.topologySpreadConstraints"
        )
        scalar_fields(constraints, "spec.topologySpreadConstraints", {"topologyKey": str})
        taken = {c.get("topologyKey") for c in constraints}
        new_constraints = []
        for spread in plan.spread:
            ours = spread_constraint(spread, labels)
            if ours is None:
                continue
            if any(
                _same_constraint(ours, c)
                for c in constraints
                if c.get("topologyKey") == spread.topology_key
            ):
                note(f"spread:{spread.name}", False)
            elif spread.topology_key not in taken:
                new_constraints.append(ours)
                taken.add(spread.topology_key)
                note(f"spread:{spread.name}", True)
        builder.append(("spec", "topologySpreadConstraints"), new_constraints)

        # schedulerName, only when the pod left it unset.
        if pieces.scheduler is not None:
            current = spec.get("schedulerName")
            if current == pieces.scheduler:
                note(f"scheduler:{pieces.scheduler}", False)
            elif scheduler_after(plan.policy, pieces.scheduler, current) != current:
                builder.set(("spec", "schedulerName"), pieces.scheduler)
                note(f"scheduler:{pieces.scheduler}", True)

        trace = None
        if audit:
            builder = PatchBuilder(pod)  # nothing the scheduler reads changes: the trace alone
        if in_effect:
            would_add = tuple(added) if audit else None
            trace = trace_text(plan.version, tuple(in_effect), pieces.term_notes, would_add, notes)
            annotations = pod_object(metadata, "annotations", "metadata.annotations")
            if annotations.get(plan.trace_key) != trace:
                builder.set(("metadata", "annotations", plan.trace_key), trace)
        ops = builder.ops()
    except ShapeError as exc:
        raise UninterpretablePod(exc.field, str(exc)) from None
    return Mutation(
        ops=tuple(ops),
        in_effect=tuple(in_effect),
        added=() if audit else tuple(added),
        pieces=pieces,
        trace=trace,
        audit=audit,
        would_add=tuple(added) if audit else (),
        classification=classification,
    )


def _holds_owned(steering: ResourceSteering, spec: Mapping[str, Any]) -> bool:
    """Whether a container requests or limits an owned resource (which the pod may not have
    chosen)."""
    return any(
        name in steering.owned
        for field in CONTAINER_FIELDS
        for container in spec.get(field) or ()
        if isinstance(container, Mapping)
        for part in ("requests", "limits")
        for name in ((container.get("resources") or {}).get(part) or {})
    )


def _same(current: Any, units: int) -> bool:
    try:
        return parse_quantity(current) == units
    except QuantityError:
        return False


def _merge_resources(
    steering: ResourceSteering,
    builder: PatchBuilder,
    spec: Mapping[str, Any],
    note: Any,
    device_units: int | None = None,
) -> None:
    """Set each container's owned requests (and, for extended resources, the equal limits the
    API requires) to what the policy asks (steer/core/steering.py), removing any other request
    or limit of those resources. Limits are read from cpu and memory only, and the device
    counter's units from the pod's claims and device requests, which this leaves as they are,
    so a reinvocation computes the same requests and adds nothing."""
    wanted = steered_container_requests(steering, spec, device_units)
    owned = steering.owned
    parts = ("requests", "limits") if steering.limits else ("requests",)
    changed: set[str] = set()
    for (field, i), want in wanted.items():
        # Objects or absent: _check_containers has read them.
        resources = spec[field][i].get("resources")
        for part in ("requests", "limits"):
            values = resources.get(part) if resources else None
            have = values or {}
            path = ("spec", field, str(i), "resources", part)
            if not owned.isdisjoint(have):
                keep = want if part in parts else {}
                for name in sorted(n for n in have if n in owned and n not in keep):
                    builder.remove((*path, name))
                    changed.add(name)
            if part not in parts:
                continue
            updates = {}
            for name, units in want.items():
                current = have.get(name)
                if current is None or not _same(current, units):
                    updates[name] = str(units)
            if not updates:
                continue
            if values is not None:
                builder.add_members(path, updates)  # the pod has this object: no walk to it
            else:
                builder.set_members(path, updates)
            changed.update(updates)
    pools = steering.budget.pools if steering.budget else ()
    if pools:
        note("budget:pool", any(name in changed for name, _ in pools))
    for gate in steering.gates:
        if any(gate.resource in want for want in wanted.values()):
            note(f"gate:{gate.rule}", gate.resource in changed)
    counter = steering.counter
    counted = counter is not None and any(counter.resource in w for w in wanted.values())
    if counter is not None and counted:
        note(counter.rule, counter.resource in changed)
    if changed and not pools and not steering.gates and not counted:
        note("resources:removed", True)


def read_trace(pod: Mapping[str, Any], trace_key: str) -> dict[str, Any] | None:
    """The trace the webhook wrote on a pod (`trace_text`), or None: absent, or not a JSON
    object."""
    metadata = pod.get("metadata")
    annotations = metadata.get("annotations") if isinstance(metadata, Mapping) else None
    text = annotations.get(trace_key) if isinstance(annotations, Mapping) else None
    if not isinstance(text, str):
        return None
    try:
        trace = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return trace if isinstance(trace, dict) else None


@functools.lru_cache(maxsize=256)
def trace_text(
    version: str,
    rules: tuple[str, ...],
    terms: tuple[str, ...],
    would_add: tuple[str, ...] | None = None,
    notes: tuple[str, ...] = (),
) -> str:
    """Compact JSON for the trace annotation: policy version, rules in effect, terms; in audit
    mode (`would_add` given) `"mode": "audit"` and the rules that would have been added; and
    what the pod was classified without (`notes`: a claim not known yet), when anything.

    Few distinct (tenant, class, rules) combinations exist, so the text is cached.
    """
    doc: dict[str, Any] = {"policy": version, "rules": list(rules), "terms": list(terms)}
    if would_add is not None:
        doc.update(mode=AUDIT, wouldAdd=list(would_add))
    if notes:
        doc["notes"] = list(notes)
    return orjson.dumps(doc).decode()
