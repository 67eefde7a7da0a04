"""The packaged example policy (`examples/policy.yaml` links to it) and preset variants.

The example policy is the one copy of the default dimensions (DCGM GPU utilisation, free GPUs,
fragmentation; Kepler power; kube-state-metrics overcommit; blackbox health). It ships inside
the package (`steer/presets/policy.yaml`); the no-cluster demo (`kits.demo`) runs it.
"""

from __future__ import annotations

from importlib import resources


def example_policy_text() -> str:
    return (resources.files("steer") / "presets" / "policy.yaml").read_text()


# Kepler 0.7.x: watts from the platform energy counter; the node is in `instance` (the
# example policy's `power` dimension: weight 0, shown and used by the cluster score only; its
# placement dimensions are `core-power` and `idle-power`, steer/core/policy/energy.py).
POWER_KEPLER_07 = """\
    - name: power
      query: sum by (instance) (irate(kepler_node_platform_joules_total[5m]))
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 0
"""
# Kepler >= 0.10 publishes watts directly, labelled `node_name`: swap this in for `power`.
POWER_KEPLER_010 = """\
    - name: power
      query: sum by (node_name) (kepler_node_cpu_watts)
      nodeLabel: node_name
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 1
"""
