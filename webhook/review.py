"""AdmissionReview (admission.k8s.io/v1) in and out: parsing, typed input errors, responses.

Pure: bytes in, typed request or `BadReview` out; a decided request (`Decided`: the core's
verdict, a refused body or a failure) in, its response out (`response`). The HTTP layer only
moves bytes, so every rule about what the apiserver sends and accepts lives here.

A body that is not an AdmissionReview at all is the caller's bug (HTTP 400 naming the
problem); a well-formed review whose object the webhook cannot interpret is answered normally
(allowed, with a warning), because refusing it would block a pod over a webhook limitation.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, NotRequired, TypedDict, cast

import orjson

from steer.core.decision import Verdict

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# The apiserver caps webhook request bodies by the object size limit (3 MiB for etcd objects
# plus envelope); a pod review is a few KiB. 4 MiB leaves room for any real pod.
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024
# Kubernetes warns that warnings above 256 characters may be truncated.
MAX_WARNING_CHARS = 256

Operation = Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
Endpoint = Literal["mutate", "validate", "validate-security"]
BadReason = Literal[
    "body-too-large",
    "empty-body",
    "not-json",
    "not-admission-review",
    "unsupported-version",
    "missing-request",
    "missing-uid",
]


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class AdmissionRequest(TypedDict):
    uid: str
    kind: NotRequired[GroupVersionKind]
    resource: NotRequired[GroupVersionResource]
    subResource: NotRequired[str]
    name: NotRequired[str]
    namespace: NotRequired[str]
    operation: NotRequired[Operation]
    object: NotRequired[dict[str, Any] | None]
    oldObject: NotRequired[dict[str, Any] | None]
    dryRun: NotRequired[bool]


class AdmissionStatus(TypedDict):
    code: int
    reason: str
    message: str


class AdmissionResponse(TypedDict):
    uid: str
    allowed: bool
    patchType: NotRequired[Literal["JSONPatch"]]
    patch: NotRequired[str]
    status: NotRequired[AdmissionStatus]
    warnings: NotRequired[list[str]]


class AdmissionReview(TypedDict):
    apiVersion: str
    kind: str
    request: NotRequired[AdmissionRequest]
    response: NotRequired[AdmissionResponse]


class BadReview(ValueError):
    """The body is not an AdmissionReview the webhook can answer (HTTP 400)."""

    def __init__(self, reason: BadReason, message: str) -> None:
        super().__init__(message)
        self.reason: BadReason = reason
        self.message = message

    def body(self) -> bytes:
        return orjson.dumps({"error": {"reason": self.reason, "message": self.message}})


@dataclass(frozen=True)
class Review:
    """The parts of a request every handler needs, checked once."""

    request: AdmissionRequest
    uid: str
    operation: str
    namespace: str
    dry_run: bool

    @property
    def object(self) -> Mapping[str, Any] | None:
        obj = self.request.get("object")
        return obj if isinstance(obj, dict) else None

    @property
    def old_object(self) -> Mapping[str, Any] | None:
        obj = self.request.get("oldObject")
        return obj if isinstance(obj, dict) else None

    @property
    def kind(self) -> str:
        kind = self.request.get("kind")
        return str(kind.get("kind", "")) if isinstance(kind, dict) else ""

    @property
    def user_info(self) -> Mapping[str, Any] | None:
        info = self.request.get("userInfo")
        return info if isinstance(info, dict) else None

    @property
    def sub_resource(self) -> str:
        return str(self.request.get("subResource") or "")


def parse_review(body: bytes, *, max_bytes: int = DEFAULT_MAX_BODY_BYTES) -> Review:
    """Check the envelope of an AdmissionReview; raise `BadReview` naming what is wrong."""
    if len(body) > max_bytes:
        raise BadReview(
            "body-too-large",
            f"request body is {len(body)} bytes, over the {max_bytes}-byte limit",
        )
    if not body.strip():
        raise BadReview("empty-body", "request body is empty; POST an AdmissionReview (JSON)")
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise BadReview("not-json", f"request body is not JSON: {exc}") from None
    if not isinstance(data, dict) or data.get("kind") != KIND:
        got = data.get("kind") if isinstance(data, dict) else type(data).__name__
        raise BadReview(
            "not-admission-review",
            f"kind: must be {KIND!r}, got {got!r}",
        )
    if data.get("apiVersion") != API_VERSION:
        raise BadReview(
            "unsupported-version",
            f"apiVersion: must be {API_VERSION!r} (set admissionReviewVersions: [v1] in the "
            f"webhook configuration), got {data.get('apiVersion')!r}",
        )
    request = data.get("request")
    if not isinstance(request, dict):
        raise BadReview("missing-request", "request: required object is missing")
    uid = request.get("uid")
    if not isinstance(uid, str) or not uid:
        raise BadReview(
            "missing-uid",
            "request.uid: required (the response must echo it), got "
            f"{'nothing' if uid is None else repr(uid)}",
        )
    namespace = request.get("namespace")
    return Review(
        request=cast(AdmissionRequest, request),
        uid=uid,
        operation=str(request.get("operation") or ""),
        namespace=namespace if isinstance(namespace, str) else "",
        dry_run=request.get("dryRun") is True,
    )


def _clip(warnings: Sequence[str]) -> list[str]:
    return [
        w if len(w) <= MAX_WARNING_CHARS else w[: MAX_WARNING_CHARS - 3] + "..." for w in warnings
    ]


def _envelope(response: AdmissionResponse) -> bytes:
    review: AdmissionReview = {"apiVersion": API_VERSION, "kind": KIND, "response": response}
    return orjson.dumps(review)


def encode_patch(patch: bytes) -> str:
    """A JSON Patch document (bytes) as a response carries it: base64."""
    return base64.b64encode(patch).decode("ascii")


def patch_of(verdict: Verdict) -> str | None:
    """The verdict's JSON Patch as a response carries it (`encode_patch`); None: it has none."""
    patch = verdict.mutation.patch_bytes() if verdict.mutation is not None else None
    return encode_patch(patch) if patch is not None else None


def allow(uid: str, *, patch: str | None = None, warnings: Sequence[str] = ()) -> bytes:
    """An allowing response; `patch` is the JSON Patch as `encode_patch` gives it, omitted when
    None."""
    response: AdmissionResponse = {"uid": uid, "allowed": True}
    if patch is not None:
        response["patchType"] = "JSONPatch"
        response["patch"] = patch
    if warnings:
        response["warnings"] = _clip(warnings)
    return _envelope(response)


def deny(uid: str, message: str, *, warnings: Sequence[str] = ()) -> bytes:
    """A denying response: 403 Forbidden with `message` shown to the user by kubectl."""
    response: AdmissionResponse = {
        "uid": uid,
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": message},
    }
    if warnings:
        response["warnings"] = _clip(warnings)
    return _envelope(response)


def error_body(reason: str, message: str) -> bytes:
    """A JSON error for non-200 answers (the apiserver then applies the failurePolicy)."""
    return orjson.dumps({"error": {"reason": reason, "message": message}})


def retry_later_body(reason: str, message: str, retry_after_seconds: int) -> bytes:
    """A 429's body: a `metav1.Status` (client-go decodes it, so the apiserver's error names
    `message`, and reads `retryAfterSeconds`), with this webhook's usual `error` beside it."""
    return orjson.dumps(
        {
            "apiVersion": "v1",
            "kind": "Status",
            "status": "Failure",
            "reason": "TooManyRequests",
            "code": 429,
            "message": message,
            "details": {"retryAfterSeconds": retry_after_seconds},
            "error": {"reason": reason, "message": message},
        }
    )


# -- a decided request and its response ---------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """What the HTTP layer sends: the status, the body, and the result the metrics label it by."""

    status: int
    body: bytes
    result: str


@dataclass(frozen=True)
class NamespaceGap:
    """Why the pod's namespace has no labels yet, as the metric's reason and a sentence."""

    reason: Literal["namespace-cache-not-synced", "namespace-unknown"]
    text: str


@dataclass(frozen=True)
class Judged:
    """A review the core decided (steer/core/decision.py), with what answering it needs."""

    endpoint: Endpoint
    review: Review
    verdict: Verdict
    patch: str | None = None  # /mutate: the verdict's JSON Patch, as the response carries it
    cached: bool | None = None  # /mutate: whether the decision cache held it (None: not asked)
    gap: NamespaceGap | None = None  # why, when the verdict is "namespace-unknown"

    @property
    def result(self) -> str:
        if self.verdict.result == "namespace-unknown":
            # Steering is optional (allowed unsteered); validation leaves it to the failurePolicy.
            return "uninterpretable" if self.endpoint == "mutate" else "unavailable"
        return self.verdict.result

    @property
    def unjudged(self) -> str | None:
        """Why the pod was answered without its rules judged, for the log (None: judged, or a
        validation 503, which the apiserver reports)."""
        if self.gap is not None:
            return f"{self.gap.text}; pod not steered" if self.endpoint == "mutate" else None
        unreadable = self.verdict.unreadable
        return unreadable.log if unreadable is not None else None


@dataclass(frozen=True)
class Refused:
    """A body that is not an AdmissionReview the webhook can answer."""

    endpoint: Endpoint
    error: BadReview
    result: ClassVar[str] = "bad_request"


@dataclass(frozen=True)
class Failed:
    """A request the webhook failed on (its log says how); `review` None: failed reading it."""

    endpoint: Endpoint
    review: Review | None
    result: ClassVar[str] = "error"


Decided = Judged | Refused | Failed
INTERNAL_ERROR_WARNING = "kube-steer: internal error, pod not steered (see the webhook log)"


def response(decided: Decided) -> Outcome:
    """The answer to the apiserver. A refused body is a 400 (413 over the size limit) naming
    the problem; a failure allows a pod unsteered (steering is optional) and answers
    validation with a 500 (the failurePolicy decides); a pod whose namespace is not known yet
    is allowed unsteered, or a 503 for validation; every other verdict is allowed (with its
    patch) or denied, with its warnings."""
    result = decided.result
    if isinstance(decided, Refused):
        status = 413 if decided.error.reason == "body-too-large" else 400
        return Outcome(status, decided.error.body(), result)
    if isinstance(decided, Failed):
        if decided.endpoint == "mutate" and decided.review is not None:
            return Outcome(
                200, allow(decided.review.uid, warnings=[INTERNAL_ERROR_WARNING]), result
            )
        message = "the webhook failed on this request; see its log"
        return Outcome(500, error_body("internal-error", message), result)
    uid, verdict, gap = decided.review.uid, decided.verdict, decided.gap
    if gap is not None:
        if decided.endpoint == "mutate":
            return Outcome(200, allow(uid, warnings=[f"kube-steer: {decided.unjudged}"]), result)
        # Without the tenant no rule can be judged: let the failurePolicy decide (Fail for the
        # security configuration) instead of guessing.
        return Outcome(503, error_body(gap.reason, f"{gap.text}; retry shortly"), result)
    if verdict.message is not None:
        return Outcome(200, deny(uid, verdict.message, warnings=verdict.warnings), result)
    return Outcome(200, allow(uid, patch=decided.patch, warnings=verdict.warnings), result)
