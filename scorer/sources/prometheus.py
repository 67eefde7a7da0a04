"""Prometheus: one instant query per dimension for the whole cluster, sent concurrently."""

from __future__ import annotations

import time
from collections.abc import Sequence

from scorer.model import NodeState
from scorer.observe import DimensionFailure, NodeIndex, read_dimension
from scorer.sources.base import Readings, SourceContext, concurrently
from steer.adapters.prometheus import (
    PrometheusAuthError,
    PrometheusClient,
    PrometheusError,
    PrometheusQueryError,
    PrometheusUnavailable,
    QueryResult,
)
from steer.core.policy import Dimension, Policy, PrometheusDimension


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

    def read(
        self,
        policy: Policy,
        dimensions: Sequence[Dimension],
        nodes: Sequence[NodeState],
        index: NodeIndex,
        at: float | None,
    ) -> Readings:
        client = self.client(policy)

        def ask(dim: Dimension) -> QueryResult | DimensionFailure:
            assert isinstance(dim, PrometheusDimension)  # grouped by source (scorer/service.py)
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
        return out
