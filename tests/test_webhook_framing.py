"""When a request has arrived whole (webhook.framing): fed at any split, the verdict and the bytes
kept are the same; bodies over the limit are dropped whatever their framing."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.framing import FRAMING_ALLOWANCE, RequestFraming

LIMIT = 1000


def framing() -> RequestFraming:
    return RequestFraming(max_body_bytes=LIMIT, max_head_bytes=4096, drain_limit=10_000)


def head(*lines: str) -> bytes:
    return ("\r\n".join(["POST /validate HTTP/1.1", "Host: x", *lines]) + "\r\n\r\n").encode()


def chunked(body: bytes, size: int) -> bytes:
    out = b"".join(
        b"%x\r\n" % len(body[i : i + size]) + body[i : i + size] + b"\r\n"
        for i in range(0, len(body), size)
    )
    return out + b"0\r\n\r\n"


def feed_in_pieces(data: bytes, cuts: list[int]) -> tuple[RequestFraming, bytes, list[bool]]:
    scan = framing()
    kept = b""
    done_after: list[bool] = []
    last = 0
    for cut in [*sorted(set(cuts)), len(data)]:
        kept += scan.feed(data[last:cut])
        done_after.append(scan.done)
        last = cut
    return scan, kept, done_after


REQUESTS = {
    "sized": head("Content-Length: 11") + b"hello world",
    "no body": head(),
    "empty sized": head("Content-Length: 0"),
    "chunked": head("Transfer-Encoding: chunked") + chunked(b"x" * 300, 64),
    "chunked with trailers": head("Transfer-Encoding: chunked")
    + b"5;ext=1\r\nhello\r\n0\r\nX-Trailer: 1\r\n\r\n",
}


@pytest.mark.parametrize("name", sorted(REQUESTS))
@given(cuts=st.lists(st.integers(0, 400), max_size=12))
def test_a_whole_request_is_done_at_its_last_byte_and_kept_entire(
    name: str, cuts: list[int]
) -> None:
    data = REQUESTS[name]
    cuts = [c for c in cuts if c < len(data)]
    scan, kept, done_after = feed_in_pieces(data, cuts)
    assert scan.done and not scan.over_limit and not scan.malformed
    assert kept == data
    assert done_after[:-1] == [False] * (len(done_after) - 1)  # not before the last piece


@given(cut=st.integers(1, 200))
def test_a_request_missing_its_last_byte_is_not_done(cut: int) -> None:
    for data in REQUESTS.values():
        if cut < len(data):
            scan = framing()
            scan.feed(data[:-1])
            assert not scan.done


def test_the_next_request_pipelined_behind_is_kept_for_the_parser() -> None:
    first, second = REQUESTS["sized"], REQUESTS["no body"]
    scan = framing()
    assert scan.feed(first + second[:10]) == first + second[:10]
    assert scan.done


@given(size=st.integers(1, 4096))
def test_a_chunked_body_over_the_limit_is_dropped_and_followed_to_its_end(size: int) -> None:
    data = head("Transfer-Encoding: chunked") + chunked(b"y" * (LIMIT + 500), size)
    scan = framing()
    kept = b"".join(scan.feed(data[i : i + 100]) for i in range(0, len(data), 100))
    assert scan.done and scan.over_limit and scan.closes_connection
    # What is kept is bounded by the limit, however small the chunks (framing counts too).
    assert len(kept) <= len(head("Transfer-Encoding: chunked")) + 2 * LIMIT + FRAMING_ALLOWANCE
    assert scan.dropped > 0


def test_chunk_framing_cannot_inflate_what_is_kept() -> None:
    scan = framing()
    extension = b";" + b"e" * 4000
    data = head("Transfer-Encoding: chunked") + (b"1" + extension + b"\r\nx\r\n") * 200
    kept = scan.feed(data)
    assert scan.over_limit
    assert len(kept) <= 2 * LIMIT + FRAMING_ALLOWANCE + 4096


def test_a_sized_body_over_the_limit_is_dropped_unless_too_large_to_drain() -> None:
    scan = framing()
    kept = scan.feed(head("Content-Length: 5000") + b"z" * 4000)
    assert not scan.done and scan.over_limit
    assert kept == head("Content-Length: 5000")  # the body is not kept
    scan.feed(b"z" * 1000)
    assert scan.done and scan.dropped == 5000
    huge = framing()
    huge.feed(head("Content-Length: 20000"))
    assert huge.done and huge.over_limit  # answered at once, and the connection closed


@pytest.mark.parametrize(
    "lines",
    [
        ("Content-Length: 5", "Content-Length: 5"),
        ("Content-Length: 5", "Transfer-Encoding: chunked"),
        ("Transfer-Encoding: gzip",),
        ("Content-Length: -1",),
        ("Content-Length: 1e3",),
    ],
)
def test_framing_the_parser_must_judge_is_handed_over_and_closes(lines: tuple[str, ...]) -> None:
    scan = framing()
    scan.feed(head(*lines) + b"hello")
    assert scan.done and scan.malformed and scan.closes_connection


def test_a_head_past_the_parser_limit_is_handed_over() -> None:
    scan = framing()
    scan.feed(b"POST / HTTP/1.1\r\n" + b"X-Long: " + b"a" * 5000)
    assert scan.done and scan.malformed


def test_expect_100_continue_is_seen_on_http_1_1_only() -> None:
    scan = framing()
    scan.feed(head("Content-Length: 3", "Expect: 100-continue"))
    assert scan.expects_continue and not scan.done
    old = framing()
    old.feed(b"POST / HTTP/1.0\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n")
    assert not old.expects_continue
