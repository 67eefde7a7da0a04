"""What every long-running `steer` service does around its own jobs: stop on SIGTERM or
SIGINT, and turn the errors of its start (a bad policy, no kubeconfig) into exit code 2 with
the reason on stderr. The scorer and the controller share it (scorer/serve.py,
controller/serve.py)."""

from __future__ import annotations

import logging
import signal
import sys
import threading
from collections.abc import Callable
from typing import Any

from steer.adapters.kube import KubeConfigError
from steer.core.policy import PolicyError


def stop_on_signals(log: logging.Logger) -> threading.Event:
    """An event set by the first SIGTERM or SIGINT (logged), for the service to wait on."""
    stop = threading.Event()

    def on_signal(signum: int, _frame: Any) -> None:
        log.info("signal %d: shutting down", signum)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


# What a command's start may fail with, and then exits 2 with `start_problem` on stderr.
START_ERRORS = (PolicyError, KubeConfigError)


def start_problem(exc: PolicyError | KubeConfigError) -> str:
    return f"invalid policy:\n{exc}" if isinstance(exc, PolicyError) else str(exc)


def serve_exit_code(serve: Callable[[], None]) -> int:
    """Run a service until it stops: 0, or 2 with the reason when it could not start."""
    try:
        serve()
    except START_ERRORS as exc:
        print(start_problem(exc), file=sys.stderr)
        return 2
    return 0
