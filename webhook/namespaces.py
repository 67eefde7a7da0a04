"""Namespace labels kept in memory by list + watch, so admission never waits on the apiserver.

The webhook needs each namespace's labels (opt-in, tenant) for every pod it sees; asking the
apiserver per request would put a network round trip, and an apiserver dependency, on the pod
creation path. One list fills the map, a watch from the list's resourceVersion keeps it
current, and a 410 Gone (the watch history no longer reaches back far enough) or any other
failure starts over with a fresh list. Watches end every `watch_seconds` by design; a clean end
proves the map was current until then, which is what the cache-age metric reports.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client

from steer.adapters.listwatch import ListWatcher

log = logging.getLogger(__name__)


class NamespaceSource(Protocol):
    """Where the app reads namespace labels from (the watch below, or a fixed map)."""

    def labels(self, name: str) -> Mapping[str, str] | None: ...

    @property
    def synced(self) -> bool: ...

    def status(self) -> NamespaceCacheStatus: ...


@dataclass(frozen=True)
class NamespaceCacheStatus:
    synced: bool
    namespaces: int
    # Wall-clock time (epoch seconds) up to which the map is known to match the apiserver.
    current_at: float | None
    resource_version: str | None
    relists: int
    last_error: str | None

    def as_json(self) -> dict[str, Any]:
        age = None if self.current_at is None else max(0.0, time.time() - self.current_at)
        return {
            "synced": self.synced,
            "namespaces": self.namespaces,
            "ageSeconds": None if age is None else round(age, 3),
            "resourceVersion": self.resource_version,
            "relists": self.relists,
            "lastError": self.last_error,
        }


Listener = Callable[[NamespaceCacheStatus], None]


class NamespaceCache(ListWatcher):
    """Labels of every namespace, from one list and then a watch (`steer.adapters.listwatch`),
    refreshed in a thread. A broken watch keeps the map it had: namespaces change rarely, and
    admission goes on with labels a few seconds old rather than none."""

    path = "/api/v1/namespaces"
    thread_name = "namespace-watch"

    def __init__(
        self,
        api_client_factory: Callable[[], client.ApiClient],
        *,
        watch_seconds: int = 60,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 10.0,
        on_change: Listener | None = None,
    ) -> None:
        super().__init__(
            api_client_factory,  # made in the thread, after the worker's fork
            timeout_s=watch_seconds,
            backoff_s=backoff_seconds,
            max_backoff_s=max_backoff_seconds,
        )
        self._on_change = on_change
        self._labels: dict[str, dict[str, str]] = {}
        self._synced = threading.Event()
        self._current_at: float | None = None
        self._relists = 0
        self._last_error: str | None = None

    # -- reads (request path: dictionary lookups only) ------------------------------------

    def labels(self, name: str) -> Mapping[str, str] | None:
        """Labels of namespace `name`, or None when it is unknown (or nothing is synced yet)."""
        return self._labels.get(name)

    @property
    def synced(self) -> bool:
        return self._synced.is_set()

    def wait_synced(self, timeout: float) -> bool:
        return self._synced.wait(timeout)

    def status(self) -> NamespaceCacheStatus:
        return NamespaceCacheStatus(
            synced=self.synced,
            namespaces=len(self._labels),
            current_at=self._current_at,
            resource_version=self.resource_version,
            relists=self._relists,
            last_error=self._last_error,
        )

    # -- the list and the watch --------------------------------------------------------------

    def _touch(self) -> None:
        self._current_at = time.time()
        if self._on_change is not None:
            self._on_change(self.status())

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        fresh = {
            str(item["metadata"]["name"]): dict(item["metadata"].get("labels") or {})
            for item in items
        }
        self._labels = fresh  # one reference swap: readers see the old map or the new one
        self._relists += 1
        self._last_error = None
        self._synced.set()
        log.info("namespace cache listed %d namespaces", len(fresh))

    def relist(self) -> None:
        super().relist()
        self._touch()  # now with the list's resourceVersion

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        if kind in ("ADDED", "MODIFIED"):
            self._labels[metadata["name"]] = dict(metadata.get("labels") or {})
        elif kind == "DELETED":
            self._labels.pop(metadata["name"], None)
        if metadata.get("resourceVersion"):
            self.resource_version = str(metadata["resourceVersion"])
        self._touch()

    def on_watch_end(self) -> None:
        self._touch()  # a watch that ran its course without error: the map was current until now

    def on_failure(self, message: str) -> None:
        if message != self._last_error:
            log.warning("namespace cache: %s; retrying", message)
        self._last_error = message
