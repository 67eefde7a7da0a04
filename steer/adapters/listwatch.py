"""List + watch of one collection, in a thread: what client-go calls a reflector.

One list (handed to the subclass as a stream), then a watch from the list's
resourceVersion, resumed from the last version seen whenever the server ends it, and, after a
backoff, whenever it fails (a dropped connection, an apiserver restarting or away): the
apiserver then sends every change since that version, as client-go's reflector relies on. Only
a 410 Gone (the watch history no longer reaches back that far; a restarted apiserver's fresh
watch cache answers it once) starts over with a list, at once unless it is the second 410 in a
row; so does a failure in the subclass's own handling of an event, and any failure of a
collection that sets `resume_after_failure = False`. Measured by tests/faults/
test_apiserver_restart.py: before this, an apiserver away for 30 s cost the scorer 10 node lists
once it was back (every cycle listed while the node watch waited out its backoff). The scorer keeps two (the bound
pods, `scorer/watch/bindings.py`; the nodes, `scorer/watch/nodes.py`), the webhook one (namespace labels,
`webhook/namespaces.py`).

The list is a streaming one where the apiserver serves it (`sendInitialEvents=true`, the
WatchList feature, on by default since Kubernetes 1.32; what client-go's reflector uses): one
watch request whose first events are the collection, ended by a bookmark annotated
`k8s.io/initial-events-end`, after which the same stream carries the changes. The apiserver
writes the events from its watch cache while this side decodes them, where a paginated list
waits for each page to be encoded, sent and decoded before asking for the next (measured on
the v1.36.2 apiserver, 27,000 bound pods of 7 KB: 30 s instead of 49 s, and a fraction of the
client's CPU). A server that refuses it (older, or the feature off) gets paginated lists.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, ClassVar

from kubernetes import client

from steer.adapters.gc_pause import gc_paused
from steer.adapters.kubejson import INITIAL_EVENTS_END, KubeApiError, KubeJson, WatchStream

log = logging.getLogger(__name__)

HTTP_GONE = 410


class WatchExpired(Exception):
    """The watch's resourceVersion is older than the apiserver's history (410 Gone)."""


class HandlerFailed(Exception):
    """The subclass failed on an event: resuming would hand it the same event again."""


class InitialEventsMissing(Exception):
    """A streaming list ended without the bookmark that closes its initial events: a server
    that ignored `sendInitialEvents`."""


# A server that does not know sendInitialEvents, or has the WatchList feature off, refuses the
# request as invalid (resourceVersionMatch without resourceVersion, or the field forbidden).
REFUSED_AS_INVALID = (400, 422)


class ListWatcher:
    """Subclasses say what to list (`path`, `query`) and what to do with the list
    (`on_list`), each event (`on_event`), a restart (`on_restart`), a failure (`on_failure`)
    and a watch that ran its course (`on_watch_end`).

    `api_client` may be a factory: the client is then made in the thread, on first use (a
    gunicorn worker must not share a connection pool made before its fork)."""

    path = ""
    query: ClassVar[Mapping[str, str]] = {}
    thread_name = "list-watch"
    # False: a failed watch starts over with a list instead of resuming (a consumer that must
    # not act on a stream it cannot prove complete).
    resume_after_failure: ClassVar[bool] = True
    # List by a streaming watch while the server accepts it (False: paginated lists only).
    streaming_list: ClassVar[bool] = True

    def __init__(
        self,
        api_client: client.ApiClient | Callable[[], client.ApiClient],
        *,
        timeout_s: int = 300,
        page_size: int = 500,
        backoff_s: float = 0.5,
        max_backoff_s: float = 10.0,
    ) -> None:
        self._api_client = api_client
        self._kube: KubeJson | None = None
        self.timeout_s = timeout_s
        self.page_size = page_size
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.resource_version: str | None = None  # None: the next round starts with a list
        self.lists = 0
        self.resumes = 0  # watches opened again from the last version after a failure
        self._interrupted = False
        self.streamed = self.streaming_list  # False once the server refused a streaming list
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._stream: WatchStream | None = None
        # The events of a streaming list's stream after its initial ones, for the next watch.
        self._resumable: Iterator[dict[str, Any]] | None = None

    @property
    def kube(self) -> KubeJson:
        if self._kube is None:
            made = self._api_client
            api = made if isinstance(made, client.ApiClient) else made()
            self._kube = KubeJson(api, timeout_s=60.0)
        return self._kube

    # -- what subclasses provide -------------------------------------------------------------

    def on_list(self, items: Iterable[dict[str, Any]]) -> None:
        """Every item of a fresh list, as it streams in (one page in memory at a time)."""
        raise NotImplementedError

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        """One watch event (ADDED, MODIFIED, DELETED; bookmarks are not passed on)."""
        raise NotImplementedError

    def on_restart(self) -> None:
        """The watch broke: what is held is no longer known to be current until a list."""

    def on_failure(self, message: str) -> None:
        """The list or the watch failed (`message` says how); a watch from the last version
        seen, or a list, follows (after a backoff unless it is a first 410)."""
        log.info("%s: %s", self.thread_name, message)

    def on_watch_end(self) -> None:
        """A watch ended without error: what is held was current until now."""

    def on_interrupted(self) -> None:
        """The watch failed and will be resumed from the last version seen (after a backoff):
        what the collection holds may lag behind the cluster until `on_resumed`."""

    def on_resumed(self) -> None:
        """The watch opened again after `on_interrupted`; every change since the last version
        seen follows in it."""

    def before_start(self) -> None:
        """Runs in `start()` before the thread does."""

    # -- the loop ----------------------------------------------------------------------------

    def start(self) -> None:
        if self._thread is None:
            self.before_start()
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is None:
            return
        # The watch may be between its request and its first byte when stop() runs: keep
        # cutting whatever stream is current until the thread notices the flag.
        deadline = time.monotonic() + 5
        while thread.is_alive() and time.monotonic() < deadline:
            stream = self._stream
            if stream is not None:
                stream.close()
            thread.join(timeout=0.05)

    def _run(self) -> None:
        backoff = self.backoff_s
        expired_before = False
        while not self._stop.is_set():
            try:
                if self.resource_version is None:
                    self.relist()
                self._watch_once()
                backoff = self.backoff_s
                expired_before = False
                continue
            except WatchExpired:
                self.on_failure("watch expired (410 Gone)")
                self._restart()
                if not expired_before:  # at once, unless the fresh list expired right away
                    expired_before = True
                    continue
            except Exception as exc:  # a dropped watch or an unreachable apiserver: go on
                if self._stop.is_set():
                    return
                if isinstance(exc, KubeApiError) and exc.status:
                    self.on_failure(f"apiserver answered {exc.status}: {exc.reason}")
                else:
                    self.on_failure(f"{type(exc).__name__}: {exc}")
                resumable = self.resume_after_failure and not isinstance(exc, HandlerFailed)
                if resumable and self.resource_version is not None:
                    if not self._interrupted:
                        log.info(
                            "%s: resuming the watch from resourceVersion %s",
                            self.thread_name,
                            self.resource_version,
                        )
                        self._interrupted = True
                        self.on_interrupted()
                else:
                    self._restart()
            finally:
                self._drop_resumable()
            if self._stop.wait(backoff):
                return
            backoff = min(backoff * 2, self.max_backoff_s)

    def _restart(self) -> None:
        self.resource_version = None
        self._interrupted = False
        self.on_restart()

    def relist(self) -> None:
        """List the collection into `on_list`; the watch resumes from there. A streaming list
        leaves its stream open for the watch that follows."""
        if self.streamed and self._stream_list():
            return
        stream = self.kube.stream_list(self.path, page_size=self.page_size, query=self.query)
        with gc_paused():  # pages of decoded JSON, freed by reference counting
            self.on_list(stream)
        self.lists += 1
        self.resource_version = stream.resource_version

    def _stream_list(self) -> bool:
        """List by a streaming watch into `on_list`, keeping the stream for `_watch_once`;
        False when the server refuses it (paginated lists from then on)."""
        try:
            stream = self._open(initial_events=True)
        except KubeApiError as exc:
            if exc.status not in REFUSED_AS_INVALID:
                raise
            self._refused(f"apiserver answered {exc.status}: {exc.message or exc.reason}")
            return False
        self._stream = stream
        events = iter(stream)
        ended: list[str] = []

        def initial() -> Iterator[dict[str, Any]]:
            for event in events:
                kind, obj = self._checked(event)
                if obj is None:
                    continue
                if kind == "BOOKMARK":
                    meta = obj.get("metadata") or {}
                    if (meta.get("annotations") or {}).get(INITIAL_EVENTS_END) == "true":
                        ended.append(str(meta.get("resourceVersion") or ""))
                        return
                    continue
                yield obj
            if not self._stop.is_set():
                self._refused("the watch ended before its initial events did")
                raise InitialEventsMissing("the watch ended before its initial events did")

        items = initial()
        try:
            with gc_paused():  # decoded events, freed by reference counting
                self.on_list(items)
                for _ in items:  # what on_list left unread (it should read every item)
                    pass
        except BaseException:
            self._stream = None
            stream.close()
            raise
        if not ended:  # stopped while listing
            self._stream = None
            stream.close()
            raise InitialEventsMissing("stopped while listing")
        self.lists += 1
        self.resource_version = ended[0] or None
        self._resumable = events
        return True

    def _drop_resumable(self) -> None:
        """A streaming list's stream that no watch followed (something failed first): closed."""
        if self._resumable is not None:
            self._resumable = None
            stream, self._stream = self._stream, None
            if stream is not None:
                stream.close()

    def _refused(self, why: str) -> None:
        self.streamed = False
        log.info("%s: no streaming list (%s): paginated lists from now on", self.thread_name, why)

    def _open(self, *, initial_events: bool = False) -> WatchStream:
        try:
            if initial_events:
                return self.kube.watch(
                    self.path,
                    resource_version="",
                    timeout_s=self.timeout_s,
                    query=self.query,
                    initial_events=True,
                )
            return self.kube.watch(
                self.path,
                resource_version=self.resource_version or "",
                timeout_s=self.timeout_s,
                query=self.query,
            )
        except KubeApiError as exc:
            if exc.status == HTTP_GONE:
                raise WatchExpired(str(exc)) from exc
            raise

    def _checked(self, event: Mapping[str, Any]) -> tuple[str, dict[str, Any] | None]:
        """An event's type and object (None: nothing to act on); an ERROR event raises."""
        kind = str(event.get("type"))
        obj = event.get("object")
        if not isinstance(obj, dict):
            return kind, None
        if kind == "ERROR":
            if obj.get("code") == HTTP_GONE:
                raise WatchExpired(str(obj.get("message", "")))
            raise KubeApiError(
                int(obj.get("code") or 0),
                str(obj.get("reason", "")),
                str(obj.get("message", "")),
                method="WATCH",
                path=self.path,
            )
        return kind, obj

    def _watch_once(self) -> None:
        """Follow the stream a streaming list left open, else open a watch from
        `resource_version`, until the server ends it."""
        assert self.resource_version is not None
        events, self._resumable = self._resumable, None
        if events is None or self._stream is None:
            self._stream = self._open()
            events = iter(self._stream)
        if self._interrupted:
            self._interrupted = False
            self.resumes += 1
            self.on_resumed()
        try:
            for event in events:
                if self._stop.is_set():
                    return
                kind, obj = self._checked(event)
                if obj is None:
                    continue
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind != "BOOKMARK":
                    try:
                        self.on_event(kind, obj)
                    except Exception as exc:
                        raise HandlerFailed(f"{kind} event not handled: {exc!r}") from exc
                if version:
                    self.resource_version = str(version)
        finally:
            self._stream = None
        if not self._stop.is_set():
            self.on_watch_end()
