"""Streaming lists (sendInitialEvents) in the list + watch loop (steer/adapters/listwatch.py):
the initial events are the list and the same stream goes on as the watch; a server that
refuses them, or ignores them, gets paginated lists from then on. Against the API stand-in
(which streams as the apiserver does) and a scripted API; on the real apiserver the scorer's
pod and node watches list this way (tests/e2e)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kits.apistub import ApiStub
from kits.waiting import wait_until
from steer.adapters.kube import make_api_client
from steer.adapters.kubejson import INITIAL_EVENTS_END, KubeApiError
from steer.adapters.listwatch import ListWatcher


class Stream:
    def __init__(self, events: list[dict[str, Any]], done: threading.Event) -> None:
        self.events, self.done = events, done

    def __iter__(self) -> Iterator[dict[str, Any]]:
        yield from self.events
        self.done.wait(10)  # an open watch with nothing more to say

    def close(self) -> None:
        self.done.set()


class Listed(list[dict[str, Any]]):
    resource_version = "20"


class ScriptedApi:
    """A streaming list answers `initial` (an exception to raise, or events); paginated lists
    answer one item."""

    def __init__(self, initial: Exception | list[dict[str, Any]]) -> None:
        self.initial = initial
        self.calls: list[str] = []
        self.done = threading.Event()

    def stream_list(self, path: str, *, page_size: int, query: Any) -> Listed:
        self.calls.append("list")
        return Listed([{"metadata": {"name": "listed", "resourceVersion": "20"}}])

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_s: int,
        query: Any,
        initial_events: bool = False,
    ) -> Stream:
        self.calls.append("stream" if initial_events else f"watch@{resource_version}")
        if initial_events:
            if isinstance(self.initial, Exception):
                raise self.initial
            events, self.initial = self.initial, []
            return Stream(events, threading.Event())
        return Stream([], self.done)


class Recorder(ListWatcher):
    path = "/api/v1/things"

    def __init__(self, api: ScriptedApi) -> None:
        super().__init__(lambda: None, backoff_s=0.01, max_backoff_s=0.02)  # type: ignore[arg-type]
        self.api = api
        self.listed: list[list[str]] = []

    @property
    def kube(self) -> Any:
        return self.api

    def on_list(self, items: Any) -> None:
        self.listed.append([i["metadata"]["name"] for i in items])

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        self.listed[-1].append(f"{kind} {obj['metadata']['name']}")


def added(name: str, version: str) -> dict[str, Any]:
    return {"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": version}}}


def end_of_initial(version: str) -> dict[str, Any]:
    meta = {"resourceVersion": version, "annotations": {INITIAL_EVENTS_END: "true"}}
    return {"type": "BOOKMARK", "object": {"metadata": meta}}


def play(api: ScriptedApi, until: Any) -> Recorder:
    watcher = Recorder(api)
    watcher.start()
    try:
        wait_until("the script played", lambda: until(watcher), timeout=10, interval=0.01)
    finally:
        api.done.set()
        watcher.stop()
    return watcher


def test_the_initial_events_are_the_list_and_the_stream_goes_on_as_the_watch() -> None:
    api = ScriptedApi([added("a", "5"), added("b", "6"), end_of_initial("9"), added("c", "10")])
    watcher = play(api, lambda w: w.listed and len(w.listed[0]) == 3)
    assert watcher.listed == [["a", "b", "ADDED c"]]
    assert api.calls == ["stream"] and watcher.lists == 1 and watcher.streamed
    assert watcher.resource_version == "10"


def test_a_server_that_refuses_streaming_lists_gets_paginated_ones() -> None:
    invalid = KubeApiError(422, "Invalid", "resourceVersionMatch: Forbidden", method="WATCH")
    watcher = play(ScriptedApi(invalid), lambda w: len(w.api.calls) >= 2)
    assert watcher.api.calls[:2] == ["stream", "list"] and not watcher.streamed
    assert watcher.listed == [["listed"]]
    assert watcher.api.calls[2:3] in ([], ["watch@20"])


class IgnoringApi(ScriptedApi):
    """An old server: sendInitialEvents unknown, so the objects come and the watch ends, with
    no bookmark ending them."""

    def watch(
        self,
        path: str,
        *,
        resource_version: str,
        timeout_s: int,
        query: Any,
        initial_events: bool = False,
    ) -> Any:
        if initial_events:
            self.calls.append("stream")
            return [added("a", "5")]
        return super().watch(
            path, resource_version=resource_version, timeout_s=timeout_s, query=query
        )


def test_a_server_that_ignores_streaming_lists_gets_paginated_ones() -> None:
    watcher = play(IgnoringApi([]), lambda w: "list" in w.api.calls)
    assert watcher.api.calls[:2] == ["stream", "list"] and not watcher.streamed
    assert watcher.listed[-1][:1] == ["listed"]


def test_the_api_stand_in_streams_a_list_and_then_the_changes(tmp_path: Path) -> None:
    stub = ApiStub.start()
    try:
        stub.add_namespace("one", {"x": "1"})
        api = make_api_client(str(stub.kubeconfig(tmp_path / "kubeconfig")))

        class Namespaces(ListWatcher):
            path = "/api/v1/namespaces"

            def __init__(self) -> None:
                super().__init__(api, timeout_s=5)
                self.names: list[str] = []

            def on_list(self, items: Any) -> None:
                self.names = [i["metadata"]["name"] for i in items]

            def on_event(self, kind: str, obj: dict[str, Any]) -> None:
                self.names.append(f"{kind} {obj['metadata']['name']}")

        watcher = Namespaces()
        watcher.start()
        try:
            wait_until("listed", lambda: "one" in watcher.names, timeout=10, interval=0.02)
            stub.add_namespace("two", {})
            wait_until("the change", lambda: "ADDED two" in watcher.names, timeout=10)
        finally:
            watcher.stop()
        lists = [
            r.query for r in stub.requests if r.path == "/api/v1/namespaces" and r.method == "GET"
        ]
        assert lists and all("watch=true" in q for q in lists), lists
        assert "sendInitialEvents=true" in lists[0]
    finally:
        stub.stop()
