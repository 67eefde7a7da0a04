"""AdmissionReview envelopes: what is accepted, the typed errors for bad input, responses."""

from __future__ import annotations

import base64
import json

import orjson
import pytest

from tests.webhook_harness import admission_fixture
from webhook.review import BadReview, allow, deny, encode_patch, parse_review


def body_of(name: str) -> bytes:
    return json.dumps(admission_fixture(name)["body"]).encode()


def test_golden_reviews_parse() -> None:
    review = parse_review(body_of("pod-create-by-replicaset.json"))
    assert review.uid == "8f460627-b713-49f2-8d0c-a81ee148132f"
    assert review.operation == "CREATE" and review.kind == "Pod" and review.namespace == "team-a"
    assert not review.dry_run and review.object is not None and review.old_object is None
    assert parse_review(body_of("pod-create-dryrun.json")).dry_run
    update = parse_review(body_of("pod-update-labels.json"))
    assert update.operation == "UPDATE" and update.old_object is not None


@pytest.mark.parametrize(
    ("body", "reason", "text"),
    [
        (b"", "empty-body", "request body is empty"),
        (b"{not json", "not-json", "request body is not JSON"),
        (b"[1, 2]", "not-admission-review", "kind: must be 'AdmissionReview', got 'list'"),
        (b'{"kind": "Pod"}', "not-admission-review", "got 'Pod'"),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1beta1"}',
            "unsupported-version",
            "admissionReviewVersions: [v1]",
        ),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1"}',
            "missing-request",
            "request:",
        ),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"operation": "CREATE"}}',
            "missing-uid",
            "request.uid: required",
        ),
        (
            b'{"kind": "AdmissionReview", "apiVersion": "admission.k8s.io/v1", "request": {"uid": 7}}',
            "missing-uid",
            "got 7",
        ),
    ],
)
def test_bad_envelopes_name_the_problem(body: bytes, reason: str, text: str) -> None:
    with pytest.raises(BadReview) as info:
        parse_review(body)
    assert info.value.reason == reason
    assert text in info.value.message
    assert orjson.loads(info.value.body()) == {
        "error": {"reason": reason, "message": info.value.message}
    }


def test_size_limit() -> None:
    with pytest.raises(BadReview) as info:
        parse_review(b"x" * 101, max_bytes=100)
    assert info.value.reason == "body-too-large"
    assert "101 bytes, over the 100-byte limit" in info.value.message


def test_allow_with_patch_and_warnings() -> None:
    review = orjson.loads(
        allow(
            "u1",
            patch=encode_patch(b'[{"op":"add","path":"/a","value":1}]'),
            warnings=["w" * 300],
        )
    )
    assert review["apiVersion"] == "admission.k8s.io/v1" and review["kind"] == "AdmissionReview"
    response = review["response"]
    assert response["uid"] == "u1" and response["allowed"] is True
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == [
        {"op": "add", "path": "/a", "value": 1}
    ]
    assert len(response["warnings"][0]) == 256 and response["warnings"][0].endswith("...")


@pytest.mark.parametrize("uid", ["u1", 'a"b\\c', "é\u2028\x00", ""])
@pytest.mark.parametrize(
    "patch", [b"", b"[]", orjson.dumps([{"op": "add", "path": "/a~1b", "value": "é"}])]
)
def test_a_patched_answer_is_the_envelope_orjson_writes(uid: str, patch: bytes) -> None:
    """`allow` writes a patched answer around the patch's base64 instead of through a dict."""
    response = {
        "uid": uid,
        "allowed": True,
        "patchType": "JSONPatch",
        "patch": base64.b64encode(patch).decode("ascii"),
    }
    envelope = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": response,
    }
    assert allow(uid, patch=encode_patch(patch)) == orjson.dumps(envelope)


def test_allow_without_patch_has_no_patch_fields() -> None:
    assert orjson.loads(allow("u2"))["response"] == {"uid": "u2", "allowed": True}


def test_deny() -> None:
    response = orjson.loads(deny("u3", "rule x: no"))["response"]
    assert response == {
        "uid": "u3",
        "allowed": False,
        "status": {"code": 403, "reason": "Forbidden", "message": "rule x: no"},
    }
