"""Ready-made score dimensions for common exporters, and the policy `steer scorer once --demo` runs.

The preset queries are the ones in `examples/policy.yaml` (a test keeps the two in step);
they live here too so that an installed package can run the demo without the repository.
"""

from __future__ import annotations

from steer.core.policy import Policy, parse_policy

# NVIDIA DCGM exporter: the node is in `Hostname`.
GPU_UTIL = """\
    - name: gpu-util
      query: avg by (Hostname) (DCGM_FI_DEV_GPU_UTIL)
      nodeLabel: Hostname
      direction: lowerIsBetter
      normalization: {method: fixed, min: 0, max: 100}
      weight: 3
"""
GPU_FREE = """\
    - name: gpu-free
      query: sum by (Hostname) (DCGM_FI_DEV_FB_USED < bool 512)
      nodeLabel: Hostname
      direction: higherIsBetter
      normalization: {method: minMax}
      weight: 2
"""
GPU_FRAG = """\
    - name: gpu-frag
      query: >-
        sum by (Hostname) (DCGM_FI_DEV_FB_FREE * (DCGM_FI_DEV_FB_USED > bool 512))
        / sum by (Hostname) (DCGM_FI_DEV_FB_FREE)
      nodeLabel: Hostname
      direction: lowerIsBetter
      normalization: {method: fixed, min: 0, max: 1}
      weight: 1
"""
# Kepler 0.7.x: watts from the platform energy counter; the node is in `instance`.
POWER_KEPLER_07 = """\
    - name: power
      query: sum by (instance) (rate(kepler_node_platform_joules_total[5m]))
      nodeLabel: instance
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 1
"""
# Kepler >= 0.10 publishes watts directly, labelled `node_name`.
POWER_KEPLER_010 = """\
    - name: power
      query: sum by (node_name) (kepler_node_cpu_watts)
      nodeLabel: node_name
      direction: lowerIsBetter
      normalization: {method: minMax}
      weight: 1
"""
# kube-state-metrics: max over cpu/memory of sum(limits)/allocatable - 1, in percent.
OVERCOMMIT = """\
    - name: overcommit-pct
      query: >-
        100 * max by (node) (
          sum by (node, resource) (kube_pod_container_resource_limits{resource=~"cpu|memory"})
          / sum by (node, resource) (kube_node_status_allocatable{resource=~"cpu|memory"})
        ) - 100
      nodeLabel: node
      publish: raw
      weight: 0
      step: 1
      hysteresis: 0.5
"""


def health(selector: str = '{job="node-health"}') -> str:
    """Blackbox exporter `probe_success` per node, averaged over 2 minutes."""
    return f"""\
    - name: health
      query: avg_over_time(probe_success{selector}[2m])
      nodeLabel: node
      direction: higherIsBetter
      normalization: {{method: fixed, min: 0, max: 1}}
      weight: 2
      ttlSeconds: 120
"""


def demo_policy_text(
    prometheus_url: str = "http://127.0.0.1:9090", *, interval_seconds: float = 30
) -> str:
    """The example policy's dimensions and rules, for the synthetic cluster (whose probes carry
    no `job="node-health"`)."""
    dims = GPU_UTIL + GPU_FREE + GPU_FRAG + POWER_KEPLER_07 + OVERCOMMIT + health("")
    return f"""\
apiVersion: steer.io/v1alpha1
kind: SteeringPolicy
metadata:
  name: demo
spec:
  labelPrefix: steer.io/
  prometheus:
    url: {prometheus_url}
    timeoutSeconds: 10
  scoring:
    intervalSeconds: {interval_seconds}
    step: 10
    hysteresis: 3
    ttlSeconds: 300
  dimensions:
{dims}  taints:
    - name: gpu-hot
      condition: {{dimension: gpu-util, source: raw, operator: Gt, value: 90}}
      effect: PreferNoSchedule
      setAfterCycles: 2
      clearAfterCycles: 3
    - name: unhealthy
      condition: {{dimension: health, source: raw, operator: Lt, value: 0.5}}
      effect: NoSchedule
      setAfterCycles: 2
      clearAfterCycles: 4
      security: true
  podClasses:
    - name: gpu
      requestsAny: [nvidia.com/gpu]
      dimensions: [gpu-util, gpu-free, gpu-frag, power, health]
      avoid: [gpu-hot]
  tenants:
    - name: dept-a
      namespaceSelector: {{matchLabels: {{tenant: dept-a}}}}
      overcommitPercent: 5
    - name: dept-b
      namespaceSelector: {{matchLabels: {{tenant: dept-b}}}}
      overcommitPercent: 0
"""


def demo_policy(
    prometheus_url: str = "http://127.0.0.1:9090", *, interval_seconds: float = 30
) -> Policy:
    return parse_policy(demo_policy_text(prometheus_url, interval_seconds=interval_seconds))
