"""The scoring schedule: an APScheduler 3.x interval job, in the scorer process itself.

`max_instances=1` with `coalesce=True` means a cycle that overruns its interval delays the
next one instead of stacking runs (two cycles at once would plan against each other's half
written nodes); `misfire_grace_time` of one interval lets a late run still happen once. A
second, short job rewrites composites and budget pools when pods were bound or ended since
the last plan; `wake()` (the pod watch's callback) runs it as soon as the events pause
(0.2 s without one, at most 1 s after the first), a burst of events coalesced into one
refresh. The interval follows policy reloads.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime

from apscheduler.schedulers.background import BackgroundScheduler

from scorer.cycle.service import CycleError, Scorer

log = logging.getLogger(__name__)

SCORE_JOB = "score"
HOT_JOB = "hot-refresh"


class _QuietHotSkips(logging.Filter):
    """APScheduler warns each time a run is skipped because the previous one still runs. For the
    2-second hot refresh that is the coalescing working (a refresh of a busy 5,000-node
    cluster takes longer), not a problem; a skipped scoring cycle is still reported, since it
    means a cycle outlasted its interval."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not ("hot_tick" in message and "maximum number of running instances" in message)


logging.getLogger("apscheduler.scheduler").addFilter(_QuietHotSkips())


class ScorerLoop:
    def __init__(
        self,
        scorer: Scorer,
        *,
        hot_refresh_seconds: float = 2.0,
        wake_delay_seconds: float = 0.2,
        max_wake_delay_seconds: float = 1.0,
        after_cycle: Callable[[], object] | None = None,
    ) -> None:
        self.scorer = scorer
        # Runs after each cycle that completed (the Events on blocked pods: scorer/jobs/pending.py).
        self.after_cycle = after_cycle
        self.hot_refresh_seconds = hot_refresh_seconds
        # A refresh waits until pod events pause for `wake_delay_seconds`, never longer than
        # `max_wake_delay_seconds` after the first: a burst is one refresh, one write per node.
        self.wake_delay_seconds = wake_delay_seconds
        self.max_wake_delay_seconds = max(max_wake_delay_seconds, wake_delay_seconds)
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._waker: threading.Thread | None = None
        self.scheduler = BackgroundScheduler(timezone=UTC)
        self._interval: float | None = None
        self.cycles = 0
        self.failures = 0

    def start(self) -> None:
        interval = self.scorer.policy.spec.scoring.interval_seconds
        self._interval = interval
        self.scheduler.add_job(
            self.tick,
            "interval",
            seconds=interval,
            id=SCORE_JOB,
            max_instances=1,
            coalesce=True,
            misfire_grace_time=max(1, int(interval)),
            next_run_time=datetime.now(UTC),  # first cycle at once: /readyz waits for it
        )
        if self.scorer.bindings is not None or self.scorer.ledger is not None:
            self._waker = threading.Thread(target=self._wake_loop, name="hot-wake", daemon=True)
            self._waker.start()
            self.scheduler.add_job(
                self.hot_tick,
                "interval",
                seconds=self.hot_refresh_seconds,
                id=HOT_JOB,
                max_instances=1,
                coalesce=True,
                misfire_grace_time=max(1, int(self.hot_refresh_seconds)),
            )
        self.scheduler.start()

    def stop(self) -> None:
        self._stopping.set()
        self._wake.set()
        if self._waker is not None:
            self._waker.join(timeout=10)
            self._waker = None
        if self.scheduler.running:
            self.scheduler.shutdown(wait=True)

    def wake(self) -> None:
        """Pods were bound or a node's pods changed: refresh soon (thread-safe, never blocks)."""
        self._wake.set()

    def _wake_loop(self) -> None:
        while not self._stopping.is_set():
            self._wake.wait()
            # A burst of bindings arrives as a burst of events, spread over the time the
            # apiserver and the watch take: wait for a pause, then one refresh for all of them.
            deadline = time.monotonic() + self.max_wake_delay_seconds
            while True:
                self._wake.clear()
                if self._stopping.wait(self.wake_delay_seconds):
                    return
                if not self._wake.is_set() or time.monotonic() >= deadline:
                    break
            self._wake.clear()
            self.hot_tick()

    def tick(self) -> None:
        try:
            result = self.scorer.run_cycle()
            self.cycles += 1
            written = result.report.nodes_written if result.report else 0
            log.info(
                "cycle: %d nodes, %d changed, %d written, %.2fs (leader=%s)",
                len(result.nodes),
                len(result.plan.changes),
                written,
                result.duration_s,
                result.leader,
            )
        except CycleError as exc:
            self.failures += 1
            log.error("cycle failed: %s", exc)
        except Exception:  # the job must keep running whatever one cycle hits
            self.failures += 1
            log.exception("cycle failed unexpectedly")
        else:
            if self.after_cycle is not None:
                try:
                    self.after_cycle()
                except Exception:
                    log.exception("after the cycle: reporting blocked pods failed")
        self._follow_interval()

    def hot_tick(self) -> None:
        try:
            self.scorer.refresh_hot()
        except Exception:
            log.exception("hot-node refresh failed")

    def _follow_interval(self) -> None:
        interval = self.scorer.policy.spec.scoring.interval_seconds
        if interval != self._interval and self.scheduler.running:
            log.info("policy changed the scoring interval: %ss → %ss", self._interval, interval)
            self._interval = interval
            self.scheduler.reschedule_job(SCORE_JOB, trigger="interval", seconds=interval)
