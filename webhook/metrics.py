"""Webhook metrics (prometheus-client), in one process or across gunicorn workers.

With several gunicorn workers each process counts on its own, so the server runs
prometheus-client's multiprocess mode: workers write to memory-mapped files in one directory
and the master's plain-HTTP metrics port adds them up. Two consequences shape this module:
the metric objects are created per process after the fork (`WebhookMetrics()`), and no gauge
is computed at scrape time inside a worker. The namespace cache age is therefore exported by
the workers as a timestamp and turned into an age by `CacheAgeCollector` where it is scraped.

Each update of a multiprocess value takes a lock and writes the memory-mapped file, and a
steered pod counts five or six rules. So under gunicorn (`deferred=True`) the rule counters
(mutations, denials, audited, dry runs) are kept in memory per worker and added to the files by
`flush`, which the status pump calls every second and the worker calls as it exits: a scrape
sees them up to a second late, none counted twice (a worker killed outright, SIGKILL or the
OOM killer, loses its last second's). The duration histogram and the rarer counters (bad
requests, uninterpretable reviews, reloads) are written as they happen.
"""

from __future__ import annotations

import glob
import os
import re
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from steer.adapters.build_info import BuildInfoCollector
from webhook.review import Decided, Failed, Judged, Refused

PREFIX = "steer_webhook"
SYNCED_AT = f"{PREFIX}_namespace_cache_current_timestamp_seconds"
CACHE_AGE = f"{PREFIX}_namespace_cache_age_seconds"
RELOAD_ERRORS = f"{PREFIX}_policy_reload_errors"
# Admission must answer in a few milliseconds; the buckets resolve 0.25 ms .. 1 s.
DURATION_BUCKETS = (0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
# Every `reason` label of the uninterpretable counter. A pod field path names its container by
# index (`spec.containers[7].resources`); as a label that is one series per index, so the label
# is the field's part of the pod (`spec.containers`), and the full path is in the warning and
# the log.
UNINTERPRETABLE_REASONS = frozenset(
    {
        "kind",
        "namespace-cache-not-synced",
        "namespace-unknown",
        "internal-error",
        "metadata",
        "metadata.labels",
        "metadata.annotations",
        "spec",
        "spec.affinity",
        "spec.containers",
        "spec.initContainers",
        "spec.nodeSelector",
        "spec.resourceClaims",
        "spec.resources",
        "spec.schedulerName",
        "spec.tolerations",
        "spec.topologySpreadConstraints",
        "other",
    }
)


def uninterpretable_reason(reason: str) -> str:
    """`reason` (a fixed reason or a pod field path) as one of UNINTERPRETABLE_REASONS."""
    part = ".".join(re.sub(r"\[.*", "", reason).split(".")[:2])
    return part if part in UNINTERPRETABLE_REASONS else "other"


# In the help of the counters `WebhookMetrics(deferred=True)` keeps in memory between flushes.
FLUSHED = " Under gunicorn each worker adds its counts every second."


class WebhookMetrics:
    """Every metric the webhook exports, registered in `registry` (the default one if None).

    `deferred`: the rule counters count in memory until `flush` (module docstring).
    """

    def __init__(
        self, registry: CollectorRegistry | None = None, *, deferred: bool = False
    ) -> None:
        reg = registry if registry is not None else REGISTRY
        self.duration = Histogram(
            f"{PREFIX}_admission_duration_seconds",
            "Time to answer one admission request, by endpoint and result.",
            ["endpoint", "result"],
            buckets=DURATION_BUCKETS,
            registry=reg,
        )
        self.mutations = Counter(
            f"{PREFIX}_mutations",
            "Steering rules added to pods (dry runs excluded), by rule." + FLUSHED,
            ["rule"],
            registry=reg,
        )
        self.denials = Counter(
            f"{PREFIX}_denials",
            "Pods denied (dry runs excluded), by rule (uninterpretable: a tenant's pod with a "
            "field validation cannot read)." + FLUSHED,
            ["rule"],
            registry=reg,
        )
        self.audits = Counter(
            f"{PREFIX}_audited",
            "Audit mode: what the webhook would have done (dry runs excluded), by action "
            "(mutate: a rule it would have added; deny: a rule it would have denied by) and rule."
            + FLUSHED,
            ["action", "rule"],
            registry=reg,
        )
        self.dry_runs = Counter(
            f"{PREFIX}_dry_run_reviews",
            "Dry-run admission requests, answered like real ones but counted only here." + FLUSHED,
            ["endpoint", "result"],
            registry=reg,
        )
        self.decisions = Counter(
            f"{PREFIX}_mutation_decisions",
            "Pods /mutate decided (miss) or answered with the verdict of an earlier pod of the "
            "same template (hit; webhook/decision_cache.py), by result." + FLUSHED,
            ["result"],
            registry=reg,
        )
        self.bad_requests = Counter(
            f"{PREFIX}_bad_requests",
            "Requests refused with HTTP 400 because the body is not a usable AdmissionReview.",
            ["reason"],
            registry=reg,
        )
        self.deferred = Counter(
            f"{PREFIX}_requests_deferred",
            "Admission requests answered 429 with Retry-After, their body dropped unread, "
            "because the worker held --max-bytes-in-flight of bodies already, by endpoint.",
            ["endpoint"],
            registry=reg,
        )
        self.uninterpretable = Counter(
            f"{PREFIX}_uninterpretable",
            "Well-formed reviews answered without steering or validation because the object "
            "could not be interpreted (or the namespace is not known yet), by endpoint and "
            "field; validation denies such a pod of a tenant (denials rule uninterpretable).",
            ["endpoint", "reason"],
            registry=reg,
        )
        self.policy_info = Gauge(
            f"{PREFIX}_policy_info",
            "The policy version in use (value 1 for the current version).",
            ["version"],
            multiprocess_mode="livemax",
            registry=reg,
        )
        self.policy_reload_errors = Counter(
            RELOAD_ERRORS,
            "Policy edits rejected since start (the last good policy keeps serving).",
            registry=reg,
        )
        self.namespace_current_at = Gauge(
            SYNCED_AT,
            "Time up to which the namespace cache is known to match the apiserver.",
            multiprocess_mode="livemin",
            registry=reg,
        )
        self.namespaces = Gauge(
            f"{PREFIX}_namespace_cache_namespaces",
            "Namespaces in the cache.",
            multiprocess_mode="livemax",
            registry=reg,
        )
        self.device_catalog_synced = Gauge(
            f"{PREFIX}_device_catalog_synced",
            "1 when the DRA catalogue (DeviceClasses, ResourceClaims, ResourceClaimTemplates) "
            "has synced; 0 before, or without DRA watches: pods are then classified by their "
            "requests only.",
            multiprocess_mode="livemin",
            registry=reg,
        )
        self.device_doubts = Counter(
            f"{PREFIX}_device_doubts",
            "Pods steered with a claim, claim template or extended-resource mapping the DRA "
            "catalogue did not know yet (classified by what was known, no gate keeping them "
            "off nodes they may need; dry runs excluded).",
            registry=reg,
        )
        self.namespace_relists = Counter(
            f"{PREFIX}_namespace_cache_relists",
            "Full namespace lists since start (1 + re-lists after 410 Gone or errors), summed "
            "over the worker processes (each keeps its own watch).",
            registry=reg,
        )
        reg.register(BuildInfoCollector(PREFIX))
        self._version: str | None = None
        # labels() hashes and locks on every call; the request path reuses the children.
        self._children: dict[tuple[str, ...], Any] = {}
        self._deferred = deferred
        # (counter, leading label values, last label values) -> requests that counted them
        self._pending: dict[tuple[Any, tuple[str, ...], tuple[str, ...]], int] = {}
        self._pending_lock = threading.Lock()

    def _child(self, metric: Any, *values: str) -> Any:
        key = (metric._name, *values)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*values)
        return child

    def record(self, decided: Decided, seconds: float) -> None:
        """Count one answered request, `seconds` to answer it: its duration by result, a body
        refused, a failure, and what a verdict counts (`_judged`); a dry run once more, apart."""
        endpoint, result = decided.endpoint, decided.result
        self.observe(endpoint, result, seconds)
        if isinstance(decided, Refused):
            self.bad_requests.labels(reason=decided.error.reason).inc()
            return
        if isinstance(decided, Failed):
            self.uninterpretable_review(endpoint, "internal-error")
        else:
            self._judged(decided)
        if decided.review is not None and decided.review.dry_run:
            self.dry_run(endpoint, result)

    def _judged(self, judged: Judged) -> None:
        """A verdict's counts: the decision cache's hit or miss, why the pod went unjudged, and
        (not for a dry run) the rules added or that audit mode would add, the pods steered past
        a claim not known yet, and the rules denied or that audit mode would deny by."""
        verdict = judged.verdict
        if judged.cached is not None:
            self.decision_cache(judged.cached)
        if judged.gap is not None:
            self.uninterpretable_review(judged.endpoint, judged.gap.reason)
        elif verdict.unreadable is not None:
            self.uninterpretable_review(judged.endpoint, verdict.unreadable.field)
        if judged.review.dry_run:
            return
        mutation = verdict.mutation
        if mutation is not None:
            if mutation.added:
                self.mutated(*mutation.added)
            if mutation.would_add:
                self.audited("mutate", *mutation.would_add)
            if verdict.warnings:  # a steered pod's warnings name the claims not known yet
                self.device_doubts.inc()
        if verdict.audited:
            self.audited("deny", *(d.rule for d in verdict.audited))
        if verdict.denials:
            self.denied(*(d.rule for d in verdict.denials))

    def observe(self, endpoint: str, result: str, seconds: float) -> None:
        self._child(self.duration, endpoint, result).observe(seconds)

    def mutated(self, *rules: str) -> None:
        """One more of each rule (the rules added to one pod)."""
        self._count(self.mutations, (), rules)

    def denied(self, *rules: str) -> None:
        self._count(self.denials, (), rules)

    def audited(self, action: str, *rules: str) -> None:
        self._count(self.audits, (action,), rules)

    def decision_cache(self, hit: bool) -> None:
        self._count(self.decisions, (), ("hit",) if hit else ("miss",))

    def dry_run(self, endpoint: str, result: str) -> None:
        self._count(self.dry_runs, (endpoint,), (result,))

    def _count(self, counter: Any, first: tuple[str, ...], last: tuple[str, ...]) -> None:
        """One more of `counter`'s child (*first, value) for each value in `last`: now, or
        kept in memory until `flush` when deferred (one dict update for all of a request's)."""
        if self._deferred:
            key = (counter, first, last)
            with self._pending_lock:
                self._pending[key] = self._pending.get(key, 0) + 1
            return
        for value in last:
            self._child(counter, *first, value).inc()

    def flush(self) -> None:
        """Add the counts kept in memory since the last flush to their counters."""
        with self._pending_lock:
            pending, self._pending = self._pending, {}
        for (counter, first, last), times in pending.items():
            for value in last:
                self._child(counter, *first, value).inc(times)

    def refused_for_room(self, endpoint: str) -> None:
        """A request turned away for the bytes in flight (webhook/inflight.py)."""
        self._child(self.deferred, endpoint).inc()

    def uninterpretable_review(self, endpoint: str, reason: str) -> None:
        self._child(self.uninterpretable, endpoint, uninterpretable_reason(reason)).inc()

    def set_policy(self, version: str) -> None:
        if self._version is not None and self._version != version:
            # remove() cannot delete a multiprocess file entry; 0 marks the old version retired.
            self.policy_info.labels(version=self._version).set(0)
        self.policy_info.labels(version=version).set(1)
        self._version = version


class ConnectionMetrics:
    """What the server's worker did to connections (created in each worker process)."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        reg = registry if registry is not None else REGISTRY
        self.timed_out = Counter(
            f"{PREFIX}_connections_timed_out",
            "Connections closed because the TLS handshake or a request took longer than "
            "--read-timeout-seconds, by phase (handshake, request).",
            ["phase"],
            registry=reg,
        )
        self.shed = Counter(
            f"{PREFIX}_connections_shed",
            "Connections closed, the longest waiting first, to stay under --max-connections.",
            registry=reg,
        )


class CacheAgeCollector(Collector):
    """Re-exports `source`'s metrics and adds the namespace cache age derived from them.

    The oldest worker counts: a request may land on any of them.
    """

    def __init__(
        self, source: Callable[[], Iterable[Metric]], clock: Callable[[], float] = time.time
    ) -> None:
        self._source = source
        self._clock = clock

    def collect(self) -> Iterable[Metric]:
        oldest: float | None = None
        for metric in self._source():
            if metric.name == SYNCED_AT:
                values = [s.value for s in metric.samples if s.value > 0]
                if values:
                    oldest = min(values) if oldest is None else min(oldest, *values)
            yield metric
        age = GaugeMetricFamily(
            CACHE_AGE, "Seconds since the namespace cache was last known current."
        )
        if oldest is not None:
            age.add_metric([], max(0.0, self._clock() - oldest))
        yield age


class LargestCountCollector(Collector):
    """Re-exports `source`'s metrics with the counters in `names` taken as the largest count of
    one process instead of the sum over processes.

    Every worker reloads the same policy file, so each one rejects the same bad edit: the sum
    would count it once per worker. The largest count is the number of edits rejected; a
    restarted worker starts from 0, and the count of the one it replaced stays in its file.
    """

    def __init__(
        self,
        source: Callable[[], Iterable[Metric]],
        per_process: Callable[[], Iterable[Iterable[Metric]]],
        names: Iterable[str],
    ) -> None:
        self._source = source
        self._per_process = per_process
        self._names = frozenset(names)

    def collect(self) -> Iterable[Metric]:
        largest: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
        for metrics in self._per_process():
            for metric in metrics:
                if metric.name in self._names:
                    for s in metric.samples:
                        key = (s.name, tuple(sorted(s.labels.items())))
                        largest[key] = max(largest.get(key, s.value), s.value)
        for metric in self._source():
            if metric.name in self._names:
                metric.samples = [
                    s._replace(
                        value=largest.get((s.name, tuple(sorted(s.labels.items()))), s.value)
                    )
                    for s in metric.samples
                ]
            yield metric


def multiprocess_registry() -> CollectorRegistry:
    """The registry the metrics port serves under gunicorn: all workers, the cache age, and
    the build info of the server."""
    from prometheus_client import multiprocess

    untyped: Any = multiprocess  # the module is not annotated
    collector = untyped.MultiProcessCollector(None)
    path = os.environ["PROMETHEUS_MULTIPROC_DIR"]  # the collector has checked it

    def per_process() -> Iterable[Iterable[Metric]]:
        for file in glob.glob(os.path.join(path, "counter_*.db")):
            yield untyped.MultiProcessCollector.merge([file], accumulate=True)

    registry = CollectorRegistry()
    registry.register(
        CacheAgeCollector(
            LargestCountCollector(collector.collect, per_process, [RELOAD_ERRORS]).collect
        )
    )
    registry.register(BuildInfoCollector(PREFIX))
    return registry
