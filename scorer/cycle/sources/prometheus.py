"""Prometheus: one instant query per dimension for the whole cluster, sent concurrently.

A dimension is diagnosed from what Prometheus holds (absent metrics and the families found
instead, the node label's spelling, renamed labels: steer/core/datacheck/diagnose.py) when first
seen and hourly, and, while its answer resolves no node or has samples that name none, when
that begins and at most every `DIAGNOSIS_INTERVAL_S`. That costs a few requests more only
then; a steady cycle sends one query per dimension.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass

from scorer.cycle.observe import DimensionFailure, DimensionReading, read_dimension
from scorer.cycle.sources.base import Readings, SourceContext, SourceRequest, concurrently
from scorer.model import DeviceReadings
from steer.adapters.prometheus import (
    PrometheusAuthError,
    PrometheusClient,
    PrometheusError,
    PrometheusQueryError,
    PrometheusUnavailable,
    QueryResult,
)
from steer.adapters.prometheus_probe import metric_index, probe
from steer.core.datacheck import DataProblem, diagnose
from steer.core.datacheck.diagnose import metrics_of
from steer.core.datacheck.units import check_unit
from steer.core.policy import Dimension, Policy, PrometheusDimension

log = logging.getLogger(__name__)

DIAGNOSIS_INTERVAL_S = 300.0
FULL_DIAGNOSIS_INTERVAL_S = 3600.0


def failure_kind(exc: PrometheusError) -> str:
    if isinstance(exc, PrometheusUnavailable):
        return "unavailable"
    if isinstance(exc, PrometheusQueryError):
        return "query"
    if isinstance(exc, PrometheusAuthError):
        return "auth"
    return "response"


class PrometheusSource:
    """`context.prometheus_url` overrides the policy's `spec.prometheus.url`."""

    def __init__(self, context: SourceContext) -> None:
        self.url_override = context.prometheus_url
        self._client: PrometheusClient | None = None
        self._client_key: tuple[object, ...] | None = None
        # (dimension, query, node label) → its last diagnosis
        self._diagnoses: dict[tuple[str, str, str], _Diagnosis] = {}

    def client(self, policy: Policy) -> PrometheusClient:
        """A client for the policy's Prometheus settings, rebuilt when a reload changes them."""
        prom = policy.spec.prometheus
        url = self.url_override or prom.url
        key = (url, prom.timeout_seconds, prom.bearer_token_file, prom.ca_file)
        if self._client is None or key != self._client_key:
            if self._client is not None:
                self._client.close()
            self._client = PrometheusClient(
                url,
                timeout_s=prom.timeout_seconds,
                bearer_token_file=prom.bearer_token_file,
                ca_file=prom.ca_file,
                pool_size=max(4, len(policy.spec.dimensions)),
            )
            self._client_key = key
        return self._client

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def read(self, request: SourceRequest) -> Readings:
        policy, dimensions, index, at = (
            request.policy,
            request.dimensions,
            request.index,
            request.at,
        )
        client = self.client(policy)

        def ask(dim: Dimension) -> QueryResult | DimensionFailure:
            assert isinstance(
                dim, PrometheusDimension
            )  # grouped by source (scorer/cycle/service.py)
            t0 = time.perf_counter()
            try:
                return client.query(dim.query, time=at)
            except PrometheusError as exc:
                return DimensionFailure(
                    dim.name, dim.query, failure_kind(exc), str(exc), time.perf_counter() - t0
                )

        answers = concurrently(ask, dimensions, "promql")
        out = Readings(requests=len(dimensions))
        for dim, answer in zip(dimensions, answers, strict=True):
            if isinstance(answer, DimensionFailure):
                out.failures[dim.name] = answer
            else:
                out.readings[dim.name] = read_dimension(
                    dim,
                    answer.samples,
                    observed_at=answer.evaluated_at,
                    index=index,
                    duration_s=answer.duration_s,
                    warnings=answer.warnings,
                )
        self._diagnose(client, dimensions, out)
        return out

    def _diagnose(
        self, client: PrometheusClient, dimensions: Sequence[Dimension], out: Readings
    ) -> None:
        """Attach to each reading what Prometheus shows is wrong with its dimension's data.

        Every dimension is diagnosed when first seen and then hourly (a renamed label leaves
        the answer whole but wrong); one that resolves no node or has samples that name none,
        when that begins and every `DIAGNOSIS_INTERVAL_S` while it lasts."""
        now = time.monotonic()
        keys: dict[str, tuple[str, str, str]] = {}
        due: list[tuple[PrometheusDimension, tuple[str, str, str], bool]] = []
        for dim in dimensions:
            reading = out.readings.get(dim.name)
            if reading is None or not isinstance(dim, PrometheusDimension):
                continue
            key = keys[dim.name] = (dim.name, dim.query, dim.node_label)
            short = _short(reading)
            last = self._diagnoses.get(key)
            interval = DIAGNOSIS_INTERVAL_S if short else FULL_DIAGNOSIS_INTERVAL_S
            if last is None or last.short != short or now - last.at >= interval:
                due.append((dim, key, short))
        # Diagnoses of what the policy no longer reads (an edit) are dropped, not kept forever.
        current = {
            (d.name, d.query, d.node_label)
            for d in dimensions
            if isinstance(d, PrometheusDimension)
        }
        self._diagnoses = {k: v for k, v in self._diagnoses.items() if k in current}
        if due:
            try:
                names = metric_index(client)
                out.requests += 1
                for dim, key, short in due:
                    facts = probe(client, metrics_of(dim), names)
                    out.requests += sum(1 for m in facts.metrics if m.name in names)
                    self._diagnoses[key] = _Diagnosis(now, short, diagnose(dim, facts, short=short))
            except PrometheusError as exc:  # the diagnosis is extra: its failure is only logged
                log.warning("diagnosis of %s: %s", ", ".join(d.name for d, _, _ in due), exc)
        for name, key in keys.items():
            found = self._diagnoses.get(key)
            if found is not None and found.problems:
                reading = out.readings[name]
                out.readings[name] = dataclasses.replace(reading, problems=found.problems)


@dataclass(frozen=True)
class _Diagnosis:
    at: float  # monotonic seconds
    short: bool  # the reading resolved no node, or too few, when diagnosed
    problems: tuple[DataProblem, ...]


def _short(reading: DimensionReading) -> bool:
    """Whether the reading resolves no node, or has samples that name none: what Prometheus can
    explain. (Nodes that no series names at all, Prometheus cannot: their exporter is not
    there, and the coverage check says which they are.)"""
    return not reading.values or bool(reading.unknown or reading.unlabelled)


def read_device_heat(
    client: PrometheusClient, policy: Policy, at: float | None = None
) -> DeviceReadings:
    """`spec.devices.heat`: one query for every device, values by the UUID label. A device
    named twice keeps its highest value (the hotter reading never hides). Values the rule's
    dimension unit cannot take are dropped, and a scale contradiction (a percent rule read
    on 0..1 values) holds the whole reading back, as for a dimension (steer/core/datacheck)."""
    heat = policy.spec.devices.heat
    assert heat is not None
    try:
        answer = client.query(heat.query, time=at)
    except PrometheusError as exc:
        return DeviceReadings(error=f"{failure_kind(exc)}: {exc}")
    values: dict[str, float] = {}
    unlabelled = 0
    for sample in answer.samples:
        uuid = sample.labels.get(heat.uuid_label)
        if not uuid:
            unlabelled += 1
            continue
        if uuid not in values or sample.value > values[uuid]:
            values[uuid] = sample.value
    problems = []
    if unlabelled:
        problems.append(f"{unlabelled} samples without the {heat.uuid_label} label")
    dim = policy.dimension(policy.taint_rule(heat.taint).condition.dimension)
    checked = check_unit(dim, values)
    problems += [p.message for p in checked.problems]
    if any(p.blocking for p in checked.problems):
        return DeviceReadings(observed_at=answer.evaluated_at, problems=tuple(problems))
    return DeviceReadings(dict(checked.kept), answer.evaluated_at, None, tuple(problems))
