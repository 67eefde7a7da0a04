"""The SteeringPolicy document's models: the spec and its cluster-wide sections, and the checks
that span its parts (label keys that clash, weights, the resource prefix).

Each part checks itself beside its fields (`issues()`, paths relative to the part); the
document's model validator runs them all, with the spec's own, once every field is well-typed,
so every problem is reported together and named by its path.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Literal, Self

from pydantic import Field, field_validator, model_validator

from steer.core.k8s_names import kubernetes_domain, label_key_errors
from steer.core.policy.cluster_scores import ClusterScores
from steer.core.policy.contract import (
    API_VERSION,
    CLASS_INFIX,
    DAEMONSET_CREATORS,
    DEFAULT_LABEL_PREFIX,
    DEFAULT_RESOURCE_PREFIX,
    FORMER_RESOURCE_PREFIXES,
    LEGACY_API_VERSIONS,
    NATIVE_RESOURCE_MARK,
    NODE_RESTRICTION_PREFIX,
    RESERVED_PREFIX,
)
from steer.core.policy.descheduling import Descheduling
from steer.core.policy.devices import Devices
from steer.core.policy.dimensions import Dimension
from steer.core.policy.energy import DRAIN_LABEL, Energy
from steer.core.policy.fields import (
    HotPenalty,
    HotWindow,
    Hysteresis,
    NamespaceName,
    ObjectName,
    PolicyModel,
    PositiveSeconds,
    Step,
    WriteBurst,
    WriteQps,
)
from steer.core.policy.issues import PolicyIssue, duplicates, nested, raise_issues
from steer.core.policy.routing import SchedulerProfiles
from steer.core.policy.rules import PodClass, SpreadRule, TaintRule
from steer.core.policy.selectors import LabelSelector
from steer.core.policy.tenants import Tenant


class Prometheus(PolicyModel):
    url: str = "http://prometheus.monitoring.svc:9090"
    timeout_seconds: PositiveSeconds = 10.0
    bearer_token_file: str | None = None
    ca_file: str | None = None


def composite_suffix(scoring: Scoring, pod_class: str | None) -> str:
    """The composite label for pods of `pod_class` (None: of no class), after the prefix."""
    base = scoring.composite_label
    return base if pod_class is None else f"{base}{CLASS_INFIX}{pod_class}"


class Scoring(PolicyModel):
    """Cluster-wide scorer defaults; each dimension may override them."""

    interval_seconds: PositiveSeconds = 30.0
    step: Step = 10
    hysteresis: Hysteresis = 3.0
    ttl_seconds: PositiveSeconds = 300.0
    composite_label: str = "score"
    # Dimensions of the default composite (pods of no class). Empty: every weighted score
    # dimension. Leave class-specific data (GPU load) out of it, or nodes that have that data
    # rank differently for pods that never use it.
    composite_dimensions: tuple[str, ...] = ()
    # Client-side write limiter: the Python client has none, and 5,000 node PATCHes in one
    # burst would starve the apiserver's priority-and-fairness queue for everyone else.
    # Label writes and status writes (gates and pools) have a limiter each and run side by
    # side, so pods waiting Pending for their gates never wait behind labels. At 100/s each, a
    # new 5,000-node cluster is fully published within a minute (200 writes/s for that minute;
    # a kubelet fleet of that size writes its Leases at 500/s); afterwards writes are rare.
    write_qps: WriteQps = 100.0
    write_burst: WriteBurst = 200
    resource_write_qps: WriteQps = 100.0
    resource_write_burst: WriteBurst = 200
    # A pod bound to a node in the last window lowers that node's composite by this many
    # points per pod (anti-herding between cycles), down to zero.
    hot_penalty_per_pod: HotPenalty = 5.0
    hot_window_seconds: HotWindow = 60.0


class Overcommit(PolicyModel):
    """How tenant budgets (`tenants[].overcommitPercent`) are enforced on nodes.

    `labels`: tenant pods require nodes whose `overcommit-pct` label is within budget; all pods
    of a burst see the same labels, so a budget holds at admission, not always at the end.
    `scheduler`: also through extended resources and pod anti-affinity that the scheduler
    accounts for on every bind (steer/core/budget.py), so a budget holds at the end state.
    """

    enforcement: Literal["labels", "scheduler"] = "labels"


class Infrastructure(PolicyModel):
    """Pods kube-steer never steers nor refuses, because they must run where they are put.

    DaemonSet pods are recognised by who creates them (an owner reference alone can be forged
    by anyone who may create pods); mirror pods of static pods by the node identity that
    creates them (`system:nodes`) and their `kubernetes.io/config.mirror` annotation. Both are
    exempt from the webhooks (`matchConditions`) and from the admission policies. Pods that
    name their node (`spec.nodeName`) are steered only by their budget (the kubelet enforces
    it); see `ResourceSteering.container_requests`.
    """

    daemon_set_creators: tuple[str, ...] = DAEMONSET_CREATORS


class OptIn(PolicyModel):
    namespace_selector: LabelSelector = Field(
        default_factory=lambda: LabelSelector(match_labels={"kube-steer.github.io/enabled": "true"})
    )
    excluded_namespaces: tuple[NamespaceName, ...] = ()


Mode = Literal["enforce", "audit"]
AUDIT: Mode = "audit"
ENFORCE: Mode = "enforce"


class Spec(PolicyModel):
    # `enforce` steers pods and denies what the rules deny. `audit` changes nothing the
    # scheduler reads (`mode_for` says what audit mode does where).
    mode: Mode = "enforce"
    label_prefix: str = DEFAULT_LABEL_PREFIX
    resource_prefix: str = DEFAULT_RESOURCE_PREFIX
    # Prefixes the pools and gates had before (the scorer keeps what running pods hold of them
    # published until they are released; the admission policies accept them meanwhile).
    former_resource_prefixes: tuple[str, ...] = FORMER_RESOURCE_PREFIXES
    # Opt-in to a resourcePrefix containing `kubernetes.io/`: Kubernetes then treats the pools
    # and gates as native resources (no per-node name check in the scheduler, no limits), at
    # the price of names the API conventions reserve to Kubernetes (docs/resources.md).
    native_resource_names: bool = False
    prometheus: Prometheus = Field(default_factory=Prometheus)
    scoring: Scoring = Field(default_factory=Scoring)
    dimensions: tuple[Dimension, ...] = Field(min_length=1)
    taints: tuple[TaintRule, ...] = ()
    tenants: tuple[Tenant, ...] = ()
    pod_classes: tuple[PodClass, ...] = ()
    spread: tuple[SpreadRule, ...] = ()
    scheduler_profiles: SchedulerProfiles = Field(default_factory=SchedulerProfiles)
    opt_in: OptIn = Field(default_factory=OptIn)
    overcommit: Overcommit = Field(default_factory=Overcommit)
    # What a node that was never scored (no label) does under a required rule: `allow` keeps
    # new nodes schedulable (their overcommit gates open: scorer/cycle/plan/resources.py); `deny` is
    # for clusters that prefer safety.
    unscored_nodes: Literal["allow", "deny"] = "allow"
    project_namespace: NamespaceName = "kube-steer"
    infrastructure: Infrastructure = Field(default_factory=Infrastructure)
    cluster_scores: ClusterScores = Field(default_factory=ClusterScores)
    # What the generated DeschedulerPolicies evict (steer/core/descheduling.py).
    descheduling: Descheduling = Field(default_factory=Descheduling)
    # Energy as efficiency: watts per busy core and idle watts, the power model from node
    # specs, consolidation and drain candidates (steer/core/policy/energy.py).
    energy: Energy = Field(default_factory=Energy)
    # Per-device readings joined to DRA devices (steer/core/policy/devices.py).
    devices: Devices = Field(default_factory=Devices)

    def mode_for(self, tenant: Tenant | None) -> Mode:
        """Enforce or audit for a pod of `tenant` (None: of no tenant, which follows `mode`):
        `tenants[].mode` when set, else `mode`. Enforce steers pods and denies what the rules
        deny. Audit changes nothing the scheduler reads:
        - the webhook computes the same mutation but patches only the pod's trace annotation,
          which says `"mode": "audit"` and what it would have added (steer/core/mutation.py);
        - the validating webhook allows what it would deny and says why in a warning; the
          budget's admission policy treats the audited tenants' pods as pods outside every
          budget (steer/core/admission_policy/budget.py): they need no pool request, and may
          still not forge one, which would take room from the enforced tenants;
        - a taint rule marked `security: true` holds in every mode: a toleration of a reserved
          taint is denied in audit mode too, by the webhook and by the apiserver's policy;
        - with `spec.mode: audit` the scorer writes labels, gates and pools but no taint (a
          taint acts on every pod, steered or not): scorer/cycle/plan/node.py.
        """
        if tenant is not None and tenant.mode is not None:
            return tenant.mode
        return self.mode

    def audits(self, tenant: Tenant | None) -> bool:
        return self.mode_for(tenant) == AUDIT

    def audited_tenants(self) -> tuple[str, ...]:
        """The names of the tenants in audit mode; `''` stands for pods of no tenant when the
        whole policy audits (the tenant variable of the admission policies is `''` for them)."""
        names = tuple(t.name for t in self.tenants if self.audits(t))
        return (*names, "") if self.mode == AUDIT else names

    @property
    def taints_written(self) -> bool:
        """Whether the scorer sets the taint rules' taints (not in audit mode)."""
        return self.mode == ENFORCE

    def issues(self) -> Iterator[PolicyIssue]:
        """Every problem of a well-typed spec, paths relative to it. Names that must be unique
        and references by name are checked on the raw document (steer/core/policy/references.py),
        so they are reported even beside field errors."""
        yield from self._label_prefix_issues()
        yield from self._label_key_issues()
        yield from self._weight_issues()
        for i, dim in enumerate(self.dimensions):
            yield from nested(f"dimensions[{i}]", dim.issues())
        for i, rule in enumerate(self.taints):
            yield from nested(f"taints[{i}]", rule.issues())
        for i, pclass in enumerate(self.pod_classes):
            yield from nested(f"podClasses[{i}]", pclass.issues())
            if pclass.dimensions and not any(
                d.weight > 0 and d.publish == "score"
                for d in self.dimensions
                if d.name in pclass.dimensions
            ):
                yield PolicyIssue(
                    f"podClasses[{i}].dimensions",
                    "needs at least one score dimension with weight > 0",
                )
        for i, tenant in enumerate(self.tenants):
            yield from nested(f"tenants[{i}]", tenant.issues(self))
        yield from self._resource_prefix_issues()
        for i, spread in enumerate(self.spread):
            yield from nested(f"spread[{i}]", spread.issues())
        yield from nested("optIn.namespaceSelector", self.opt_in.namespace_selector.issues())
        yield from nested("clusterScores", self.cluster_scores.issues(self))
        yield from nested("descheduling", self.descheduling.issues(self))
        yield from nested("energy", self.energy.issues(self))
        yield from nested("devices", self.devices.issues(self))

    def _label_prefix_issues(self) -> Iterator[PolicyIssue]:
        prefix = self.label_prefix
        if "/" not in prefix:
            yield PolicyIssue(
                "labelPrefix",
                f"must contain a DNS-subdomain and '/', e.g. {DEFAULT_LABEL_PREFIX!r} or "
                f"'{NODE_RESTRICTION_PREFIX}steer-', got {prefix!r}",
            )
        elif kubernetes_domain(prefix) and not prefix.startswith(NODE_RESTRICTION_PREFIX):
            yield PolicyIssue(
                "labelPrefix",
                f"the kubernetes.io and k8s.io prefixes are reserved; use your own domain or "
                f"{NODE_RESTRICTION_PREFIX!r}, got {prefix!r}",
            )

    def _label_key_issues(self) -> Iterator[PolicyIssue]:
        """Every label the scorer will write must be accepted by the apiserver, and written by
        one rule only."""
        suffixes: list[tuple[str, str]] = [
            (f"dimensions[{i}].name", d.label_suffix) for i, d in enumerate(self.dimensions)
        ]
        suffixes += [(f"taints[{i}].name", r.name) for i, r in enumerate(self.taints)]
        suffixes.append(("scoring.compositeLabel", composite_suffix(self.scoring, None)))
        suffixes += [
            (f"podClasses[{i}].name", composite_suffix(self.scoring, c.name))
            for i, c in enumerate(self.pod_classes)
        ]
        suffixes += [
            (f"podClasses[{i}].reserveNodes", f"{RESERVED_PREFIX}{c.name}")
            for i, c in enumerate(self.pod_classes)
            if c.reserve_nodes != "none"
        ]
        if self.energy.drain_candidates.enabled:
            suffixes.append(("energy.drainCandidates", DRAIN_LABEL))
        for path, suffix in suffixes:
            key = self.label_prefix + suffix
            for problem in label_key_errors(key):
                yield PolicyIssue(path, f"label key {key!r} is invalid: {problem}")
        clashes = duplicates(suffix for _, suffix in suffixes)
        for path, suffix in suffixes:
            if suffix in clashes:
                yield PolicyIssue(
                    path, f"label {self.label_prefix + suffix!r} would be written by two rules"
                )

    def _weight_issues(self) -> Iterator[PolicyIssue]:
        weighted = [d for d in self.dimensions if d.publish == "score" and d.weight > 0]
        if not weighted:
            yield PolicyIssue(
                "dimensions",
                "the weights of the score dimensions must sum to more than 0 (no composite score otherwise)",
            )
        composite = self.scoring.composite_dimensions
        if composite and not any(d.name in composite for d in weighted):
            yield PolicyIssue(
                "scoring.compositeDimensions",
                "needs at least one score dimension with weight > 0",
            )

    def _resource_prefix_issues(self) -> Iterator[PolicyIssue]:
        """The prefix of pools and gates: a DNS subdomain of the operator's (Kubernetes' own
        `kubernetes.io` only with `nativeResourceNames`), and every resource name it makes
        valid; the former prefixes are prefixes too, and not the current one."""
        prefix = self.resource_prefix
        path = "resourcePrefix"
        if not prefix.endswith("/") or prefix.count("/") != 1:
            yield PolicyIssue(
                path,
                f"must be a DNS subdomain followed by '/', e.g. {DEFAULT_RESOURCE_PREFIX!r}, "
                f"got {prefix!r}",
            )
            return
        if prefix.startswith(("kubernetes.io/", "k8s.io/")):
            yield PolicyIssue(
                path,
                f"the bare kubernetes.io/ and k8s.io/ prefixes are Kubernetes' own; use your "
                f"own domain, e.g. {DEFAULT_RESOURCE_PREFIX!r}",
            )
            return
        native = NATIVE_RESOURCE_MARK in prefix
        if self.native_resource_names and not native:
            yield PolicyIssue(
                "nativeResourceNames",
                f"true needs a resourcePrefix containing 'kubernetes.io/' (Kubernetes treats "
                f"only such names as native), got {prefix!r}",
            )
        elif not self.native_resource_names and (native or kubernetes_domain(prefix)):
            yield PolicyIssue(
                path,
                f"{prefix!r} is under a domain the API conventions reserve to Kubernetes "
                f"(kubernetes.io, k8s.io); use your own, e.g. {DEFAULT_RESOURCE_PREFIX!r} (the "
                f"default), or set nativeResourceNames: true to keep native resource names "
                f"knowingly (docs/resources.md)",
            )
        levels = [
            f"{t.overcommit_percent:g}" for t in self.tenants if t.overcommit_percent is not None
        ]
        longest_level = max(levels, key=len, default="0")
        names = [f"{prefix}pool-memory", f"{prefix}budget-{longest_level}pct"]
        names += [f"{prefix}avoid-{r.name}" for r in self.taints]
        names += [f"{prefix}unreserved-{c.name}" for c in self.pod_classes]
        for name in names:
            for problem in label_key_errors(name):
                yield PolicyIssue(path, f"resource name {name!r} is invalid: {problem}")
        for i, former in enumerate(self.former_resource_prefixes):
            where = f"formerResourcePrefixes[{i}]"
            if former == prefix:
                yield PolicyIssue(where, f"is the resourcePrefix itself ({prefix!r})")
            for problem in label_key_errors(f"{former}pool-memory"):
                yield PolicyIssue(where, f"{former!r} is not a resource prefix: {problem}")
        for former in duplicates(self.former_resource_prefixes):
            yield PolicyIssue("formerResourcePrefixes", f"lists {former!r} twice")

    @property
    def resource_prefixes(self) -> tuple[str, ...]:
        """The current resource prefix, then the former ones."""
        return (self.resource_prefix, *self.former_resource_prefixes)


class Metadata(PolicyModel):
    name: ObjectName = "default"


class SteeringPolicyDoc(PolicyModel):
    api_version: str
    kind: Literal["SteeringPolicy"]
    metadata: Metadata = Field(default_factory=Metadata)
    spec: Spec

    @field_validator("api_version")
    @classmethod
    def _known_api_version(cls, value: str) -> str:
        if value == API_VERSION or value in LEGACY_API_VERSIONS:
            return API_VERSION
        raise ValueError(f"input should be {API_VERSION!r}, got {value!r}")

    # On the document, not the spec: the checks run only once every field of the document is
    # well-typed (a wrong apiVersion is reported alone, as before the checks were models').
    @model_validator(mode="after")
    def _checked(self) -> Self:
        raise_issues(nested("spec", self.spec.issues()))
        return self
