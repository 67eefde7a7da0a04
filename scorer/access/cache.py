"""A bounded memory of the apiserver's answers: each entry lives `ttl_s` seconds (a role
removed takes effect within that), and past `max_entries` the least recently used goes, so
callers sending ever new tokens cost memory that stays bounded.

The Kubernetes delegating authenticator and authorizer (k8s.io/apiserver, used by
metrics-server and kube-rbac-proxy) cache the same answers for 10 s by default.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TtlCache(Generic[K, V]):
    """Thread-safe (the HTTP server answers on several threads)."""

    def __init__(self, max_entries: int, clock: Callable[[], float] = time.monotonic) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries: at least 1, got {max_entries}")
        self.max_entries = max_entries
        self._clock = clock
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: K) -> V | None:
        with self._lock:
            found = self._entries.get(key)
            if found is None:
                return None
            expires, value = found
            if self._clock() >= expires:
                del self._entries[key]
                return None
            self._entries.move_to_end(key)
            return value

    def put(self, key: K, value: V, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        with self._lock:
            self._entries[key] = (self._clock() + ttl_s, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_entries:
                self._entries.popitem(last=False)

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
