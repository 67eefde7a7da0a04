"""Progress on stderr and the thread pool the benches send their requests from."""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

WORKERS = 32  # parallel requests when creating nodes and pods

T = TypeVar("T")
R = TypeVar("R")


def log(message: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def in_parallel(fn: Callable[[T], R], items: Iterable[T], workers: int = WORKERS) -> list[R]:
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="bench") as pool:
        return list(pool.map(fn, items))


class Progress:
    def __init__(self, what: str, total: int) -> None:
        self.what, self.total = what, total
        self.done = 0
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._next = max(1, total // 10)

    def step(self) -> None:
        with self._lock:
            self.done += 1
            if self.done % self._next == 0 or self.done == self.total:
                elapsed = time.monotonic() - self._t0
                log(
                    f"   {self.what}: {self.done:,}/{self.total:,} in {elapsed:.0f} s "
                    f"({self.done / max(elapsed, 1e-9):.0f}/s)"
                )
