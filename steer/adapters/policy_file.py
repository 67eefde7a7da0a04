"""Hot reload of the policy file, shared by the scorer and the webhook.

A ConfigMap volume updates by swapping a `..data` symlink, so an inotify watch on the file
itself misses the change; polling the content and comparing a hash sees every update, whatever
the mount does. A bad edit never replaces a running policy: it is counted, logged with every
problem, and the last good policy keeps serving.
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from steer.adapters.periodic import Periodic
from steer.core.policy import Policy, PolicyError, PolicyIssue, parse_policy

log = logging.getLogger(__name__)

Listener = Callable[[Policy], None]
ErrorListener = Callable[[str], None]

# The most a ConfigMap holds. The YAML parser is pure Python: a file this size can take it
# ~10 s of CPU, and a larger one would hold a core (and the reload thread) for minutes.
MAX_POLICY_BYTES = 1 << 20


def read_policy_bytes(path: str) -> bytes:
    """The file's content; `PolicyError` if it is over `MAX_POLICY_BYTES` (never parsed),
    OSError if it cannot be read."""
    with open(path, "rb") as fh:
        data = fh.read(MAX_POLICY_BYTES + 1)
        if len(data) > MAX_POLICY_BYTES:
            size = os.fstat(fh.fileno()).st_size
            raise PolicyError(
                [
                    PolicyIssue(
                        "",
                        f"policy file {path!r} is {size} bytes, larger than the "
                        f"{MAX_POLICY_BYTES} bytes a ConfigMap holds; not parsed",
                    )
                ]
            )
    return data


def load_policy_file(path: str) -> Policy:
    """Read and validate a policy file; `PolicyError` names every problem (and a missing file)."""
    try:
        data = read_policy_bytes(path)
    except OSError as exc:
        raise PolicyError(
            [PolicyIssue("", f"cannot read policy file {path!r}: {exc.strerror}")]
        ) from None
    return parse_policy(data)


@dataclass(frozen=True)
class ReloadStatus:
    version: str
    digest: str
    loaded_at: float
    reload_errors: int
    last_error: str | None


class PolicyKeeper:
    """The policy in force and who hears of a change: what every policy source shares (this
    file's `PolicyWatcher`, the SteeringPolicy resource's `PolicyResourceWatcher`).
    `current` is swapped atomically on a good change; a bad one is counted and logged once
    and never replaces it."""

    def __init__(self, first: Policy) -> None:
        self._lock = threading.Lock()
        self._listeners: list[Listener] = []
        self._error_listeners: list[ErrorListener] = []
        self.reload_errors = 0
        self.last_error: str | None = None
        self._current = first
        self.loaded_at = time.time()

    @property
    def current(self) -> Policy:
        return self._current

    def subscribe(self, listener: Listener, *, call_now: bool = True) -> None:
        """Call `listener(policy)` on every successful change (and once now, by default)."""
        with self._lock:
            self._listeners.append(listener)
        if call_now:
            listener(self._current)

    def on_reload_error(self, listener: ErrorListener) -> None:
        """Call `listener(message)` once for each rejected content (what `reload_errors` counts)."""
        with self._lock:
            self._error_listeners.append(listener)

    def _swap(self, policy: Policy) -> None:
        with self._lock:
            # The policy is swapped last: a reader without the lock that sees it also sees
            # the error cleared and the new load time.
            self.last_error = None
            self.loaded_at = time.time()
            self._current = policy
            listeners = list(self._listeners)
        log.info("policy reloaded: %s", policy.version)
        for listener in listeners:
            try:
                listener(policy)
            except Exception:  # one broken consumer must not stop the others from updating
                log.exception("policy listener failed for %s", policy.version)

    def _reject(self, message: str) -> None:
        with self._lock:
            # Count each bad content (or unreadable state) once, not once per poll. The reason
            # is stored before the count moves: a reader without the lock that sees the new
            # count also sees its reason.
            new = message != self.last_error
            self.last_error = message
            if new:
                self.reload_errors += 1
            listeners = list(self._error_listeners) if new else []
            kept = self._current.version
        if new:
            log.error("policy not reloaded, keeping %s:\n%s", kept, message)
        for listener in listeners:
            try:
                listener(message)
            except Exception:
                log.exception("policy reload-error listener failed")

    def _clear_error(self) -> None:
        with self._lock:
            self.last_error = None

    def status(self) -> ReloadStatus:
        with self._lock:
            return ReloadStatus(
                version=self._current.version,
                digest=self._current.digest,
                loaded_at=self.loaded_at,
                reload_errors=self.reload_errors,
                last_error=self.last_error,
            )


class PolicyWatcher(PolicyKeeper):
    """Keeps the current policy of one file."""

    def __init__(self, path: str, *, interval_seconds: float = 2.0) -> None:
        self.path = path
        self.interval_seconds = interval_seconds
        # The first load must succeed: a service that starts without a valid policy has
        # nothing to serve, and saying so at start-up beats serving defaults silently.
        super().__init__(load_policy_file(path))
        self._last_seen_digest: str | None = self._current.digest
        self._poller = Periodic(
            "policy-reload",
            interval_seconds,
            self.check,
            at_once=False,
            # Whatever a file does (a nesting too deep, an unreadable mount), the next valid
            # edit is served.
            on_error=lambda exc: self._failed(
                f"policy file {self.path!r} could not be loaded: {exc!r}", None
            ),
        )

    def check(self) -> bool:
        """Re-read the file once; True when a new policy was swapped in."""
        try:
            data = read_policy_bytes(self.path)
        except PolicyError as exc:
            return self._failed(str(exc), None)  # too large: the content is not looked at
        except OSError as exc:
            # What was read before is forgotten: content that comes back is judged again, the
            # policy in force quietly, a bad one with its own reason (not "cannot read").
            return self._failed(
                f"cannot read policy file {self.path!r}: {exc.strerror}", self._current.digest
            )
        digest = hashlib.sha256(data).hexdigest()
        if digest == self._last_seen_digest:
            if digest == self._current.digest and self.last_error is not None:
                # The file is back to the policy in force (after a delete or a bad edit
                # reverted): the error no longer describes the file.
                self._clear_error()
            return False
        try:
            policy = parse_policy(data)
        except PolicyError as exc:
            return self._failed(str(exc), digest)
        self._last_seen_digest = digest
        self._swap(policy)
        return True

    def _failed(self, message: str, digest: str | None) -> bool:
        if digest is not None:
            self._last_seen_digest = digest
        self._reject(message)
        return False

    def start(self) -> None:
        self._poller.start()

    def stop(self) -> None:
        self._poller.stop(timeout_s=5)
