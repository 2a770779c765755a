"""The Python codec against the shared wire vectors (clients/testdata/frames.json, written by
the server's codec)."""

import json

import pytest

from smdb import _frame
from conftest import TESTDATA

VECTORS = json.loads((TESTDATA / "frames.json").read_text())


def test_the_vectors_are_there():
    assert len(VECTORS["frames"]) >= 15


@pytest.mark.parametrize("f", VECTORS["frames"], ids=lambda f: f["name"])
def test_vector(f):
    data = bytes.fromhex(f["hex"])
    limit = VECTORS["max_payload"]
    if not f["complete"]:
        assert _frame.decode_frame(data, limit) is None
    elif f["error"]:
        with pytest.raises(_frame.FrameError) as e:
            _frame.decode_frame(data, limit)
        assert e.value.code == f["error"]
    else:
        payload, end = _frame.decode_frame(data, limit)
        assert end == len(data)
        assert json.loads(payload) == f["payload"]
        if data[4:8] == b"\0\0\0\0":
            assert _frame.encode_frame(payload) == data


@pytest.mark.parametrize("crc", [_frame.crc32c, _frame.crc32c_python], ids=["active", "python"])
def test_crc32c_check_value(crc):
    assert crc(b"123456789") == 0xE3069283
    assert crc(b"") == 0


def _crc32c_bytewise(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc ^ 0xFFFFFFFF


@pytest.mark.parametrize("crc", [_frame.crc32c, _frame.crc32c_python], ids=["active", "python"])
def test_crc32c_matches_the_bitwise_definition_across_block_edges(crc):
    # The active CRC (C where built) and the pure-Python one. Python's fast path works on blocks of _frame._BLOCK bytes with a table loop below
    # _frame._SHORT and for a tail of under 4 bytes: every edge, from bytes, bytearray and
    # memoryview alike.
    data = bytes((i * 131 + 7) % 256 for i in range(3 * _frame._BLOCK + 8))
    block, short = _frame._BLOCK, _frame._SHORT
    lengths = set(range(0, 70)) | {short - 1, short, short + 1, 150, 232}
    for k in (1, 2, 3):
        lengths |= {k * block + d for d in range(-4, 6)}
    for n in sorted(lengths):
        chunk = data[:n]
        want = _crc32c_bytewise(chunk)
        assert crc(chunk) == want, n
        assert crc(bytearray(chunk)) == want, n
        assert crc(memoryview(chunk)) == want, n
