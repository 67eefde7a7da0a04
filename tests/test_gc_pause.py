"""The shared pause of the cyclic collector (steer/adapters/gc_pause.py)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from steer.adapters.gc_pause import gc_paused


@pytest.fixture(autouse=True)
def collector_on() -> Iterator[None]:
    was = gc.isenabled()
    gc.enable()
    yield
    if not was:
        gc.disable()


def test_overlapping_sections_in_two_threads_resume_after_the_last() -> None:
    entered, release = threading.Event(), threading.Event()

    def other() -> None:
        with gc_paused():
            entered.set()
            release.wait(5)

    thread = threading.Thread(target=other)
    with gc_paused():
        assert not gc.isenabled()
        thread.start()
        assert entered.wait(5)
    assert not gc.isenabled()  # the other thread's section still runs
    release.set()
    thread.join(5)
    assert gc.isenabled()


def test_nested_sections_and_a_failing_one() -> None:
    with pytest.raises(RuntimeError), gc_paused():
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
        raise RuntimeError("boom")
    assert gc.isenabled()


def test_a_collector_disabled_before_stays_disabled() -> None:
    gc.disable()
    with gc_paused():
        pass
    assert not gc.isenabled()
