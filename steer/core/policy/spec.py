"""The SteeringPolicy document: one YAML file that drives both the scorer and the webhook.

Parsing is pure (text in, model or `PolicyError` out) so the CLI, the hot-reload helper and the
tests share one validator. Field errors come from pydantic; reference checks that span fields
(a taint rule naming an unknown dimension, duplicate tenants, label keys the apiserver would
refuse) run once every field is well-typed, and all of them are reported together.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
)
from pydantic.alias_generators import to_camel

from steer.core.k8s_names import (
    is_dns1123_label,
    is_dns1123_subdomain,
    label_key_errors,
    label_value_errors,
)

# The project's domain: a GitHub organisation's `<org>.github.io` belongs to that organisation
# alone, so no other project writes labels under it. Every key is under `spec.labelPrefix`.
API_VERSION = "kube-steer.github.io/v1alpha1"
# Read as API_VERSION: policies written before the project had a domain of its own.
LEGACY_API_VERSIONS = ("steer.io/v1alpha1",)
KIND = "SteeringPolicy"
DEFAULT_LABEL_PREFIX = "kube-steer.github.io/"
# Budget pools and gates (steer/core/gates.py) are node resources under this prefix. It contains
# `kubernetes.io/`, so Kubernetes treats them as native resources: the scheduler does not
# re-validate their names on every node it filters (measured: two of them keep 0.89x of a plain
# pod's scheduling throughput at 1,000 nodes, two extended resources 0.64x), and a pod
# requests them without a matching limit.
DEFAULT_RESOURCE_PREFIX = "kube-steer.kubernetes.io/"
NATIVE_RESOURCE_MARK = "kubernetes.io/"
# Who creates DaemonSet pods: the controller manager's daemon-set-controller ServiceAccount
# (with --use-service-account-credentials, as kubeadm sets it), or the controller manager itself.
DAEMONSET_CREATORS = (
    "system:serviceaccount:kube-system:daemon-set-controller",
    "system:kube-controller-manager",
)
# Kubelets may not set labels under this prefix (NodeRestriction admission), so a compromised
# node cannot promote itself to "best node".
NODE_RESTRICTION_PREFIX = "node-restriction.kubernetes.io/"
ALWAYS_EXCLUDED_NAMESPACES = ("kube-system",)
# What the apiserver writes into a pod that names no scheduler.
DEFAULT_SCHEDULER = "default-scheduler"
# The label contract (README "Node labels"): a dimension published as a score is
# `<prefix>score-<dimension>`, 0..100, higher is better for placement, whatever the metric's
# direction; the composites are `<prefix><compositeLabel>` (pods of no class) and
# `<prefix><compositeLabel>-class-<class>`; a dimension published raw carries the value itself
# under `<prefix><dimension>`, whose name ends with its unit (`overcommit-pct`, `power-watts`).
SCORE_PREFIX = "score-"
# Units a raw dimension's name may end with without naming `unit:` (any other one word may be
# named there).
KNOWN_UNITS = frozenset(
    {
        "pct",
        "ratio",
        "watts",
        "joules",
        "celsius",
        "seconds",
        "ms",
        "bytes",
        "count",
        "gpus",
        "cores",
    }
)
CLASS_INFIX = "-class-"
# Label suffix of the nodes a pod class reserves (`<prefix>reserved-for-<class>`).
RESERVED_PREFIX = "reserved-for-"
# Resources every node offers: a class cannot reserve nodes by them.
CORE_RESOURCES = frozenset({"cpu", "memory", "ephemeral-storage", "pods"})
_PROM_LABEL_RE = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_UNIT_RE = re.compile(r"^[a-z][a-z0-9]{0,15}$")


def _between(lo: float, hi: float) -> AfterValidator:
    def check(value: float) -> float:
        if not lo <= value <= hi:
            raise ValueError(f"must be between {_fmt(lo)} and {_fmt(hi)}, got {_fmt(value)}")
        return value

    return AfterValidator(check)


def _at_least(lo: float) -> AfterValidator:
    def check(value: float) -> float:
        if value < lo:
            raise ValueError(f"must be at least {_fmt(lo)}, got {_fmt(value)}")
        return value

    return AfterValidator(check)


def _fmt(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError(f"must be a finite number, got {value}")
    return value


Percent = Annotated[float, AfterValidator(_finite), _between(0, 100)]
PositiveSeconds = Annotated[float, AfterValidator(_finite), _at_least(0.001)]
Cycles = Annotated[int, _between(1, 1000)]
Weight = Annotated[float, AfterValidator(_finite), _between(0, 1000)]


def _step(value: int) -> int:
    # Buckets are 0, step, 2*step, ..., 100: the top bucket must be exactly 100 so that the
    # binary-weighted preference terms sum to the bucket value at every level.
    if value < 1 or 100 % value:
        raise ValueError(f"must divide 100 (1, 2, 4, 5, 10, 20, 25, 50 or 100), got {value}")
    return value


Step = Annotated[int, AfterValidator(_step)]


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
    )


class Direction(StrEnum):
    HIGHER_IS_BETTER = "higherIsBetter"
    LOWER_IS_BETTER = "lowerIsBetter"


class LabelSelector(_Model):
    """A Kubernetes label selector (matchLabels + matchExpressions)."""

    match_labels: dict[str, str] = Field(default_factory=dict)
    match_expressions: tuple[SelectorRequirement, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        if any(labels.get(k) != v for k, v in self.match_labels.items()):
            return False
        return all(req.matches(labels) for req in self.match_expressions)


class SelectorRequirement(_Model):
    key: str
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        if self.operator == "In":
            return present and labels[self.key] in self.values
        return not present or labels[self.key] not in self.values


LabelSelector.model_rebuild()


class Normalization(_Model):
    """How raw values map onto 0..100 before the direction is applied.

    `minMax` spreads the cluster's current range over 0..100 (relative: the best node is always
    100); `fixed` uses absolute bounds (a 50 % loaded GPU scores the same in any cluster).
    """

    method: Literal["minMax", "fixed"] = "minMax"
    min: float | None = None
    max: float | None = None


class Prometheus(_Model):
    url: str = "http://prometheus.monitoring.svc:9090"
    timeout_seconds: PositiveSeconds = 10.0
    bearer_token_file: str | None = None
    ca_file: str | None = None


def composite_suffix(scoring: Scoring, pod_class: str | None) -> str:
    """The composite label for pods of `pod_class` (None: of no class), after the prefix."""
    base = scoring.composite_label
    return base if pod_class is None else f"{base}{CLASS_INFIX}{pod_class}"


class Scoring(_Model):
    """Cluster-wide scorer defaults; each dimension may override them."""

    interval_seconds: PositiveSeconds = 30.0
    step: Step = 10
    hysteresis: Annotated[float, _between(0, 49)] = 3.0
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
    write_qps: Annotated[float, _between(0.1, 1000)] = 100.0
    write_burst: Annotated[int, _between(1, 1000)] = 200
    resource_write_qps: Annotated[float, _between(0.1, 1000)] = 100.0
    resource_write_burst: Annotated[int, _between(1, 1000)] = 200
    # A pod bound to a node in the last window lowers that node's composite by this many
    # points per pod (anti-herding between cycles), down to zero.
    hot_penalty_per_pod: Annotated[float, _between(0, 100)] = 5.0
    hot_window_seconds: Annotated[float, _between(0, 3600)] = 60.0


class KubernetesSource(_Model):
    """A value computed from the Kubernetes API (scorer/sources/kubernetes.py).

    `limitOvercommit`: max over cpu and memory of the node's pods' limits / allocatable - 1, in
    % (a node without pods reads -100). `endpointReadiness`: % of the endpoints of Service
    `namespace/service` on the node that are ready (no value where it has none).
    """

    kind: Literal["limitOvercommit", "endpointReadiness"]
    namespace: str | None = None
    service: str | None = None


class HttpSource(_Model):
    """A JSON document fetched over HTTP (a service registry's REST API), mapped to nodes.

    `items` is the dotted path to the list of entries (empty: the document itself); each entry
    names its node in `nodeField` (a name or an address) and its value in `valueField`, read as
    a number, or looked up in `statusValues` (e.g. Consul's `passing: 100`). Several entries on
    one node combine by `aggregate`.
    """

    url: str
    items: str = ""
    node_field: str
    value_field: str
    status_values: dict[str, float] | None = None
    aggregate: Literal["min", "max", "mean"] = "min"
    timeout_seconds: PositiveSeconds = 10.0
    # Sent as `Authorization: Bearer <token>` (Consul accepts an ACL token so).
    bearer_token_file: str | None = None
    ca_file: str | None = None


class Dimension(_Model):
    name: str
    # Where the raw values come from; `query` is the PromQL of a `prometheus` dimension.
    source: Literal["prometheus", "kubernetes", "http"] = "prometheus"
    query: str = ""
    kubernetes: KubernetesSource | None = None
    http: HttpSource | None = None
    node_label: str = "node"
    direction: Direction = Direction.HIGHER_IS_BETTER
    normalization: Normalization = Field(default_factory=Normalization)
    weight: Weight = 1.0
    # `score` publishes the normalised 0..100 bucket as `<prefix>score-<name>`; `raw` publishes
    # the raw value rounded to an integer as `<prefix><name>`, and the name must end with the
    # unit (e.g. overcommit-pct, which the webhook compares with `Lt` against a budget).
    publish: Literal["score", "raw"] = "score"
    # The unit of the raw value (`pct`, `watts`, `gpus`, `ratio`, ...), shown by /explain and
    # `steer scorer once`. A raw dimension's unit is the last part of its name unless set.
    unit: str | None = None
    step: Step | None = None
    hysteresis: Annotated[float, _between(0, 49)] | None = None
    ttl_seconds: PositiveSeconds | None = None

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must be a PromQL expression, got an empty string")
        return value

    @property
    def label_suffix(self) -> str:
        """The label this dimension writes, after the prefix (the label contract above)."""
        return self.name if self.publish == "raw" else SCORE_PREFIX + self.name

    @property
    def raw_unit(self) -> str | None:
        """`unit`, else (a raw dimension) the last part of its name if it is a known unit."""
        if self.unit is not None:
            return self.unit
        suffix = self.name.rsplit("-", 1)[-1]
        if self.publish == "raw" and "-" in self.name and suffix in KNOWN_UNITS:
            return suffix
        return None

    @property
    def what(self) -> str:
        """What the values are read from, for traces and /explain: the PromQL, or the source."""
        if self.source == "kubernetes" and self.kubernetes is not None:
            k = self.kubernetes
            target = f" {k.namespace}/{k.service}" if k.kind == "endpointReadiness" else ""
            return f"kubernetes: {k.kind}{target}"
        if self.source == "http" and self.http is not None:
            return f"http: GET {self.http.url}"
        return self.query


class Condition(_Model):
    dimension: str
    # `source: raw` compares the metric as Prometheus returned it; `score` the 0..100 score.
    source: Literal["raw", "score"] = "raw"
    operator: Literal["Gt", "Ge", "Lt", "Le"]
    value: float
    # Once the condition holds, it clears only when the value is back past `value` by this
    # much (same unit as `value`): a node hovering at the threshold keeps its taint instead of
    # being rewritten every few cycles.
    margin: Annotated[float, AfterValidator(_finite), _at_least(0)] = 0.0

    def holds(self, observed: float, *, active: bool = False) -> bool:
        """Whether the condition holds; `active` (it held before) applies the clearing margin."""
        shift = self.margin if active else 0.0
        if self.operator in ("Gt", "Ge"):
            bound = self.value - shift
            return observed > bound if self.operator == "Gt" else observed >= bound
        bound = self.value + shift
        return observed < bound if self.operator == "Lt" else observed <= bound


class TaintRule(_Model):
    """A condition on a dimension that marks a node (label `<prefix><name>=true`) and taints it.

    `setAfterCycles`/`clearAfterCycles` debounce the condition so one noisy sample does not
    taint (and, with NoExecute, evict) a node.
    """

    name: str
    condition: Condition
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"
    set_after_cycles: Cycles = 2
    clear_after_cycles: Cycles = 3
    # Security rules deny tolerations of this taint even when the webhook is down: the
    # apiserver enforces them itself through the ValidatingAdmissionPolicy that
    # `steer policy admission-policy` generates (steer/core/admission_policy.py).
    security: bool = False


class PodClass(_Model):
    """Pods recognised by what they request; each class is steered by its own composite."""

    name: str
    requests_any: tuple[str, ...] = ()
    dimensions: tuple[str, ...] = ()
    scheduler_profile: str | None = None
    avoid: tuple[str, ...] = ()
    # Nodes that offer one of `requestsAny` (allocatable > 0) are kept for this class: the
    # scorer labels them `<prefix>reserved-for-<class>=true`, and the webhook steers every other
    # opted-in pod away from them, by preference (`prefer`: only when nothing else fits) or
    # by a required term (`require`). A node carrying a taint the class avoids is not reserved:
    # the class cannot use it.
    reserve_nodes: Literal["none", "prefer", "require"] = "none"


class Tenant(_Model):
    name: str
    namespace_selector: LabelSelector
    overcommit_percent: Percent | None = None
    default_scheduler_name: str | None = None
    allowed_scheduler_names: tuple[str, ...] = ("default-scheduler",)
    allowed_tolerations: tuple[str, ...] = ()


class SpreadRule(_Model):
    name: str
    label_key: str
    topology_key: str = "topology.kubernetes.io/zone"
    max_skew: Annotated[int, _between(1, 1000)] = 1
    when_unsatisfiable: Literal["DoNotSchedule", "ScheduleAnyway"] = "ScheduleAnyway"
    match_label_keys: tuple[str, ...] = ()


class SchedulerProfiles(_Model):
    """Profiles of the stock kube-scheduler that `manifests/scheduler/profiles.yaml` adds.

    Only when `installed` is true does the webhook route pods to them; otherwise a pod that
    names a missing profile would stay Pending forever.
    """

    installed: bool = False
    spread: str = "steer-spread"
    binpack: str = "steer-binpack"
    default_scheduler_is_unset: bool = True


class Overcommit(_Model):
    """How tenant budgets (`tenants[].overcommitPercent`) are enforced on nodes.

    `labels`: tenant pods require nodes whose `overcommit-pct` label is within budget; all pods
    of a burst see the same labels, so a budget holds at admission, not always at the end.
    `scheduler`: also through extended resources and pod anti-affinity that the scheduler
    accounts for on every bind (steer/core/budget.py), so a budget holds at the end state.
    """

    enforcement: Literal["labels", "scheduler"] = "labels"


class Infrastructure(_Model):
    """Pods kube-steer never steers nor refuses, because they must run where they are put.

    DaemonSet pods are recognised by who creates them (an owner reference alone can be forged
    by anyone who may create pods); mirror pods of static pods by the node identity that
    creates them (`system:nodes`) and their `kubernetes.io/config.mirror` annotation. Both are
    exempt from the webhooks (`matchConditions`) and from the admission policies. Pods that
    name their node (`spec.nodeName`) are steered only by their budget (the kubelet enforces
    it); see `ResourceSteering.container_requests`.
    """

    daemon_set_creators: tuple[str, ...] = DAEMONSET_CREATORS


class OptIn(_Model):
    namespace_selector: LabelSelector = Field(
        default_factory=lambda: LabelSelector(match_labels={"kube-steer.github.io/enabled": "true"})
    )
    excluded_namespaces: tuple[str, ...] = ()


class ClusterScore(_Model):
    """One cluster-level score in the AddOnPlacementScore (scorer/clusterscore.py computes it).

    The raw value (`freeResource`: whole units; `tenantHeadroom`: cores or GiB;
    `powerPerCore`: watts per requested core) maps linearly from `worst` (-100) to `best`
    (100), clamped. Use the same bounds in every cluster: Placement compares the values.
    """

    # What a Placement names in `scoreCoordinate.addOn.scoreName`.
    name: str
    kind: Literal["freeResource", "tenantHeadroom", "powerPerCore"]
    # freeResource: the extended resource counted (whole units); tenantHeadroom: cpu | memory.
    resource: str | None = None
    # freeResource: `sum` over eligible nodes, or `max`, the most free on one node (the
    # largest job that still fits whole).
    aggregate: Literal["sum", "max"] = "sum"
    tenant: str | None = None  # tenantHeadroom: whose budget
    dimension: str | None = None  # powerPerCore: the dimension holding node watts
    worst: Annotated[float, AfterValidator(_finite)] | None = None
    best: Annotated[float, AfterValidator(_finite)] | None = None

    @property
    def target(self) -> str:
        """The resource the score counts, with the kind's default."""
        if self.resource:
            return self.resource
        return "nvidia.com/gpu" if self.kind == "freeResource" else "cpu"

    @property
    def bounds(self) -> tuple[float, float]:
        """(worst, best): the raw values that map to -100 and 100 (validated to differ)."""
        return (0.0 if self.worst is None else self.worst, 0.0 if self.best is None else self.best)


class ClusterScores(_Model):
    """Cluster-level scores published for Open Cluster Management's Placement as an
    AddOnPlacementScore (cluster.open-cluster-management.io/v1alpha1) on the hub, in the
    managed cluster's namespace there. Every write sets `status.validUntil` to now +
    `validForSeconds`, so a scorer that stops leaves scores that expire (Placement then
    counts 0) instead of a stale best cluster."""

    enabled: bool = False
    # The hub's kubeconfig file; unset: the scorer's own credentials (the hub is this cluster).
    hub_kubeconfig: str | None = None
    # This cluster's name on the hub: the namespace of the object.
    cluster_name: str = ""
    # The object's name: what a Placement names in `scoreCoordinate.addOn.resourceName`.
    resource_name: str = "kube-steer"
    valid_for_seconds: PositiveSeconds = 300.0
    scores: tuple[ClusterScore, ...] = ()


class Spec(_Model):
    label_prefix: str = DEFAULT_LABEL_PREFIX
    resource_prefix: str = DEFAULT_RESOURCE_PREFIX
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
    # new nodes schedulable (DESIGN decision 5); `deny` is for clusters that prefer safety.
    unscored_nodes: Literal["allow", "deny"] = "allow"
    project_namespace: str = "kube-steer"
    infrastructure: Infrastructure = Field(default_factory=Infrastructure)
    cluster_scores: ClusterScores = Field(default_factory=ClusterScores)


class Metadata(_Model):
    name: str = "default"


class SteeringPolicyDoc(_Model):
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


@dataclass(frozen=True)
class PolicyIssue:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}" if self.path else self.message


class PolicyError(ValueError):
    """The document is not a valid policy; `issues` lists every problem found."""

    def __init__(self, issues: Iterable[PolicyIssue]):
        self.issues = tuple(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


@dataclass(frozen=True)
class Policy:
    """A validated policy plus its identity (name and content hash)."""

    doc: SteeringPolicyDoc
    digest: str

    @property
    def spec(self) -> Spec:
        return self.doc.spec

    @property
    def name(self) -> str:
        return self.doc.metadata.name

    @property
    def version(self) -> str:
        """Short, stable identity written into traces and annotations: `name@hash`."""
        return f"{self.name}@{self.digest[:10]}"

    def dimension(self, name: str) -> Dimension:
        for dim in self.spec.dimensions:
            if dim.name == name:
                return dim
        raise KeyError(name)

    def label_key(self, suffix: str) -> str:
        return self.spec.label_prefix + suffix

    def step_of(self, dim: Dimension) -> int:
        return dim.step if dim.step is not None else self.spec.scoring.step

    def hysteresis_of(self, dim: Dimension) -> float:
        return dim.hysteresis if dim.hysteresis is not None else self.spec.scoring.hysteresis

    def ttl_of(self, dim: Dimension) -> float:
        return dim.ttl_seconds if dim.ttl_seconds is not None else self.spec.scoring.ttl_seconds

    def composite_suffix(self, pod_class: str | None) -> str:
        return composite_suffix(self.spec.scoring, pod_class)

    def tenant(self, name: str) -> Tenant:
        for tenant in self.spec.tenants:
            if tenant.name == name:
                return tenant
        raise KeyError(name)

    def taint_rule(self, name: str) -> TaintRule:
        for rule in self.spec.taints:
            if rule.name == name:
                return rule
        raise KeyError(name)


def routed_scheduler(spec: Spec, tenant: Tenant | None, pod_class: PodClass | None) -> str | None:
    """The schedulerName the webhook sets on an opted-in pod that left it unset, or None to
    leave it alone (the pod keeps `default-scheduler`).

    Profiles are used only when the policy says they are installed: a pod naming a profile
    that no scheduler serves would stay Pending forever.
    """
    profiles = spec.scheduler_profiles
    if not profiles.installed:
        return None
    if pod_class is not None and pod_class.scheduler_profile:
        wanted = pod_class.scheduler_profile
    elif tenant is not None and tenant.default_scheduler_name:
        wanted = tenant.default_scheduler_name
    else:
        wanted = profiles.spread
    if tenant is not None and wanted not in tenant.allowed_scheduler_names:
        return tenant.default_scheduler_name
    return wanted


def parse_policy(text: str | bytes) -> Policy:
    """Parse and validate a policy document; raise `PolicyError` listing every problem."""
    try:
        raw = yaml.safe_load(text)
    except RecursionError:
        raise PolicyError(
            [PolicyIssue("", "nested too deeply to be a policy (the YAML parser gave up)")]
        ) from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise PolicyError([PolicyIssue("", f"not valid YAML: {where}{problem}")]) from None
    if not isinstance(raw, dict):
        got = type(raw).__name__ if raw is not None else "an empty document"
        raise PolicyError(
            [PolicyIssue("", f"must be a YAML mapping (a SteeringPolicy), got {got}")]
        )
    # Reference checks read the raw document, so they are reported together with any field
    # errors; the remaining cross-field checks need well-typed fields.
    spec = raw.get("spec")
    references = list(_reference_issues(spec)) if isinstance(spec, dict) else []
    try:
        doc = SteeringPolicyDoc.model_validate(raw)
    except ValidationError as exc:
        raise PolicyError(_issues_from_pydantic(exc) + references) from None
    except RecursionError:
        raise PolicyError([PolicyIssue("", "nested too deeply to be a policy")]) from None
    issues = references + list(_cross_field_issues(doc.spec))
    if issues:
        raise PolicyError(issues)
    data = text.encode() if isinstance(text, str) else text
    return Policy(doc=doc, digest=hashlib.sha256(data).hexdigest())


def _issues_from_pydantic(exc: ValidationError) -> list[PolicyIssue]:
    issues = []
    for err in exc.errors(include_url=False):
        path = _path(err["loc"])
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "unknown field (check the spelling; fields are camelCase)"
        elif err["type"] == "missing":
            message = "required field is missing"
        elif err["type"] == "literal_error":
            message = f"{message[0].lower()}{message[1:]}, got {err.get('input')!r}"
        elif err["type"] == "too_short" and isinstance(err.get("input"), list | tuple):
            message = "must list at least one entry"
        elif "input" in err and not message.endswith(repr(err["input"])) and "got" not in message:
            message = f"{message[0].lower()}{message[1:]}, got {_short(err['input'])}"
        issues.append(PolicyIssue(path, message))
    return issues


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _path(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else part
    return out


def _duplicates(names: Iterable[str]) -> set[str]:
    seen: set[str] = set()
    dups: set[str] = set()
    for name in names:
        (dups if name in seen else seen).add(name)
    return dups


def _named(spec: Mapping[str, Any], field: str) -> list[tuple[int, Mapping[str, Any], str]]:
    """(index, item, name) of the well-formed entries of a raw list of named objects."""
    items = spec.get(field)
    if not isinstance(items, list):
        return []
    return [
        (i, item, item["name"])
        for i, item in enumerate(items)
        if isinstance(item, dict) and isinstance(item.get("name"), str)
    ]


def _strings(value: Any) -> list[tuple[int, str]]:
    if not isinstance(value, list):
        return []
    return [(j, v) for j, v in enumerate(value) if isinstance(v, str)]


def _reference_issues(spec: Mapping[str, Any]) -> Iterable[PolicyIssue]:
    """Names that must be unique, and references to dimensions and taint rules by name.

    Malformed entries are skipped here: the field validation reports them.
    """
    for field in ("dimensions", "taints", "tenants", "podClasses", "spread"):
        names = [name for _, _, name in _named(spec, field)]
        dups = _duplicates(names)
        seen: set[str] = set()
        for i, _, name in _named(spec, field):
            if name in dups and name in seen:
                yield PolicyIssue(f"spec.{field}[{i}].name", f"duplicate name {name!r}")
            seen.add(name)

    dim_names = {name for _, _, name in _named(spec, "dimensions")}
    rule_names = {name for _, _, name in _named(spec, "taints")}
    for i, rule, _ in _named(spec, "taints"):
        condition = rule.get("condition")
        dimension = condition.get("dimension") if isinstance(condition, dict) else None
        if isinstance(dimension, str) and dimension not in dim_names:
            yield PolicyIssue(
                f"spec.taints[{i}].condition.dimension",
                f"unknown dimension {dimension!r}; known: {sorted(dim_names)}",
            )
    scoring = spec.get("scoring")
    composite_dims = scoring.get("compositeDimensions") if isinstance(scoring, dict) else None
    for j, name in _strings(composite_dims):
        if name not in dim_names:
            yield PolicyIssue(
                f"spec.scoring.compositeDimensions[{j}]",
                f"unknown dimension {name!r}; known: {sorted(dim_names)}",
            )
    for i, pclass, _ in _named(spec, "podClasses"):
        for j, name in _strings(pclass.get("dimensions")):
            if name not in dim_names:
                yield PolicyIssue(
                    f"spec.podClasses[{i}].dimensions[{j}]", f"unknown dimension {name!r}"
                )
        for j, name in _strings(pclass.get("avoid")):
            if name not in rule_names:
                yield PolicyIssue(
                    f"spec.podClasses[{i}].avoid[{j}]", f"unknown taint rule {name!r}"
                )
    for i, dim, _ in _named(spec, "dimensions"):
        if dim.get("source", "prometheus") == "prometheus" and "query" not in dim:
            yield PolicyIssue(f"spec.dimensions[{i}].query", "required field is missing")
    for i, tenant, _ in _named(spec, "tenants"):
        for j, name in _strings(tenant.get("allowedTolerations")):
            if name not in rule_names:
                yield PolicyIssue(
                    f"spec.tenants[{i}].allowedTolerations[{j}]",
                    f"unknown taint rule {name!r}; known: {sorted(rule_names)}",
                )


def _cross_field_issues(spec: Spec) -> Iterable[PolicyIssue]:
    yield from _label_prefix_issues(spec.label_prefix)
    # Every label the scorer will write must be accepted by the apiserver.
    suffixes: list[tuple[str, str]] = [
        (f"spec.dimensions[{i}].name", d.label_suffix) for i, d in enumerate(spec.dimensions)
    ]
    suffixes += [(f"spec.taints[{i}].name", r.name) for i, r in enumerate(spec.taints)]
    suffixes.append(("spec.scoring.compositeLabel", composite_suffix(spec.scoring, None)))
    suffixes += [
        (f"spec.podClasses[{i}].name", composite_suffix(spec.scoring, c.name))
        for i, c in enumerate(spec.pod_classes)
    ]
    suffixes += [
        (f"spec.podClasses[{i}].reserveNodes", f"{RESERVED_PREFIX}{c.name}")
        for i, c in enumerate(spec.pod_classes)
        if c.reserve_nodes != "none"
    ]
    for path, suffix in suffixes:
        key = spec.label_prefix + suffix
        for problem in label_key_errors(key):
            yield PolicyIssue(path, f"label key {key!r} is invalid: {problem}")
    clashes = _duplicates(suffix for _, suffix in suffixes)
    for path, suffix in suffixes:
        if suffix in clashes:
            yield PolicyIssue(
                path, f"label {spec.label_prefix + suffix!r} would be written by two rules"
            )

    weighted = [d for d in spec.dimensions if d.publish == "score" and d.weight > 0]
    if not weighted:
        yield PolicyIssue(
            "spec.dimensions",
            "the weights of the score dimensions must sum to more than 0 (no composite score otherwise)",
        )
    if spec.scoring.composite_dimensions and not any(
        d.name in spec.scoring.composite_dimensions for d in weighted
    ):
        yield PolicyIssue(
            "spec.scoring.compositeDimensions",
            "needs at least one score dimension with weight > 0",
        )

    for i, dim in enumerate(spec.dimensions):
        norm = dim.normalization
        base = f"spec.dimensions[{i}].normalization"
        if norm.method == "fixed":
            if norm.min is None or norm.max is None:
                yield PolicyIssue(base, "method fixed needs both min and max")
            elif not norm.min < norm.max:
                yield PolicyIssue(
                    f"{base}.max", f"must be greater than min ({norm.min}), got {norm.max}"
                )
        elif norm.min is not None or norm.max is not None:
            yield PolicyIssue(base, "min/max are only used with method: fixed")
        yield from _source_issues(f"spec.dimensions[{i}]", dim)
        yield from _unit_issues(f"spec.dimensions[{i}]", dim)
        if not _PROM_LABEL_RE.match(dim.node_label):
            yield PolicyIssue(
                f"spec.dimensions[{i}].nodeLabel",
                f"must be a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*), got {dim.node_label!r}",
            )

    for i, rule in enumerate(spec.taints):
        if rule.condition.source == "score" and not 0 <= rule.condition.value <= 100:
            yield PolicyIssue(
                f"spec.taints[{i}].condition.value",
                f"a score condition compares against 0..100, got {rule.condition.value}",
            )

    for i, pclass in enumerate(spec.pod_classes):
        if not pclass.requests_any:
            yield PolicyIssue(
                f"spec.podClasses[{i}].requestsAny", "must list at least one resource name"
            )
        core = sorted(set(pclass.requests_any) & CORE_RESOURCES)
        if pclass.reserve_nodes != "none" and core:
            yield PolicyIssue(
                f"spec.podClasses[{i}].reserveNodes",
                f"every node offers {', '.join(core)}: reserve nodes by an extended resource "
                "(e.g. nvidia.com/gpu) only",
            )
        if pclass.dimensions and not any(
            d.weight > 0 and d.publish == "score"
            for d in spec.dimensions
            if d.name in pclass.dimensions
        ):
            yield PolicyIssue(
                f"spec.podClasses[{i}].dimensions",
                "needs at least one score dimension with weight > 0",
            )

    for i, tenant in enumerate(spec.tenants):
        if (
            tenant.default_scheduler_name
            and tenant.default_scheduler_name not in tenant.allowed_scheduler_names
        ):
            yield PolicyIssue(
                f"spec.tenants[{i}].defaultSchedulerName",
                f"{tenant.default_scheduler_name!r} is not in allowedSchedulerNames {list(tenant.allowed_scheduler_names)}",
            )
        if (
            tenant.overcommit_percent is not None
            and spec.overcommit.enforcement == "labels"
            and not any(d.publish == "raw" and d.name == "overcommit-pct" for d in spec.dimensions)
        ):
            yield PolicyIssue(
                f"spec.tenants[{i}].overcommitPercent",
                "needs a dimension named 'overcommit-pct' with publish: raw (the node label the budget is matched against)",
            )
        yield from _selector_issues(
            f"spec.tenants[{i}].namespaceSelector", tenant.namespace_selector
        )
        yield from _unschedulable_tenant_issues(spec, i, tenant)

    yield from _resource_prefix_issues(spec)

    for i, spread in enumerate(spec.spread):
        for problem in label_key_errors(spread.label_key):
            yield PolicyIssue(f"spec.spread[{i}].labelKey", problem)
        for problem in label_key_errors(spread.topology_key):
            yield PolicyIssue(f"spec.spread[{i}].topologyKey", problem)

    yield from _selector_issues("spec.optIn.namespaceSelector", spec.opt_in.namespace_selector)
    yield from _cluster_score_issues(spec)


def _unit_issues(path: str, dim: Dimension) -> Iterable[PolicyIssue]:
    """A unit is one lower-case word, and a raw label says its unit in its name."""
    if dim.unit is not None and not _UNIT_RE.match(dim.unit):
        yield PolicyIssue(
            f"{path}.unit",
            f"must be one lower-case word such as pct, watts, gpus or ratio, got {dim.unit!r}",
        )
    if dim.publish != "raw":
        return
    unit = dim.raw_unit
    if unit is None or not dim.name.endswith(f"-{unit}") or not _UNIT_RE.match(unit):
        example = f"{dim.name}-{dim.unit or 'pct'}"
        known = (
            ""
            if dim.unit
            else f", or set unit: (known without it: {', '.join(sorted(KNOWN_UNITS))})"
        )
        yield PolicyIssue(
            f"{path}.name",
            f"publish: raw writes the value itself as label {dim.name!r}, so the name must end "
            f"with its unit (e.g. {example!r}) and read apart from the 0..100 scores{known}, "
            f"got {dim.name!r}",
        )


def _source_issues(path: str, dim: Dimension) -> Iterable[PolicyIssue]:
    """Each source's settings are present, and only its own."""
    settings = {"kubernetes": dim.kubernetes, "http": dim.http}
    for source, value in settings.items():
        if dim.source == source and value is None:
            yield PolicyIssue(f"{path}.{source}", f"required for source: {source}")
        elif dim.source != source and value is not None:
            yield PolicyIssue(f"{path}.{source}", f"not used by source: {dim.source}")
    if dim.source != "prometheus" and dim.query:
        yield PolicyIssue(f"{path}.query", f"not used by source: {dim.source}")
    k = dim.kubernetes
    if dim.source == "kubernetes" and k is not None:
        if k.kind == "endpointReadiness":
            for name in ("namespace", "service"):
                value = getattr(k, name)
                if not value or not is_dns1123_label(value):
                    yield PolicyIssue(
                        f"{path}.kubernetes.{name}",
                        f"required for endpointReadiness: the Service's {name} "
                        f"(lower-case RFC 1123 label), got {value!r}",
                    )
        else:
            for name in ("namespace", "service"):
                if getattr(k, name) is not None:
                    yield PolicyIssue(f"{path}.kubernetes.{name}", f"not used by {k.kind}")
    h = dim.http
    if dim.source == "http" and h is not None:
        if not h.url.startswith(("http://", "https://")):
            yield PolicyIssue(f"{path}.http.url", f"must be an http(s) URL, got {h.url!r}")
        for name in ("node_field", "value_field"):
            if not getattr(h, name).strip():
                yield PolicyIssue(f"{path}.http.{to_camel(name)}", "must name a field")


def _selector_issues(path: str, selector: LabelSelector) -> Iterable[PolicyIssue]:
    for key, value in selector.match_labels.items():
        for problem in label_key_errors(key):
            yield PolicyIssue(f"{path}.matchLabels", f"key {key!r}: {problem}")
        for problem in label_value_errors(value):
            yield PolicyIssue(f"{path}.matchLabels[{key}]", f"value {value!r}: {problem}")
    for j, req in enumerate(selector.match_expressions):
        if req.operator in ("In", "NotIn") and not req.values:
            yield PolicyIssue(
                f"{path}.matchExpressions[{j}].values", f"operator {req.operator} needs values"
            )
        if req.operator in ("Exists", "DoesNotExist") and req.values:
            yield PolicyIssue(
                f"{path}.matchExpressions[{j}].values", f"operator {req.operator} takes no values"
            )


def _resource_prefix_issues(spec: Spec) -> Iterable[PolicyIssue]:
    """The prefix of pools and gates: a DNS subdomain containing `kubernetes.io`, and every
    resource name it makes valid."""
    prefix = spec.resource_prefix
    path = "spec.resourcePrefix"
    if not prefix.endswith("/") or NATIVE_RESOURCE_MARK not in prefix:
        yield PolicyIssue(
            path,
            f"must be a DNS subdomain containing 'kubernetes.io' followed by '/', e.g. "
            f"{DEFAULT_RESOURCE_PREFIX!r}: Kubernetes treats such resource names as native, so "
            f"the scheduler does not re-validate them on every node (an extended resource name "
            f"costs a third of the scheduling throughput), got {prefix!r}",
        )
        return
    if prefix == NATIVE_RESOURCE_MARK or prefix.startswith(("kubernetes.io/", "k8s.io/")):
        yield PolicyIssue(
            path,
            f"the bare kubernetes.io/ prefix is Kubernetes' own; add a subdomain, e.g. {DEFAULT_RESOURCE_PREFIX!r}",
        )
        return
    names = [f"{prefix}pool-memory", f"{prefix}budget-{_longest_level(spec)}pct"]
    names += [f"{prefix}avoid-{r.name}" for r in spec.taints]
    names += [f"{prefix}unreserved-{c.name}" for c in spec.pod_classes]
    for name in names:
        for problem in label_key_errors(name):
            yield PolicyIssue(path, f"resource name {name!r} is invalid: {problem}")


def _longest_level(spec: Spec) -> str:
    texts = [f"{t.overcommit_percent:g}" for t in spec.tenants if t.overcommit_percent is not None]
    return max(texts, key=len, default="0")


def _label_prefix_issues(prefix: str) -> Iterable[PolicyIssue]:
    if "/" not in prefix:
        yield PolicyIssue(
            "spec.labelPrefix",
            f"must contain a DNS-subdomain and '/', e.g. {DEFAULT_LABEL_PREFIX!r} or "
            f"'{NODE_RESTRICTION_PREFIX}steer-', got {prefix!r}",
        )
    elif prefix.startswith(("kubernetes.io/", "k8s.io/")) or (
        prefix.split("/")[0].endswith((".kubernetes.io", ".k8s.io"))
        and not prefix.startswith(NODE_RESTRICTION_PREFIX)
    ):
        yield PolicyIssue(
            "spec.labelPrefix",
            f"the kubernetes.io and k8s.io prefixes are reserved; use your own domain or "
            f"{NODE_RESTRICTION_PREFIX!r}, got {prefix!r}",
        )


def _unschedulable_tenant_issues(spec: Spec, index: int, tenant: Tenant) -> Iterable[PolicyIssue]:
    """A tenant whose pods would all be denied: the schedulerName a pod ends with (the
    apiserver's `default-scheduler`, or what the webhook routes it to) must be one the
    validating webhook allows for the tenant. It judges every namespace the tenant selects,
    opted in or not, and leaves a pod in a namespace that is not opted in unmutated."""
    allowed = tenant.allowed_scheduler_names
    path = f"spec.tenants[{index}].allowedSchedulerNames"
    who = f"tenant {tenant.name!r}"
    opt_in = spec.opt_in.namespace_selector
    if DEFAULT_SCHEDULER not in allowed and not _selector_implies(
        tenant.namespace_selector, opt_in
    ):
        yield PolicyIssue(
            path,
            f"{who}: pods in a namespace it selects that is not opted in keep schedulerName "
            f"{DEFAULT_SCHEDULER!r} (they are not mutated), which {list(allowed)} does not "
            f"allow, so every such pod is denied; add {DEFAULT_SCHEDULER!r} to "
            f"allowedSchedulerNames, or make namespaceSelector require the opt-in label "
            f"({_describe_selector(opt_in)})",
        )
    if tenant.default_scheduler_name and tenant.default_scheduler_name not in allowed:
        return  # reported on defaultSchedulerName; the routes below would repeat it
    # Opted-in pods that name no scheduler, per pod class they may belong to.
    ends: dict[str, list[str]] = {}
    for pod_class in (None, *spec.pod_classes):
        final = routed_scheduler(spec, tenant, pod_class) or DEFAULT_SCHEDULER
        if final not in allowed:
            ends.setdefault(final, []).append(
                "pods of no class" if pod_class is None else f"pods of class {pod_class.name!r}"
            )
    profiles = spec.scheduler_profiles
    for final, pods in ends.items():
        if profiles.installed:
            yield PolicyIssue(
                path,
                f"{who}: opted-in {' and '.join(pods)} are routed to schedulerName {final!r}, "
                f"which {list(allowed)} does not allow, so every such pod is denied; add "
                f"{final!r} to allowedSchedulerNames, or set defaultSchedulerName to one it allows",
            )
        else:
            named = [n for n in allowed if n in (profiles.spread, profiles.binpack)]
            because = (
                (f" (it names {', '.join(repr(n) for n in named)}, but " if named else " (")
                + "spec.schedulerProfiles.installed is false, so the webhook routes no pod to a profile)"
            )
            yield PolicyIssue(
                path,
                f"{who}: opted-in {' and '.join(pods)} keep schedulerName {final!r}, which "
                f"{list(allowed)} does not allow{because}, so every such pod is denied; add "
                f"{DEFAULT_SCHEDULER!r} to allowedSchedulerNames, or install the scheduler "
                "profiles and set spec.schedulerProfiles.installed: true",
            )


def _selector_implies(selector: LabelSelector, required: LabelSelector) -> bool:
    """Whether every label set `selector` matches is also matched by `required` (checked
    requirement by requirement, so False may also mean "could not prove it")."""
    labels = selector.match_labels
    exprs = selector.match_expressions

    def implied(req: SelectorRequirement) -> bool:
        key, values = req.key, set(req.values)
        same_key = [e for e in exprs if e.key == key]
        if req.operator == "In":
            return (key in labels and labels[key] in values) or any(
                e.operator == "In" and set(e.values) <= values for e in same_key
            )
        if req.operator == "Exists":
            return key in labels or any(e.operator in ("In", "Exists") for e in same_key)
        if req.operator == "NotIn":
            return (
                (key in labels and labels[key] not in values)
                or any(e.operator == "DoesNotExist" for e in same_key)
                or any(e.operator == "NotIn" and set(e.values) >= values for e in same_key)
                or any(e.operator == "In" and not set(e.values) & values for e in same_key)
            )
        return key not in labels and any(e.operator == "DoesNotExist" for e in same_key)

    as_requirements = [
        SelectorRequirement(key=k, operator="In", values=(v,))
        for k, v in required.match_labels.items()
    ]
    return all(implied(r) for r in (*as_requirements, *required.match_expressions))


def _describe_selector(selector: LabelSelector) -> str:
    parts = [f"{k}={v}" for k, v in selector.match_labels.items()]
    parts += [
        f"{e.key} {e.operator}" + (f" {list(e.values)}" if e.values else "")
        for e in selector.match_expressions
    ]
    return ", ".join(parts) or "every namespace"


def _cluster_score_issues(spec: Spec) -> Iterable[PolicyIssue]:
    """Entries are checked even while disabled; the cluster name and references to tenants
    and dimensions only when enabled (a disabled section may name what is not there yet)."""
    scores = spec.cluster_scores
    base = "spec.clusterScores"
    if scores.enabled and not scores.cluster_name:
        yield PolicyIssue(
            f"{base}.clusterName",
            "required when enabled: this cluster's name on the hub (the namespace of the "
            "AddOnPlacementScore)",
        )
    elif scores.cluster_name and not is_dns1123_label(scores.cluster_name):
        yield PolicyIssue(
            f"{base}.clusterName",
            f"must be a namespace name (lower-case RFC 1123 label), got {scores.cluster_name!r}",
        )
    if not is_dns1123_subdomain(scores.resource_name):
        yield PolicyIssue(
            f"{base}.resourceName",
            f"must be an object name (lower-case RFC 1123 subdomain), got {scores.resource_name!r}",
        )
    interval = spec.scoring.interval_seconds
    if scores.enabled and scores.valid_for_seconds <= interval:
        yield PolicyIssue(
            f"{base}.validForSeconds",
            f"must be greater than spec.scoring.intervalSeconds ({_fmt(interval)}), or the "
            f"scores expire between cycles; got {_fmt(scores.valid_for_seconds)}",
        )
    if scores.enabled and not scores.scores:
        yield PolicyIssue(f"{base}.scores", "must list at least one score when enabled")
    dups = _duplicates(s.name for s in scores.scores)
    dims = {d.name for d in spec.dimensions}
    tenants = {t.name: t for t in spec.tenants}
    for i, score in enumerate(scores.scores):
        path = f"{base}.scores[{i}]"
        if not score.name.strip() or score.name != score.name.strip():
            yield PolicyIssue(f"{path}.name", f"must be a non-blank name, got {score.name!r}")
        if score.name in dups:
            yield PolicyIssue(f"{path}.name", f"duplicate score name {score.name!r}")
        if score.best is None:
            yield PolicyIssue(
                f"{path}.best",
                "required: the raw value worth 100 (keep it the same in every cluster)",
            )
        if score.kind == "powerPerCore" and score.worst is None:
            yield PolicyIssue(
                f"{path}.worst", "required for powerPerCore: the watts per core worth -100"
            )
        if score.best is not None and score.bounds[0] == score.bounds[1]:
            yield PolicyIssue(f"{path}.best", f"must differ from worst ({_fmt(score.bounds[0])})")
        if score.kind == "freeResource":
            if score.target in CORE_RESOURCES:
                yield PolicyIssue(
                    f"{path}.resource",
                    f"counts whole units of an extended resource (e.g. nvidia.com/gpu), "
                    f"got {score.target!r}",
                )
        elif score.resource is not None and score.kind == "tenantHeadroom":
            if score.resource not in ("cpu", "memory"):
                yield PolicyIssue(
                    f"{path}.resource", f"must be cpu or memory, got {score.resource!r}"
                )
        elif score.resource is not None:
            yield PolicyIssue(f"{path}.resource", f"not used by {score.kind}")
        if score.kind == "tenantHeadroom":
            tenant = tenants.get(score.tenant or "")
            if score.tenant is None:
                yield PolicyIssue(f"{path}.tenant", "required for tenantHeadroom")
            elif tenant is None and scores.enabled:
                yield PolicyIssue(
                    f"{path}.tenant",
                    f"unknown tenant {score.tenant!r}; known: {sorted(tenants)}",
                )
            elif tenant is not None and tenant.overcommit_percent is None:
                yield PolicyIssue(
                    f"{path}.tenant",
                    f"tenant {score.tenant!r} has no overcommitPercent: its headroom is "
                    "measured against its budget",
                )
        elif score.tenant is not None:
            yield PolicyIssue(f"{path}.tenant", f"not used by {score.kind}")
        if score.kind == "powerPerCore":
            if score.dimension is None:
                yield PolicyIssue(
                    f"{path}.dimension", "required for powerPerCore: the dimension of node watts"
                )
            elif score.dimension not in dims and scores.enabled:
                yield PolicyIssue(
                    f"{path}.dimension",
                    f"unknown dimension {score.dimension!r}; known: {sorted(dims)}",
                )
        elif score.dimension is not None:
            yield PolicyIssue(f"{path}.dimension", f"not used by {score.kind}")
        # A default written out (a dumped policy read back) is not a mistake; `max` is.
        if score.kind != "freeResource" and score.aggregate != "sum":
            yield PolicyIssue(f"{path}.aggregate", f"not used by {score.kind}")
