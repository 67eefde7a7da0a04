"""The metric families of the exporters the presets read, by release (docs/exporters.md cites
each): to say, when a query's metric is absent, which related families Prometheus does hold
and so which form of the dimension fits the cluster.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

# The label a query reading more than one exporter form sets on each answer (the example
# policy's `label_replace(..., "form", "kepler >= 0.10", "", "")`): the checks count the nodes
# read from each form and name them.
FORM_LABEL = "form"


def forms_text(forms: Iterable[tuple[str, int]]) -> str:
    """`dcgm-exporter hostname (2 nodes), dcgm-exporter Hostname (1 node)`."""
    return ", ".join(f"{form} ({n} node{'s' if n != 1 else ''})" for form, n in forms)


@dataclass(frozen=True)
class Family:
    """One exporter release line: the metrics it exports and the label that names the node."""

    exporter: str
    release: str
    metrics: frozenset[str]
    node_label: str
    preset: str  # where the dimensions for it are documented

    @property
    def title(self) -> str:
        return f"{self.exporter} {self.release}"


FAMILIES: tuple[Family, ...] = (
    Family(
        "Kepler",
        ">= 0.10",
        frozenset(
            {
                "kepler_node_cpu_joules_total",
                "kepler_node_cpu_watts",
                "kepler_node_cpu_active_joules_total",
                "kepler_node_cpu_active_watts",
                "kepler_node_cpu_idle_joules_total",
                "kepler_node_cpu_idle_watts",
                "kepler_node_cpu_usage_ratio",
            }
        ),
        "node_name",
        "the example policy's energy dimensions (docs/exporters.md, Kepler >= 0.10)",
    ),
    Family(
        "Kepler",
        "<= 0.9",
        frozenset(
            {
                "kepler_node_platform_joules_total",
                "kepler_node_package_joules_total",
                "kepler_node_core_joules_total",
                "kepler_node_dram_joules_total",
                "kepler_node_uncore_joules_total",
                "kepler_container_joules_total",
            }
        ),
        "instance",
        "the example policy's energy dimensions (docs/exporters.md, Kepler <= 0.9)",
    ),
    Family(
        "DCGM exporter",
        "4.x",
        frozenset(
            {
                "DCGM_FI_DEV_GPU_UTIL",
                "DCGM_FI_DEV_FB_USED",
                "DCGM_FI_DEV_FB_FREE",
                "DCGM_FI_DEV_POWER_USAGE",
                "DCGM_FI_DEV_GPU_TEMP",
            }
        ),
        "Hostname",
        "the example policy's GPU dimensions (docs/exporters.md, DCGM exporter)",
    ),
    Family(
        "DCGM exporter",
        "ratio/bytes names",
        frozenset(
            {
                "DCGM_FI_DEV_GPU_UTIL_RATIO",
                "DCGM_FI_DEV_FB_USED_BYTES",
                "DCGM_FI_DEV_FB_FREE_BYTES",
            }
        ),
        "hostname",
        "the example policy's GPU dimensions (docs/exporters.md, DCGM exporter)",
    ),
    Family(
        "kube-state-metrics",
        "2.x",
        frozenset(
            {
                "kube_pod_container_resource_requests",
                "kube_pod_container_resource_limits",
                "kube_node_status_allocatable",
            }
        ),
        "node",
        "the example policy's tenancy and energy dimensions",
    ),
    Family(
        "blackbox exporter",
        "0.x",
        frozenset({"probe_success"}),
        "instance",
        "the example policy's health dimension",
    ),
)
# The prefix every metric of an exporter starts with: a metric absent from the catalogue but
# with a known prefix still finds its exporter's present families.
_PREFIXES = {"Kepler": "kepler_", "DCGM exporter": "DCGM_", "kube-state-metrics": "kube_"}


def family_of(metric: str) -> Family | None:
    for family in FAMILIES:
        if metric in family.metrics:
            return family
    return None


def exporter_of(metric: str) -> str | None:
    family = family_of(metric)
    if family is not None:
        return family.exporter
    for exporter, prefix in _PREFIXES.items():
        if metric.startswith(prefix):
            return exporter
    return None


def present_related(metric: str, present: Iterable[str]) -> dict[str, list[str]]:
    """For an absent `metric`: the families of its exporter that Prometheus holds series of,
    by title, with the metrics found (sorted). Empty when its exporter is unknown or absent."""
    exporter = exporter_of(metric)
    if exporter is None:
        return {}
    names = set(present)
    found: dict[str, list[str]] = {}
    for family in FAMILIES:
        if family.exporter == exporter:
            hits = sorted(family.metrics & names)
            if hits:
                found[family.title] = hits
    prefix = _PREFIXES.get(exporter)
    if not found and prefix:
        others = sorted(n for n in names if n.startswith(prefix))
        if others:
            found[f"other {exporter}"] = others[:8]
    return found
