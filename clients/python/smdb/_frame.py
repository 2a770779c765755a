"""The RCP1 frame codec: a 16-byte header (``RCP1``, 4 flag bytes, big-endian payload length,
big-endian CRC32C of the payload), then the UTF-8 JSON payload."""

from __future__ import annotations

import struct
from typing import List, Optional, Tuple

MAGIC = b"RCP1"
HEADER_LEN = 16
#: The server's default payload limit (``network.max_frame_bytes``).
FRAME_PAYLOAD_BYTES_DEFAULT = 16 * 1024 * 1024
#: Largest frame this client accepts (the server default x4: large pages fit).
CLIENT_FRAME_BYTES_MAX = 64 * 1024 * 1024

_HEADER = struct.Struct(">4s4xII")


def _byte_table() -> List[int]:
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        out.append(c)
    return out


_T8 = _byte_table()


def _word_tables() -> List[List[int]]:
    """Four tables that advance CRC32C (Castagnoli, reflected) over one 8-byte word, 16 bits
    per lookup: ``T[k][x]`` is the CRC contribution of the word whose only non-zero 16 bits are
    ``x`` at bits ``16k..16k+15``. The CRC is linear, so each entry is the XOR of two per-byte
    tables. Four lookups per 8 payload bytes keep pure Python fast enough (the standard library
    has no CRC32C)."""
    t8 = _T8

    def over8(byte: int, pos: int) -> int:
        c = 0
        for i in range(8):
            b = byte if i == pos else 0
            c = t8[(c ^ b) & 0xFF] ^ (c >> 8)
        return c

    per_byte = [[over8(b, pos) for b in range(256)] for pos in range(8)]
    return [
        [lo ^ hi for hi in per_byte[2 * k + 1] for lo in per_byte[2 * k]]
        for k in range(4)
    ]


_WORD: Optional[List[List[int]]] = None


def crc32c(data: bytes) -> int:
    """CRC32C of ``data``."""
    global _WORD
    if _WORD is None:
        _WORD = _word_tables()
    t0, t1, t2, t3 = _WORD
    crc = 0xFFFFFFFF
    n8 = len(data) & ~7
    if n8:
        for (w,) in struct.iter_unpack("<Q", memoryview(data)[:n8]):
            w ^= crc
            crc = t0[w & 0xFFFF] ^ t1[(w >> 16) & 0xFFFF] ^ t2[(w >> 32) & 0xFFFF] ^ t3[w >> 48]
    t8 = _T8
    for b in data[n8:]:
        crc = t8[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


class FrameError(Exception):
    """Bytes that are not a valid RCP1 frame. ``code`` is the server's code for the same fault
    (``INVALID_FRAME``, ``CHECKSUM_MISMATCH`` or ``FRAME_TOO_LARGE``)."""

    code = "INVALID_FRAME"


class BadMagic(FrameError):
    code = "INVALID_FRAME"


class ChecksumMismatch(FrameError):
    code = "CHECKSUM_MISMATCH"


class FrameTooLarge(FrameError):
    code = "FRAME_TOO_LARGE"


def encode_frame(payload: bytes) -> bytes:
    """One frame around ``payload`` (flags zero)."""
    return _HEADER.pack(MAGIC, len(payload), crc32c(payload)) + payload


def decode_frame(
    buf: bytes, max_payload: int = CLIENT_FRAME_BYTES_MAX, start: int = 0
) -> Optional[Tuple[bytes, int]]:
    """Decodes the frame at ``buf[start:]``: ``(payload, end)`` with ``end`` the offset after
    it, ``None`` when more bytes are needed, or a ``FrameError``. The header is checked (magic,
    length) as soon as its 16 bytes are there, before waiting for the payload."""
    if len(buf) - start < HEADER_LEN:
        return None
    magic, length, crc = _HEADER.unpack_from(buf, start)
    if magic != MAGIC:
        raise BadMagic(f"bad frame magic {bytes(magic)!r}, expected b'RCP1'")
    if length > max_payload:
        raise FrameTooLarge(
            f"frame payload of {length} bytes exceeds the limit of {max_payload} bytes"
        )
    end = start + HEADER_LEN + length
    if len(buf) < end:
        return None
    payload = bytes(buf[start + HEADER_LEN : end])
    actual = crc32c(payload)
    if actual != crc:
        raise ChecksumMismatch(
            f"payload CRC32C mismatch: header says {crc:08x}, payload has {actual:08x}"
        )
    return payload, end
