"""Counters read from the apiserver's and the scorer's /metrics text."""

from __future__ import annotations

import re
from collections.abc import Mapping

from prometheus_client.parser import text_string_to_metric_families

_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')


def apiserver_requests(text: str) -> dict[str, float]:
    """`apiserver_request_total` for nodes and pods, summed by `resource/subresource VERB`."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line.startswith("apiserver_request_total{"):
            continue
        head, _, value = line.rpartition(" ")
        labels = dict(_LABEL.findall(head))
        if labels.get("resource") not in ("nodes", "pods"):
            continue
        sub = labels.get("subresource") or ""
        key = f"{labels['resource']}{'/' + sub if sub else ''} {labels.get('verb', '')}"
        out[key] = out.get(key, 0.0) + float(value)
    return out


def scorer_metrics(text: str) -> dict[str, float]:
    """The scorer's counters and histogram sums/counts, one number per series."""
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith("_bucket") or sample.name.endswith("_created"):
                continue
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return out


def delta(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {
        k: round(v - before.get(k, 0.0), 3) for k, v in after.items() if v != before.get(k, 0.0)
    }
