"""What the kube-scheduler said of a live pod: its `PodScheduled` condition and its latest
`FailedScheduling` event, into a `SchedulerVerdict` (scorer/explain/view/pod_explanation.py).

Pure: the pod and its events as the API answered them in, the view out. The scorer reads them
(one GET of the pod, one filtered list of its events) only when `/explain/pod/NS/NAME` asks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scorer.explain.view import PodScheduled, SchedulerVerdict, SchedulingEvent
from scorer.model import parse_rfc3339


def _text(value: Any) -> str | None:
    return str(value) if value else None


def _last_seen(event: Mapping[str, Any]) -> str | None:
    """When the event last happened. The scheduler writes through the events.k8s.io API, whose
    core/v1 view has `series.lastObservedTime` for a repeat and `eventTime` for the first
    occurrence, and leaves `lastTimestamp` empty; older recorders set only `lastTimestamp`."""
    series = event.get("series") or {}
    meta = event.get("metadata") or {}
    for value in (
        series.get("lastObservedTime"),
        event.get("lastTimestamp"),
        event.get("eventTime"),
        meta.get("creationTimestamp"),
    ):
        if value:
            return str(value)
    return None


def _count(event: Mapping[str, Any]) -> int:
    series = event.get("series") or {}
    return int(series.get("count") or event.get("count") or 1)


def latest_failed_scheduling(
    events: Iterable[Mapping[str, Any]], uid: str | None = None
) -> SchedulingEvent | None:
    """The latest `FailedScheduling` event among `events` (of this pod's `uid`, when known: a
    deleted pod's events outlive it, and a new pod may take its name)."""
    best: tuple[float, Mapping[str, Any]] | None = None
    for event in events:
        if event.get("reason") != "FailedScheduling":
            continue
        involved = event.get("involvedObject") or {}
        if uid and involved.get("uid") and involved.get("uid") != uid:
            continue
        seen = _last_seen(event)
        at = (parse_rfc3339(seen) if seen else None) or 0.0
        if best is None or at >= best[0]:
            best = (at, event)
    if best is None:
        return None
    event = best[1]
    source = event.get("source") or {}
    return SchedulingEvent(
        message=str(event.get("message") or event.get("note") or ""),
        count=_count(event),
        last_seen=_last_seen(event),
        reporter=_text(event.get("reportingComponent") or source.get("component")),
    )


def scheduler_verdict(
    pod: Mapping[str, Any],
    events: Iterable[Mapping[str, Any]],
    events_error: str | None = None,
) -> SchedulerVerdict:
    """The scheduler's verdict on `pod` from its status and `events` (its events, any reason;
    only `FailedScheduling` ones count). `events_error` says why the events were not read."""
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    condition = next(
        (
            c
            for c in status.get("conditions") or ()
            if isinstance(c, Mapping) and c.get("type") == "PodScheduled"
        ),
        None,
    )
    scheduled = None
    if condition is not None:
        scheduled = PodScheduled(
            status=str(condition.get("status") or "Unknown"),
            reason=_text(condition.get("reason")),
            message=_text(condition.get("message")),
            since=_text(condition.get("lastTransitionTime")),
        )
    return SchedulerVerdict(
        node=_text(spec.get("nodeName")),
        phase=_text(status.get("phase")),
        pod_scheduled=scheduled,
        failed_scheduling=latest_failed_scheduling(events, _text(meta.get("uid"))),
        events_error=events_error,
    )
