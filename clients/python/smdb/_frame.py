"""The RCP1 frame codec: a 16-byte header (``RCP1``, 4 flag bytes, big-endian payload length,
big-endian CRC32C of the payload), then the UTF-8 JSON payload."""

from __future__ import annotations

import os
import struct
from typing import Any, Callable, Dict, List, Optional, Tuple

MAGIC = b"RCP1"
HEADER_LEN = 16
#: The server's default payload limit (``network.max_frame_bytes``).
FRAME_PAYLOAD_BYTES_DEFAULT = 16 * 1024 * 1024
#: Largest frame this client accepts (the server default x4: large pages fit).
CLIENT_FRAME_BYTES_MAX = 64 * 1024 * 1024

_HEADER = struct.Struct(">4s4xII")


_POLY = 0x82F63B78  # CRC32C (Castagnoli), reflected


def _byte_table() -> List[int]:
    out = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        out.append(c)
    return out


_T8 = _byte_table()

#: Bytes per block of the parity method below; longer data is done block by block.
_BLOCK = 512
#: Shorter data goes byte by byte through the table (cheaper than 32 popcounts there).
_SHORT = 32


def _block_masks() -> List[int]:
    """CRC32C without a table loop. The CRC is linear over GF(2) in the message bits: with the
    register's start value folded into the first four bytes (XOR), bit ``k`` of the CRC is the
    parity of the message bits selected by a mask ``M[k]`` that depends only on each bit's
    distance from the end of the message. With the message read as one big-endian integer
    ``x`` (its last byte lowest), that is ``(x & M[k]).bit_count() & 1``: 32 big-integer ANDs
    and popcounts done in C, whatever the length up to ``_BLOCK`` bytes, instead of a Python
    loop over the bytes. ``M[k]`` has bit ``8m + t`` set when bit ``k`` of the CRC register
    depends on bit ``t`` of the byte ``m`` places before the end (bits go in LSB first)."""
    nbits = 8 * _BLOCK
    # reach[d]: the register after a single 1 bit followed by d more bits (all zero).
    reach = []
    c = 1
    for _ in range(nbits):
        c = (c >> 1) ^ _POLY if c & 1 else c >> 1
        reach.append(c)
    cols = [reach[8 * (q >> 3) + 7 - (q & 7)] for q in range(nbits)]
    masks = []
    for k in range(32):
        bits = "".join("1" if (v >> k) & 1 else "0" for v in reversed(cols))
        masks.append(int(bits, 2))
    return masks


def _parity_function(masks: List[int]) -> Callable[[int], int]:
    """``f(x)``: the 32 parities ``(x & masks[k])`` as one int, unrolled (no loop, masks
    bound as defaults)."""
    if hasattr(int, "bit_count"):
        term = "(((x & m{k}).bit_count() & 1) << {k})"
    else:  # Python 3.9
        term = "((bin(x & m{k}).count('1') & 1) << {k})"
    body = " | ".join(term.format(k=k) for k in range(32))
    args = ", ".join(f"m{k}=_M[{k}]" for k in range(32))
    ns: Dict[str, Any] = {"_M": masks}
    exec(f"def parities(x, {args}):\n    return {body}\n", ns)
    return ns["parities"]  # type: ignore[no-any-return]


_parities: Optional[Callable[[int], int]] = None


def crc32c_python(data: bytes) -> int:
    """CRC32C of ``data`` (any bytes-like object), in pure Python: the fallback of the C
    accelerator, and its reference in the tests."""
    global _parities
    n = len(data)
    if n < _SHORT:
        crc = 0xFFFFFFFF
        for b in bytes(data):
            crc = _T8[(crc ^ b) & 0xFF] ^ (crc >> 8)
        return crc ^ 0xFFFFFFFF
    par = _parities
    if par is None:
        par = _parities = _parity_function(_block_masks())
    if n <= _BLOCK:
        return par(int.from_bytes(data, "big") ^ (0xFFFFFFFF << (8 * n - 32))) ^ 0xFFFFFFFF
    view = memoryview(data)
    crc = 0xFFFFFFFF
    at = 0
    while n - at >= 4:
        block = view[at : at + _BLOCK]
        size = len(block)
        # The register so far goes into the block's first four bytes, little-endian first.
        inject = int.from_bytes(crc.to_bytes(4, "little"), "big") << (8 * size - 32)
        crc = par(int.from_bytes(block, "big") ^ inject)
        at += size
    for b in bytes(view[at:]):
        crc = _T8[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


#: Set (to anything but empty or ``0``) to use the pure-Python code even where the C accelerator
#: ``smdb._speedups`` is built (read once, at import).
PURE_PYTHON_ENV = "SMDB_PURE_PYTHON"


def _load_speedups() -> Any:
    """The C accelerator module, or ``None`` when it is not built or is turned off."""
    if os.environ.get(PURE_PYTHON_ENV, "") not in ("", "0"):
        return None
    try:
        from . import _speedups  # type: ignore[attr-defined]
    except ImportError:
        return None
    return _speedups


_speedups = _load_speedups()

#: ``"c"`` when the CRC32C is the C accelerator's, ``"python"`` when it is the fallback.
CRC32C_IMPLEMENTATION = "c" if _speedups is not None else "python"

crc32c: Callable[[bytes], int]
if _speedups is not None:
    crc32c = _speedups.crc32c
else:
    crc32c = crc32c_python


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


def frame_python(text: str) -> bytes:
    """One frame around the UTF-8 of ``text`` (the fallback of the C ``frame``)."""
    payload = text.encode()
    return _HEADER.pack(MAGIC, len(payload), crc32c(payload)) + payload


def split_python(data: Any, pos: int, max_payload: int) -> Tuple[List[bytes], int, bool]:
    """The payloads of the whole, valid frames in ``data[pos:]``, the offset after them, and
    whether the frame there is invalid (bad magic, length over ``max_payload``, CRC
    mismatch: ``decode_frame`` at that offset raises the error); else it is cut short or
    ``data`` ends there (the fallback of the C ``split``)."""
    out = []
    size = len(data)
    unpack_from = _HEADER.unpack_from
    while size - pos >= HEADER_LEN:
        magic, length, crc = unpack_from(data, pos)
        if magic != MAGIC or length > max_payload:
            return out, pos, True
        end = pos + HEADER_LEN + length
        if end > size:
            break
        payload = bytes(data[pos + HEADER_LEN : end])
        if crc32c(payload) != crc:
            return out, pos, True
        out.append(payload)
        pos = end
    return out, pos, False


#: ``frame(text)`` and ``split(data, pos, max_payload)``: the C accelerator's or the fallbacks.
frame: Callable[[str], bytes] = _speedups.frame if _speedups is not None else frame_python
split: Callable[[Any, int, int], Tuple[List[bytes], int, bool]] = (
    _speedups.split if _speedups is not None else split_python
)


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
