"""`spec.devices`: what the policy reads per device, beside what it reads per node.

With Dynamic Resource Allocation the scheduler picks a node's devices one by one, so a node's
average GPU load hides which of its GPUs are busy from outside Kubernetes. `heat` asks for one
sample per device (dcgm-exporter labels each GPU's series with its `UUID`); the scorer joins
them to the DRA devices in ResourceSlices on their `uuid` attribute (NVIDIA's DRA driver
publishes it) and marks a device hot when its value meets a taint rule's condition, the same
rule that taints a hot node. /explain and the page show each device's reading and heat.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from steer.core.policy.fields import PolicyModel
from steer.core.policy.issues import PolicyIssue, nested

if TYPE_CHECKING:
    from steer.core.policy.spec import Spec


class DeviceHeat(PolicyModel):
    # One sample per device, in the unit of the taint rule's dimension (e.g. percent).
    query: str
    # The label holding the device's UUID (dcgm-exporter: `UUID`).
    uuid_label: str = "UUID"
    # The taint rule whose condition (`source: raw`) marks a device hot, e.g. `gpu-hot`.
    taint: str

    def issues(self, spec: Spec) -> Iterator[PolicyIssue]:
        if not self.query.strip():
            yield PolicyIssue("query", "must be a PromQL query with one sample per device")
        if not self.uuid_label:
            yield PolicyIssue("uuidLabel", "must name the label holding the device's UUID")
        rule = next((r for r in spec.taints if r.name == self.taint), None)
        if rule is None:
            known = ", ".join(r.name for r in spec.taints) or "none"
            yield PolicyIssue("taint", f"no taint rule named {self.taint!r} (rules: {known})")
        elif rule.condition.source != "raw":
            yield PolicyIssue(
                "taint",
                f"taint rule {self.taint!r} compares a score; a device's reading is compared "
                "with a raw condition (source: raw) only",
            )


class Devices(PolicyModel):
    heat: DeviceHeat | None = None

    def issues(self, spec: Spec) -> Iterator[PolicyIssue]:
        if self.heat is not None:
            yield from nested("heat", self.heat.issues(spec))
