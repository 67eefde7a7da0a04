"""The apiserver decides: a caller's bearer token is reviewed (TokenReview) and each permission
asked for that caller (SubjectAccessReview), as kube-rbac-proxy and every delegating
Kubernetes server do. The answers are cached briefly (`cache.TtlCache`), keyed on the token's
SHA-256, never on the token itself.

When the apiserver cannot answer (down, throttled, or the scorer's ServiceAccount may not
create the reviews) nothing is served that needs an answer not already cached:
`ReviewUnavailable`, which the gate turns into 503. Only answers are cached, never failures.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from typing import Any

from scorer.access.cache import TtlCache
from scorer.access.rules import Caller, Need
from steer.adapters.kubejson import KubeApiError, KubeJson

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class ReviewUnavailable(RuntimeError):
    """The apiserver did not answer a review (the message says why and what to check)."""


@dataclass(frozen=True)
class ReviewSettings:
    """Seconds each kind of answer is kept (0: not cached), the entries each cache holds, the
    timeout of one review, and the audiences a token must be valid for (none: the
    apiserver's own, as `kubectl` tokens are)."""

    token_ttl_s: float = 10.0
    allow_ttl_s: float = 10.0
    deny_ttl_s: float = 10.0
    max_entries: int = 1024
    timeout_s: float = 5.0
    audiences: tuple[str, ...] = ()


@dataclass
class ReviewCounts:
    """Reviews sent to the apiserver and answers taken from the caches (for tests, the page
    of docs/scorer.md that measures them, and the log)."""

    token_reviews: int = 0
    access_reviews: int = 0
    cached: int = 0


class ApiserverReviews:
    def __init__(self, kube: KubeJson, settings: ReviewSettings | None = None) -> None:
        self.kube = kube
        self.settings = settings or ReviewSettings()
        self.counts = ReviewCounts()
        # (None,) marks a token the apiserver refused: a repeated bad token costs no review.
        self._tokens: TtlCache[str, tuple[Caller | None]] = TtlCache(self.settings.max_entries)
        self._decisions: TtlCache[tuple[Caller, Need], bool] = TtlCache(self.settings.max_entries)

    def authenticate(self, token: str) -> Caller | None:
        """The caller the token belongs to, or None if the apiserver does not accept it."""
        key = hashlib.sha256(token.encode()).hexdigest()
        cached = self._tokens.get(key)
        if cached is not None:
            self.counts.cached += 1
            return cached[0]
        spec: dict[str, Any] = {"token": token}
        if self.settings.audiences:
            spec["audiences"] = list(self.settings.audiences)
        self.counts.token_reviews += 1
        status = self._review(TOKEN_REVIEWS, "TokenReview", "tokenreviews", spec)
        caller = None
        if status.get("authenticated") and isinstance(status.get("user"), dict):
            caller = Caller.from_review(status["user"])
        if caller is None or not caller.user:
            self._tokens.put(key, (None,), self.settings.deny_ttl_s)
            return None
        self._tokens.put(key, (caller,), self.settings.token_ttl_s)
        return caller

    def allowed(self, caller: Caller, need: Need) -> bool:
        """Whether the apiserver's authorizer allows `caller` what `need` names."""
        found = self._decisions.get((caller, need))
        if found is not None:
            self.counts.cached += 1
            return found
        self.counts.access_reviews += 1
        spec = {**caller.subject(), **need.attributes()}
        status = self._review(ACCESS_REVIEWS, "SubjectAccessReview", "subjectaccessreviews", spec)
        allowed = bool(status.get("allowed")) and not status.get("denied")
        ttl = self.settings.allow_ttl_s if allowed else self.settings.deny_ttl_s
        self._decisions.put((caller, need), allowed, ttl)
        return allowed

    def _review(self, path: str, kind: str, plural: str, spec: dict[str, Any]) -> dict[str, Any]:
        group = path.split("/")[2]
        body = {"apiVersion": f"{group}/v1", "kind": kind, "spec": spec}
        started = time.monotonic()
        try:
            answer = self.kube.request("POST", path, body=body, timeout_s=self.settings.timeout_s)
        except KubeApiError as exc:
            if exc.status in (401, 403):
                raise ReviewUnavailable(
                    f"the apiserver refused the scorer's {kind} ({exc.status}): its "
                    f"ServiceAccount needs `create` on {plural}.{group} (the ClusterRole "
                    "system:auth-delegator, docs/install.md)"
                ) from None
            waited = time.monotonic() - started
            raise ReviewUnavailable(
                f"the apiserver did not answer the {kind} ({exc.status or 'no connection'}, "
                f"{waited:.1f}s): {exc.message}"
            ) from None
        status = answer.get("status")
        return status if isinstance(status, dict) else {}
