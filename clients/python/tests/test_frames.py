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


def test_crc32c_check_value():
    assert _frame.crc32c(b"123456789") == 0xE3069283
    assert _frame.crc32c(b"") == 0
