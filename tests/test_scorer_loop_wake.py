"""The pod watch's wake-ups (scorer/cycle/loop.py): a burst of events is one refresh, run once the
events pause, and a stream that never pauses still refreshes at least every
`max_wake_delay_seconds`."""

from __future__ import annotations

import threading
import time
from typing import Any

from kits.waiting import wait_until
from scorer.cycle.loop import ScorerLoop


class CountingLoop(ScorerLoop):
    """The loop's own wake-up logic, with the refresh counted instead of run."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(None, **kwargs)  # type: ignore[arg-type]
        self.ticks: list[float] = []

    def hot_tick(self) -> None:
        self.ticks.append(time.monotonic())

    def run_waker(self) -> threading.Thread:
        thread = threading.Thread(target=self._wake_loop, daemon=True)
        thread.start()
        return thread

    def halt(self, thread: threading.Thread) -> None:
        self._stopping.set()
        self._wake.set()
        thread.join(timeout=5)


def test_a_burst_of_events_is_one_refresh_after_the_pause() -> None:
    loop = CountingLoop(wake_delay_seconds=0.2, max_wake_delay_seconds=5)
    thread = loop.run_waker()
    try:
        for _ in range(10):  # 10 events over ~0.5 s: never 0.2 s without one
            loop.wake()
            time.sleep(0.05)
        last = time.monotonic()
        wait_until("the refresh", lambda: loop.ticks, timeout=5)
        time.sleep(0.5)  # and no second one
        assert len(loop.ticks) == 1
        assert loop.ticks[0] >= last + 0.15  # after the pause, not during the burst
    finally:
        loop.halt(thread)


def test_a_stream_that_never_pauses_still_refreshes_within_the_bound() -> None:
    loop = CountingLoop(wake_delay_seconds=0.2, max_wake_delay_seconds=0.5)
    thread = loop.run_waker()
    try:
        start = time.monotonic()
        while time.monotonic() - start < 2.0:
            loop.wake()
            time.sleep(0.05)
        # A refresh at least every 0.5 s (+ one pause of 0.2 s) while the stream lasts.
        during = [t for t in loop.ticks if t <= start + 2.0]
        assert len(during) >= 2, loop.ticks
    finally:
        loop.halt(thread)
