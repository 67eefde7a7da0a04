"""Writes the cluster scores (scorer/cycle/clusterscore.py) into an AddOnPlacementScore on the hub.

The object is `<clusterName>/<resourceName>` of cluster.open-cluster-management.io/v1alpha1;
its scores live in `status`, which upstream serves as a subresource, so the scores go in a
merge patch of `/status` (a create ignores any status it carries). A missing object is created
first, labelled as ours. The patch names no resourceVersion: the object has one writer (the
scorer's leader), and the scores list is replaced whole.

A failed write is logged and counted by the caller, and retried at the next cycle: the cycle's
node writes never wait on the hub beyond one request's timeout.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

from scorer.cycle.clusterscore import (
    ClusterScoreValue,
    PublishedScores,
    published,
    status_patch,
    valid_until,
    write_reason,
)
from steer.adapters.kube import KubeConfigError, make_api_client
from steer.adapters.kubejson import MERGE_PATCH, KubeApiError, KubeJson
from steer.core.policy import Policy

PLACEMENT_SCORE_API = "/apis/cluster.open-cluster-management.io/v1alpha1"


def placement_score_path(namespace: str, name: str = "") -> str:
    """An Open Cluster Management AddOnPlacementScore (namespaced in the cluster's namespace
    on the hub), or the collection of one namespace."""
    base = f"{PLACEMENT_SCORE_API}/namespaces/{quote(namespace, safe='')}/addonplacementscores"
    return f"{base}/{quote(name, safe='')}" if name else base


log = logging.getLogger(__name__)

API_VERSION = "cluster.open-cluster-management.io/v1alpha1"
KIND = "AddOnPlacementScore"
MANAGED_BY = {"app.kubernetes.io/managed-by": "kube-steer"}


class PublishError(RuntimeError):
    """The hub could not be reached or refused the write."""


@dataclass(frozen=True)
class PublishResult:
    written: bool
    reason: str | None  # why it was written (None: nothing to write)
    scores: tuple[tuple[str, int], ...] = ()
    valid_until: float | None = None
    created: bool = False


def _connect(kubeconfig: str) -> KubeJson:
    return KubeJson(make_api_client(kubeconfig))


class PlacementScorePublisher:
    """Keeps what it last wrote, so unchanged scores are written only to push `validUntil`
    forward. `local` is the scorer's own cluster (the hub when `hubKubeconfig` is unset)."""

    def __init__(
        self, local: Callable[[], KubeJson], *, connect: Callable[[str], KubeJson] = _connect
    ) -> None:
        self._local = local
        self._connect = connect
        self._hub: KubeJson | None = None
        self._hub_key: str | None = None
        self.last: PublishedScores | None = None

    def hub(self, policy: Policy) -> KubeJson:
        path = policy.spec.cluster_scores.hub_kubeconfig
        key = path or ""
        if self._hub is None or key != self._hub_key:
            try:
                self._hub = self._connect(path) if path else self._local()
            except KubeConfigError as exc:
                raise PublishError(f"spec.clusterScores.hubKubeconfig: {exc}") from exc
            self._hub_key = key
        return self._hub

    def forget(self) -> None:
        """Not writing (not the leader): another replica may write meanwhile, so what this
        one wrote last says nothing about the object when it leads again."""
        self.last = None

    def publish(
        self, policy: Policy, values: tuple[ClusterScoreValue, ...], now: float
    ) -> PublishResult:
        """Write the scores when they changed or `validUntil` needs pushing; raises
        `PublishError` when the write failed (it is tried again on the next call)."""
        config = policy.spec.cluster_scores
        namespace, name = config.cluster_name, config.resource_name
        scores = published(values)
        reason = write_reason(self.last, namespace, name, scores, now, config.valid_for_seconds)
        if reason is None:
            return PublishResult(False, None, scores)
        until = valid_until(now, config.valid_for_seconds)
        kube = self.hub(policy)
        try:
            created = self._write(kube, namespace, name, status_patch(scores, until))
        except KubeApiError as exc:
            raise PublishError(_problem(exc, namespace, name)) from exc
        self.last = PublishedScores(namespace, name, scores, until)
        return PublishResult(True, reason, scores, until, created)

    @staticmethod
    def _write(kube: KubeJson, namespace: str, name: str, patch: dict[str, object]) -> bool:
        """Patch the status; create the object first when it is missing. True if created."""
        status = placement_score_path(namespace, name) + "/status"
        try:
            kube.request("PATCH", status, body=patch, content_type=MERGE_PATCH)
            return False
        except KubeApiError as exc:
            if exc.status != 404:
                raise
        body = {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": name, "namespace": namespace, "labels": dict(MANAGED_BY)},
        }
        created = True
        try:
            kube.request("POST", placement_score_path(namespace), body=body)
        except KubeApiError as exc:
            if exc.status != 409:  # created meanwhile by another writer: patch it
                raise
            created = False
        kube.request("PATCH", status, body=patch, content_type=MERGE_PATCH)
        return created


def _problem(exc: KubeApiError, namespace: str, name: str) -> str:
    where = f"AddOnPlacementScore {namespace}/{name} on the hub"
    if exc.status == 404:
        return (
            f"{where}: {exc.message or 'not found'} (is the AddOnPlacementScore CRD installed "
            f"(manifests/ocm/) and does namespace {namespace!r}, the managed cluster's, exist?)"
        )
    if exc.status in (401, 403):
        return (
            f"{where}: refused ({exc.status} {exc.reason}): {exc.message}; the scorer needs "
            "create on addonplacementscores and patch on addonplacementscores/status there "
            "(manifests/ocm/hub-rbac.yaml)"
        )
    return f"{where}: {exc}"
