"""Where the scheduler's time went, read from its /metrics text."""

from __future__ import annotations

from typing import Any

from prometheus_client.parser import text_string_to_metric_families

PLUGIN_METRIC = "scheduler_plugin_execution_duration_seconds"
POINT_METRIC = "scheduler_framework_extension_point_duration_seconds"
ALGORITHM_METRIC = "scheduler_scheduling_algorithm_duration_seconds"
ATTEMPTS_METRIC = "scheduler_schedule_attempts"  # counters lose "_total" in the parser
BATCH_METRIC = "scheduler_batch_attempts"
# The scheduling pipeline in order. Bind (and PreBind, PostBind) run asynchronously and wait on
# the apiserver: their wall time is latency, overlapping between pods, not scheduler work.
POINTS = (
    "PreEnqueue",
    "Sign",
    "PreFilter",
    "Filter",
    "PostFilter",
    "PreScore",
    "Score",
    "Reserve",
    "Permit",
    "PreBind",
    "Bind",
)
CPU_POINTS = frozenset(POINTS[:8])
# The scheduler buffers plugin observations (1,000 at most) and flushes them every second.
METRICS_FLUSH_S = 1.5


def metric_sums(text: str, name: str, key: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of histogram or counter `name` per value of label `key` (others summed;
    a counter's count is 0)."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != name:
            continue
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            slot = out.setdefault(sample.labels.get(key, ""), [0.0, 0.0])
            slot[1 if sample.name.endswith("_count") else 0] += sample.value
    return {k: (v[0], v[1]) for k, v in out.items()}


def plugin_means(text: str) -> dict[str, tuple[float, int]]:
    """`Point/Plugin` -> (mean µs per call, calls kept). Only ~10 % of cycles record plugin
    times, Filter and Score once per node, and the scheduler drops what exceeds its buffer of
    1,000 per second: sums and counts are truncated, the mean per call is not."""
    out: dict[str, list[float]] = {}
    for family in text_string_to_metric_families(text):
        if family.name != PLUGIN_METRIC:
            continue
        for sample in family.samples:
            if not sample.name.endswith(("_sum", "_count")):
                continue
            key = f"{sample.labels['extension_point']}/{sample.labels['plugin']}"
            slot = out.setdefault(key, [0.0, 0.0])
            slot[1 if sample.name.endswith("_count") else 0] += sample.value
    return {k: (round(v[0] / v[1] * 1e6, 2), int(v[1])) for k, v in out.items() if v[1]}


def scheduler_time(text: str) -> dict[str, Any]:
    """Where a run's scheduling time went, from the scheduler's /metrics: per pod, the
    algorithm (filter + score) and each extension point in µs (every cycle records these);
    per plugin call, the mean µs; attempts and batching results by result."""
    attempts = {k: int(v[0]) for k, v in metric_sums(text, ATTEMPTS_METRIC, "result").items()}
    tried = sum(attempts.values()) or 1
    points = metric_sums(text, POINT_METRIC, "extension_point")
    algorithm = metric_sums(text, ALGORITHM_METRIC, "")
    algorithm_s = sum(s for s, _ in algorithm.values())
    return {
        "attempts": attempts,
        "batch": {k: int(v[0]) for k, v in metric_sums(text, BATCH_METRIC, "result").items()},
        "algorithm_us": round(algorithm_s / tried * 1e6, 1),
        "extension_point_us": {
            p: round(points[p][0] / tried * 1e6, 1) for p in POINTS if p in points
        },
        "plugin_us_per_call": {k: v[0] for k, v in plugin_means(text).items()},
        "plugin_calls_kept": {k: v[1] for k, v in plugin_means(text).items()},
    }
