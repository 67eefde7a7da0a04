"""A job run every few seconds on a daemon thread: the policy file's reload check, the webhook's
status gauges, the scorer's lease renewal.

The scorer's scoring cycles run on APScheduler (scorer/cycle/loop.py), which coalesces missed runs
and keeps one cycle at a time; these jobs are single, short and need neither, so one thread
each keeps the webhook free of a scheduler. A run that raises is handed to `on_error` (logged
by default) and the next run goes on: whatever one round throws, the job never ends by itself.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Periodic:
    """Run `job` every `interval_s` seconds, first at once (`at_once`) or after one interval."""

    def __init__(
        self,
        name: str,
        interval_s: float,
        job: Callable[[], object],
        *,
        at_once: bool = True,
        on_error: Callable[[Exception], object] | None = None,
    ) -> None:
        self.name = name
        self.interval_s = interval_s
        self.job = job
        self.at_once = at_once
        self.on_error = on_error
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> Periodic:
        """Start the thread (again after `stop`); a no-op while it runs."""
        if self._thread is None:
            self._stop = threading.Event()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop after the run in flight, if any, waiting up to `timeout_s` for it."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=timeout_s)

    def _run(self) -> None:
        stop = self._stop
        if not self.at_once and stop.wait(self.interval_s):
            return
        while not stop.is_set():
            try:
                self.job()
            except Exception as exc:  # the next run goes on, whatever this one threw
                try:
                    (self.on_error or self._log)(exc)
                except Exception:
                    log.exception("%s: reporting a failed run failed", self.name)
            if stop.wait(self.interval_s):
                return

    def _log(self, exc: Exception) -> None:
        log.error("%s: a run failed", self.name, exc_info=exc)
