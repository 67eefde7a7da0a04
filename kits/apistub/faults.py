"""Fault injection and the request log, so tests can stage failures and count calls.

Everything here is touched by the test thread and the server's handler threads at once, hence
one lock around all of it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass(frozen=True)
class RequestRecord:
    """One request as the stand-in answered it; `path` excludes the query string."""

    method: str
    path: str
    query: str
    content_type: str
    status: int


@dataclass
class _WriteFault:
    remaining: int
    status: int
    path_contains: str | None


@dataclass
class _WriteDelay:
    remaining: int
    seconds: float
    path_contains: str | None


class Faults:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._write_faults: list[_WriteFault] = []
        self._write_delays: list[_WriteDelay] = []
        self._delay = 0.0
        self._log: list[RequestRecord] = []

    def fail_next_writes(self, n: int, status: int = 500, path_contains: str | None = None) -> None:
        """The next `n` writes (POST/PUT/PATCH/DELETE) whose path contains `path_contains`
        (any path when None) fail with `status`, without touching the stored objects."""
        if n < 1:
            raise ValueError(f"fail_next_writes: n must be >= 1, got {n}")
        with self._lock:
            self._write_faults.append(_WriteFault(n, status, path_contains))

    def take_write_fault(self, path: str) -> int | None:
        """The status a write to `path` must fail with, consuming one injected failure."""
        with self._lock:
            for fault in self._write_faults:
                if fault.remaining > 0 and (
                    fault.path_contains is None or fault.path_contains in path
                ):
                    fault.remaining -= 1
                    return fault.status
            self._write_faults = [f for f in self._write_faults if f.remaining > 0]
            return None

    def delay_next_writes(self, n: int, seconds: float, path_contains: str | None = None) -> None:
        """The next `n` writes whose path contains `path_contains` (any path when None) wait
        `seconds` before they are applied: a client with a shorter timeout gives up on them, and
        they still land afterwards, as on an apiserver that commits what its client abandoned."""
        if n < 1 or seconds < 0:
            raise ValueError(
                f"delay_next_writes: need n >= 1 and seconds >= 0, got n={n}, seconds={seconds}"
            )
        with self._lock:
            self._write_delays.append(_WriteDelay(n, seconds, path_contains))

    def take_write_delay(self, path: str) -> float:
        """The seconds a write to `path` must wait, consuming one injected delay (0: none)."""
        with self._lock:
            for delay in self._write_delays:
                if delay.remaining > 0 and (
                    delay.path_contains is None or delay.path_contains in path
                ):
                    delay.remaining -= 1
                    return delay.seconds
            self._write_delays = [d for d in self._write_delays if d.remaining > 0]
            return 0.0

    def set_delay(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"delay: seconds must be >= 0, got {seconds}")
        with self._lock:
            self._delay = seconds

    @property
    def delay(self) -> float:
        with self._lock:
            return self._delay

    def record(self, entry: RequestRecord) -> None:
        with self._lock:
            self._log.append(entry)

    def requests(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._log)

    def clear_requests(self) -> None:
        with self._lock:
            self._log.clear()
