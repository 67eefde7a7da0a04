"""The background job runner of the policy reload, the webhook's status and the lease."""

from __future__ import annotations

import itertools
import threading
import time

from steer.adapters.periodic import Periodic


def test_a_failing_run_is_reported_and_the_next_one_goes_on() -> None:
    runs: list[int] = []
    errors: list[Exception] = []
    third = threading.Event()

    def job() -> None:
        runs.append(1)
        if len(runs) == 3:
            third.set()
        if len(runs) == 1:
            raise RuntimeError("first round")

    job_runner = Periodic("t", 0.01, job, on_error=errors.append).start()
    assert third.wait(10)
    job_runner.stop()
    assert not job_runner.running
    assert [str(e) for e in errors] == ["first round"]
    count = len(runs)
    time.sleep(0.1)  # ten intervals: a stopped job runs no more
    assert len(runs) == count


def test_a_failing_error_handler_does_not_end_the_job() -> None:
    second = threading.Event()
    runs: list[int] = []

    def job() -> None:
        runs.append(1)
        if len(runs) >= 2:
            second.set()
        raise ValueError("always")

    def handler(exc: Exception) -> None:
        raise RuntimeError("handler broke")

    runner = Periodic("t", 0.01, job, on_error=handler).start()
    assert second.wait(10)
    runner.stop()


def test_the_first_run_waits_an_interval_unless_at_once() -> None:
    ran = threading.Event()
    later = Periodic("t", 60, ran.set, at_once=False).start()
    assert not ran.wait(0.2)
    later.stop(timeout_s=5)  # returns at once: the thread waits on its stop flag
    assert not later.running and not ran.is_set()
    now = Periodic("t", 60, ran.set).start()
    assert ran.wait(10)
    now.stop(timeout_s=5)


def test_a_stopped_job_starts_again() -> None:
    runs = threading.Semaphore(0)
    runner = Periodic("t", 60, runs.release)
    runner.start()
    assert runs.acquire(timeout=10)
    runner.stop()
    runner.start().start()  # a second start while running is a no-op
    assert runs.acquire(timeout=10)
    assert not runs.acquire(timeout=0.1)
    runner.stop()


def test_a_wake_runs_now_and_one_during_a_run_runs_again_after_it() -> None:
    runs = threading.Semaphore(0)
    in_run, go_on = threading.Event(), threading.Event()

    def job() -> None:
        in_run.set()
        go_on.wait(10)
        runs.release()

    runner = Periodic("t", 60, job)
    runner.wake()  # before start: nothing more than the first run
    runner.start()
    assert in_run.wait(10)
    in_run.clear()
    runner.wake()  # during the first run
    go_on.set()
    assert runs.acquire(timeout=10)
    assert runs.acquire(timeout=10)  # the second run came at once, not after 60 s
    assert not runs.acquire(timeout=0.2)
    runner.wake()
    assert runs.acquire(timeout=10)
    runner.stop(timeout_s=5)
    assert not runner.running


def test_failed_runs_are_retried_sooner_doubling_up_to_the_interval() -> None:
    times: list[float] = []
    third_retry = threading.Event()

    def job() -> bool:
        times.append(time.monotonic())
        if len(times) == 4:
            third_retry.set()
        return len(times) > 4  # four failures, then success

    runner = Periodic("t", 30, job, retry_s=0.05).start()
    assert third_retry.wait(10)  # three retries within seconds: not the 30 s interval
    runner.stop(timeout_s=5)
    gaps = [later - earlier for earlier, later in itertools.pairwise(times)]
    for gap, backoff in zip(gaps, (0.05, 0.1, 0.2), strict=False):
        assert gap >= backoff * 0.9, (gaps, backoff)


def test_without_retry_a_failed_run_waits_the_interval() -> None:
    runs = threading.Semaphore(0)

    def job() -> bool:
        runs.release()
        return False

    runner = Periodic("t", 60, job).start()
    assert runs.acquire(timeout=10)
    assert not runs.acquire(timeout=0.3)
    runner.stop(timeout_s=5)
