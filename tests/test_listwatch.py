"""The list + watch loop (steer/adapters/listwatch.py) on failures, against a scripted API: a
failed watch resumes from the last version seen (no list), a 410 or a failure of the
subclass's own handling starts over with one, and so does a collection that never resumes.
The same on the real apiserver, restarted: tests/faults/test_apiserver_restart.py."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

from kits.waiting import wait_until
from steer.adapters.kubejson import KubeApiError
from steer.adapters.listwatch import HTTP_GONE, ListWatcher


class Listed(list[dict[str, Any]]):
    resource_version = "10"


class Stream:
    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = events

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self.events)

    def close(self) -> None:
        pass


class ScriptedApi:
    """Each watch takes the next step of `script`: an exception to raise, or events to send
    (then the stream ends, as the server's timeout ends it). Past the script, the watch
    blocks until the test ends."""

    def __init__(self, script: list[Exception | list[dict[str, Any]]]) -> None:
        self.script = list(script)
        self.lists = 0
        self.watched_from: list[str] = []
        self.done = threading.Event()

    def stream_list(self, path: str, *, page_size: int, query: Any) -> Listed:
        self.lists += 1
        return Listed([{"metadata": {"name": "a", "resourceVersion": "10"}}])

    def watch(self, path: str, *, resource_version: str, timeout_s: int, query: Any) -> Stream:
        self.watched_from.append(resource_version)
        if not self.script:
            self.done.wait(10)
            return Stream([])
        step = self.script.pop(0)
        if isinstance(step, Exception):
            raise step
        return Stream(step)


class Recorder(ListWatcher):
    path = "/api/v1/things"
    streaming_list = False  # lists by `stream_list`, the script's watches follow

    def __init__(self, api: ScriptedApi, *, fail_on: str = "") -> None:
        super().__init__(lambda: None, backoff_s=0.01, max_backoff_s=0.02)  # type: ignore[arg-type]
        self.api = api
        self.fail_on = fail_on
        self.seen: list[str] = []
        self.calls: list[str] = []

    @property
    def kube(self) -> Any:
        return self.api

    def on_list(self, items: Any) -> None:
        self.calls.append("list")
        self.seen = [i["metadata"]["name"] for i in items]

    def on_event(self, kind: str, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        if name == self.fail_on:
            self.fail_on = ""
            raise ValueError(f"cannot handle {name}")
        self.seen.append(name)

    def on_restart(self) -> None:
        self.calls.append("restart")

    def on_interrupted(self) -> None:
        self.calls.append("interrupted")

    def on_resumed(self) -> None:
        self.calls.append("resumed")


def event(name: str, version: str) -> dict[str, Any]:
    return {"type": "ADDED", "object": {"metadata": {"name": name, "resourceVersion": version}}}


REFUSED = KubeApiError(0, "", "connection refused", method="WATCH", path="/api/v1/things")


def run(watcher: Recorder, until: int) -> None:
    watcher.start()
    try:
        wait_until(
            "the script played",
            lambda: len(watcher.api.watched_from) >= until,
            timeout=10,
            interval=0.01,
        )
    finally:
        watcher.api.done.set()
        watcher.stop()


def test_a_failed_watch_resumes_from_the_last_version_without_a_list() -> None:
    api = ScriptedApi([[event("b", "11")], REFUSED, REFUSED, [event("c", "12")]])
    watcher = Recorder(api)
    run(watcher, until=5)
    assert api.lists == 1 and watcher.seen == ["a", "b", "c"]
    assert api.watched_from[:5] == ["10", "11", "11", "11", "12"]
    assert watcher.calls == ["list", "interrupted", "resumed"] and watcher.resumes == 1


def test_a_410_starts_over_with_one_list() -> None:
    gone = KubeApiError(HTTP_GONE, "Gone", "too old resource version")
    api = ScriptedApi([REFUSED, gone])
    watcher = Recorder(api)
    run(watcher, until=3)
    assert api.lists == 2 and api.watched_from[:3] == ["10", "10", "10"]
    assert watcher.calls == ["list", "interrupted", "restart", "list"]


def test_a_failure_of_the_handler_is_not_resumed_into_again() -> None:
    api = ScriptedApi([[event("bad", "11")]])
    watcher = Recorder(api, fail_on="bad")
    run(watcher, until=2)
    assert api.lists == 2 and watcher.calls == ["list", "restart", "list"]


def test_a_collection_that_never_resumes_lists_again() -> None:
    api = ScriptedApi([REFUSED])
    watcher = Recorder(api)
    watcher.resume_after_failure = False
    run(watcher, until=2)
    assert api.lists == 2 and watcher.calls == ["list", "restart", "list"]
