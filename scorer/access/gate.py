"""The Flask side of access: every request but the probes shows a bearer token, which the
apiserver reviews, and is allowed what `rules.requirement` says its path needs.

The token is read from `Authorization: Bearer ...` (Prometheus, a port-forward, a client in
the cluster) or from `X-Steer-Authorization: Bearer ...`: the apiserver's Service proxy
authenticates the caller and then drops `Authorization` before it proxies (kubernetes#38775),
so `kubectl steer` sends the user's token again in a header the proxy passes on.

Answers: 401 without a token or with one the apiserver does not accept, 403 when the caller
may not read what the answer holds (the message names the permission), 503 when the
apiserver cannot be asked (fail closed: nothing is served that needs an answer not cached).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from flask import Flask, Response, g, request

from scorer.access.reviews import ApiserverReviews, ReviewUnavailable
from scorer.access.rules import Caller, Need, requirement

log = logging.getLogger(__name__)

TOKEN_HEADER = "X-Steer-Authorization"
CHALLENGE = 'Bearer realm="kube-steer scorer"'

ErrorResponse = Callable[[int, str], Response]


def bearer_token(authorization: str | None) -> str | None:
    """The token of an `Authorization`-style value `Bearer TOKEN` (the scheme in any case)."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token else None


class AccessGate:
    """Installed on an app with `install`; handlers ask `require` for needs they learn from
    the body and `may` to leave out of an answer what the caller may not read."""

    def __init__(self, reviews: ApiserverReviews, error: ErrorResponse) -> None:
        self.reviews = reviews
        self._error = error

    def install(self, app: Flask) -> None:
        app.before_request(self._check)

    def _check(self) -> Response | None:
        rule = requirement(request.method, request.path)
        if rule.public:
            return None
        token = bearer_token(request.headers.get("Authorization")) or bearer_token(
            request.headers.get(TOKEN_HEADER)
        )
        if token is None:
            return self._unauthorized(
                "no bearer token: send `Authorization: Bearer TOKEN` (or, through the "
                f"apiserver's Service proxy, `{TOKEN_HEADER}: Bearer TOKEN`)"
            )
        try:
            caller = self.reviews.authenticate(token)
        except ReviewUnavailable as exc:
            return self._unavailable(exc)
        if caller is None:
            return self._unauthorized("the apiserver does not accept this token")
        g.steer_caller = caller
        return self.require(rule.needs)

    def require(self, needs: Sequence[Need]) -> Response | None:
        """None when the request's caller may do every one of `needs`, else the 403 (or 503)
        answer that names the first it may not."""
        caller: Caller = g.steer_caller
        for need in needs:
            try:
                allowed = self.reviews.allowed(caller, need)
            except ReviewUnavailable as exc:
                return self._unavailable(exc)
            if not allowed:
                return self._error(
                    403,
                    f"{caller.user!r} may not {need.describe()}, which {request.path} needs",
                )
        return None

    def may(self, need: Need) -> bool:
        """Whether the request's caller may do `need` (False when it cannot be asked)."""
        try:
            return self.reviews.allowed(g.steer_caller, need)
        except ReviewUnavailable:
            return False

    def _unauthorized(self, message: str) -> Response:
        response = self._error(401, message)
        response.headers["WWW-Authenticate"] = CHALLENGE
        return response

    def _unavailable(self, exc: ReviewUnavailable) -> Response:
        log.warning("%s %s refused: %s", request.method, request.path, exc)
        response = self._error(503, f"the caller could not be checked: {exc}")
        response.headers["Retry-After"] = "5"
        return response
