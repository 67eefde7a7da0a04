"""`Status` bodies shaped exactly as kube-apiserver sends them.

Clients branch on `reason` and `code` and show `message` to people, so each builder copies the
apiserver's wording (apimachinery `k8s.io/apimachinery/pkg/api/errors`) and key order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

JsonObject = dict[str, Any]


class ApiError(Exception):
    """A request the API refuses; carries the `Status` body the client receives."""

    def __init__(self, status: JsonObject) -> None:
        super().__init__(status["message"])
        self.status = status

    @property
    def code(self) -> int:
        return int(self.status["code"])


@dataclass(frozen=True)
class GroupResource:
    """What error messages name: `nodes`, `leases.coordination.k8s.io`."""

    group: str
    plural: str

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural

    def details(self, name: str) -> JsonObject:
        out: JsonObject = {"name": name}
        if self.group:
            out["group"] = self.group
        out["kind"] = self.plural
        return out


def failure(code: int, reason: str, message: str, details: JsonObject | None = None) -> JsonObject:
    """A `Status` with `status: Failure`; `details` is omitted when None, as Go's omitempty does."""
    body: JsonObject = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
    }
    if details is not None:
        body["details"] = details
    body["code"] = code
    return body


def success(code: int | None, details: JsonObject | None = None) -> JsonObject:
    """A `status: Success`; a DELETE's carries no code, a binding's carries 201."""
    body: JsonObject = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}
    if details is not None:
        body["details"] = details
    if code is not None:
        body["code"] = code
    return body


def not_found(gr: GroupResource, name: str) -> ApiError:
    return ApiError(failure(404, "NotFound", f'{gr} "{name}" not found', gr.details(name)))


def already_exists(gr: GroupResource, name: str) -> ApiError:
    return ApiError(
        failure(409, "AlreadyExists", f'{gr} "{name}" already exists', gr.details(name))
    )


def conflict(gr: GroupResource, name: str, why: str | None = None) -> ApiError:
    why = why or (
        "the object has been modified; please apply your changes to the latest version and try again"
    )
    message = f'Operation cannot be fulfilled on {gr} "{name}": {why}'
    return ApiError(failure(409, "Conflict", message, gr.details(name)))


def bad_request(message: str) -> ApiError:
    return ApiError(failure(400, "BadRequest", message))


def unprocessable_patch() -> ApiError:
    """What the apiserver answers when a JSON Patch cannot apply (a failed `test` included)."""
    message = "the server rejected our request due to an error in our request"
    return ApiError(failure(422, "Invalid", message, {}))


def resource_not_found() -> ApiError:
    """Unknown URL: the apiserver's generic 404, without details about a named object."""
    return ApiError(
        failure(404, "NotFound", "the server could not find the requested resource", {})
    )


def method_not_allowed() -> ApiError:
    message = "the server does not allow this method on the requested resource"
    return ApiError(failure(405, "MethodNotAllowed", message, {}))


def unsupported_media_type(content_type: str) -> ApiError:
    message = (
        f"the body of the request was in an unknown format ({content_type!r}) - accepted media "
        "types include: application/json-patch+json, application/merge-patch+json, "
        "application/apply-patch+yaml, application/strategic-merge-patch+json"
    )
    return ApiError(failure(415, "UnsupportedMediaType", message, {}))


def expired(requested: int, oldest: int) -> JsonObject:
    """The Status inside a watch ERROR event when the requested resourceVersion left the window."""
    message = f"too old resource version: {requested} ({oldest})"
    return failure(410, "Expired", message)


def internal_error(cause: str) -> ApiError:
    message = f"Internal error occurred: {cause}"
    return ApiError(failure(500, "InternalError", message, {"causes": [{"message": cause}]}))


_INJECTED_REASONS = {
    429: ("TooManyRequests", "Too many requests, please try again later."),
    503: ("ServiceUnavailable", "the server is currently unable to handle the request"),
    504: ("Timeout", "the server was unable to return a response in the time allotted"),
}


def injected(code: int, gr: GroupResource, name: str) -> ApiError:
    """A fault injected by a test, shaped like the real error with that code."""
    if code == 409:
        return conflict(gr, name)
    if code == 500:
        return internal_error("injected fault")
    reason, message = _INJECTED_REASONS.get(code, ("InternalError", "injected fault"))
    return ApiError(failure(code, reason, message, gr.details(name)))
