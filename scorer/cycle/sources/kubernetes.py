"""Values the Kubernetes API gives exactly, with no exporter in between.

- `limitOvercommit`: from the pod ledger the scorer's pod watch keeps (scorer/watch/ledger.py) and
  the nodes' allocatable. Unlike kube-state-metrics, a node without pods has a value (-100),
  and the sum counts containers the way the scheduler does (sidecars, init containers).
- `endpointReadiness`: the EndpointSlices of a named Service, listed each cycle; per node, the
  % of its endpoints that are ready: a service registry's health signal where the registry is
  the cluster itself. Nodes without an endpoint of the Service get no value.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from scorer.cycle.observe import DimensionFailure, read_dimension
from scorer.cycle.sources.base import (
    NodeValue,
    Readings,
    SourceContext,
    SourceFailed,
    SourceRequest,
)
from scorer.model import NodeState
from scorer.watch.ledger import PodLedger
from steer.adapters.kubejson import KubeApiError
from steer.core.budget import Amount, limit_overcommit_pct
from steer.core.policy import Dimension, KubernetesDimension

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
_ZERO = Amount()


class KubernetesApiSource:
    """The `kubernetes` source: values read from the Kubernetes API, for the dimensions the
    policy describes with `steer.core.policy.KubernetesSource`."""

    def __init__(self, context: SourceContext) -> None:
        self.context = context

    def close(self) -> None:
        pass

    def read(self, request: SourceRequest) -> Readings:
        dimensions, nodes, index, at = request.dimensions, request.nodes, request.index, request.at
        out = Readings()
        for dim in dimensions:
            t0 = time.perf_counter()
            observed_at = time.time() if at is None else at
            try:
                values = self._values(dim, nodes)
            except SourceFailed as exc:
                out.failures[dim.name] = DimensionFailure(
                    dim.name, dim.what, exc.kind, str(exc), time.perf_counter() - t0
                )
                continue
            samples = [NodeValue(dim.node_label, node, value) for node, value in values.items()]
            out.readings[dim.name] = read_dimension(
                dim,
                samples,
                observed_at=observed_at,
                index=index,
                duration_s=time.perf_counter() - t0,
            )
        return out

    def _values(self, dim: Dimension, nodes: Sequence[NodeState]) -> dict[str, float]:
        assert isinstance(dim, KubernetesDimension)  # grouped by source (scorer/cycle/service.py)
        settings = dim.kubernetes
        if settings.kind == "limitOvercommit":
            return self._limit_overcommit(nodes)
        return self._endpoint_readiness(settings.namespace or "", settings.service or "")

    def _limit_overcommit(self, nodes: Sequence[NodeState]) -> dict[str, float]:
        ledger = self.context.ledger
        if ledger is None:
            ledger = self._listed_pods()
        limits = ledger.limits()
        if limits is None:
            raise SourceFailed("unavailable", "the pod watch has not listed the pods yet")
        out = {}
        for node in nodes:
            value = limit_overcommit_pct(node.amounts, limits.get(node.name, _ZERO))
            out[node.name] = float("nan") if value is None else value
        return out

    def _listed_pods(self) -> PodLedger:
        """Without the scorer's pod watch (`steer scorer once`): one list of every pod."""
        if self.context.kube is None:
            raise SourceFailed("unavailable", "no pod ledger and no Kubernetes API client")
        ledger = PodLedger()
        try:
            ledger.replace(self.context.kube().list_all("/api/v1/pods"))
        except KubeApiError as exc:
            kind = "auth" if exc.status in (401, 403) else "unavailable"
            raise SourceFailed(kind, str(exc)) from exc
        return ledger

    def _endpoint_readiness(self, namespace: str, service: str) -> dict[str, float]:
        if self.context.kube is None:
            raise SourceFailed("unavailable", "no Kubernetes API client")
        path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
        try:
            slices = self.context.kube().list_all(
                path, query={"labelSelector": f"{SERVICE_NAME_LABEL}={service}"}
            )
        except KubeApiError as exc:
            kind = "auth" if exc.status in (401, 403) else "unavailable"
            raise SourceFailed(kind, str(exc)) from exc
        return endpoint_readiness(slices)


def endpoint_readiness(slices: Iterable[Mapping[str, Any]]) -> dict[str, float]:
    """Per node, 100 * ready endpoints / endpoints, over every slice of the Service. An
    endpoint without a `ready` condition counts as ready, as the EndpointSlice API says."""
    total: dict[str, int] = {}
    ready: dict[str, int] = {}
    seen: set[tuple[str, tuple[str, ...]]] = set()
    for piece in slices:
        for endpoint in piece.get("endpoints") or ():
            node = endpoint.get("nodeName")
            if not node:
                continue
            # The same address may appear in two slices while the controller moves it.
            ident = (str(node), tuple(endpoint.get("addresses") or ()))
            if ident in seen:
                continue
            seen.add(ident)
            total[node] = total.get(node, 0) + 1
            if (endpoint.get("conditions") or {}).get("ready", True) is not False:
                ready[node] = ready.get(node, 0) + 1
    return {node: 100.0 * ready.get(node, 0) / count for node, count in total.items()}
