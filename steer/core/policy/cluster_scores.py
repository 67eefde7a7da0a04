"""Cluster-level scores for Open Cluster Management's Placement (scorer/clusterscore.py
computes them).

Each kind reads its own settings (`resource`, `tenant`, `dimension`, `aggregate`), which sit
beside `kind:` in the policy format; `ClusterScore.issues` says which a kind needs and which it
does not use ("required for tenantHeadroom", "not used by powerPerCore"): a pydantic
discriminated union would call the latter an unknown field.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Set
from typing import TYPE_CHECKING, Literal

from steer.core.k8s_names import is_dns1123_label, is_dns1123_subdomain
from steer.core.policy.contract import CORE_RESOURCES
from steer.core.policy.fields import Finite, PolicyModel, PositiveSeconds, fmt
from steer.core.policy.issues import PolicyIssue, duplicates

if TYPE_CHECKING:
    from steer.core.policy.spec import Spec
    from steer.core.policy.tenants import Tenant


class ClusterScore(PolicyModel):
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
    worst: Finite | None = None
    best: Finite | None = None

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

    def issues(
        self,
        *,
        enabled: bool,
        duplicated: bool,
        tenants: Mapping[str, Tenant],
        dimensions: Set[str],
    ) -> Iterator[PolicyIssue]:
        """The kind's settings; names of tenants and dimensions only when `enabled` (a disabled
        section may name what is not there yet)."""
        if not self.name.strip() or self.name != self.name.strip():
            yield PolicyIssue("name", f"must be a non-blank name, got {self.name!r}")
        if duplicated:
            yield PolicyIssue("name", f"duplicate score name {self.name!r}")
        if self.best is None:
            yield PolicyIssue(
                "best", "required: the raw value worth 100 (keep it the same in every cluster)"
            )
        if self.kind == "powerPerCore" and self.worst is None:
            yield PolicyIssue("worst", "required for powerPerCore: the watts per core worth -100")
        if self.best is not None and self.bounds[0] == self.bounds[1]:
            yield PolicyIssue("best", f"must differ from worst ({fmt(self.bounds[0])})")
        yield from self._resource_issues()
        yield from self._tenant_issues(enabled, tenants)
        yield from self._dimension_issues(enabled, dimensions)
        # A default written out (a dumped policy read back) is not a mistake; `max` is.
        if self.kind != "freeResource" and self.aggregate != "sum":
            yield PolicyIssue("aggregate", f"not used by {self.kind}")

    def _resource_issues(self) -> Iterator[PolicyIssue]:
        if self.kind == "freeResource":
            if self.target in CORE_RESOURCES:
                yield PolicyIssue(
                    "resource",
                    f"counts whole units of an extended resource (e.g. nvidia.com/gpu), "
                    f"got {self.target!r}",
                )
        elif self.resource is not None and self.kind == "tenantHeadroom":
            if self.resource not in ("cpu", "memory"):
                yield PolicyIssue("resource", f"must be cpu or memory, got {self.resource!r}")
        elif self.resource is not None:
            yield PolicyIssue("resource", f"not used by {self.kind}")

    def _tenant_issues(self, enabled: bool, tenants: Mapping[str, Tenant]) -> Iterator[PolicyIssue]:
        if self.kind != "tenantHeadroom":
            if self.tenant is not None:
                yield PolicyIssue("tenant", f"not used by {self.kind}")
            return
        tenant = tenants.get(self.tenant or "")
        if self.tenant is None:
            yield PolicyIssue("tenant", "required for tenantHeadroom")
        elif tenant is None and enabled:
            yield PolicyIssue("tenant", f"unknown tenant {self.tenant!r}; known: {sorted(tenants)}")
        elif tenant is not None and tenant.overcommit_percent is None:
            yield PolicyIssue(
                "tenant",
                f"tenant {self.tenant!r} has no overcommitPercent: its headroom is "
                "measured against its budget",
            )

    def _dimension_issues(self, enabled: bool, dimensions: Set[str]) -> Iterator[PolicyIssue]:
        if self.kind != "powerPerCore":
            if self.dimension is not None:
                yield PolicyIssue("dimension", f"not used by {self.kind}")
            return
        if self.dimension is None:
            yield PolicyIssue("dimension", "required for powerPerCore: the dimension of node watts")
        elif self.dimension not in dimensions and enabled:
            yield PolicyIssue(
                "dimension",
                f"unknown dimension {self.dimension!r}; known: {sorted(dimensions)}",
            )


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
        """Entries are checked even while disabled; the cluster name and references to tenants
        and dimensions (of `spec`, the spec this section belongs to) only when enabled."""
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
        dups = duplicates(s.name for s in self.scores)
        dimensions = {d.name for d in spec.dimensions}
        tenants = {t.name: t for t in spec.tenants}
        for i, score in enumerate(self.scores):
            for issue in score.issues(
                enabled=self.enabled,
                duplicated=score.name in dups,
                tenants=tenants,
                dimensions=dimensions,
            ):
                yield PolicyIssue(f"scores[{i}].{issue.path}", issue.message)
