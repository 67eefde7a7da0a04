"""One dimension on one node: the value it carries, how fresh its data is, and its label."""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping

from scorer.cycle.plan.layout import CycleContext, DimensionLayout
from scorer.cycle.plan.model import DataStatus, DimensionScore
from scorer.model import NodeState, parse_rfc3339
from steer.core.encoding import quantise, quantise_raw


def bucket(label: str | None) -> int | None:
    if label is None:
        return None
    try:
        return int(label)
    except ValueError:
        return None  # a hand-edited label: treat as no previous value


def observed_times(node: NodeState, key: str) -> dict[str, str]:
    text = node.annotations.get(key)
    if not text:
        return {}
    return dict(_parsed_times(text))


@functools.lru_cache(maxsize=1024)
def _parsed_times(text: str) -> tuple[tuple[str, str], ...]:
    """The annotation's times; nodes observed together carry the same text, and every cycle
    reads every node's, so each text is parsed once."""
    try:
        data = json.loads(text)
    except ValueError:
        return ()
    if not isinstance(data, dict):
        return ()
    return tuple((str(k), str(v)) for k, v in data.items())


def score_dimension(
    d: DimensionLayout, node: NodeState, cycle: CycleContext, times: Mapping[str, str]
) -> DimensionScore:
    """The node's value of one dimension and its label; `times` are the observation times the
    node's annotation holds (a label carried over a restart keeps its own)."""
    now = cycle.now
    current = node.labels.get(d.key)
    obs = cycle.observations[d.name].get(node.name)
    if obs is not None:
        score = cycle.scores[d.name].get(node.name)
        if d.raw:
            label = str(quantise_raw(obs.value, d.step, bucket(current), d.hysteresis))
        else:
            label = str(
                quantise(score if score is not None else 0.0, d.step, bucket(current), d.hysteresis)
            )
        return DimensionScore(
            dimension=d.name,
            status=DataStatus.FRESH
            if node.name in cycle.fresh.get(d.name, ())
            else DataStatus.RETAINED,
            raw=obs.value,
            score=score,
            label=label,
            observed_at=obs.observed_at,
            age_s=max(0.0, now - obs.observed_at),
        )
    if current is None:
        return DimensionScore(d.name, DataStatus.MISSING, None, None, None, None, None)
    set_at = parse_rfc3339(times[d.name]) if d.name in times else None
    if set_at is not None and now - set_at <= d.ttl:
        carried = bucket(current)
        return DimensionScore(
            dimension=d.name,
            status=DataStatus.CARRIED,
            raw=None,
            score=float(carried) if carried is not None and not d.raw else None,
            label=current,
            observed_at=set_at,
            age_s=max(0.0, now - set_at),
        )
    return DimensionScore(
        dimension=d.name,
        status=DataStatus.STALE,
        raw=None,
        score=None,
        label=None,
        observed_at=set_at,
        age_s=None if set_at is None else max(0.0, now - set_at),
    )
