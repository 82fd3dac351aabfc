"""The output stream of docs/api.md ("The output stream"): frames of one byte naming the
stream (1 stdout, 2 stderr, 3 the result), three zero bytes, a 4-byte big-endian length and
that many bytes.  The result frame (the exec's result.json) is the last; a stream that ends
without one was cut, and is asked for again from the byte counts received.
"""
from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from typing import BinaryIO, Iterator, Optional

STDOUT = 1
STDERR = 2
RESULT = 3

# A frame's length is bounded by the server (64 KiB of output; a result.json is small): a
# length far past that is a stream out of step, not a frame to allocate for.
MAX_FRAME = 16 << 20


class StreamError(ValueError):
    """The bytes are not an output stream (a bad header, a frame too long)."""


@dataclass(frozen=True)
class Frame:
    """One frame: ``stream`` is STDOUT, STDERR or RESULT, ``data`` its bytes."""
    stream: int
    data: bytes

    def result(self) -> dict:
        """The result.json of a RESULT frame, parsed."""
        return json.loads(self.data)


def read_frames(f: BinaryIO) -> Iterator[Frame]:
    """Yield the frames read from f (anything with read(n)) until the result frame or the end.

    A stream cut in the middle of a frame ends without that frame (its bytes are asked for
    again from the offsets); a malformed header raises StreamError.  Keep-alive frames (stdout,
    length 0) are skipped.
    """
    while True:
        head = _read_full(f, 8)
        if head is None:
            return
        stream, z0, z1, z2, n = struct.unpack(">BBBBI", head)
        if (z0, z1, z2) != (0, 0, 0) or stream not in (STDOUT, STDERR, RESULT):
            raise StreamError("bad frame header %s" % head.hex())
        if n > MAX_FRAME:
            raise StreamError("frame of %d bytes, over %d" % (n, MAX_FRAME))
        data = _read_full(f, n) if n else b""
        if data is None:
            return
        if stream == RESULT:
            yield Frame(stream, data)
            return
        if n:
            yield Frame(stream, data)


def parse(buf: bytes) -> Iterator[Frame]:
    """The frames of a whole stream held in memory."""
    import io
    return read_frames(io.BytesIO(buf))


def _read_full(f: BinaryIO, n: int) -> Optional[bytes]:
    """n bytes, or None when the stream ends first."""
    parts = []
    while n:
        b = f.read(n)
        if not b:
            return None
        parts.append(b)
        n -= len(b)
    return b"".join(parts)
