"""A tenant: the namespaces it selects, its overcommit budget and the schedulers its pods may
name, with the checks that keep every one of its pods admissible."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Literal

from steer.core.policy.contract import DEFAULT_SCHEDULER
from steer.core.policy.fields import Name, ObjectName, Percent, PolicyModel
from steer.core.policy.issues import PolicyIssue, nested
from steer.core.policy.routing import routed_scheduler
from steer.core.policy.selectors import LabelSelector

if TYPE_CHECKING:
    from steer.core.policy.spec import Spec


class Tenant(PolicyModel):
    name: Name
    namespace_selector: LabelSelector
    overcommit_percent: Percent | None = None
    default_scheduler_name: ObjectName | None = None
    allowed_scheduler_names: tuple[ObjectName, ...] = ("default-scheduler",)
    allowed_tolerations: tuple[str, ...] = ()
    # `audit` for this tenant's pods alone; unset, the tenant follows `spec.mode`.
    mode: Literal["enforce", "audit"] | None = None

    def issues(self, spec: Spec) -> Iterator[PolicyIssue]:
        """Checks of this tenant; `spec` is the one it belongs to (its dimensions, opt-in and
        scheduler profiles decide whether the tenant's pods can be admitted)."""
        if self.default_scheduler_name and self.default_scheduler_name not in (
            self.allowed_scheduler_names
        ):
            yield PolicyIssue(
                "defaultSchedulerName",
                f"{self.default_scheduler_name!r} is not in allowedSchedulerNames {list(self.allowed_scheduler_names)}",
            )
        if (
            self.overcommit_percent is not None
            and spec.overcommit.enforcement == "labels"
            and not any(d.publish == "raw" and d.name == "overcommit-pct" for d in spec.dimensions)
        ):
            yield PolicyIssue(
                "overcommitPercent",
                "needs a dimension named 'overcommit-pct' with publish: raw (the node label the budget is matched against)",
            )
        yield from nested("namespaceSelector", self.namespace_selector.issues())
        yield from nested("allowedSchedulerNames", self._unschedulable_issues(spec))

    def _unschedulable_issues(self, spec: Spec) -> Iterator[PolicyIssue]:
        """A tenant whose pods would all be denied: the schedulerName a pod ends with (the
        apiserver's `default-scheduler`, or what the webhook routes it to) must be one the
        validating webhook allows for the tenant. It judges every namespace the tenant selects,
        opted in or not, and leaves a pod in a namespace that is not opted in unmutated."""
        allowed = self.allowed_scheduler_names
        who = f"tenant {self.name!r}"
        opt_in = spec.opt_in.namespace_selector
        if DEFAULT_SCHEDULER not in allowed and not self.namespace_selector.implies(opt_in):
            yield PolicyIssue(
                "",
                f"{who}: pods in a namespace it selects that is not opted in keep schedulerName "
                f"{DEFAULT_SCHEDULER!r} (they are not mutated), which {list(allowed)} does not "
                f"allow, so every such pod is denied; add {DEFAULT_SCHEDULER!r} to "
                f"allowedSchedulerNames, or make namespaceSelector require the opt-in label "
                f"({opt_in.describe()})",
            )
        if self.default_scheduler_name and self.default_scheduler_name not in allowed:
            return  # reported on defaultSchedulerName; the routes below would repeat it
        # Opted-in pods that name no scheduler, per pod class they may belong to.
        ends: dict[str, list[str]] = {}
        for pod_class in (None, *spec.pod_classes):
            final = routed_scheduler(spec, self, pod_class) or DEFAULT_SCHEDULER
            if final not in allowed:
                ends.setdefault(final, []).append(
                    "pods of no class" if pod_class is None else f"pods of class {pod_class.name!r}"
                )
        profiles = spec.scheduler_profiles
        for final, pods in ends.items():
            if profiles.installed:
                yield PolicyIssue(
                    "",
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
                    "",
                    f"{who}: opted-in {' and '.join(pods)} keep schedulerName {final!r}, which "
                    f"{list(allowed)} does not allow{because}, so every such pod is denied; add "
                    f"{DEFAULT_SCHEDULER!r} to allowedSchedulerNames, or install the scheduler "
                    "profiles and set spec.schedulerProfiles.installed: true",
                )
