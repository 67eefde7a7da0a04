"""Waiting for something that happens in another thread or process: the one polling loop the
tests, the kits and the benchmarks share.

    node = wait_until("node-4 watched", lambda: cache.get("node-4"), timeout=10)

A check is polled until its answer is truthy (or satisfies `until`), and that answer is
returned, so a wait can hand on what it waited for. Exceptions named in `ignoring` count as
"not yet" (an object the apiserver has not created, a server not listening yet); any other
exception fails at once. On timeout, `WaitTimeout` names what was awaited and the last answer
or exception seen: the clue to why it never came.
"""

from __future__ import annotations

import reprlib
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

_shown = reprlib.Repr()  # a long answer (a list of pods) is cut short in the message
_shown.maxstring = _shown.maxother = 300


class WaitTimeout(AssertionError, TimeoutError):
    """A wait ran out of time. An AssertionError, so a test reports a failed expectation; a
    TimeoutError, so a kit's or a benchmark's caller can handle it as one."""


def wait_until(
    what: str,
    check: Callable[[], T],
    *,
    timeout: float,
    interval: float = 0.1,
    until: Callable[[T], object] = bool,
    ignoring: tuple[type[Exception], ...] = (),
) -> T:
    """Poll `check` every `interval` seconds until `until(answer)` holds (by default: the
    answer is truthy) and return that answer; raise `WaitTimeout` after `timeout` seconds.
    `what` says what is awaited ("the CRD is established"); `ignoring`: the exceptions of
    `check` or `until` that mean "not yet"."""
    deadline = time.monotonic() + timeout
    last = "no answer yet"
    while True:
        try:
            answer = check()
            if until(answer):
                return answer
            last = f"last answer: {_shown.repr(answer)}"
        except ignoring as exc:
            last = f"last error: {type(exc).__name__}: {_shown.repr(str(exc))}"
        if time.monotonic() >= deadline:
            raise WaitTimeout(f"{what}: not within {timeout:g} s ({last})")
        time.sleep(interval)
