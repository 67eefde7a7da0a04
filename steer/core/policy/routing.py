"""Which scheduler an opted-in pod is sent to: the profiles of the stock kube-scheduler and the
rule that picks one for a pod (its class's, its tenant's default, or the spread profile)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from steer.core.policy.fields import ObjectName, PolicyModel

if TYPE_CHECKING:
    from steer.core.policy.rules import PodClass
    from steer.core.policy.spec import Spec
    from steer.core.policy.tenants import Tenant


class SchedulerProfiles(PolicyModel):
    """Profiles of the stock kube-scheduler that `manifests/scheduler/profiles.yaml` adds.

    Only when `installed` is true does the webhook route pods to them; otherwise a pod that
    names a missing profile would stay Pending forever.
    """

    installed: bool = False
    spread: ObjectName = "steer-spread"
    binpack: ObjectName = "steer-binpack"
    default_scheduler_is_unset: bool = True


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
