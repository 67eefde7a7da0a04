"""A job run every few seconds on a daemon thread: the policy file's reload check, the webhook's
status gauges, the Lease renewal, and the leader jobs of the scorer and the controller (the
SteeringPolicy's status, the webhook's certificate, the admission policies).

The scorer's scoring cycles run on APScheduler (scorer/cycle/loop.py), which coalesces missed runs
and keeps one cycle at a time; these jobs are single, short and need neither, so one thread
each keeps the webhook free of a scheduler. A run that raises is handed to `on_error` (logged
by default) and the next run goes on: whatever one round throws, the job never ends by itself.
A job that must follow an event (a new policy version, a change of leadership) is woken by it
rather than polled faster; one whose run can fail for a while (the apiserver unreachable) is
tried again sooner than its interval with `retry_s`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Run `job` every `interval_s` seconds, first at once (`at_once`) or after one interval.

    With `retry_s`, a run that fails (raises, or returns False) is tried again after `retry_s`
    seconds, doubling with each failure in a row up to `interval_s`; without it, every wait is
    one interval whatever the run returned.
    """

    def __init__(
        self,
        name: str,
        interval_s: float,
        job: Callable[[], object],
        *,
        at_once: bool = True,
        on_error: Callable[[Exception], object] | None = None,
        retry_s: float | None = None,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.job = job
        self.at_once = at_once
        self.on_error = on_error
        self.retry_s = retry_s
        self._stop = threading.Event()
        self._wake = threading.Event()  # set by stop() too: a wait ends on either
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> Periodic:
        """Start the thread (again after `stop`); a no-op while it runs."""
        if self._thread is None:
            self._stop, self._wake = threading.Event(), threading.Event()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after the run in flight, if any, waiting up to `timeout_s` for it."""
        self._stop.set()
        self._wake.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)

    def wake(self, _why: object = None) -> None:
        """Run now rather than at the end of the wait; woken during a run, run again right
        after it. Before `start` it does nothing: the first run comes as `at_once` says."""
        self._wake.set()

    def _run(self) -> None:
        stop, wake = self._stop, self._wake
        if not self.at_once and self._pause(stop, wake, self.interval_s):
            return
        failures = 0
        while not stop.is_set():
            failures = 0 if self._run_once() else failures + 1
            if self._pause(stop, wake, self._next_wait(failures)):
                return

    def _run_once(self) -> bool:
        """One run; False when it failed."""
        try:
            return self.job() is not False
        except Exception as exc:  # the next run goes on, whatever this one threw
            try:
                (self.on_error or self._log)(exc)
            except Exception:
                log.exception("%s: reporting a failed run failed", self.name)
            return False

    def _next_wait(self, failures: int) -> float:
        if not failures or self.retry_s is None:
            return self.interval_s
        return min(self.interval_s, self.retry_s * 2.0 ** (failures - 1))

    @staticmethod
    def _pause(stop: threading.Event, wake: threading.Event, seconds: float) -> bool:
        """Wait `seconds`, or until woken; True when stopped."""
        wake.wait(seconds)
        wake.clear()
        return stop.is_set()

    def _log(self, exc: Exception) -> None:
        log.error("%s: a run failed", self.name, exc_info=exc)
