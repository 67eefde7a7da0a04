"""A worker's budget for request bodies in flight: what its clients may make it hold at once.

`--max-body-bytes` bounds one body; it does not bound how many a worker reads at once. Under
gevent every connection is a greenlet, so 256 slow clients each sending a 4 MiB body would
make one worker hold 1 GiB, far past its container's memory limit. A body takes its declared
length from the budget before a byte of it is read (a chunked one, the most it may be) and
gives it back once its answer is built, so what the worker holds for bodies never passes
`total` (parsing one costs a few times its size, which the default leaves room for under the
manifest's limit).

A body that does not fit is not read into memory: the app drops it in small pieces (the
client, which may send it all before it reads, then reads its answer) and answers 429 with
`Retry-After` (webhook/app.py). The apiserver's client waits that long and sends again while
the webhook's `timeoutSeconds` allows; after that its failurePolicy applies.

Bodies of at most `SMALL_BODY` (every real pod review: a few KiB) may use the whole budget;
larger ones only all but `reserve`, so clients sending large bodies slowly cannot take the
room the apiserver's usual reviews need. With the defaults, 8 MiB stays for small bodies: 128
of them at their largest, and ~2,000 of the captured GPU review's 4.6 KiB.
"""

from __future__ import annotations

import threading

DEFAULT_BYTES_IN_FLIGHT = 32 * 1024 * 1024
SMALL_BODY = 64 * 1024


class BytesInFlight:
    """Bytes taken by the bodies being read and answered; thread- and greenlet-safe (the lock is
    never held across a wait)."""

    def __init__(self, total: int = DEFAULT_BYTES_IN_FLIGHT, reserve: int | None = None) -> None:
        if total < SMALL_BODY:
            raise ValueError(f"total must be at least {SMALL_BODY}, got {total}")
        self.total = total
        self.reserve = total // 4 if reserve is None else reserve
        self.held = 0
        self.peak = 0
        self.refused = 0
        self._lock = threading.Lock()

    def take(self, size: int) -> bool:
        """Hold `size` bytes if they fit; False (and counted) if they do not."""
        room = self.total if size <= SMALL_BODY else self.total - self.reserve
        with self._lock:
            if self.held + size > room:
                self.refused += 1
                return False
            self.held += size
            self.peak = max(self.peak, self.held)
            return True

    def give(self, size: int) -> None:
        with self._lock:
            self.held -= size
