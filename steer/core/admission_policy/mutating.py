"""The mutation as a MutatingAdmissionPolicy: the apiserver steers a pod itself, webhook up or
down, as `steer_pod` (steer/core/mutation.py) steers it.

Pure: policy in, two Kubernetes objects (a MutatingAdmissionPolicy and its binding, as
JSON-ready dicts) and the list of what they leave to the webhook out. Nothing is decided
here that the core does not decide: every (tenant, pod class, spared classes) combination's
pieces come from `build_pieces`, the same function the webhook's plan is built with; what is
generated is the CEL that picks a combination for a pod and merges its pieces into the pod
exactly as `mutate_pod` does. The end-to-end suite checks the two paths against each other on
the real apiserver (tests/e2e/test_mutating_policy.py).

Upstream sources: the API types (kubernetes staging/src/k8s.io/api/admissionregistration/v1/
types.go: MutatingAdmissionPolicySpec's matchConditions, variables and reinvocationPolicy,
Mutation's patchType JSONPatch | ApplyConfiguration, JSONPatch's expression with
`JSONPatch{op, path, value}`, `jsonpatch.escapeKey` and `Object.<field>` types), as v1.36.2
serves them (`kubectl explain mutatingadmissionpolicy.spec
--api-version=admissionregistration.k8s.io/v1`); KEP-3962 and the docs page "Mutating Admission Policy"; the Kubernetes CEL libraries (docs
"Common Expression Language in Kubernetes": quantity, lists, optional fields, two-variable
comprehensions). What they decide here, measured on the v1.36.2 apiserver:
- the MutatingAdmissionPolicy plugin is on by default in 1.36 and runs before
  MutatingAdmissionWebhook (the apiserver logs the order), so with both installed the webhook
  sees the pod the policy steered;
- `reinvocationPolicy: IfNeeded` re-runs a policy after any later change, its own included
  (measured on v1.36.2: a policy that appends a toleration appends it twice; with `Never`
  once). The mutation is therefore idempotent: applying it twice is applying it once, and
  `IfNeeded` keeps a pool request on a container another webhook adds afterwards (a sidecar);
- what a policy costs the apiserver per pod (the MutatingAdmissionPolicy dispatcher,
  k8s.io/apiserver/pkg/admission/plugin/policy/mutating/dispatcher.go, and the CEL filter,
  plugin/cel/filter.go): for each policy bound, every pass converts the pod to unstructured and
  evaluates all its matchConditions (no short circuit between conditions; variables and
  namespaceObject are not declared there), before it checks whether a reinvocation concerns
  the policy at all; a policy that passes then converts the pod again, evaluates its patch,
  encodes the pod to JSON, applies the patch, decodes and defaults it, whether the patch is
  empty or not. Measured on v1.36.2 with the bench pods: about 0.3 ms per pass for each bound
  policy its matchCondition leaves out, about 1 ms for the patch of a constant, and 1.2 ms more
  for this policy's CEL. Hence one policy, not one per tenant or class (each would add its
  matchCondition's 0.3 ms to every pod, twice), with one matchCondition that leaves out, first
  and cheaply, a pod that carries what the policy adds already (`_steered`): the second pass,
  after the policy's own change, costs the condition alone;
- one mutation, so every part of the patch is computed from the same object (the trace says
  what was in effect before this pass, as the webhook's does);
- JSONPatch everywhere: tolerations and preferred terms are atomic lists (an apply
  configuration would replace them), and a topology spread constraint is added only when the
  pod has none on the same topologyKey (the webhook's rule), which the list's merge key
  (topologyKey, whenUnsatisfiable) would not give;
- CEL has `quantity()` with add, sub and compareTo but no multiplication or division, and no
  `math.ceil` (undeclared in v1.36.2): a pool request of ceil(limit in millicores or MiB) is
  estimated with `asApproximateFloat()` and then checked exactly, `quantity('<n>m') >= limit`,
  over the four integers around the estimate;
- no `cel.bind` (undeclared): a value is bound by mapping over a one-item list; two-variable
  `transformList` gives container indexes, `lists` gives `flatten`;
- list and map literals must be homogeneous (`cel.HomogeneousAggregateLiterals`: one element
  type exactly, `dyn` and `string` differ), so map values of different types are wrapped in
  `dyn()`; and a variable is typed by its expression for this policy, `[]` as `list(dyn)`, so a
  list whose elements go into such a literal is written typed even when this policy makes it
  empty (`cel_empty_list`; the starter policy has no gate and no pool);
- `failurePolicy: Ignore`, as the webhook's: a pod the CEL cannot steer (an error, the cost
  budget) is created unsteered, and the budget's ValidatingAdmissionPolicy (steer-budget)
  still refuses a tenant pod that lacks its pool requests.

Matching: CREATE of pods, in namespaces the opt-in selector selects and that are not excluded
(`matchConstraints.namespaceSelector`; a policy whose `optIn.namespaceSelector` is empty, as the
starter policy's, leaves the opt-in to the install's label, which the webhook configuration
carries: here that is the project's default opt-in label, `<labelPrefix>enabled: "true"`, so
that no namespace is steered that the webhook install would leave alone), not infrastructure (`matchConditions`, the same CEL
the validating policies use), and, when a pod class names DeviceClasses, not a pod whose class
depends on DRA objects (`NotCovered`). The namespace's tenant is read from `namespaceObject`.

The trace annotation carries the webhook's text, byte for byte (the same JSON: policy version,
rules in effect, terms; in audit mode what would be added), with `"via": "admission-policy"`
added, so a pod says which path steered it. The policy leaves a trace alone that is already
its own text or the webhook's: with both installed, the webhook (called after the policy)
rewrites the trace to its own text, and the policy, reinvoked, keeps it (by this rule; the
differential test runs each path alone). One difference is not observable from the pod alone, and kept on purpose: a pod
with no pool or gate whose forged requests of the project's resources were removed keeps
`resources:removed` in its trace on the reinvocation that follows (the webhook, invoked once,
writes it once); a trace forged to that exact text is therefore kept as well.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

import orjson

from steer.core.admission_policy.cel import (
    Cel,
    cel_empty_list,
    cel_list,
    cel_string,
    cel_value,
    choose,
    tenant_variables,
)
from steer.core.admission_policy.objects import (
    API_VERSION,
    NAMESPACE_NAME_LABEL,
    Json,
    object_metadata,
    resource_rule,
)
from steer.core.budget import POOL_KINDS, pool_resource
from steer.core.device_counter import device_counter
from steer.core.dra.classes import IMPLICIT_EXTENDED_PREFIX, implicit_extended_name
from steer.core.infrastructure import exempt_cel
from steer.core.mutation import Pieces, build_pieces
from steer.core.policy import DEFAULT_SCHEDULER, PodClass, Policy, Tenant
from steer.core.steering import (
    excluded_namespace_list,
    resource_steering,
    trace_annotation_key,
)

POLICY_NAME = "steer-mutation"
TRACE_VIA = "admission-policy"  # the trace's `via` on this path
# The one matchCondition: not steered already, not infrastructure, no DRA lookup needed.
MATCH_CONDITION = "unsteered-and-in-scope"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"
PREFERRED_PATH = f"/spec/affinity/nodeAffinity/{PREFERRED}"


@dataclass(frozen=True)
class NotCovered:
    """Pods (or a part of what they get) the MutatingAdmissionPolicy does not steer as the
    webhook does, and why. `covered_by: "webhook"`: the policy leaves the pod alone
    (`matchConditions`) and the webhook steers it; `"none"`: where only the policy runs, the
    pod gets less than the webhook would give it, as `effect` says."""

    rule: str
    pods: str
    why: str
    covered_by: Literal["webhook", "none"]
    effect: str = ""

    def text(self) -> str:
        by = "left to the webhook" if self.covered_by == "webhook" else "not covered"
        effect = f"; {self.effect}" if self.effect else ""
        return f"{self.rule}: {self.pods} ({by}): {self.why}{effect}"


@dataclass(frozen=True)
class MutatingPolicies:
    """What `mutating_admission_policy` makes of a policy: the objects to apply and what they
    leave to the webhook."""

    objects: tuple[Json, ...]
    not_covered: tuple[NotCovered, ...]


# -- which pieces a pod gets -----------------------------------------------------------------


@dataclass(frozen=True)
class _Combination:
    """One (tenant, pod class, spared classes) and its pieces, as the webhook's plan has them."""

    tenant: Tenant | None
    pod_class: PodClass | None
    spared: tuple[str, ...]  # sorted
    pieces: Pieces

    @property
    def key(self) -> str:
        """The value of `variables.key` for a pod of this combination."""
        tenant = self.tenant.name if self.tenant else ""
        pod_class = self.pod_class.name if self.pod_class else ""
        return f"{tenant}|{pod_class}|{','.join(self.spared)}"


def _combinations(policy: Policy) -> tuple[_Combination, ...]:
    """Every combination a pod can be in. `spared` (steer/core/steering.py PodClassification)
    names `reserveNodes: require` classes other than the pod's whose resources the pod asks
    for: their "unreserved" gate is left out."""
    spec = policy.spec
    out = []
    for tenant in (None, *spec.tenants):
        for pod_class in (None, *spec.pod_classes):
            candidates = sorted(
                c.name
                for c in spec.pod_classes
                if c.reserve_nodes == "require" and c is not pod_class
            )
            for size in range(len(candidates) + 1):
                for spared in itertools.combinations(candidates, size):
                    pieces = build_pieces(policy, tenant, pod_class, frozenset(spared))
                    out.append(_Combination(tenant, pod_class, spared, pieces))
    return tuple(out)


def _by_value(
    combinations: Sequence[_Combination], value: str, otherwise: str | None = None
) -> str:
    """CEL: per combination the CEL `value` renders for it, picked by `variables.key`; the most
    common value is the fallback (fewer comparisons), unless `otherwise` is given."""
    groups: dict[str, list[str]] = {}
    for combination in combinations:
        groups.setdefault(value_of(combination, value), []).append(combination.key)
    if not groups:
        return otherwise or "[]"
    ordered = sorted(groups.items(), key=lambda item: -len(item[1]))
    default = otherwise if otherwise is not None else ordered[0][0]
    cases = [
        (f"variables.key in {cel_list(keys)}", text)
        for text, keys in ordered
        if otherwise is not None or text != default
    ]
    return "(" + choose(cases, default) + ")"


def value_of(combination: _Combination, aspect: str) -> str:
    """The CEL text of one aspect of a combination's pieces (see `_ASPECTS`)."""
    return _ASPECTS[aspect](combination.pieces)


def _json(text: str) -> str:
    """A string as the trace's JSON has it (orjson, as `trace_text`), as a CEL string."""
    return cel_string(orjson.dumps(text).decode())


# -- CEL fragments -----------------------------------------------------------------------------


def _term_equals(var: str, term: Json) -> str:
    """CEL: the pod's preferred term `var` equals `term` as the webhook compares them (the
    decoded JSON objects are equal; the apiserver's pod omits empty lists)."""
    (expression,) = term["preference"]["matchExpressions"]
    values = expression.get("values")
    checks = [
        f"{var}.weight == {term['weight']}",
        f"size({var}.preference.?matchFields.orValue([])) == 0",
        f"size({var}.preference.?matchExpressions.orValue([])) == 1",
        f"{var}.preference.matchExpressions[0].key == {cel_string(expression['key'])}",
        f"{var}.preference.matchExpressions[0].operator == {cel_string(expression['operator'])}",
        f"{var}.preference.matchExpressions[0].?values.orValue([]) == {cel_list(values or ())}",
    ]
    return "(" + " && ".join(checks) + ")"


def _toleration_equals(var: str, toleration: Json) -> str:
    """CEL: the pod's toleration `var` is `toleration` with defaults filled in (the webhook's
    `toleration_id`: an unset operator is Equal)."""
    return (
        f"({var}.?key.orValue('') == {cel_string(toleration.get('key') or '')}"
        f" && ({var}.?operator.orValue('') == '' ? 'Equal' : {var}.operator) == "
        f"{cel_string(toleration.get('operator') or 'Equal')}"
        f" && {var}.?value.orValue('') == {cel_string(toleration.get('value') or '')}"
        f" && {var}.?effect.orValue('') == {cel_string(toleration.get('effect') or '')}"
        f" && !has({var}.tolerationSeconds))"
    )


def _have_terms(pieces: Pieces) -> str:
    return (
        "["
        + ", ".join(
            f"variables.existingTerms.exists(e, {_term_equals('e', t)})" for t in pieces.preferred
        )
        + "]"
    )


def _missing_terms(pieces: Pieces) -> str:
    parts = [
        f"(variables.haveTerms[{i}] ? [] : [{cel_value(t)}])"
        for i, t in enumerate(pieces.preferred)
    ]
    return " + ".join(parts) if parts else "[]"


def _have_tolerations(pieces: Pieces) -> str:
    return (
        "["
        + ", ".join(
            f"variables.existingTolerations.exists(t, {_toleration_equals('t', tol)})"
            for _, tol in pieces.tolerations
        )
        + "]"
    )


def _missing_tolerations(pieces: Pieces) -> str:
    parts = [
        f"(variables.haveTolerations[{i}] ? [] : [{cel_value(tol)}])"
        for i, (_, tol) in enumerate(pieces.tolerations)
    ]
    return " + ".join(parts) if parts else "[]"


def _toleration_rules(pieces: Pieces, added: bool) -> str:
    parts = [
        (f"(variables.haveTolerations[{i}] ? [] : [{_json('tolerate:' + rule)}])")
        if added
        else f"[{_json('tolerate:' + rule)}]"
        for i, (rule, _) in enumerate(pieces.tolerations)
    ]
    return " + ".join(parts) if parts else "[]"


def _gates(pieces: Pieces) -> str:
    """[resource, rule, the trace's `gate:<rule>` as JSON] per gate, in the webhook's order;
    a list of string lists even when there is none (`_want` puts a gate's name in a literal
    beside a string: module doc)."""
    if not pieces.resources.gates:
        return cel_empty_list(cel_list(["", "", ""]))
    return (
        "["
        + ", ".join(
            cel_list([g.resource, g.rule, orjson.dumps(f"gate:{g.rule}").decode()])
            for g in pieces.resources.gates
        )
        + "]"
    )


def _counted(pieces: Pieces) -> str:
    """The extended resources whose quantities a pod of the combination counts in its class's
    device counter (steer/core/device_counter.py `pod_device_units`, for a pod with no claim
    and no other extended resource a DeviceClass may map: the others are the webhook's)."""
    counter = pieces.resources.counter
    if counter is None:
        return cel_empty_list("''")
    names = {*counter.requests_any, *map(implicit_extended_name, counter.device_classes)}
    return cel_list(sorted(names))


_ASPECTS: dict[str, Callable[[Pieces], str]] = {
    "haveTerms": _have_terms,
    "missingTerms": _missing_terms,
    "preferRule": lambda p: _json(p.preferred_rule) if p.preferred else "''",
    "haveTolerations": _have_tolerations,
    "missingTolerations": _missing_tolerations,
    "tolerationRules": lambda p: _toleration_rules(p, added=False),
    "tolerationsAdded": lambda p: _toleration_rules(p, added=True),
    "scheduler": lambda p: cel_string(p.scheduler or ""),
    "pooled": lambda p: "true" if p.resources.budget and p.resources.budget.pools else "false",
    "gates": _gates,
    "counter": lambda p: cel_string(p.resources.counter.resource if p.resources.counter else ""),
    "counterRule": lambda p: _json(p.resources.counter.rule) if p.resources.counter else "''",
    "counted": _counted,
    "terms": lambda p: cel_string(orjson.dumps(list(p.term_notes)).decode()),
}


def _units(quantity: str, suffix: str, scale: str) -> str:
    """CEL: ceil(`quantity` in units of `suffix`), exactly: a float estimate t (`scale` turns the
    quantity's value into units, truncated), then the least of t - 1 .. t + 2 whose quantity
    `<n><suffix>` is at least the value, found by comparing two of them (below 2^52 units the
    estimate is off by less than one, so the answer is t or t + 1); none of the four: an error
    (NotCovered quantity-range)."""

    def holds(n: str) -> str:
        return f"quantity(string({n}) + {cel_string(suffix)}).compareTo(q) >= 0"

    return (
        f"[quantity({quantity})].map(q, [int(q.asApproximateFloat() {scale})].map(t, "
        f"{holds('t')} ? ({holds('t - 1')} ? t - 1 : t) : {holds('t + 1')} ? t + 1 : "
        f"[t + 2].filter(n, {holds('n')})[0])[0])[0]"
    )


def _pool_text(container: str, kind: str) -> str:
    """CEL: the container's limit of `kind`, or its request without one, or '0' (as the pool
    counts it: steer/core/budget.py `container_pool_units`)."""
    return (
        f"{container}.?resources.?limits[?{cel_string(kind)}].orValue("
        f"{container}.?resources.?requests[?{cel_string(kind)}].orValue('0'))"
    )


def _want(policy: Policy, container: str, first: str) -> str:
    """CEL: [name, units as text] the container must request (steer/core/steering.py
    `ResourceSteering.container_requests`): its pool units when its tenant has pools (only
    those above 0), and, for the first container, one unit of each gate (only the budget's
    when the pod names its node) and its device counter's units (none when it names its
    node)."""
    cpu_pool, memory_pool = (pool_resource(policy, kind) for kind in POOL_KINDS)
    cpu = _units(_pool_text(container, "cpu"), "m", "* 1000.0")
    memory = _units(_pool_text(container, "memory"), "Mi", "/ 1048576.0")
    return (
        f"(variables.pooled ? [{cpu}].filter(u, u > 0).map(u, [{cel_string(cpu_pool)}, "
        f"string(u)]) + [{memory}].filter(u, u > 0).map(u, [{cel_string(memory_pool)}, "
        f"string(u)]) : []) + ({first} ? variables.gates.filter(g, !variables.nodePreset || "
        "g[1].startsWith('budget:')).map(g, [g[0], '1']) : []) + "
        f"({first} && variables.deviceUnits > 0 && !variables.nodePreset ? "
        "[[variables.counter, string(variables.deviceUnits)]] : [])"
    )


def _changes(container: str, want: str, owned: str, limits: bool) -> str:
    """CEL: what the webhook changes in one container's resources (steer/core/mutation.py
    `_merge_resources`), as a map: `rq`/`rl` the owned names it removes from requests/limits,
    `uq`/`ul` the [name, units] it sets there (missing, or another quantity), `res`/`req`/`lim`
    whether the container has resources, requests, limits."""

    def part(name: str, sets: bool) -> tuple[str, str]:
        have = f"{container}.?resources.?{name}"
        keep = f"{want}.map(p, p[0])" if sets else "[]"
        removes = f"{have}.orValue({{}}).filter(k, k in {owned} && !(k in {keep}))"
        updates = (
            f"{want}.filter(p, !({have}[?p[0]].hasValue() && "
            f"quantity({have}[?p[0]].value()).compareTo(quantity(p[1])) == 0))"
            if sets
            else "[]"
        )
        return removes, updates

    rq, uq = part("requests", True)
    rl, ul = part("limits", limits)
    return (
        f"{{'rq': dyn({rq}), 'uq': dyn({uq}), 'rl': dyn({rl}), 'ul': dyn({ul}), "
        f"'res': dyn(has({container}.resources)), "
        f"'req': dyn({container}.?resources.?requests.hasValue()), "
        f"'lim': dyn({container}.?resources.?limits.hasValue())}}"
    )


def _change_ops(field: str, index: str, record: str) -> str:
    """CEL: the JSON Patch of one container's change record (`_changes`). A map the pod lacks
    is added empty first, then filled member by member (the ops apply in order)."""
    base = f"'/spec/{field}/' + string({index}) + '/resources'"

    def part(name: str, removes: str, updates: str, present: str) -> str:
        return (
            f"{record}.{removes}.map(k, JSONPatch{{op: 'remove', path: {base} + '/{name}/' + "
            "jsonpatch.escapeKey(k)})"
            f" + (size({record}.{updates}) == 0 || {record}.{present} ? [] : "
            f"[JSONPatch{{op: 'add', path: {base} + '/{name}', value: {{}}}}])"
            f" + {record}.{updates}.map(p, JSONPatch{{op: 'add', path: {base} + '/{name}/' + "
            "jsonpatch.escapeKey(p[0]), value: p[1]})"
        )

    return (
        f"(size({record}.uq) + size({record}.ul) == 0 || {record}.res ? [] : "
        f"[JSONPatch{{op: 'add', path: {base}, value: {{}}}}])"
        f" + {part('requests', 'rq', 'uq', 'req')} + {part('limits', 'rl', 'ul', 'lim')}"
    )


def _append_ops(items: str, levels: Sequence[tuple[str, str]]) -> str:
    """CEL: append the list `items` to a list of the pod, creating what is missing on the way
    (as `PatchBuilder.append`). `levels` are [(CEL true when the path exists, path)], from the
    list up to the outermost object that may be missing."""
    list_check, list_path = levels[0]
    append = (
        f"{items}.map(x, JSONPatch{{op: 'add', path: {cel_string(list_path + '/-')}, value: x}})"
    )
    branches = [(list_check, append)]
    value = items
    for (_, child_path), (parent_check, _) in itertools.pairwise(levels):
        add = f"[JSONPatch{{op: 'add', path: {cel_string(child_path)}, value: {value}}}]"
        branches.append((parent_check, add))
        value = "{" + cel_string(child_path.rsplit("/", 1)[1]) + ": " + value + "}"
    outer = levels[-1][1]
    fallback = f"[JSONPatch{{op: 'add', path: {cel_string(outer)}, value: {value}}}]"
    return f"size({items}) == 0 ? [] : " + choose(branches, fallback)


def _spread_variables(policy: Policy) -> tuple[list[Json], list[str], list[str]]:
    """Per spread rule j, `spreadSame<j>` (the pod has the constraint already) and
    `spreadAdd<j>` (the webhook adds it: the pod has the rule's label and no constraint on the
    topologyKey, and no earlier rule added one there); the constraints added, in order; the
    trace's `spread:<name>` in effect and added."""
    variables: list[Json] = []
    in_effect: list[str] = []
    added: list[str] = []
    adds: list[Cel] = []
    earlier: list[tuple[str, int]] = []
    for j, rule in enumerate(policy.spec.spread):
        key = cel_string(rule.label_key)
        keys = cel_list(k for k in rule.match_label_keys if k != rule.label_key)
        match_keys = f"{keys}.filter(k, k in variables.podLabels)"
        taints = (
            ""
            if rule.node_taints_policy is None
            else f"c.?nodeTaintsPolicy.orValue('') == {cel_string(rule.node_taints_policy)} && "
        )
        same = (
            f"{key} in variables.podLabels && variables.existingSpread.exists(c, "
            f"c.topologyKey == {cel_string(rule.topology_key)} && c.maxSkew == {rule.max_skew} "
            f"&& c.whenUnsatisfiable == {cel_string(rule.when_unsatisfiable)} && {taints}"
            "c.?labelSelector.hasValue() && "
            "size(c.labelSelector.?matchExpressions.orValue([])) == 0 && "
            f"c.labelSelector.?matchLabels.orValue({{}}) == {{{key}: variables.podLabels[{key}]}}"
            f" && (size({match_keys}) == 0 || c.?matchLabelKeys.orValue([]) == {match_keys}))"
        )
        taken = [f"variables.spreadAdd{k}" for t, k in earlier if t == rule.topology_key]
        add = (
            f"{key} in variables.podLabels && !variables.spreadSame{j} && "
            f"!variables.existingSpread.exists(c, c.topologyKey == "
            f"{cel_string(rule.topology_key)})" + "".join(f" && !{t}" for t in taken)
        )
        variables += [
            {"name": f"spreadSame{j}", "expression": same},
            {"name": f"spreadAdd{j}", "expression": add},
        ]
        earlier.append((rule.topology_key, j))
        constraint = {
            "maxSkew": rule.max_skew,
            "topologyKey": rule.topology_key,
            "whenUnsatisfiable": rule.when_unsatisfiable,
            "labelSelector": {"matchLabels": Cel(f"{{{key}: variables.podLabels[{key}]}}")},
        }
        if rule.node_taints_policy is not None:
            constraint["nodeTaintsPolicy"] = rule.node_taints_policy
        with_keys = {**constraint, "matchLabelKeys": Cel(match_keys)}
        adds.append(
            Cel(
                f"(variables.spreadAdd{j} ? [size({match_keys}) == 0 ? "
                f"{cel_value(constraint)} : {cel_value(with_keys)}] : [])"
            )
        )
        note = _json(f"spread:{rule.name}")
        in_effect.append(f"(variables.spreadSame{j} || variables.spreadAdd{j} ? [{note}] : [])")
        added.append(f"(variables.spreadAdd{j} ? [{note}] : [])")
    variables.append(
        {"name": "newSpread", "expression": " + ".join(adds) if adds else "[]"},
    )
    return variables, in_effect, added


# -- what is not covered -----------------------------------------------------------------------


def _device_classes(policy: Policy) -> tuple[PodClass, ...]:
    return tuple(c for c in policy.spec.pod_classes if c.device_classes)


def _foreign(policy: Policy, requested: str) -> str:
    """CEL: the names in `requested` a DeviceClass may map (steer/core/dra/claims.py
    `may_be_device_backed`), but the implicit `deviceclass.resource.kubernetes.io/<class>`
    (which names its class) and the project's own resources (never a device)."""
    ours = (policy.spec.resource_prefix, *policy.spec.former_resource_prefixes)
    own = " || ".join(f"n.startsWith({cel_string(p)})" for p in ours)
    return (
        f"{requested}.filter(n, n.contains('/') && !n.contains('kubernetes.io/') && "
        f"!n.startsWith('requests.') && !n.startsWith({cel_string(IMPLICIT_EXTENDED_PREFIX)}) "
        f"&& !({own}))"
    )


def _uncertain_classes(policy: Policy) -> list[str]:
    """The pod classes ('' for none) a pod classified by its requests alone may leave once an
    extended resource a DeviceClass maps is known: a class with DeviceClasses comes before it,
    or a `require` class with DeviceClasses may be spared."""
    classes = policy.spec.pod_classes
    out = []
    for i, pod_class in enumerate((*classes, None)):
        before = classes[:i]
        spared = [
            c
            for c in classes
            if c is not pod_class and c.reserve_nodes == "require" and c.device_classes
        ]
        if any(c.device_classes for c in before) or spared:
            out.append(pod_class.name if pod_class else "")
    return out


def not_covered(policy: Policy) -> tuple[NotCovered, ...]:
    """What the MutatingAdmissionPolicy leaves to the webhook, or does not give a pod, for this
    policy (empty when it steers every pod as the webhook does)."""
    out: list[NotCovered] = []
    if _device_classes(policy):
        names = ", ".join(c.name for c in _device_classes(policy))
        out.append(
            NotCovered(
                "dra-claims",
                "pods with spec.resourceClaims",
                f"pod classes {names} are recognised by the DeviceClasses a ResourceClaim or "
                "ResourceClaimTemplate requests, which are in those objects, not in the pod or "
                "its namespace (the CEL of an admission policy reads no other object)",
                "webhook",
                "with the policy alone such a pod is not steered, and a pod of a tenant with a "
                "budget is refused by steer-budget",
            )
        )
        classes = _uncertain_classes(policy)
        described = ", ".join(c or "(no class)" for c in classes)
        out.append(
            NotCovered(
                "dra-extended-resources",
                "pods requesting an extended resource that is not the project's nor "
                f"{IMPLICIT_EXTENDED_PREFIX}<class>, whose class by requests alone is "
                f"{described}",
                "a DeviceClass may map the resource (extendedResourceName), which would put the "
                "pod in another class; the DeviceClasses are not in the pod",
                "webhook",
                "with the policy alone such a pod is not steered, and a pod of a tenant with a "
                "budget is refused by steer-budget",
            )
        )
    counted = [c for c in policy.spec.pod_classes if device_counter(policy, c) is not None]
    if counted:
        names = ", ".join(c.name for c in counted)
        out.append(
            NotCovered(
                "device-counter",
                f"pods of classes {names} (by their requests) that request an extended resource "
                "a DeviceClass may map other than the class's requestsAny, or whose init "
                "containers request the class's devices",
                "the units of the class's device counter are the devices the pod asks for: "
                "whether a DeviceClass of the class maps such a resource is in the "
                "DeviceClasses, and init containers and sidecars are summed as the scheduler "
                "sums them, which the policy leaves to the webhook",
                "webhook",
                "with the policy alone such a pod is not steered, and a pod of a tenant with a "
                "budget is refused by steer-budget",
            )
        )
    combinations = _combinations(policy)
    pooled = any(
        c.pieces.resources.budget and c.pieces.resources.budget.pools for c in combinations
    )
    if pooled:
        out.append(
            NotCovered(
                "quantity-range",
                "pods with a cpu or memory limit (or request without a limit) above 2^52 pool units "
                "(4.5e12 cores, 4.5e15 MiB)",
                "the pool request is estimated in floating point and checked exactly over the four "
                "integers around the estimate, which holds only below 2^52",
                "none",
                "the expression fails and failurePolicy Ignore creates the pod unsteered (no node "
                "offers such a limit)",
            )
        )
    if any(
        not (c.pieces.resources.budget and c.pieces.resources.budget.pools)
        and not c.pieces.resources.gates
        for c in combinations
    ):
        out.append(
            NotCovered(
                "trace-resources-removed",
                "pods with no pool and no gate whose trace annotation, as created, is already "
                "the one the policy writes with the rule resources:removed",
                "the policy is reinvoked after its own change and keeps resources:removed in "
                "the trace once the forged requests are gone; it cannot tell that trace from "
                "one the pod was created with",
                "none",
                "such a forged trace is kept where the webhook would rewrite it; steering is "
                "the same",
            )
        )
    out.append(
        NotCovered(
            "steered-already",
            "pods created carrying this policy version's trace (the policy's or the webhook's) "
            "whose containers' pool requests already match their limits, such as a copy of a "
            "steered pod",
            "the policy's one matchCondition leaves out a pod that carries what it adds, so that "
            "the apiserver does not evaluate it a second time after its own change; a condition "
            "reads the pod alone and cannot tell such a pod from one the policy steered a "
            "moment before",
            "none",
            "such a pod keeps the steering it was created with (its gates and device counter "
            "units included); steer-budget still checks its pools and its budget gate",
        )
    )
    out += [
        NotCovered(
            "spread-duplicates",
            f"pods with the label {a.label_key}",
            f"spread rules {a.name} and {b.name} ask for the same constraint on "
            f"{a.topology_key}: evaluated again after its own change (a pod its matchCondition "
            "does not find steered already: pool requests that do not match its limits), the "
            f"policy finds the constraint {a.name} added and notes {b.name} as in effect as well",
            "none",
            f"the trace lists spread:{b.name}, which the webhook's does not; steering is the same",
        )
        for i, a in enumerate(policy.spec.spread)
        for b in policy.spec.spread[i + 1 :]
        if (a.label_key, a.topology_key, a.max_skew, a.when_unsatisfiable, a.node_taints_policy)
        == (b.label_key, b.topology_key, b.max_skew, b.when_unsatisfiable, b.node_taints_policy)
    ]
    return tuple(out)


# -- the objects -------------------------------------------------------------------------------


def install_opt_in_label(policy: Policy) -> str:
    """The opt-in label an install sets by default (manifests/kustomization.yaml, the chart's
    `optIn.label`): the one that selects namespaces when the policy's own selector is empty."""
    return policy.label_key("enabled")


def _namespace_selector(policy: Policy) -> Json:
    """The opt-in selector and the excluded namespaces in one selector (both must hold). An
    empty opt-in selector stands for the install's opt-in label (`install_opt_in_label`)."""
    selector = policy.spec.opt_in.namespace_selector
    expressions: list[Json] = [
        {
            "key": NAMESPACE_NAME_LABEL,
            "operator": "NotIn",
            "values": list(excluded_namespace_list(policy)),
        }
    ]
    if not selector.match_labels and not selector.match_expressions:
        expressions.append(
            {"key": install_opt_in_label(policy), "operator": "In", "values": ["true"]}
        )
    for req in selector.match_expressions:
        expression: Json = {"key": req.key, "operator": req.operator}
        if req.values:
            expression["values"] = list(req.values)
        expressions.append(expression)
    out: Json = {"matchExpressions": expressions}
    if selector.match_labels:
        out["matchLabels"] = dict(selector.match_labels)
    return out


def _requested(containers: str) -> str:
    """CEL: every resource name the containers request or limit (`requested_resources`)."""
    return (
        f"{containers}.map(c, c.?resources.?requests.orValue({{}}).map(k, k) + "
        "c.?resources.?limits.orValue({}).map(k, k)).flatten()"
    )


def _class_cel(policy: Policy, requested: str, implicit: str) -> str:
    """CEL: the pod's class ('' for none) by its requests and the DeviceClasses its implicit
    extended resources name, the first in policy order (`pod_classification`)."""
    return choose(
        [(_in_class(c, requested, implicit), cel_string(c.name)) for c in policy.spec.pod_classes],
        "''",
    )


def _in_class(pod_class: PodClass, requested: str, implicit: str) -> str:
    tests = []
    if pod_class.requests_any:
        tests.append(f"{requested}.exists(n, n in {cel_list(pod_class.requests_any)})")
    if pod_class.device_classes:
        tests.append(f"{implicit}.exists(d, d in {cel_list(pod_class.device_classes)})")
    return "(" + " || ".join(tests or ["false"]) + ")"


def _implicit(requested: str) -> str:
    prefix = cel_string(IMPLICIT_EXTENDED_PREFIX)
    return (
        f"{requested}.filter(n, n.startsWith({prefix})).map(n, "
        f"n.substring({len(IMPLICIT_EXTENDED_PREFIX)}))"
    )


def _counted_elsewhere(policy: Policy, foreign: str, pod_class: str) -> str:
    """CEL: the pod, of class `pod_class` ('' for none) by its requests, counts devices the
    policy cannot: its class has a device counter and the pod requests an extended resource a
    DeviceClass may map (`foreign`, `_foreign` of its requests) that is not one of the class's
    `requestsAny` (the webhook counts it when a DeviceClass of the class maps it), or an init
    container requests one the class counts (the webhook sums init containers and sidecars as
    the scheduler does)."""
    init = _requested("object.spec.?initContainers.orValue([])")
    cases = []
    for candidate in policy.spec.pod_classes:
        counter = device_counter(policy, candidate)
        if counter is None:
            continue
        names = {*counter.requests_any, *map(implicit_extended_name, counter.device_classes)}
        cases.append(
            f"({pod_class} == {cel_string(candidate.name)} && ("
            f"{foreign}.exists(n, !(n in {cel_list(sorted(counter.requests_any))})) || "
            f"{init}.exists(n, n in {cel_list(sorted(names))})))"
        )
    return " || ".join(cases) or "false"


def _pool_matches(policy: Policy, container: str, kind: str) -> str:
    """CEL: the container's request of the `kind` pool is what `_want` gives it: ceil(its limit,
    or request without one, in millicores or MiB), and absent when that is 0. Checked exactly,
    as `_units` checks its estimate: n units hold the limit and n - 1 do not."""
    pool = cel_string(pool_resource(policy, kind))
    suffix = cel_string("m" if kind == "cpu" else "Mi")
    limit = f"quantity({_pool_text(container, kind)})"
    held = f"{container}.resources.requests[{pool}]"
    return (
        f"({container}.?resources.?requests[?{pool}].hasValue() ? "
        f"{held}.matches('^[1-9][0-9]{{0,14}}$') && "
        f"quantity({held} + {suffix}).compareTo({limit}) >= 0 && "
        f"quantity(string(int({held}) - 1) + {suffix}).compareTo({limit}) < 0 : "
        f"{limit}.compareTo(quantity('0')) <= 0)"
    )


def _steered(policy: Policy, combinations: Sequence[_Combination]) -> str:
    """CEL: the pod carries what the policy adds already, so evaluating it again would add
    nothing: this version's trace (the policy's or the webhook's; neither is written before
    the rest of the pass is) and, where the policy has pools, every container's pool requests
    as its limits give them. A container a later webhook adds (a sidecar) holds none, so the
    policy, reinvoked, steers the pod again and gives it its pool requests.

    A matchCondition is evaluated before the reinvocation check and reads neither variables
    nor namespaceObject (the API's rules), hence the pod's own fields alone: a pod of a
    combination without pools whose containers have limits does not pass, and is evaluated
    again (which changes nothing)."""
    key = cel_string(trace_annotation_key(policy))
    prefix = cel_string('{"policy":' + orjson.dumps(policy.version).decode() + ",")
    traced = f"object.metadata.?annotations[?{key}].orValue('').startsWith({prefix})"
    if not any(c.pieces.resources.budget and c.pieces.resources.budget.pools for c in combinations):
        return traced
    pools = " && ".join(_pool_matches(policy, "c", kind) for kind in POOL_KINDS)
    return (
        f"{traced} && (object.spec.containers + object.spec.?initContainers.orValue([]))"
        f".all(c, {pools})"
    )


def _match_conditions(policy: Policy, combinations: Sequence[_Combination]) -> list[Json]:
    """One condition: the apiserver evaluates every matchCondition of a policy (no short
    circuit between them), and within one `&&` stops at the first false, so a pod that is
    steered already (the reinvocation after the policy's own change) costs the trace lookup
    and the pool checks alone."""
    parts = [f"!({_steered(policy, combinations)})", f"!({exempt_cel(policy)})"]
    if _device_classes(policy):
        # The requested names, those a DeviceClass may map and the class, computed once each
        # (bound by a one-item list: a matchCondition has no variables).
        requested = _requested("(object.spec.containers + object.spec.?initContainers.orValue([]))")
        uncertain = cel_list(_uncertain_classes(policy))
        pod_class = _class_cel(policy, "rq", _implicit("rq"))
        # NotCovered dra-claims, dra-extended-resources and device-counter: the webhook
        # steers these.
        parts.append(
            "size(object.spec.?resourceClaims.orValue([])) == 0 && "
            f"[{requested}].all(rq, [{_foreign(policy, 'rq')}].all(fg, [{pod_class}].all(pc, "
            f"!(size(fg) > 0 && pc in {uncertain}) && "
            f"!({_counted_elsewhere(policy, 'fg', 'pc')}))))"
        )
    return [{"name": MATCH_CONDITION, "expression": " && ".join(parts)}]


def _variables(policy: Policy, combinations: Sequence[_Combination]) -> list[Json]:
    spec = policy.spec
    trace_key = trace_annotation_key(policy)
    owned = cel_list(sorted(resource_steering(policy, None, None).owned))
    limits = not spec.native_resource_names
    require = sorted(
        (c for c in spec.pod_classes if c.reserve_nodes == "require"), key=lambda c: c.name
    )
    spared = [
        f"(variables.podClass != {cel_string(c.name)} && "
        f"{_in_class(c, 'variables.requested', 'variables.implicit')} ? "
        f"[{cel_string(c.name)}] : [])"
        for c in require
    ]
    audited = policy.spec.audited_tenants()
    unset = "variables.currentScheduler == ''"
    if spec.scheduler_profiles.default_scheduler_is_unset:
        unset += f" || variables.currentScheduler == {cel_string(DEFAULT_SCHEDULER)}"
    pools = cel_list(pool_resource(policy, kind) for kind in POOL_KINDS)
    first = "variables.gates.filter(g, !variables.nodePreset || g[1].startsWith('budget:'))"
    spread_variables, spread_in_effect, spread_added = _spread_variables(policy)

    def records(field: str, first_index: str) -> str:
        containers = (
            f"object.spec.{field}"
            if field == "containers"
            else ("object.spec.?initContainers.orValue([])")
        )
        want = _want(policy, "c", first_index)
        return (
            f"{containers}.transformList(i, c, [{want}].map(w, "
            f"{_changes('c', 'w', owned, limits)})[0])"
        )

    def by(aspect: str) -> str:
        return _by_value(combinations, aspect)

    return [
        *tenant_variables(policy),
        {"name": "podLabels", "expression": "object.metadata.?labels.orValue({})"},
        {
            "name": "requested",
            "expression": _requested(
                "(object.spec.containers + object.spec.?initContainers.orValue([]))"
            ),
        },
        {"name": "implicit", "expression": _implicit("variables.requested")},
        {
            "name": "podClass",
            "expression": _class_cel(policy, "variables.requested", "variables.implicit"),
        },
        {"name": "spared", "expression": " + ".join(spared) if spared else "[]"},
        {
            "name": "key",
            "expression": "variables.tenant + '|' + variables.podClass + '|' + "
            "variables.spared.join(',')",
        },
        {"name": "audit", "expression": f"variables.tenant in {cel_list(audited)}"},
        {
            "name": "nodePreset",
            "expression": "object.spec.?nodeName.orValue('') != ''",
        },
        # Resources: the pools and gates, and what changes container by container.
        {"name": "pooled", "expression": by("pooled")},
        {"name": "gates", "expression": by("gates")},
        # The device counter (steer/core/device_counter.py): as many units as the devices the
        # pod's extended resources ask for (whole quantities only; else none, as the webhook).
        {"name": "counter", "expression": by("counter")},
        {"name": "counterRule", "expression": by("counterRule")},
        {"name": "counted", "expression": by("counted")},
        {
            "name": "deviceAmounts",
            "expression": "object.spec.containers.map(c, variables.counted.map(n, quantity("
            "c.?resources.?requests[?n].orValue(c.?resources.?limits[?n].orValue('0'))))"
            ").flatten()",
        },
        {
            "name": "deviceUnits",
            "expression": "variables.counter == '' || "
            "!variables.deviceAmounts.all(q, q.isInteger()) ? 0 : "
            "variables.deviceAmounts.map(q, q.asInteger()).sum()",
        },
        {
            "name": "counterRules",
            "expression": "variables.deviceUnits > 0 && !variables.nodePreset ? "
            "[variables.counterRule] : []",
        },
        {"name": "containerChanges", "expression": records("containers", "i == 0")},
        {"name": "initChanges", "expression": records("initContainers", "false")},
        {
            "name": "changed",
            "expression": "(variables.containerChanges + variables.initChanges).map(r, "
            "r.rq + r.uq.map(p, p[0]) + r.rl + r.ul.map(p, p[0])).flatten()",
        },
        {
            # `_merge_resources` notes `resources:removed` for a pod with no pool, no gate and
            # no device counter units that held the project's resources.
            "name": "removedOnly",
            "expression": "!variables.pooled && size(variables.gates) == 0 && "
            "size(variables.counterRules) == 0",
        },
        # Preferred terms.
        {
            "name": "existingTerms",
            "expression": f"object.spec.?affinity.?nodeAffinity.?{PREFERRED}.orValue([])",
        },
        {"name": "haveTerms", "expression": by("haveTerms")},
        {"name": "missingTerms", "expression": by("missingTerms")},
        {"name": "preferRule", "expression": by("preferRule")},
        # Tolerations.
        {"name": "existingTolerations", "expression": "object.spec.?tolerations.orValue([])"},
        {"name": "haveTolerations", "expression": by("haveTolerations")},
        {"name": "missingTolerations", "expression": by("missingTolerations")},
        # Spread constraints.
        {
            "name": "existingSpread",
            "expression": "object.spec.?topologySpreadConstraints.orValue([])",
        },
        *spread_variables,
        # schedulerName.
        {"name": "scheduler", "expression": by("scheduler")},
        {"name": "currentScheduler", "expression": "object.spec.?schedulerName.orValue('')"},
        {
            "name": "setScheduler",
            "expression": "variables.scheduler != '' && "
            f"variables.currentScheduler != variables.scheduler && ({unset})",
        },
        # The trace: the rules in effect (and added), in the webhook's order, as JSON text.
        {
            "name": "rulesHead",
            "expression": "variables.preferRule != '' ? [variables.preferRule] : []",
        },
        {
            "name": "rulesResources",
            "expression": f"(variables.pooled ? ['\"budget:pool\"'] : []) + {first}.map(g, g[2])"
            " + variables.counterRules"
            " + (variables.removedOnly && size(variables.changed) > 0 ? "
            "['\"resources:removed\"'] : [])",
        },
        {
            "name": "rulesTail",
            "expression": f"{by('tolerationRules')} + "
            + " + ".join([*spread_in_effect, "[]"])
            + " + (variables.scheduler != '' && (variables.setScheduler || "
            "variables.currentScheduler == variables.scheduler) ? "
            "['\"scheduler:' + variables.scheduler + '\"'] : [])",
        },
        {
            "name": "inEffect",
            "expression": "variables.rulesHead + variables.rulesResources + variables.rulesTail",
        },
        {
            "name": "added",
            "expression": "(size(variables.missingTerms) > 0 ? variables.rulesHead : []) + "
            f"(variables.pooled && variables.changed.exists(n, n in {pools}) ? "
            "['\"budget:pool\"'] : []) + "
            f"{first}.filter(g, g[0] in variables.changed).map(g, g[2]) + "
            "(variables.counter in variables.changed ? variables.counterRules : []) + "
            "(variables.removedOnly && size(variables.changed) > 0 ? "
            "['\"resources:removed\"'] : []) + "
            f"{by('tolerationsAdded')} + "
            + " + ".join([*spread_added, "[]"])
            + " + (variables.setScheduler ? "
            "['\"scheduler:' + variables.scheduler + '\"'] : [])",
        },
        {"name": "terms", "expression": by("terms")},
        {
            "name": "traceBody",
            "expression": f"'{{\"policy\":' + {_json(policy.version)} + ',\"rules\":[' + "
            "variables.inEffect.join(',') + '],\"terms\":' + variables.terms + "
            '(variables.audit ? \',"mode":"audit","wouldAdd":[\' + '
            "variables.added.join(',') + ']' : '')",
        },
        {
            # The same trace with `resources:removed` where a first pass had it (module doc).
            "name": "traceRemoved",
            "expression": "!variables.audit && variables.removedOnly && "
            "size(variables.changed) == 0 ? "
            f"'{{\"policy\":' + {_json(policy.version)} + ',\"rules\":[' + "
            "(variables.rulesHead + ['\"resources:removed\"'] + variables.rulesTail).join(',') "
            "+ '],\"terms\":' + variables.terms : ''",
        },
        {
            "name": "trace",
            "expression": f"variables.traceBody + ',\"via\":{TRACE_VIA_JSON}}}'",
        },
        {
            "name": "currentTrace",
            "expression": f"object.metadata.?annotations[?{cel_string(trace_key)}].orValue('')",
        },
        {
            "name": "traced",
            "expression": "variables.currentTrace in [variables.trace, "
            "variables.traceBody + '}'] || (variables.traceRemoved != '' && "
            "variables.currentTrace in [variables.traceRemoved + "
            f"',\"via\":{TRACE_VIA_JSON}}}', variables.traceRemoved + '}}'])",
        },
    ]


TRACE_VIA_JSON = orjson.dumps(TRACE_VIA).decode()


# The parts of the JSON Patch, in the webhook's order; each is a CEL list of JSONPatch.
STEERING_PARTS = ("preferred", "resources", "tolerations", "spread", "scheduler")
MUTATION_PARTS = (*STEERING_PARTS, "trace")


def mutation_parts(policy: Policy) -> dict[str, str]:
    """CEL per part of the JSON Patch (MUTATION_PARTS), each a list of JSONPatch over the
    policy's variables: the preferred terms, the container resources, the tolerations, the
    spread constraints and schedulerName the webhook adds, and the trace annotation.
    bench/admission_policy_parts.py measures what each costs the apiserver."""
    trace_key = trace_annotation_key(policy)
    affinity = "object.spec.?affinity"
    preferred = _append_ops(
        "variables.missingTerms",
        [
            (f"{affinity}.?nodeAffinity.?{PREFERRED}.hasValue()", PREFERRED_PATH),
            (f"{affinity}.?nodeAffinity.hasValue()", "/spec/affinity/nodeAffinity"),
            (f"{affinity}.hasValue()", "/spec/affinity"),
        ],
    )
    tolerations = _append_ops(
        "variables.missingTolerations",
        [("has(object.spec.tolerations)", "/spec/tolerations")],
    )
    spread = _append_ops(
        "variables.newSpread",
        [("has(object.spec.topologySpreadConstraints)", "/spec/topologySpreadConstraints")],
    )
    resources = (
        "variables.containerChanges.transformList(i, r, "
        f"{_change_ops('containers', 'i', 'r')}).flatten() + "
        "variables.initChanges.transformList(i, r, "
        f"{_change_ops('initContainers', 'i', 'r')}).flatten()"
    )
    scheduler = (
        "(variables.setScheduler ? [JSONPatch{op: 'add', path: '/spec/schedulerName', "
        "value: variables.scheduler}] : [])"
    )
    trace = (
        "(size(variables.inEffect) == 0 || variables.traced ? [] : "
        "has(object.metadata.annotations) ? [JSONPatch{op: 'add', path: "
        f"'/metadata/annotations/' + jsonpatch.escapeKey({cel_string(trace_key)}), "
        "value: variables.trace}] : [JSONPatch{op: 'add', path: '/metadata/annotations', "
        f"value: {{{cel_string(trace_key)}: variables.trace}}}}])"
    )
    return {
        "preferred": f"({preferred})",
        "resources": resources,
        "tolerations": f"({tolerations})",
        "spread": f"({spread})",
        "scheduler": scheduler,
        "trace": trace,
    }


def _mutation(policy: Policy) -> str:
    """CEL: the JSON Patch; nothing but the trace in audit mode."""
    parts = mutation_parts(policy)
    steering = " + ".join(parts[name] for name in STEERING_PARTS)
    return f"(variables.audit ? [] : {steering}) + {parts['trace']}"


def mutating_admission_policy(policy: Policy, name: str = POLICY_NAME) -> MutatingPolicies:
    """The MutatingAdmissionPolicy and binding that steer pods as the webhook does, and what
    they leave to it (`not_covered`)."""
    combinations = _combinations(policy)
    metadata = object_metadata(policy, name)
    mutating: Json = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicy",
        "metadata": dict(metadata),
        "spec": {
            # Ignore: steering is optional (the webhook fails open as well); what must hold is
            # a ValidatingAdmissionPolicy's (security, budget).
            "failurePolicy": "Ignore",
            "reinvocationPolicy": "IfNeeded",
            "matchConstraints": {
                "namespaceSelector": _namespace_selector(policy),
                "resourceRules": [resource_rule(["CREATE"], ["pods"])],
                "matchPolicy": "Equivalent",
            },
            "matchConditions": _match_conditions(policy, combinations),
            "variables": _variables(policy, combinations),
            "mutations": [
                {"patchType": "JSONPatch", "jsonPatch": {"expression": _mutation(policy)}}
            ],
        },
    }
    binding: Json = {
        "apiVersion": API_VERSION,
        "kind": "MutatingAdmissionPolicyBinding",
        "metadata": dict(metadata),
        # The scope again: the apiserver applies a policy only where its constraints and its
        # binding's both match, and the binding is the install's, which no kube-steer
        # identity may edit (docs/security.md).
        "spec": {"policyName": name, "matchResources": mutating["spec"]["matchConstraints"]},
    }
    return MutatingPolicies((mutating, binding), not_covered(policy))
