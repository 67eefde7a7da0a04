"""Raw-JSON calls to the Kubernetes API through the `kubernetes` client's connection and auth.

The generated model classes cost seconds per 5,000-node list and pick a patch content type
by themselves (a dict body to `patch_node` becomes a strategic merge patch, which replaces the
taint list); here every call names its content type and gets plain JSON back. The scorer's
cycles and watches and the `steer certs` commands all call the API through `KubeJson`.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import quote

import orjson
from kubernetes import client

log = logging.getLogger(__name__)

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
JSON = "application/json"
# On the BOOKMARK that ends a watch's initial events (`sendInitialEvents=true`): the state so
# far was sent in full (apimachinery metav1.InitialEventsAnnotationKey).
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


# Paths and field selectors of the core API that the services call.


def node_path(name: str = "") -> str:
    return f"/api/v1/nodes/{quote(name, safe='')}" if name else "/api/v1/nodes"


def node_status_path(name: str) -> str:
    return f"{node_path(name)}/status"


PODS_PATH = "/api/v1/pods"
NAMESPACES_PATH = "/api/v1/namespaces"
BOUND_PODS = "spec.nodeName!="  # the field selector of pods bound to a node


def pod_path(namespace: str, name: str) -> str:
    return f"/api/v1/namespaces/{quote(namespace, safe='')}/pods/{quote(name, safe='')}"


def events_path(namespace: str) -> str:
    """The core/v1 Events of a namespace (the scheduler's, written through events.k8s.io, are
    served here too)."""
    return f"{namespace_path(namespace)}/events"


def failed_scheduling_selector(namespace: str, name: str) -> str:
    """The fieldSelector of one pod's `FailedScheduling` events (fields the apiserver indexes
    for core/v1 Events)."""
    return (
        f"involvedObject.kind=Pod,involvedObject.namespace={namespace},"
        f"involvedObject.name={name},reason=FailedScheduling"
    )


def namespace_path(name: str) -> str:
    return f"/api/v1/namespaces/{quote(name, safe='')}"


class KubeApiError(Exception):
    """A non-2xx answer (`status` is the HTTP code, 0 for a connection failure)."""

    def __init__(
        self, status: int, reason: str, message: str, *, method: str = "", path: str = ""
    ) -> None:
        super().__init__(f"{method} {path}: HTTP {status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.method = method
        self.path = path

    @property
    def conflict(self) -> bool:
        return self.status == 409

    @property
    def retriable(self) -> bool:
        """Worth another try after a pause: throttled, overloaded or unreachable."""
        return self.status in (0, 429, 500, 502, 503, 504)


class KubeJson:
    """`request(method, path, ...)` → the decoded JSON body, or `KubeApiError`."""

    def __init__(self, api_client: client.ApiClient, *, timeout_s: float = 10.0) -> None:
        self.api_client = api_client
        self.timeout_s = timeout_s

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: Any = None,
        content_type: str = JSON,
        timeout_s: float | None = None,
    ) -> dict[str, Any]:
        headers = {"Accept": JSON}
        if body is not None:
            headers["Content-Type"] = content_type
        params = self.api_client.param_serialize(
            method=method,
            resource_path=path,
            query_params=list((query or {}).items()),
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        try:
            resp = self.api_client.call_api(*params, _request_timeout=timeout_s or self.timeout_s)
            data = resp.read()
        except client.ApiException as exc:  # raised by the REST layer for retry-after answers
            raise KubeApiError(
                int(exc.status or 0), str(exc.reason), str(exc.body), method=method, path=path
            ) from exc
        except Exception as exc:  # urllib3 connection, timeout and protocol errors
            raise KubeApiError(0, type(exc).__name__, str(exc), method=method, path=path) from exc
        try:
            decoded = orjson.loads(data) if data else {}
        except orjson.JSONDecodeError:
            decoded = {"message": data[:200].decode("utf-8", "replace")}
        if not 200 <= resp.status <= 299:
            message = decoded.get("message", "") if isinstance(decoded, dict) else ""
            reason = decoded.get("reason", "") if isinstance(decoded, dict) else ""
            raise KubeApiError(resp.status, str(reason), str(message), method=method, path=path)
        if not isinstance(decoded, dict):
            raise KubeApiError(
                resp.status,
                "BadResponse",
                "the answer is not a JSON object",
                method=method,
                path=path,
            )
        return decoded

    def list_all(
        self, path: str, *, page_size: int = 500, query: Mapping[str, str] | None = None
    ) -> list[dict[str, Any]]:
        """Every item of a collection, following `continue` tokens page by page."""
        return self.list_snapshot(path, page_size=page_size, query=query)[0]

    def list_snapshot(
        self, path: str, *, page_size: int = 500, query: Mapping[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        """Every item of a collection and the resourceVersion of that snapshot (the pages of
        one list are one consistent snapshot: a watch from this version misses nothing)."""
        stream = self.stream_list(path, page_size=page_size, query=query)
        items = list(stream)
        return items, stream.resource_version

    def stream_list(
        self, path: str, *, page_size: int = 500, query: Mapping[str, str] | None = None
    ) -> ListStream:
        """The items of a collection one page at a time, so a caller that reduces each item
        keeps one page in memory, not 100,000 pods; `resource_version` is the snapshot's."""
        return ListStream(self, path, page_size, dict(query or {}))

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_s: int,
        query: Mapping[str, str] | None = None,
        initial_events: bool = False,
    ) -> WatchStream:
        """Open a watch of a collection from `resource_version` (with bookmarks); the server
        ends it after `timeout_s`. A non-2xx answer raises `KubeApiError`.

        `initial_events`: a streaming list (`sendInitialEvents=true`, KEP-3157): the watch
        starts with an ADDED event for every object as of a consistent read (or of
        `resource_version` or newer, when one is given), then a BOOKMARK annotated
        `k8s.io/initial-events-end` with the version they are current at, then the changes.
        The apiserver sends them from its watch cache as it encodes them, so the reader works
        while the server still writes, with no round trip per page."""
        params: dict[str, str | int] = {
            **(query or {}),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": timeout_s,
        }
        if initial_events:
            params["sendInitialEvents"] = "true"
            params["resourceVersionMatch"] = "NotOlderThan"  # required with sendInitialEvents
            if resource_version:
                params["resourceVersion"] = resource_version
        else:
            params["resourceVersion"] = resource_version
        request = self.api_client.param_serialize(
            method="GET",
            resource_path=path,
            query_params=list(params.items()),
            header_params={"Accept": JSON},
            auth_settings=["BearerToken"],
        )
        try:
            # Read timeout: a quiet watch sends nothing (or a bookmark a minute) until its end.
            resp = self.api_client.call_api(*request, _request_timeout=(5.0, timeout_s + 30.0))
        except client.ApiException as exc:
            raise KubeApiError(
                int(exc.status or 0), str(exc.reason), str(exc.body), method="WATCH", path=path
            ) from exc
        except Exception as exc:
            raise KubeApiError(0, type(exc).__name__, str(exc), method="WATCH", path=path) from exc
        if not 200 <= resp.status <= 299:
            data = resp.read()
            try:
                decoded = orjson.loads(data) if data else {}
            except orjson.JSONDecodeError:
                decoded = {}
            body = decoded if isinstance(decoded, dict) else {}
            raise KubeApiError(
                resp.status,
                str(body.get("reason", "")),
                str(body.get("message", "")),
                method="WATCH",
                path=path,
            )
        return WatchStream(resp.response)


class ListStream:
    """The items of one paginated list (one consistent snapshot), fetched as iterated."""

    def __init__(self, kube: KubeJson, path: str, page_size: int, query: dict[str, str]) -> None:
        self._kube, self._path, self._page_size, self._query = kube, path, page_size, query
        self.resource_version = ""
        self.pages = 0

    def __iter__(self) -> Iterator[dict[str, Any]]:
        token = ""
        while True:
            params: dict[str, str | int] = {**self._query, "limit": self._page_size}
            if token:
                params["continue"] = token
            page = self._kube.request("GET", self._path, query=params)
            self.pages += 1
            meta = page.get("metadata") or {}
            self.resource_version = self.resource_version or str(meta.get("resourceVersion") or "")
            token = meta.get("continue") or ""
            items = page.pop("items", None) or ()
            del page
            yield from items
            if not token:
                return


class WatchStream:
    """The events of one open watch, each a decoded JSON object (`type`, `object`).
    `close()` from another thread ends a read that is blocked waiting for the next event."""

    def __init__(self, response: Any) -> None:
        self._resp = response  # urllib3.HTTPResponse, not read yet

    def __iter__(self) -> Iterator[dict[str, Any]]:
        try:
            for line in _lines(self._resp):
                event = orjson.loads(line)
                if isinstance(event, dict):
                    yield event
        finally:
            self._resp.release_conn()

    def close(self) -> None:
        resp = self._resp
        sock = getattr(getattr(resp, "connection", None), "sock", None)
        try:
            if sock is not None:
                sock.shutdown(socket.SHUT_RDWR)  # wakes a recv() blocked in another thread
            resp.close()
        except OSError:
            log.debug("closing a watch failed", exc_info=True)


def _lines(resp: Any) -> Iterator[bytes]:
    """The non-empty lines of a streamed body, as bytes, split once per chunk: a streaming
    list of 100,000 pods arrives in chunks of many events, and the client library's line
    reader copies the rest of its buffer after every line and decodes each to text first."""
    pending = b""
    for chunk in resp.stream(amt=None, decode_content=False):
        parts = chunk.split(b"\n")
        if pending:
            parts[0] = pending + parts[0]
        pending = parts.pop()
        for part in parts:
            if part:
                yield part
    if pending:
        yield pending
