"""Waiting on the real control plane and reading a running scorer's /metrics: the helpers the
e2e tests share."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

import requests
from prometheus_client.parser import text_string_to_metric_families

from kits.service_processes import RunningScorer
from scorer.kubeapi import KubeApiError


def wait_until(
    what: str, check: Callable[[], Any], timeout_s: float = 30.0, interval_s: float = 0.1
) -> Any:
    """Poll `check` until it returns something truthy and return that; an API error, a
    connection error or a missing key counts as "not yet". TimeoutError names `what` and the
    last answer."""
    deadline = time.monotonic() + timeout_s
    last: Any = None
    while True:
        try:
            last = check()
        except (KubeApiError, requests.RequestException, KeyError) as exc:
            last = exc
        else:
            if last:
                return last
        if time.monotonic() >= deadline:
            raise TimeoutError(f"{what}: not within {timeout_s}s (last: {last!r})")
        time.sleep(interval_s)


def metric(scorer: RunningScorer, name: str, labels: Mapping[str, str] | None = None) -> float:
    """A sample of the running scorer's /metrics with exactly these labels (0 when absent)."""
    with requests.Session() as session:
        session.trust_env = False
        text = session.get(f"{scorer.url}/metrics", timeout=10).text
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and dict(sample.labels) == dict(labels or {}):
                return float(sample.value)
    return 0.0
