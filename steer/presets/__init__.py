"""The packaged example policy (`examples/policy.yaml` links to it) and preset variants.

The example policy is the one copy of the default dimensions (DCGM GPU utilisation, free GPUs,
fragmentation; Kepler power; kube-state-metrics overcommit; blackbox health). It ships inside
the package (`steer/presets/policy.yaml`); the no-cluster demo (`kits.demo`) runs it.
"""

from __future__ import annotations

from importlib import resources


def example_policy_text() -> str:
    return (resources.files("steer") / "presets" / "policy.yaml").read_text()


# The example policy's `power` dimension for Kepler >= 0.10 (CPU package and DRAM watts, node
# in `node_name`: docs/exporters.md): weight 0, shown and used by the cluster score only; its
# placement dimensions are `core-power` and `idle-power` (steer/core/policy/energy.py).
POWER_KEPLER_010 = """\
    - name: power
      query: sum by (node_name) (kepler_node_cpu_watts{zone=~"package|dram"})
      nodeLabel: node_name
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 0
      coverage: {nodes: all}
"""
# Kepler 0.7 .. 0.9 (before its 2025 rewrite): watts from the platform energy counter; the node
# is in `instance` (scrape with honor_labels, or it is `exported_instance`).
POWER_KEPLER_07 = """\
    - name: power
      query: sum by (instance) (irate(kepler_node_platform_joules_total[5m]))
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 0
"""
# The other two energy dimensions for Kepler 0.7 .. 0.9: dynamic package watts per requested
# core, and the platform's idle watts (docs/exporters.md).
ENERGY_KEPLER_07 = """\
    - name: core-power
      query: >-
        sum by (instance) (irate(kepler_node_package_joules_total{mode="dynamic"}[5m]))
        / on (instance) label_replace(
            sum by (node) (kube_pod_container_resource_requests{resource="cpu", node!=""}) >= 1,
            "instance", "$1", "node", "(.+)")
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 2
      ttlSeconds: 3600
    - name: idle-power
      query: sum by (instance) (irate(kepler_node_platform_joules_total{mode="idle"}[5m]))
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 1
      ttlSeconds: 3600
"""
