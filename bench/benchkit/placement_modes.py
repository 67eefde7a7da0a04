"""The placement bench's modes: what each one runs, and the policy its services read.

`steered` and `audit` run the same stack (scheduler profiles, webhook, scorer, exporter,
Prometheus); they differ only in the policy's `spec.mode` (Spec.mode_for). An audited pod
keeps its schedulerName (default-scheduler) and its spec, so `audit` should place like `stock`
and measure what the project's stack costs and reports when it only watches.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from .placement_measure import WebhookEffect


@dataclass(frozen=True)
class Mode:
    name: str
    steers: bool  # runs the webhook, the scorer, the exporter, Prometheus and the profiles
    policy_mode: str | None = None  # spec.mode written into the policy copy (None: as is)
    # What the webhook does to a trace pod, as its dry-run probe shows it.
    webhook_effect: WebhookEffect = "none"

    @property
    def writes_taints(self) -> bool:
        """Whether the scorer taints nodes (not in audit mode: Spec.mode_for)."""
        return self.policy_mode != "audit"

    def policy(self, example: dict[str, Any]) -> dict[str, Any]:
        """The example policy as this mode's services read it (a copy)."""
        doc = copy.deepcopy(example)
        if self.policy_mode is not None:
            doc["spec"]["mode"] = self.policy_mode
        return doc


MODES: dict[str, Mode] = {
    m.name: m
    for m in (
        Mode("stock", steers=False),
        Mode("steered", steers=True, webhook_effect="mutated"),
        Mode("audit", steers=True, policy_mode="audit", webhook_effect="audited"),
    )
}
