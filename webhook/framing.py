"""How much of an HTTP/1.1 request has arrived: bytes in, a verdict out. Pure.

The server reads each request ahead, off its thread pool, and gives it to a thread only when
the thread will not have to wait for the client: the head is whole and so is the body, by its
Content-Length or its chunked framing. `RequestFraming` says when that is. It reads no more of
the request than the framing needs; gunicorn's parser still parses and checks all of it, so
where the two could disagree (a malformed head, conflicting lengths) the request is handed over
as it is and the connection closed after the answer.

A body over the limit is dropped as it arrives, never kept: the framing is still followed, up
to `drain_limit` bytes, so that the client has sent everything when it is told 413.
"""

from __future__ import annotations

from enum import Enum

# Set in the WSGI environ of a request whose body was over the limit (and dropped unread).
BODY_OVER_LIMIT = "kube_steer.body_over_limit"
MAX_CHUNK_SIZE_LINE = 4096
# Chunk framing a body may add to its size before it counts as over the limit.
FRAMING_ALLOWANCE = 64 * 1024


class State(Enum):
    HEAD = "head"
    SIZED = "sized"
    CHUNK_SIZE = "chunk-size"
    CHUNK_DATA = "chunk-data"
    TRAILERS = "trailers"
    DONE = "done"


class RequestFraming:
    """Feed it the bytes of one request as they arrive; `feed` returns those to keep."""

    def __init__(self, *, max_body_bytes: int, max_head_bytes: int, drain_limit: int) -> None:
        self.max_body_bytes = max_body_bytes
        self.max_head_bytes = max_head_bytes
        self.drain_limit = drain_limit
        self.state = State.HEAD
        self.over_limit = False
        # Handed to the parser as it is: gunicorn will refuse it, or may read on its own.
        self.malformed = False
        self.expects_continue = False
        self.body_bytes = 0  # decoded body bytes announced so far
        self.dropped = 0  # raw bytes dropped (a body over the limit)
        self.raw_body_bytes = 0  # body bytes as sent, chunk framing included
        self._carry = bytearray()  # an unfinished head, chunk-size line or trailer section
        self._remaining = 0  # of a sized body, or of a chunk and its CRLF

    @property
    def done(self) -> bool:
        return self.state is State.DONE

    @property
    def closes_connection(self) -> bool:
        """Whether the connection must close after the answer (bytes of it were not kept)."""
        return self.over_limit or self.malformed

    def feed(self, data: bytes) -> bytes:
        kept = bytearray()
        view = memoryview(data)
        while view:
            if self.state is State.DONE:
                if not self.closes_connection:
                    kept += view  # the next request, pipelined
                break
            used = self._step(view, kept)
            view = view[used:]
        return bytes(kept)

    # -- states ---------------------------------------------------------------------------

    def _step(self, view: memoryview, kept: bytearray) -> int:
        if self.state is State.HEAD:
            return self._head(view, kept)
        if self.state in (State.SIZED, State.CHUNK_DATA):
            return self._data(view, kept)
        if self.state is State.CHUNK_SIZE:
            return self._chunk_line(view, kept)
        return self._trailers(view, kept)

    def _keep(self, kept: bytearray, data: memoryview | bytes) -> None:
        self.raw_body_bytes += len(data)
        if self.raw_body_bytes > 2 * self.max_body_bytes + FRAMING_ALLOWANCE:
            self.over_limit = True  # 1-byte chunks, long chunk extensions: framing, not body
        if self.over_limit:
            self.dropped += len(data)
            if self.dropped > self.drain_limit:
                self.state = State.DONE  # stop draining: the connection closes after the 413
        else:
            kept += data

    def _chunk_line(self, view: memoryview, kept: bytearray) -> int:
        start = len(self._carry)
        self._carry += view[: MAX_CHUNK_SIZE_LINE + 2]
        at = self._carry.find(b"\r\n", max(0, start - 1))
        if at < 0:
            if len(self._carry) > MAX_CHUNK_SIZE_LINE:
                self._give_up(kept, view)
                return len(view)
            self._keep(kept, view[: len(self._carry) - start])
            return len(self._carry) - start
        used = at + 2 - start
        self._keep(kept, view[:used])
        line = bytes(self._carry[:at])
        self._carry.clear()
        self._chunk_size(line)
        return used

    def _give_up(self, kept: bytearray, view: memoryview) -> None:
        """Framing the scan cannot follow: hand the request over; the parser decides."""
        self.malformed = True
        self.state = State.DONE
        self._carry.clear()
        if not self.over_limit:
            kept += view

    def _head(self, view: memoryview, kept: bytearray) -> int:
        start = len(self._carry)
        self._carry += view[: self.max_head_bytes + 4]
        at = self._carry.find(b"\r\n\r\n", max(0, start - 3))
        if at < 0:
            if len(self._carry) > self.max_head_bytes:
                self._give_up(kept, view)
                return len(view)
            kept += view[: len(self._carry) - start]
            return len(self._carry) - start
        used = at + 4 - start
        kept += view[:used]
        head = bytes(self._carry[:at])
        self._carry.clear()
        self._framing(head)
        return used

    def _framing(self, head: bytes) -> None:
        lines = head.split(b"\r\n")
        version = lines[0].rpartition(b" ")[2]
        lengths: list[bytes] = []
        codings: list[bytes] = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                continue  # the parser will refuse it
            name, value = name.strip().lower(), value.strip()
            if name == b"content-length":
                lengths.append(value)
            elif name == b"transfer-encoding":
                codings += [c.strip().lower() for c in value.split(b",")]
            elif name == b"expect" and value.lower() == b"100-continue":
                self.expects_continue = version == b"HTTP/1.1"
        if codings:
            if lengths or codings[-1] != b"chunked":
                self.malformed, self.state = True, State.DONE
            else:
                self.state = State.CHUNK_SIZE
            return
        if not lengths:
            self.state = State.DONE  # no body
            return
        if len(lengths) > 1 or not lengths[0].isdigit():
            self.malformed, self.state = True, State.DONE
            return
        length = int(lengths[0])
        self.body_bytes = length
        if length > self.max_body_bytes:
            self.over_limit = True
            if length > self.drain_limit:
                self.state = State.DONE  # not worth draining: answer and close at once
                return
        self._remaining = length
        self.state = State.SIZED if length else State.DONE

    def _data(self, view: memoryview, kept: bytearray) -> int:
        used = min(self._remaining, len(view))
        self._keep(kept, view[:used])
        self._remaining -= used
        if self._remaining == 0 and self.state is not State.DONE:
            self.state = State.DONE if self.state is State.SIZED else State.CHUNK_SIZE
        return used

    def _chunk_size(self, line: bytes) -> None:
        size_text = line.partition(b";")[0].strip()
        try:
            size = int(size_text, 16)
        except ValueError:
            size = -1
        if size < 0 or not size_text or len(size_text) > 16:
            self.malformed, self.state = True, State.DONE
            return
        if size == 0:
            self.state = State.TRAILERS
            return
        self.body_bytes += size
        if self.body_bytes > self.max_body_bytes:
            self.over_limit = True
        self._remaining = size + 2  # the data and its CRLF
        self.state = State.CHUNK_DATA

    def _trailers(self, view: memoryview, kept: bytearray) -> int:
        # Empty (the CRLF after the last chunk) or header lines up to an empty line.
        if not self._carry and bytes(view[:2]) == b"\r\n":
            self._keep(kept, view[:2])
            self.state = State.DONE
            return 2
        start = len(self._carry)
        self._carry += view[: self.max_head_bytes + 4]
        probe = bytes(self._carry)
        if probe.startswith(b"\r\n"):
            at = 0
        else:
            found = probe.find(b"\r\n\r\n", max(0, start - 3))
            at = -1 if found < 0 else found + 2
        if at < 0:
            if len(self._carry) > self.max_head_bytes:
                self._give_up(kept, view)
                return len(view)
            self._keep(kept, view[: len(self._carry) - start])
            return len(self._carry) - start
        used = at + 2 - start
        self._keep(kept, view[:used])
        self._carry.clear()
        self.state = State.DONE
        return used
