"""Namespace labels kept in memory by list + watch, so admission never waits on the apiserver.

The webhook needs each namespace's labels (opt-in, tenant) for every pod it sees; asking the
apiserver per request would put a network round trip, and an apiserver dependency, on the pod
creation path. One list fills the map, a watch from the list's resourceVersion keeps it
current, and a 410 Gone (the watch history no longer reaches back far enough) or any other
failure starts over with a fresh list. Watches end every `watch_seconds` by design; a clean end
proves the map was current until then, which is what the cache-age metric reports.
"""

from __future__ import annotations

import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

log = logging.getLogger(__name__)

HTTP_GONE = 410


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


class NamespaceCache:
    """Labels of every namespace, from one list and then a watch, refreshed in a thread."""

    def __init__(
        self,
        api_client_factory: Callable[[], client.ApiClient],
        *,
        watch_seconds: int = 60,
        backoff_seconds: float = 0.5,
        max_backoff_seconds: float = 10.0,
        on_change: Listener | None = None,
    ) -> None:
        self._factory = api_client_factory
        self.watch_seconds = watch_seconds
        self.backoff_seconds = backoff_seconds
        self.max_backoff_seconds = max_backoff_seconds
        self._on_change = on_change
        self._labels: dict[str, dict[str, str]] = {}
        self._synced = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._watch: watch.Watch | None = None
        self._rv: str | None = None
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
            resource_version=self._rv,
            relists=self._relists,
            last_error=self._last_error,
        )

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._thread = threading.Thread(target=self._run, name="namespace-watch", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the thread; an open watch is cut so the thread does not wait it out."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        # The watch may be between its request and its first byte when stop() runs, so keep
        # cutting whatever stream is current until the thread notices the stop flag.
        deadline = time.monotonic() + 5
        while thread.is_alive() and time.monotonic() < deadline:
            self._interrupt()
            thread.join(timeout=0.05)

    def _interrupt(self) -> None:
        current = self._watch
        resp = getattr(current, "_resp", None) if current is not None else None
        if resp is None:
            return
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in the other thread
            resp.close()
        except OSError:
            log.debug("cutting the namespace watch failed", exc_info=True)

    # -- the loop ---------------------------------------------------------------------------

    def _touch(self) -> None:
        self._current_at = time.time()
        if self._on_change is not None:
            self._on_change(self.status())

    def _run(self) -> None:
        backoff = self.backoff_seconds
        api = client.CoreV1Api(self._factory())
        need_list = True
        while not self._stop.is_set():
            try:
                if need_list:
                    self._list(api)
                    need_list = False
                self._watch_once(api)
                backoff = self.backoff_seconds
            except ApiException as exc:
                if exc.status == HTTP_GONE:
                    log.info("namespace watch expired (410 Gone), listing again")
                    self._last_error = "watch expired (410 Gone)"
                    need_list = True
                    continue
                self._failed(f"apiserver answered {exc.status}: {exc.reason}")
                need_list = True
            except Exception as exc:  # connection refused, reset, timeouts: retry, never die
                if self._stop.is_set():
                    return
                self._failed(f"{type(exc).__name__}: {exc}")
                need_list = True
            if self._stop.wait(backoff if need_list else 0):
                return
            if need_list:
                backoff = min(backoff * 2, self.max_backoff_seconds)

    def _failed(self, message: str) -> None:
        if message != self._last_error:
            log.warning("namespace cache: %s; retrying", message)
        self._last_error = message

    def _list(self, api: client.CoreV1Api) -> None:
        # Raw JSON: thousands of namespaces parse far faster than as client model objects.
        resp: Any = api.list_namespace(_preload_content=False, _request_timeout=(5, 30))
        try:
            body = json.loads(resp.data)
        finally:
            resp.release_conn()
        fresh = {
            item["metadata"]["name"]: dict(item["metadata"].get("labels") or {})
            for item in body.get("items") or ()
        }
        self._labels = fresh  # one reference swap: readers see the old map or the new one
        self._rv = str(body.get("metadata", {}).get("resourceVersion") or "") or None
        self._relists += 1
        self._last_error = None
        self._synced.set()
        log.info("namespace cache listed %d namespaces at resourceVersion %s", len(fresh), self._rv)
        self._touch()

    def _watch_once(self, api: client.CoreV1Api) -> None:
        self._watch = watch.Watch()
        try:
            stream = self._watch.stream(
                api.list_namespace,
                resource_version=self._rv,
                timeout_seconds=self.watch_seconds,
                allow_watch_bookmarks=True,
                _request_timeout=(5, self.watch_seconds + 10),
            )
            for event in stream:
                if self._stop.is_set():
                    return
                self._apply(event["type"], event["raw_object"])
            # A watch that ran its course without error: the map was current until now.
            self._touch()
        finally:
            self._watch = None

    def _apply(self, kind: str, obj: Mapping[str, Any]) -> None:
        metadata = obj.get("metadata") or {}
        rv = metadata.get("resourceVersion")
        if kind in ("ADDED", "MODIFIED"):
            self._labels[metadata["name"]] = dict(metadata.get("labels") or {})
        elif kind == "DELETED":
            self._labels.pop(metadata["name"], None)
        if rv:
            self._rv = str(rv)
        self._touch()
