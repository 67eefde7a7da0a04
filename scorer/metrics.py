"""The scorer's own Prometheus metrics, in a registry per scorer (tests run several at once)."""

from __future__ import annotations

from collections.abc import Mapping

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from steer.adapters.build_info import BuildInfoCollector
from steer.core.dra.inventory import ClassSummary

_CYCLE_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 120)
_QUERY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


DEVICE_STATES = ("total", "allocated", "free")


class ScorerMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.registry = registry or CollectorRegistry(auto_describe=True)
        r = self.registry
        self.cycle_duration = Histogram(
            "steer_scorer_cycle_duration_seconds",
            "Wall time of one scoring cycle: node list, queries, planning and writes.",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.compute_duration = Histogram(
            "steer_scorer_compute_duration_seconds",
            "Time spent mapping samples to nodes and planning labels (no I/O).",
            buckets=_CYCLE_BUCKETS,
            registry=r,
        )
        self.cycles = Counter(
            "steer_scorer_cycles_total",
            "Scoring cycles by result (ok, error).",
            ["result"],
            registry=r,
        )
        self.blocked_events = Counter(
            "steer_scorer_blocked_events_total",
            "Warning Events written on pods a kube-steer rule keeps Pending, by result "
            "(written, failed).",
            ["result"],
            registry=r,
        )
        self.queries = Counter(
            "steer_scorer_queries_total",
            "PromQL queries sent, per dimension.",
            ["dimension"],
            registry=r,
        )
        self.query_duration = Histogram(
            "steer_scorer_query_duration_seconds",
            "PromQL query latency per dimension.",
            ["dimension"],
            buckets=_QUERY_BUCKETS,
            registry=r,
        )
        self.query_errors = Counter(
            "steer_scorer_query_errors_total",
            "Failed PromQL queries per dimension and kind (unavailable, query, auth, response).",
            ["dimension", "kind"],
            registry=r,
        )
        self.unknown_nodes = Gauge(
            "steer_scorer_unknown_node_samples",
            "Samples of the last query whose node identity matched no Node object.",
            ["dimension"],
            registry=r,
        )
        self.dropped_samples = Gauge(
            "steer_scorer_dropped_samples",
            "Samples of the last query that gave their node no value, by reason: non-finite "
            "(NaN, +-Inf), too-large (a raw value no label can carry), duplicate (another "
            "series for the same node; the larger is kept), unlabelled (no node label), "
            "out-of-range (a value the dimension's unit cannot take).",
            ["dimension", "reason"],
            registry=r,
        )
        self.held_readings = Counter(
            "steer_scorer_held_readings_total",
            "Readings not published because their data contradicted the dimension, by reason: "
            "unit (another scale than the declared unit), coverage (fewer than "
            "coverage.minPercent of the expected nodes). The labels age out on the TTL.",
            ["dimension", "reason"],
            registry=r,
        )
        self.data_problems = Gauge(
            "steer_scorer_data_problems",
            "1 while the last cycle found a problem of this kind with the dimension's data "
            "(absent, no-data, node-label, not-node-names, coverage, unit, out-of-range); the "
            "scorer's /readyz and /explain/nodes say what and the fix.",
            ["dimension", "kind"],
            registry=r,
        )
        self.dimension_stale = Gauge(
            "steer_scorer_dimension_stale",
            "1 when a dimension's data is older than its TTL (its labels are withdrawn).",
            ["dimension"],
            registry=r,
        )
        self.dimension_age = Gauge(
            "steer_scorer_dimension_age_seconds",
            "Age of the newest successful observation of a dimension.",
            ["dimension"],
            registry=r,
        )
        self.stale_dimensions = Gauge(
            "steer_scorer_stale_dimensions",
            "Number of dimensions whose data is past the TTL.",
            registry=r,
        )
        self.node_writes = Counter(
            "steer_scorer_node_writes_total",
            "Nodes written, by result (ok, error).",
            ["result"],
            registry=r,
        )
        self.write_requests = Counter(
            "steer_scorer_write_requests_total",
            "PATCH requests sent to nodes, retries included.",
            registry=r,
        )
        self.write_conflicts = Counter(
            "steer_scorer_write_conflicts_total",
            "409 conflicts on taint writes (each was retried).",
            registry=r,
        )
        self.planned_changes = Gauge(
            "steer_scorer_planned_node_changes",
            "Nodes whose labels or taints the last cycle changed.",
            registry=r,
        )
        self.nodes = Gauge("steer_scorer_nodes", "Nodes seen in the last cycle.", registry=r)
        self.leader = Gauge(
            "steer_scorer_leader", "1 while this replica holds the Lease and writes.", registry=r
        )
        self.policy_info = Gauge(
            "steer_scorer_policy_info",
            "The policy version in use (value is always 1).",
            ["version"],
            registry=r,
        )
        self.policy_reload_errors = Counter(
            "steer_scorer_policy_reload_errors",
            "Policy edits rejected since start (the last good policy keeps serving).",
            registry=r,
        )
        r.register(BuildInfoCollector("steer_scorer"))
        self.last_success = Gauge(
            "steer_scorer_last_successful_cycle_timestamp_seconds",
            "Unix time of the last cycle that completed.",
            registry=r,
        )
        self.cluster_score_writes = Counter(
            "steer_scorer_cluster_score_writes_total",
            "AddOnPlacementScore writes to the hub (spec.clusterScores), by result (ok, error).",
            ["result"],
            registry=r,
        )
        self.cluster_score = Gauge(
            "steer_scorer_cluster_score",
            "Cluster scores as last computed (-100..100); a score without data has no series.",
            ["name"],
            registry=r,
        )
        self.cluster_score_valid_until = Gauge(
            "steer_scorer_cluster_score_valid_until_timestamp_seconds",
            "validUntil of the AddOnPlacementScore as last written.",
            registry=r,
        )
        self.pool_capacity = Gauge(
            "steer_scorer_pool_capacity",
            "Budget pool capacity the last plan publishes, summed over the nodes, per pool "
            "resource, in its unit (millicores for pool-cpu, MiB for pool-memory).",
            ["resource"],
            registry=r,
        )
        self.pool_free = Gauge(
            "steer_scorer_pool_free",
            "What new pods may still request from each budget pool (capacity minus what its "
            "bound pods hold), summed over the nodes, in the pool's unit.",
            ["resource"],
            registry=r,
        )
        self.pool_overrun = Gauge(
            "steer_scorer_pool_overrun",
            "By how much nodes' limits exceed the room of the lowest budget of a pool pod on "
            "them, summed over the nodes, per pool resource, in its unit: pods kube-steer does "
            "not steer (namespaces not opted in, DaemonSets, static pods) that landed between "
            "two publications of the pool. 0 while every budget holds.",
            ["resource"],
            registry=r,
        )
        self.pool_overrun_nodes = Gauge(
            "steer_scorer_pool_overrun_nodes",
            "Nodes whose limits exceed the room of the lowest budget of a pool pod on them, "
            "per pool resource (steer_scorer_pool_overrun; /explain/node names them).",
            ["resource"],
            registry=r,
        )
        self.devices = Gauge(
            "steer_scorer_devices",
            "DRA devices in ResourceSlices per DeviceClass, as the last cycle read them: "
            "state total, allocated (held by a claim) or free.",
            ["device_class", "state"],
            registry=r,
        )
        self.device_whole_free_nodes = Gauge(
            "steer_scorer_device_whole_free_nodes",
            "Nodes whose DRA devices of the class are all free.",
            ["device_class"],
            registry=r,
        )
        self.device_fragmentation = Gauge(
            "steer_scorer_device_fragmentation_ratio",
            "Share of the class's free DRA devices that sit on nodes where some are held (0..1).",
            ["device_class"],
            registry=r,
        )
        self._policy_version: str | None = None
        self._pool_resources: set[str] = set()
        self._device_classes: set[str] = set()

    def set_policy(self, version: str) -> None:
        if version == self._policy_version:
            return
        if self._policy_version is not None:
            self.policy_info.remove(self._policy_version)
        self.policy_info.labels(version=version).set(1)
        self._policy_version = version

    def set_pools(
        self,
        capacity: Mapping[str, int],
        free: Mapping[str, int],
        overrun: Mapping[str, tuple[int, int]] | None = None,
    ) -> None:
        """The pools of the last plan (`overrun`: per pool, the units over budget and the nodes
        they are on); a pool the policy no longer has loses its series."""
        overrun = overrun or {}
        gauges = (self.pool_capacity, self.pool_free, self.pool_overrun, self.pool_overrun_nodes)
        for resource in self._pool_resources - set(capacity):
            for gauge in gauges:
                gauge.remove(resource)
        for resource, value in capacity.items():
            units, nodes = overrun.get(resource, (0, 0))
            self.pool_capacity.labels(resource=resource).set(value)
            self.pool_free.labels(resource=resource).set(free.get(resource, 0))
            self.pool_overrun.labels(resource=resource).set(units)
            self.pool_overrun_nodes.labels(resource=resource).set(nodes)
        self._pool_resources = set(capacity)

    def set_devices(self, summaries: Mapping[str, ClassSummary]) -> None:
        """The DRA devices of the last cycle by DeviceClass; a class gone loses its series."""
        for gone in self._device_classes - set(summaries):
            for state in DEVICE_STATES:
                self.devices.remove(gone, state)
            self.device_whole_free_nodes.remove(gone)
            self.device_fragmentation.remove(gone)
        for device_class, s in summaries.items():
            for state, value in zip(DEVICE_STATES, (s.total, s.allocated, s.free), strict=True):
                self.devices.labels(device_class=device_class, state=state).set(value)
            self.device_whole_free_nodes.labels(device_class=device_class).set(s.whole_free_nodes)
            self.device_fragmentation.labels(device_class=device_class).set(s.fragmentation)
        self._device_classes = set(summaries)
