"""Cluster-level scores for Open Cluster Management's Placement (scorer/cycle/clusterscore.py
computes them).

`kind:` picks the model: `ClusterScore` is the discriminated union of one model per kind, each
with the settings it reads beside `kind:` as the policy format has them (`resource`, `tenant`,
`dimension`, `aggregate`) and the bounds they share in `ClusterScoreBase`. `SCORE_KINDS` says
the union's errors in the kind's words ("required for tenantHeadroom", "not used by
powerPerCore"; steer/core/policy/issues.py). Each score checks itself as it is validated; the
names it refers to (tenants, dimensions) and duplicate names are checked on the raw document
(steer/core/policy/references.py), so that all of it is reported with the field errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Literal

from pydantic import Tag, ValidationInfo, field_validator, model_validator

from steer.core.k8s_names import is_dns1123_label, is_dns1123_subdomain
from steer.core.policy.contract import CORE_RESOURCES
from steer.core.policy.fields import Finite, PolicyModel, PositiveSeconds, fmt
from steer.core.policy.issues import PolicyIssue, Variants, raise_issues

if TYPE_CHECKING:
    from steer.core.policy.spec import Spec


class ClusterScoreBase(PolicyModel):
    """One cluster-level score in the AddOnPlacementScore (scorer/cycle/clusterscore.py computes it).

    The raw value (`freeResource`: whole units; `tenantHeadroom`: cores or GiB;
    `powerPerCore`: watts per requested core) maps linearly from `worst` (-100) to `best`
    (100), clamped. Use the same bounds in every cluster: Placement compares the values.
    """

    # What a Placement names in `scoreCoordinate.addOn.scoreName`.
    name: str
    worst: Finite | None = None
    best: Finite

    @model_validator(mode="before")
    @classmethod
    def _defaults_are_absent(cls, data: Any) -> Any:
        """A setting written out at its default reads as absent, whatever the kind (a dumped
        policy of the time when every score had every setting, read back): null, and
        `aggregate: sum`."""
        if isinstance(data, dict):
            return {
                k: v
                for k, v in data.items()
                if not ((v is None and k in _OPTIONAL) or (k == "aggregate" and v == "sum"))
            }
        return data

    @field_validator("name")
    @classmethod
    def _name_not_blank(cls, value: str) -> str:
        if not value.strip() or value != value.strip():
            raise ValueError(f"must be a non-blank name, got {value!r}")
        return value

    @field_validator("best")
    @classmethod
    def _best_not_worst(cls, value: float, info: ValidationInfo) -> float:
        # An invalid or missing `worst` is not in `info.data`: reads as 0, its default.
        worst = info.data.get("worst")
        worst = 0.0 if worst is None else worst
        if value == worst:
            # As a policy issue: a value error's message would end in ", got <best>".
            raise_issues([PolicyIssue("", f"must differ from worst ({fmt(worst)})")])
        return value

    @property
    def bounds(self) -> tuple[float, float]:
        """(worst, best): the raw values that map to -100 and 100 (validated to differ)."""
        return (0.0 if self.worst is None else self.worst, self.best)


_OPTIONAL = ("resource", "tenant", "dimension", "worst", "best")


class FreeResourceScore(ClusterScoreBase):
    """Whole units of an extended resource free on eligible nodes."""

    kind: Literal["freeResource"]
    # The extended resource counted (whole units).
    resource: str | None = None
    # `sum` over eligible nodes, or `max`, the most free on one node (the largest job that
    # still fits whole).
    aggregate: Literal["sum", "max"] = "sum"

    @field_validator("resource")
    @classmethod
    def _extended(cls, value: str | None) -> str | None:
        if value in CORE_RESOURCES:
            raise ValueError(
                f"counts whole units of an extended resource (e.g. nvidia.com/gpu), got {value!r}"
            )
        return value

    @property
    def target(self) -> str:
        """The resource the score counts."""
        return self.resource or "nvidia.com/gpu"


class TenantHeadroomScore(ClusterScoreBase):
    """Room left within a tenant's budget (its `overcommitPercent`) on the nodes it may use."""

    kind: Literal["tenantHeadroom"]
    tenant: str  # whose budget
    resource: str | None = None  # cpu | memory

    @field_validator("resource")
    @classmethod
    def _cpu_or_memory(cls, value: str | None) -> str | None:
        if value is not None and value not in ("cpu", "memory"):
            raise ValueError(f"must be cpu or memory, got {value!r}")
        return value

    @property
    def target(self) -> str:
        """The resource the score counts."""
        return self.resource or "cpu"


class PowerPerCoreScore(ClusterScoreBase):
    """Watts per requested core over the nodes with a value of `dimension`."""

    kind: Literal["powerPerCore"]
    dimension: str  # the dimension holding node watts
    worst: Finite

    @property
    def target(self) -> str:
        """The resource the score counts: requested cores."""
        return "cpu"


SCORE_KINDS = Variants(
    key="kind",
    models={
        "freeResource": FreeResourceScore,
        "tenantHeadroom": TenantHeadroomScore,
        "powerPerCore": PowerPerCoreScore,
    },
    name="ClusterScore",
    not_used="not used by {tag}",
    missing={
        "best": "required: the raw value worth 100 (keep it the same in every cluster)",
        "tenant": "required for tenantHeadroom",
        "worst": "required for powerPerCore: the watts per core worth -100",
        "dimension": "required for powerPerCore: the dimension of node watts",
    },
)

ClusterScore = Annotated[
    Annotated[FreeResourceScore, Tag(SCORE_KINDS.label("freeResource"))]
    | Annotated[TenantHeadroomScore, Tag(SCORE_KINDS.label("tenantHeadroom"))]
    | Annotated[PowerPerCoreScore, Tag(SCORE_KINDS.label("powerPerCore"))],
    SCORE_KINDS.discriminator,
]


class ClusterScores(PolicyModel):
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

    def issues(self, spec: Spec) -> Iterator[PolicyIssue]:
        """The section's own problems; `spec` is the spec it belongs to. Each score checked
        itself when validated; the names the scores use are checked on the raw document."""
        if self.enabled and not self.cluster_name:
            yield PolicyIssue(
                "clusterName",
                "required when enabled: this cluster's name on the hub (the namespace of the "
                "AddOnPlacementScore)",
            )
        elif self.cluster_name and not is_dns1123_label(self.cluster_name):
            yield PolicyIssue(
                "clusterName",
                f"must be a namespace name (lower-case RFC 1123 label), got {self.cluster_name!r}",
            )
        if not is_dns1123_subdomain(self.resource_name):
            yield PolicyIssue(
                "resourceName",
                f"must be an object name (lower-case RFC 1123 subdomain), got {self.resource_name!r}",
            )
        interval = spec.scoring.interval_seconds
        if self.enabled and self.valid_for_seconds <= interval:
            yield PolicyIssue(
                "validForSeconds",
                f"must be greater than spec.scoring.intervalSeconds ({fmt(interval)}), or the "
                f"scores expire between cycles; got {fmt(self.valid_for_seconds)}",
            )
        if self.enabled and not self.scores:
            yield PolicyIssue("scores", "must list at least one score when enabled")
