"""One scoring cycle end to end: take the nodes (from the node watch, else a list), read each dimension from its source (one PromQL
query per Prometheus dimension, scorer/cycle/sources/), plan, write if leader.

`Scorer` holds what outlives a cycle (the planner's memory, the last result for `/explain`,
metrics) and is driven either directly (`steer scorer once`, tests) or by `scorer.cycle.loop`.
A replica that is not the leader runs the same cycles and serves the same `/explain`
answers, but never writes. With budget pools enforced by the scheduler, the pods bound to each
node come from the `PodLedger` the pod watch keeps; a change there republishes the pools of
the nodes concerned without waiting for the next cycle (`refresh_hot`).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from scorer.cycle.clusterscore import ClusterScoreValue, requested_resources
from scorer.cycle.decide import (
    ClusterPods,
    CycleDecision,
    CycleInputs,
    DimensionCheck,
    decide_cycle,
)
from scorer.cycle.observe import DimensionFailure, DimensionReading, NodeIndex
from scorer.cycle.placementscore import PlacementScorePublisher, PublishError
from scorer.cycle.plan import CyclePlan, ScorerMemory
from scorer.cycle.sources import SOURCES, Readings, Source, SourceContext, SourceRequest
from scorer.cycle.sources.base import concurrently
from scorer.cycle.sources.prometheus import PrometheusSource, read_device_heat
from scorer.cycle.writer import NodeApi, NodeWriter, RateLimiter, WriteReport
from scorer.metrics import ScorerMetrics
from scorer.model import DeviceReadings, NodeState, with_devices
from scorer.watch.bindings import BindingWindow
from scorer.watch.ledger import PodLedger
from scorer.watch.nodes import NodeCache
from steer.adapters.gc_pause import freeze_survivors, gc_paused, release_free_memory
from steer.adapters.kubejson import BOUND_PODS, PODS_PATH, KubeApiError, KubeJson
from steer.adapters.lease import LeaseElector
from steer.core.budget import PodUsage
from steer.core.datacheck import ProblemKind
from steer.core.dra.inventory import Inventory
from steer.core.policy import Dimension, Policy
from steer.core.steering import drain_keys, energy_composites, owned_resource_keys

log = logging.getLogger(__name__)


def plans_from_pods(policy: Policy) -> bool:
    """Whether a cycle's plan reads the pods bound to each node: gates and budget pools hold
    what they request, the consolidation term and drain candidates count the movable ones."""
    return (
        bool(owned_resource_keys(policy))
        or bool(energy_composites(policy))
        or drain_keys(policy) is not None
    )


# Node writes in flight at once (each pipeline, status and metadata): the limiters cap the
# rate, this only hides round trips. A first cycle writes every node: at 5,000 nodes on a
# loaded apiserver (about 120 ms a PATCH), 8 in flight published 65 pools a second of the 250
# the example allows, 32 about 270. Each writer is a thread, made per cycle: with 2 x 32 the
# scorer's steady RSS at 100,000 pods rose to 304 MiB (292 MiB with 2 x 8), over its 300 MiB
# budget; 16 is the compromise.
WRITE_CONCURRENCY = 16
# How long the first cycle waits for the pod watch's first list (100,000 pods: about a minute).
FIRST_LIST_WAIT_S = 120.0
# A later cycle waits this long for a relist the node watch is reading (after a 410) before
# listing the nodes itself: one list, not two.
RELIST_WAIT_S = 5.0


class DeviceSource(Protocol):
    """The DRA watches' store (`steer.adapters.dra`)."""

    def snapshot(self) -> Inventory: ...


class CycleError(RuntimeError):
    """The cycle could not run at all (the node list failed); nothing was planned or written."""


@dataclass(frozen=True)
class CycleResult:
    plan: CyclePlan
    nodes: tuple[NodeState, ...]
    report: WriteReport | None  # None when nothing was written (dry run or not the leader)
    leader: bool
    dry_run: bool
    queries: int
    started_at: float
    list_s: float
    query_s: float
    compute_s: float
    write_s: float
    compute_cpu_s: float = 0.0  # CPU seconds of mapping + planning (one thread, no I/O)

    @property
    def duration_s(self) -> float:
        return self.list_s + self.query_s + self.compute_s + self.write_s


@dataclass(frozen=True)
class Timings:
    """When a cycle started (unix seconds) and how long its steps took (seconds)."""

    started_at: float
    list_s: float = 0.0
    query_s: float = 0.0
    compute_s: float = 0.0
    compute_cpu_s: float = 0.0


class Scorer:
    """`prometheus_url` overrides the policy's `spec.prometheus.url` (the `--prometheus` flag)."""

    def __init__(
        self,
        policy: Callable[[], Policy],
        node_api: NodeApi,
        *,
        prometheus_url: str | None = None,
        elector: LeaseElector | None = None,
        bindings: BindingWindow | None = None,
        ledger: PodLedger | None = None,
        metrics: ScorerMetrics | None = None,
        dry_run: bool = False,
        clock: Callable[[], float] = time.time,
        writer_sleep: Callable[[float], None] | None = None,
        placement_scores: PlacementScorePublisher | None = None,
        sources: Mapping[str, Source] | None = None,
        node_cache: NodeCache | None = None,
        devices: DeviceSource | None = None,
    ) -> None:
        """`sources` are used instead of the registry's for their names (`prometheus`,
        `kubernetes`, `http`), e.g. to replay recorded readings. `node_cache`, kept by a
        `scorer.watch.nodes.NodeWatcher`, spares each cycle a list of every node while it is synced, and
        each write after a 409 a GET of its node.
        `devices`, kept by the DRA watches (`steer.adapters.dra`), adds each node's DRA devices
        to what it offers (reserved nodes, coverage, free-device scores)."""
        self._policy = policy
        self.node_api = node_api
        self.prometheus_url = prometheus_url
        self.elector = elector
        self.bindings = bindings
        self.ledger = ledger
        self.node_cache = node_cache
        self.devices = devices
        # spec.devices.heat as last read (values by device UUID), and what was last logged.
        self.device_readings = DeviceReadings()
        self._told_device_heat: tuple[str | None, tuple[str, ...]] = (None, ())
        self.metrics = metrics or ScorerMetrics()
        self.dry_run = dry_run
        self._clock = clock
        first = policy()
        # Set on shutdown: pacing waits end at once, and no further node is started (the one
        # being written is finished, so no node is left half-written).
        self.stopping = threading.Event()
        # Set while writing must not go on (shutting down, or the Lease lost): writers waiting
        # at a limiter or in a backoff wake at once and see it, instead of sleeping out a token
        # reserved before (up to WRITE_CONCURRENCY of them per pipeline).
        self._halt_writes = threading.Event()
        sleep: Callable[[float], None] = writer_sleep or self._pause
        scoring = first.spec.scoring
        self.limiter = RateLimiter(scoring.write_qps, scoring.write_burst, sleep=sleep)
        self.status_limiter = RateLimiter(
            scoring.resource_write_qps, scoring.resource_write_burst, sleep=sleep
        )
        self.writer = NodeWriter(
            node_api,
            self.limiter,
            status_limiter=self.status_limiter,
            sleep=sleep,
            reread=node_cache.get if node_cache is not None else None,
            concurrency=WRITE_CONCURRENCY,
        )
        self._memory = ScorerMemory()
        self._lock = threading.Lock()  # one cycle (or hot refresh) at a time
        self._last: CycleResult | None = None
        # The nodes the last cycle planned, updated from the answers to our writes and (for the
        # nodes a refresh plans) from the node watch: a refresh after pod events plans from
        # these instead of listing 5,000 nodes again.
        self._nodes: dict[str, NodeState] = {}
        self._last_bindings_generation = 0
        self._last_ledger_generation = 0
        self._sources: dict[str, Source] = dict(sources or {})
        self.query_count = 0  # every request this scorer ever sent to a data source
        # Per dimension, the kinds of data problem last logged (a change is logged again).
        self._told_problems: dict[str, frozenset[tuple[ProblemKind, bool]]] = {}
        # spec.clusterScores: the hub writer (made on first use) and the last scores computed.
        self.placement_scores = placement_scores
        self.cluster_scores: tuple[ClusterScoreValue, ...] = ()
        self._cluster_score_names: set[str] = set()
        self.metrics.set_policy(first.version)
        if elector is not None:
            elector.on_change(self._leadership_changed)

    # ----------------------------------------------------------------- state

    @property
    def policy(self) -> Policy:
        return self._policy()

    @property
    def last(self) -> CycleResult | None:
        return self._last

    @property
    def ready(self) -> bool:
        return self._last is not None

    @property
    def is_leader(self) -> bool:
        return self.elector is None or self.elector.is_leader

    def source(self, name: str) -> Source:
        """The data source of that name (spec.dimensions[].source), made on first use."""
        source = self._sources.get(name)
        if source is None:
            context = SourceContext(
                prometheus_url=self.prometheus_url,
                ledger=self.ledger,
                kube=lambda: self.node_api.kube,
            )
            source = self._sources[name] = SOURCES[name](context)
        return source

    def _pause(self, seconds: float) -> None:
        self._halt_writes.wait(seconds)

    def _leadership_changed(self, leading: bool) -> None:
        self.metrics.leader.set(1 if leading else 0)
        if leading and not self.stopping.is_set():
            self._halt_writes.clear()
        else:
            self._halt_writes.set()

    def request_stop(self) -> None:
        """Shutdown: the cycle in flight finishes the node it writes and starts no other."""
        self.stopping.set()
        self._halt_writes.set()

    def close(self) -> None:
        for source in self._sources.values():
            source.close()
        self._sources.clear()

    # ----------------------------------------------------------------- cycles

    def read_all(
        self, policy: Policy, nodes: tuple[NodeState, ...], at: float | None = None
    ) -> tuple[dict[str, DimensionReading], dict[str, DimensionFailure], float]:
        """Every dimension read from its source, mapped onto `nodes`, not yet vetted; PromQL
        evaluated at `at` (unix seconds) when given, else at Prometheus' now."""
        started = time.perf_counter()
        index = NodeIndex(nodes)
        by_source: dict[str, list[Dimension]] = {}
        for dim in policy.spec.dimensions:
            by_source.setdefault(dim.source, []).append(dim)
        sources = {name: self.source(name) for name in by_source}  # made here, not in threads

        def read(name: str) -> Readings:
            dims = by_source[name]
            t0 = time.perf_counter()
            try:
                return sources[name].read(SourceRequest(policy, dims, nodes, index, at))
            except Exception as exc:  # a source's bug must not stop the other dimensions
                log.exception("source %s failed", name)
                elapsed = time.perf_counter() - t0
                return Readings(
                    failures={
                        d.name: DimensionFailure(d.name, d.what, "response", repr(exc), elapsed)
                        for d in dims
                    }
                )

        answer = Readings()
        # Sources are read at once: a slow registry does not hold back the PromQL dimensions.
        for part in concurrently(read, by_source, "source"):
            answer.readings.update(part.readings)
            answer.failures.update(part.failures)
            answer.requests += part.requests
        self.query_count += answer.requests
        return answer.readings, answer.failures, time.perf_counter() - started

    def _record_checks(self, checks: Iterable[DimensionCheck]) -> None:
        """Each dimension's reading as vetted (`decide.check_readings`): the metrics of its
        query and its data, and a log line when its set of data problems changes."""
        m = self.metrics
        for check in checks:
            name, failure, reading = check.dimension, check.failure, check.reading
            m.queries.labels(dimension=name).inc()
            if check.held and failure is not None:
                m.held_readings.labels(dimension=name, reason=failure.kind).inc()
            problems = (
                failure.problems if failure is not None else reading.problems if reading else ()
            )
            kinds = {p.kind for p in problems}
            for kind in ProblemKind:
                m.data_problems.labels(dimension=name, kind=kind).set(1 if kind in kinds else 0)
            # Logged when the dimension's set of problems changes, not every cycle it lasts.
            told = frozenset((p.kind, p.blocking) for p in problems)
            if told != self._told_problems.get(name, frozenset()):
                for problem in problems:
                    log.warning("dimension %s", problem.line())
                if not problems:
                    log.info("dimension %s: its data problems are gone", name)
                self._told_problems[name] = told
            if failure is not None:
                if not failure.problems:
                    m.query_errors.labels(dimension=name, kind=failure.kind).inc()
                    log.warning("dimension %s: %s", name, failure.message)
                m.query_duration.labels(dimension=name).observe(failure.duration_s)
                continue
            if reading is None:
                continue
            m.query_duration.labels(dimension=name).observe(reading.duration_s)
            m.unknown_nodes.labels(dimension=name).set(reading.unknown)
            for reason, count in (
                ("non-finite", reading.non_finite),
                ("too-large", reading.too_large),
                ("duplicate", reading.duplicates),
                ("unlabelled", reading.unlabelled),
                ("out-of-range", reading.out_of_range),
            ):
                m.dropped_samples.labels(dimension=name, reason=reason).set(count)

    def run_cycle(self, *, dry_run: bool | None = None, at: float | None = None) -> CycleResult:
        """List nodes, query, plan and (if leader and not a dry run) write. Raises `CycleError`
        when the node list fails; a failed query only ages that dimension's data.

        `at` replays the cycle at a past moment (queries evaluated then, ages counted from
        then): for benchmarks and investigations over recorded data."""
        dry = self.dry_run if dry_run is None else dry_run
        with self._lock:
            try:
                result = self._cycle(dry, at)
            except CycleError:
                self.metrics.cycles.labels(result="error").inc()
                raise
            self.metrics.cycles.labels(result="ok").inc()
            release_free_memory()  # the cycle's garbage, freed, back to the system
            return result

    def _cycle(self, dry: bool, at: float | None) -> CycleResult:
        policy = self.policy
        self.metrics.set_policy(policy.version)
        scoring = policy.spec.scoring
        self.limiter.configure(scoring.write_qps, scoring.write_burst)
        self.status_limiter.configure(scoring.resource_write_qps, scoring.resource_write_burst)
        started_at = self._clock() if at is None else at
        t0 = time.perf_counter()
        nodes = self._current_nodes(first=self._last is None, wait_s=scoring.interval_seconds)
        # One snapshot of the DRA devices for the whole cycle: what nodes offer, the metrics and
        # whether the per-device reading is asked all read the same inventory, built once.
        inventory = self.inventory()
        if self.devices is not None:
            nodes = with_devices(nodes, inventory)
            self.metrics.set_devices({c: inventory.summary(c) for c in inventory.device_classes()})
        self._nodes = {n.name: n for n in nodes}
        list_s = time.perf_counter() - t0
        readings, failures, query_s = self.read_all(policy, nodes, at)
        if self._last is None and self.ledger is not None and not self.ledger.synced:
            # The first cycle waits (a while) for the pod list being read: a cycle without it
            # plans no gate or pool, and the refresh that would publish them waits for it.
            # Prometheus was asked first: its answers do not wait for the list, nor it for them.
            waited = min(FIRST_LIST_WAIT_S, 4 * policy.spec.scoring.interval_seconds)
            if not self.ledger.wait_synced(waited):
                log.warning("first cycle without the pod list (not synced after %.0fs)", waited)
        if self.ledger is not None:
            self.ledger.take_dirty()  # this cycle plans every node
        self.device_readings = self._read_device_heat(policy, at, inventory)
        generation = self._generations()
        hot = self._hot_counts(policy)
        t1, c1 = time.perf_counter(), time.thread_time()
        now = self._clock() if at is None else at
        # Planning allocates a few hundred short-lived objects per node (measured: +40 % CPU
        # at 5,000 nodes with the collector running).
        with gc_paused():
            usages = self._pod_usages(policy)
            decision = decide_cycle(
                CycleInputs(
                    policy,
                    nodes,
                    now,
                    self._memory,
                    readings=readings,
                    failures=failures,
                    hot=hot,
                    pod_usages=usages,
                    cluster_pods=self._cluster_pods(policy),
                )
            )
        compute_s, compute_cpu_s = time.perf_counter() - t1, time.thread_time() - c1
        if self._last is None and usages is not None:
            freeze_survivors()  # the first lists' objects live on: no full collection walks them
        self._record_checks(decision.checks)
        self._memory = decision.memory
        self._last_bindings_generation, self._last_ledger_generation = generation
        return self._finish(
            policy,
            decision,
            nodes,
            dry,
            Timings(started_at, list_s, query_s, compute_s, compute_cpu_s),
            len(policy.spec.dimensions),
        )

    def _current_nodes(self, *, first: bool, wait_s: float) -> tuple[NodeState, ...]:
        """Every node: from the node watch while it is synced (a cycle waits a while for the
        list the watch is reading: the first one's, or one after a 410), else from a list.
        Raises `CycleError` when that list fails."""
        cache = self.node_cache
        if cache is not None:
            wait = min(FIRST_LIST_WAIT_S if first else RELIST_WAIT_S, wait_s)
            if cache.synced or cache.wait_synced(wait):
                return cache.nodes()
            log.info("node watch not synced: listing the nodes")
        try:
            return tuple(self.node_api.list_nodes())
        except KubeApiError as exc:
            raise CycleError(f"cannot list nodes: {exc}") from exc

    def _read_device_heat(
        self, policy: Policy, at: float | None, inventory: Inventory
    ) -> DeviceReadings:
        """`spec.devices.heat`, one query a cycle, only while some node has DRA devices."""
        heat = policy.spec.devices.heat
        if heat is None or not inventory.nodes():
            return DeviceReadings()
        source = self.source("prometheus")
        if not isinstance(source, PrometheusSource):  # replayed readings: no per-device data
            return DeviceReadings(error="no Prometheus to ask (replayed readings)")
        self.query_count += 1
        readings = read_device_heat(source.client(policy), policy, at)
        told = (readings.error, readings.problems)
        if told != self._told_device_heat:
            if readings.error or readings.problems:
                log.warning(
                    "spec.devices.heat: %s",
                    "; ".join(filter(None, (readings.error, *readings.problems))),
                )
            self._told_device_heat = told
        return readings

    def inventory(self) -> Inventory:
        """The DRA devices and claims as last seen (empty without DRA watches)."""
        return self.devices.snapshot() if self.devices is not None else Inventory.empty()

    def _remember(self, state: NodeState) -> None:
        """A newer state of a planned node (the answer to our write, or the node watch's),
        with the DRA devices the last cycle gave it: neither source knows them."""
        held = self._nodes.get(state.name)
        if held is not None and held.devices:
            state = dataclasses.replace(
                state, devices=held.devices, free_devices=held.free_devices, dra=held.dra
            )
        self._nodes[state.name] = state

    def _generations(self) -> tuple[int, int]:
        return (
            # `is not None`: an empty ledger is falsy (it has a length), yet its generation
            # moves when it becomes synced, and that must trigger a republish.
            self.bindings.generation if self.bindings is not None else 0,
            self.ledger.generation if self.ledger is not None else 0,
        )

    def _pod_changes(self) -> bool:
        """Pods were bound, or a node's pods changed, since the last plan."""
        return self._generations() != (
            self._last_bindings_generation,
            self._last_ledger_generation,
        )

    def _pod_usages(
        self, policy: Policy, nodes: Iterable[str] | None = None
    ) -> Mapping[str, tuple[PodUsage, ...]] | None:
        """Each node's pods (of `nodes`, or all) for the gates and budget pools, the
        consolidation term and drain candidates; None while the ledger is not synced, or
        without one when the policy plans nothing from pods (then no gate or pool is set, and
        no node is marked a drain candidate)."""
        if self.ledger is not None:
            return self.ledger.usages(nodes)
        if not plans_from_pods(policy):
            return None
        # Without a pod watch (`steer scorer once`, tests): one list of the bound pods.
        ledger = PodLedger()
        try:
            pods = self.node_api.kube.list_all(
                PODS_PATH, page_size=self.node_api.page_size, query={"fieldSelector": BOUND_PODS}
            )
        except KubeApiError as exc:
            log.warning(
                "gates, pools and drain candidates not planned: cannot list the bound pods: %s",
                exc,
            )
            return None
        ledger.replace(pods)
        return ledger.usages()

    def refresh_hot(self) -> CycleResult | None:
        """Recompute composites, gates and pools from memory when pods were bound or a node's
        pods changed since the last plan (no queries, no node list), for those nodes only, and
        write what changed. None when there is nothing new or no cycle yet."""
        if not self._pod_changes():
            return None
        with self._lock:  # a cycle in flight may have started before the change: wait for it
            if self._last is None or not self._pod_changes():
                return None
            previous = self._last
            policy = self.policy
            started_at = self._clock()
            generation = self._generations()
            hot = self._hot_counts(policy)
            dirty = self.ledger.take_dirty() if self.ledger is not None else None
            known = {p.node: p for p in previous.plan.nodes}
            if dirty is None:
                names = set(self._nodes)
            else:
                moved = {
                    n for n in self._nodes if hot.get(n, 0) != getattr(known.get(n), "hot_pods", 0)
                }
                names = (dirty | moved) & set(self._nodes)
            cache = self.node_cache
            if cache is not None and cache.synced:
                for name in names:  # as the node watch last saw them (a foreign taint, ...)
                    seen = cache.get(name)
                    if seen is not None:
                        self._remember(seen)
            # Their DRA devices as the last cycle read them: a refresh follows bindings, and
            # rebuilding the inventory (0.5 s at 40,000 devices) per binding would cost more
            # than the free-device counts it refreshes; reserved nodes follow the slices,
            # which a cycle reads.
            nodes = tuple(self._nodes[n] for n in sorted(names))
            t1 = time.perf_counter()
            decision = decide_cycle(
                CycleInputs(
                    policy,
                    nodes,
                    self._clock(),
                    self._memory,
                    hot=hot,
                    pod_usages=self._pod_usages(policy, names),
                    known=self._nodes,
                    previous=previous.plan,
                    cluster_pods=self._cluster_pods(policy),
                )
            )
            compute_s = time.perf_counter() - t1
            self._memory = decision.memory
            self._last_bindings_generation, self._last_ledger_generation = generation
            return self._finish(
                policy,
                decision,
                nodes,
                self.dry_run,
                Timings(started_at, 0.0, 0.0, compute_s),
                0,
                refresh=True,
            )

    def _hot_counts(self, policy: Policy) -> dict[str, int]:
        scoring = policy.spec.scoring
        if (
            self.bindings is None
            or scoring.hot_window_seconds <= 0
            or scoring.hot_penalty_per_pod <= 0
        ):
            return {}
        return self.bindings.counts(scoring.hot_window_seconds, self._clock())

    def _finish(
        self,
        policy: Policy,
        decision: CycleDecision,
        nodes: tuple[NodeState, ...],
        dry: bool,
        timings: Timings,
        queries: int,
        *,
        refresh: bool = False,
    ) -> CycleResult:
        """Write (if leading) what `decision` plans for `nodes`, publish its cluster scores and
        record it. In a refresh `nodes` are some of the nodes, and the result holds them all."""
        retired = decision.retired
        if retired:
            log.info(
                "retiring keys under old label prefixes %s on %d nodes",
                sorted({p for r in retired.values() for p in r.prefixes}),
                len(retired),
            )
        leader = self.is_leader
        report = None
        write_s = 0.0
        if leader and not dry:
            t2 = time.perf_counter()
            report = self.writer.apply(
                policy,
                decision.writes,
                nodes,
                still_allowed=lambda: self.is_leader and not self.stopping.is_set(),
                still_leading=lambda: self.is_leader,
            )
            write_s = time.perf_counter() - t2
            for written in report.results:
                if written.state is not None and written.node in self._nodes:
                    self._remember(written.state)
                    if self.node_cache is not None:
                        self.node_cache.offer(written.state)
            self.metrics.node_writes.labels(result="ok").inc(report.nodes_written)
            self.metrics.node_writes.labels(result="error").inc(len(report.errors))
            self.metrics.write_requests.inc(report.requests)
            self.metrics.write_conflicts.inc(report.conflicts)
        plan = decision.plan
        if refresh:
            nodes = tuple(self._nodes.values())
        if decision.cluster_scores is not None:
            self._publish_cluster_scores(policy, decision.cluster_scores, write=leader and not dry)
        result = CycleResult(
            plan=plan,
            nodes=nodes,
            report=report,
            leader=leader,
            dry_run=dry,
            queries=queries,
            started_at=timings.started_at,
            list_s=timings.list_s,
            query_s=timings.query_s,
            compute_s=timings.compute_s,
            write_s=write_s,
            compute_cpu_s=timings.compute_cpu_s,
        )
        self._last = result
        m = self.metrics
        m.cycle_duration.observe(result.duration_s)
        m.compute_duration.observe(timings.compute_s)
        m.planned_changes.set(len(plan.changes))
        m.nodes.set(len(nodes))
        m.leader.set(1 if leader else 0)
        m.stale_dimensions.set(len(plan.stale_dimensions))
        for summary in plan.dimensions:
            m.dimension_stale.labels(dimension=summary.dimension).set(1 if summary.stale else 0)
            if summary.age_s is not None:
                m.dimension_age.labels(dimension=summary.dimension).set(summary.age_s)
        capacity: dict[str, int] = {}
        free: dict[str, int] = {}
        overrun: dict[str, tuple[int, int]] = {}
        for node_plan in plan.nodes:
            for pool in node_plan.pools:
                capacity[pool.resource] = capacity.get(pool.resource, 0) + int(pool.capacity)
                free[pool.resource] = free.get(pool.resource, 0) + pool.free
                if pool.overrun:
                    units, over = overrun.get(pool.resource, (0, 0))
                    overrun[pool.resource] = (units + pool.overrun, over + 1)
        m.set_pools(capacity, free, overrun)
        m.last_success.set(self._clock())
        return result

    # ----------------------------------------------------------------- cluster scores

    def _cluster_pods(self, policy: Policy) -> ClusterPods | None:
        """The pods as the cluster scores count them, from the ledger (none without one); None
        when the policy has no cluster score."""
        if not policy.spec.cluster_scores.enabled:
            return None
        ledger = self.ledger
        if ledger is None:
            return ClusterPods(None, None)
        return ClusterPods(ledger.requested(requested_resources(policy)), ledger.usages())

    def _publish_cluster_scores(
        self, policy: Policy, values: tuple[ClusterScoreValue, ...], *, write: bool
    ) -> None:
        """Record this plan's spec.clusterScores and, when writing, publish them to the hub
        (scorer/cycle/placementscore.py). A hub failure is logged and counted, never fatal."""
        self.cluster_scores = values
        known = {v.name for v in values if v.value is not None}
        for name in self._cluster_score_names - known:
            self.metrics.cluster_score.remove(name)
        for v in values:
            if v.value is not None:
                self.metrics.cluster_score.labels(name=v.name).set(v.value)
        self._cluster_score_names = known
        if not write:
            if self.placement_scores is not None:
                self.placement_scores.forget()
            return
        if self.placement_scores is None:
            api_client = self.node_api.kube.api_client
            self.placement_scores = PlacementScorePublisher(lambda: KubeJson(api_client))
        try:
            result = self.placement_scores.publish(policy, values, self._clock())
        except PublishError as exc:
            self.metrics.cluster_score_writes.labels(result="error").inc()
            log.warning("cluster scores not published: %s", exc)
            return
        if result.written:
            self.metrics.cluster_score_writes.labels(result="ok").inc()
            if result.valid_until is not None:
                self.metrics.cluster_score_valid_until.set(result.valid_until)
            log.info(
                "cluster scores published (%s): %s",
                result.reason,
                ", ".join(f"{v.name}={v.value} ({v.why})" for v in values),
            )
