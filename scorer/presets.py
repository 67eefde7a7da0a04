"""The packaged example policy (`examples/policy.yaml` links to it) and preset variants.

The example policy is the one copy of the default dimensions (DCGM GPU utilisation, free GPUs,
fragmentation; Kepler power; kube-state-metrics overcommit; blackbox health). It ships inside
the package so `steer scorer once --demo` runs from an installed wheel too.
"""

from __future__ import annotations

from importlib import resources

import yaml

from steer.core.policy import Policy, parse_policy


def example_policy_text() -> str:
    return (resources.files("steer") / "presets" / "policy.yaml").read_text()


# Kepler 0.7.x: watts from the platform energy counter; the node is in `instance` (the
# example policy's `power` dimension).
POWER_KEPLER_07 = """\
    - name: power
      query: sum by (instance) (irate(kepler_node_platform_joules_total[5m]))
      nodeLabel: instance
      unit: watts
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 1
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


def demo_policy_text(
    prometheus_url: str = "http://127.0.0.1:9090", *, interval_seconds: float = 30
) -> str:
    """The example policy, pointed at a local Prometheus and renamed `demo`."""
    doc = yaml.safe_load(example_policy_text())
    doc["metadata"]["name"] = "demo"
    doc["spec"]["prometheus"]["url"] = prometheus_url
    doc["spec"]["scoring"]["intervalSeconds"] = interval_seconds
    return yaml.safe_dump(doc, sort_keys=False)


def demo_policy(
    prometheus_url: str = "http://127.0.0.1:9090", *, interval_seconds: float = 30
) -> Policy:
    return parse_policy(demo_policy_text(prometheus_url, interval_seconds=interval_seconds))
