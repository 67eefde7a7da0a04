"""Helpers shared by the scorer tests: a small policy, samples, and applying a plan to nodes."""

from __future__ import annotations

import contextlib
import io
import json
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kits.apistub import ApiStub
from kits.apistub.synthetic import synthetic_node
from kits.prometheus_server import PrometheusServer
from kits.synthetic_exporter import SyntheticCluster
from scorer.cycle.observe import DimensionReading, NodeIndex, read_dimension
from scorer.cycle.plan import CyclePlan, NodePlan, observed_at_key
from scorer.model import NodeState
from steer.core.policy import Policy, parse_policy

SMALL_POLICY = """\
apiVersion: kube-steer.github.io/v1alpha1
kind: SteeringPolicy
metadata: {name: small}
spec:
  scoring: {step: 10, hysteresis: 3, ttlSeconds: 60, hotPenaltyPerPod: 5, hotWindowSeconds: 60,
            intervalSeconds: 30}
  dimensions:
    - name: util
      query: avg by (hostname) (DCGM_FI_DEV_GPU_UTIL)
      nodeLabel: hostname
      unit: pct
      direction: lowerIsBetter
      normalization: {method: fixed, min: 0, max: 100}
      weight: 3
    - name: power
      query: sum by (node_name) (kepler_node_cpu_watts)
      nodeLabel: node_name
      direction: lowerIsBetter
      weight: 1
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
  taints:
    - name: gpu-hot
      condition: {dimension: util, source: raw, operator: Gt, value: 90}
      effect: NoSchedule
      setAfterCycles: 2
      clearAfterCycles: 2
  podClasses:
    - name: gpu
      requestsAny: [nvidia.com/gpu]
      dimensions: [util]
      avoid: [gpu-hot]
  tenants:
    - name: dept-b
      namespaceSelector: {matchLabels: {tenant: dept-b}}
      overcommitPercent: 0
"""


def small_policy(**scoring: object) -> Policy:
    text = SMALL_POLICY
    for key, value in scoring.items():
        text = text.replace("intervalSeconds: 30}", f"intervalSeconds: 30, {key}: {value}}}", 1)
    return parse_policy(text)


@dataclass(frozen=True)
class FakeSample:
    labels: Mapping[str, str]
    value: float


def readings_for(
    policy: Policy,
    nodes: Sequence[NodeState],
    values: Mapping[str, Mapping[str, float]],
    at: float,
) -> dict[str, DimensionReading]:
    """`values[dimension][node]` as one reading per dimension, labelled as the exporter would."""
    index = NodeIndex(nodes)
    out = {}
    for dim in policy.spec.dimensions:
        if dim.name not in values:
            continue
        samples = [FakeSample({dim.node_label: node}, v) for node, v in values[dim.name].items()]
        out[dim.name] = read_dimension(dim, samples, observed_at=at, index=index)
    return out


def apply_plan(policy: Policy, nodes: Iterable[NodeState], plan: CyclePlan) -> list[NodeState]:
    """The nodes as they would be after the writer applied `plan` (labels, annotation, taints)."""
    out = []
    for node in nodes:
        node_plan = plan.node(node.name)
        out.append(node if node_plan is None else apply_node_plan(policy, node, node_plan))
    return out


def apply_node_plan(policy: Policy, node: NodeState, plan: NodePlan) -> NodeState:
    labels = dict(node.labels)
    for key, value in plan.label_changes.items():
        if value is None:
            labels.pop(key, None)
        else:
            labels[key] = value
    annotations = dict(node.annotations)
    for key, text in plan.annotation_changes.items():
        if text is None:
            annotations.pop(key, None)
        else:
            annotations[key] = text
    owned = {t.key for t in plan.taints} | {t.key for t in plan.current_taints}
    taints = tuple(t for t in node.taints if t.key not in owned) + plan.taints
    capacity, allocatable = dict(node.capacity), dict(node.allocatable)
    for name, amount in plan.resource_changes.items():
        for status in (capacity, allocatable):
            if amount is None:
                status.pop(name, None)
            else:
                status[name] = amount
    return replace(
        node,
        labels=labels,
        annotations=annotations,
        taints=taints,
        raw_taints=tuple(t.to_k8s() for t in taints),
        capacity=capacity,
        allocatable=allocatable,
    )


def observed_times(policy: Policy, node: NodeState) -> dict[str, str]:
    text = node.annotations.get(observed_at_key(policy))
    return json.loads(text) if text else {}


@contextlib.contextmanager
def backfilled_prometheus(
    cluster: SyntheticCluster, *, span_s: float = 90.0, step_s: float = 15.0
) -> Iterator[PrometheusServer]:
    """A real Prometheus holding `cluster`'s series for the last `span_s` seconds, written with
    promtool before start: no scrape to wait for (the first one takes ~5 s to be scheduled)."""
    now = time.time()
    count = int(span_s // step_s) + 1
    text = io.StringIO()
    cluster.write_openmetrics(text, [now - span_s + i * step_s for i in range(count)])
    prom = PrometheusServer([])
    prom.backfill(text.getvalue())
    with prom:
        yield prom


def stub_nodes(stub: ApiStub, names: Iterable[str], *, gpus: int = 2) -> None:
    """Node objects for the synthetic cluster's nodes; the first carries a foreign label and
    foreign taints that every test expects to survive untouched."""
    for i, name in enumerate(names):
        node = synthetic_node(name, gpus=gpus)
        if i == 0:
            node["metadata"]["labels"].update(FOREIGN_LABELS)
            node["spec"]["taints"] = [dict(t) for t in FOREIGN_TAINTS]
        stub.add_node(node)


FOREIGN_LABELS = {"team.example.com/owner": "ml", "kube-steer.github.io/not-ours": "1"}
FOREIGN_TAINTS = (
    {
        "key": "node.kubernetes.io/unreachable",
        "effect": "NoExecute",
        "timeAdded": "2026-11-30T03:58:30Z",
    },
    {"key": "dedicated", "value": "ml", "effect": "NoSchedule"},
)


def owned_labels(node: Mapping[str, Any]) -> dict[str, str]:
    return {
        k: v
        for k, v in node["metadata"]["labels"].items()
        if k.startswith("kube-steer.github.io/") and k not in FOREIGN_LABELS
    }
