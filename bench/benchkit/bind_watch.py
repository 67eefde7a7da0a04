"""A watch of one run's pods: when this process first saw each of them bound, and where."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Mapping
from typing import Any

import orjson
import requests

from .api import Api


class BindWatch:
    """Watches the pods of one run from a resourceVersion and notes when this process first
    received each of them bound (spec.nodeName set), on the monotonic clock, and the node
    (its name only: a run holds thousands of pods)."""

    def __init__(self, raw: Api, selector: str, resource_version: str) -> None:
        self.raw = raw
        self.selector = selector
        self.resource_version = resource_version
        self.bound: dict[str, float] = {}
        self.node_of: dict[str, str] = {}  # pod -> node, in bind order (as `bound`)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._response: requests.Response | None = None
        self._thread = threading.Thread(target=self._run, name="bind-watch", daemon=True)

    def _run(self) -> None:
        session = self.raw.new_session()
        # A short server-side timeout: the thread ends within that time of `__exit__`.
        params = {"watch": "1", "labelSelector": self.selector, "timeoutSeconds": "5"}
        try:
            while not self._stop.is_set():
                params["resourceVersion"] = self.resource_version
                try:
                    with session.get(
                        f"{self.raw.base}/api/v1/pods", params=params, stream=True, timeout=60
                    ) as resp:
                        self._response = resp
                        for line in resp.iter_lines(chunk_size=None):
                            if line:
                                self._event(orjson.loads(line), time.monotonic())
                            if self._stop.is_set():
                                return
                except (requests.RequestException, AttributeError, ValueError):
                    if not self._stop.is_set():
                        time.sleep(0.1)
        finally:
            session.close()

    def _event(self, event: Mapping[str, Any], now: float) -> None:
        obj = event.get("object") or {}
        if event.get("type") == "ERROR":
            raise ValueError(f"watch error: {obj.get('message')}")  # restart from the last RV
        version = (obj.get("metadata") or {}).get("resourceVersion")
        if version:
            self.resource_version = version
        node = (obj.get("spec") or {}).get("nodeName")
        if event.get("type") in ("ADDED", "MODIFIED") and node:
            name = obj["metadata"]["name"]
            with self._lock:
                if name not in self.bound:
                    self.bound[name] = now
                    self.node_of[name] = node

    def times(self) -> list[float]:
        with self._lock:
            return sorted(self.bound.values())

    def nodes(self) -> list[str]:
        """The node each bound pod was bound to, in the order this process saw the binds."""
        with self._lock:
            return list(self.node_of.values())

    def __enter__(self) -> BindWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        with contextlib.suppress(Exception):
            if self._response is not None:
                self._response.close()
        self._thread.join(timeout=15)
