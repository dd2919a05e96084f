"""Protobuf's base-128 varint, shared by the metrics' protobuf exposition and the traces' OTLP
encoding (both write the wire format by hand; see their modules for why)."""

from __future__ import annotations

SMALL = [bytes([i]) for i in range(128)]
# Every varint below 2^14 (two bytes at most: nearly every length either writes).
VARINTS = SMALL + [bytes(((n & 0x7F) | 0x80, n >> 7)) for n in range(128, 1 << 14)]


def varint(n: int) -> bytes:
    """`n` as a varint; a negative int64 in its ten-byte two's complement, as protobuf does."""
    if n < 16384:
        return VARINTS[n] if n >= 0 else varint(n + (1 << 64))
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
