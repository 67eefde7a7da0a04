"""The SteeringPolicy document: one YAML file that drives both the scorer and the webhook.

One module per part, each model with its checks beside it:

- `contract.py`: API version, label and resource prefixes, the label contract;
- `fields.py`: the base model and the constrained number types;
- `issues.py`: `PolicyIssue`, `PolicyError`, pydantic errors as issues with field paths;
- `selectors.py`: label selectors; `dimensions.py`: dimensions, one model per source;
- `rules.py`: taint rules, pod classes, spread rules; `tenants.py`: tenants;
- `routing.py`: scheduler profiles and which scheduler a pod is routed to;
- `cluster_scores.py`: scores for Open Cluster Management's Placement, one model per kind;
- `energy.py`: energy as efficiency (watts per core, idle watts, the power model, drain candidates);
- `spec.py`: the spec, its cluster-wide sections and the checks across them;
- `references.py`: unique names and references by name, on the raw document;
- `document.py`: `Policy` and `parse_policy`.

Importers use this package (`from steer.core.policy import Policy, parse_policy`).
"""

from steer.core.policy.cluster_scores import (
    ClusterScore,
    ClusterScoreBase,
    ClusterScores,
    FreeResourceScore,
    PowerPerCoreScore,
    TenantHeadroomScore,
)
from steer.core.policy.contract import (
    ALWAYS_EXCLUDED_NAMESPACES,
    API_VERSION,
    CLASS_INFIX,
    CORE_RESOURCES,
    DAEMONSET_CREATORS,
    DEFAULT_LABEL_PREFIX,
    DEFAULT_RESOURCE_PREFIX,
    DEFAULT_SCHEDULER,
    FORMER_RESOURCE_PREFIXES,
    KIND,
    KNOWN_UNITS,
    LEGACY_API_VERSIONS,
    NATIVE_RESOURCE_MARK,
    NODE_RESTRICTION_PREFIX,
    RESERVED_PREFIX,
    SCORE_PREFIX,
)
from steer.core.policy.devices import DeviceHeat, Devices
from steer.core.policy.dimensions import (
    Coverage,
    Dimension,
    DimensionBase,
    Direction,
    HttpDimension,
    HttpSource,
    KubernetesDimension,
    KubernetesSource,
    Normalization,
    PrometheusDimension,
)
from steer.core.policy.document import Policy, parse_policy
from steer.core.policy.energy import (
    DRAIN_LABEL,
    DRAIN_REASON_ANNOTATION,
    Consolidation,
    DrainCandidates,
    Energy,
    NodeType,
    PowerModel,
)
from steer.core.policy.issues import PolicyError, PolicyIssue
from steer.core.policy.routing import SchedulerProfiles, routed_scheduler
from steer.core.policy.rules import Condition, PodClass, SpreadRule, TaintRule
from steer.core.policy.selectors import LabelSelector, SelectorRequirement
from steer.core.policy.spec import (
    AUDIT,
    ENFORCE,
    Infrastructure,
    Metadata,
    OptIn,
    Overcommit,
    Prometheus,
    Scoring,
    Spec,
    SteeringPolicyDoc,
    composite_suffix,
)
from steer.core.policy.tenants import Tenant

__all__ = [
    "ALWAYS_EXCLUDED_NAMESPACES",
    "API_VERSION",
    "AUDIT",
    "CLASS_INFIX",
    "CORE_RESOURCES",
    "DAEMONSET_CREATORS",
    "DEFAULT_LABEL_PREFIX",
    "DEFAULT_RESOURCE_PREFIX",
    "DEFAULT_SCHEDULER",
    "DRAIN_LABEL",
    "DRAIN_REASON_ANNOTATION",
    "ENFORCE",
    "FORMER_RESOURCE_PREFIXES",
    "KIND",
    "KNOWN_UNITS",
    "LEGACY_API_VERSIONS",
    "NATIVE_RESOURCE_MARK",
    "NODE_RESTRICTION_PREFIX",
    "RESERVED_PREFIX",
    "SCORE_PREFIX",
    "ClusterScore",
    "ClusterScoreBase",
    "ClusterScores",
    "Condition",
    "Consolidation",
    "Coverage",
    "DeviceHeat",
    "Devices",
    "Dimension",
    "DimensionBase",
    "Direction",
    "DrainCandidates",
    "Energy",
    "FreeResourceScore",
    "HttpDimension",
    "HttpSource",
    "Infrastructure",
    "KubernetesDimension",
    "KubernetesSource",
    "LabelSelector",
    "Metadata",
    "NodeType",
    "Normalization",
    "OptIn",
    "Overcommit",
    "PodClass",
    "Policy",
    "PolicyError",
    "PolicyIssue",
    "PowerModel",
    "PowerPerCoreScore",
    "Prometheus",
    "PrometheusDimension",
    "SchedulerProfiles",
    "Scoring",
    "SelectorRequirement",
    "Spec",
    "SpreadRule",
    "SteeringPolicyDoc",
    "TaintRule",
    "Tenant",
    "TenantHeadroomScore",
    "composite_suffix",
    "parse_policy",
    "routed_scheduler",
]
