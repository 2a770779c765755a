"""The optional C accelerator (``smdb._speedups``) against the pure-Python reference: the same
CRC32C on the shared wire vectors and on random data, both C methods (SSE4.2 and
slicing-by-8), and the switch between C and fallback (``SMDB_PURE_PYTHON``)."""

import importlib
import json
import os
import random
import subprocess
import sys

import pytest

import smdb
from smdb import _frame
from conftest import TESTDATA

VECTORS = json.loads((TESTDATA / "frames.json").read_text())


def _speedups():
    """The C module itself (also when the suite runs with the fallback forced). Its tests fail,
    rather than skip, where it was not built: a C compiler and the Python headers were missing
    when the package was installed."""
    try:
        return importlib.import_module("smdb._speedups")
    except ImportError as e:
        pytest.fail(
            f"the C accelerator smdb._speedups is not built in this install ({e}): "
            "apt-get install -y --no-install-recommends gcc python3-dev, then reinstall the "
            "package (pip install ./clients/python); .ci/test does both"
        )


def _run(code: str, **env: str) -> str:
    e = dict(os.environ)
    e.pop(_frame.PURE_PYTHON_ENV, None)
    e.pop("SMDB_CRC32C_NO_SSE42", None)
    e.update(env)
    out = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def _header_crcs():
    for f in VECTORS["frames"]:
        data = bytes.fromhex(f["hex"])
        if f["complete"] and f["error"] is None:
            yield f["name"], data[16:], int.from_bytes(data[12:16], "big")


def test_the_vectors_have_payloads():
    assert len(list(_header_crcs())) >= 5


def test_python_crc_matches_the_vectors():
    for name, payload, want in _header_crcs():
        assert _frame.crc32c_python(payload) == want, name


def test_c_crc_matches_the_vectors():
    c = _speedups()
    for name, payload, want in _header_crcs():
        assert c.crc32c(payload) == want, name


def test_c_and_python_agree_on_random_data_of_every_length_up_to_2000():
    c = _speedups()
    rng = random.Random(18)
    data = bytes(rng.getrandbits(8) for _ in range(2000 + 8))
    for n in range(0, 2001):
        chunk = data[:n]
        want = _frame.crc32c_python(chunk)
        assert c.crc32c(chunk) == want, n
        # Unaligned starts and the other buffer types take the C code's other paths.
        off = n % 8
        assert c.crc32c(memoryview(data)[off : off + n]) == _frame.crc32c_python(data[off : off + n]), n
    assert c.crc32c(bytearray(data)) == _frame.crc32c_python(data)


def test_c_crc_of_a_large_buffer_and_of_non_buffers():
    c = _speedups()
    big = bytes(range(256)) * 1200  # over the size where the GIL is released
    assert c.crc32c(big) == _frame.crc32c_python(big)
    with pytest.raises(TypeError):
        c.crc32c("text")
    with pytest.raises(TypeError):
        c.crc32c(12)


def test_slicing_by_8_agrees_with_python():
    _speedups()
    code = (
        "import random, smdb._speedups as c, smdb._frame as f\n"
        "r = random.Random(8); d = bytes(r.getrandbits(8) for _ in range(1100))\n"
        "bad = [n for n in range(1100) if c.crc32c(d[:n]) != f.crc32c_python(d[:n])]\n"
        "print(c.crc32c_method(), bad)\n"
    )
    assert _run(code, SMDB_CRC32C_NO_SSE42="1") == "slicing-by-8 []"


def test_the_fallback_can_be_forced():
    code = "import smdb; print(smdb.CRC32C_IMPLEMENTATION, smdb.crc32c is smdb._frame.crc32c_python)"
    assert _run(code, SMDB_PURE_PYTHON="1") == "python True"


def test_the_c_module_is_used_when_built():
    _speedups()
    code = "import smdb, smdb._speedups as c; print(smdb.CRC32C_IMPLEMENTATION, smdb.crc32c is c.crc32c)"
    assert _run(code) == "c True"
    assert _run(code, SMDB_PURE_PYTHON="0") == "c True"


def test_implementation_matches_the_module_in_use():
    forced = os.environ.get(_frame.PURE_PYTHON_ENV, "") not in ("", "0")
    if smdb.CRC32C_IMPLEMENTATION == "c":
        assert not forced
        assert smdb.crc32c is _speedups().crc32c
    else:
        assert smdb.CRC32C_IMPLEMENTATION == "python"
        assert smdb.crc32c is _frame.crc32c_python


def test_c_crc_is_active_unless_the_fallback_is_forced():
    # A build that silently fell back to Python fails here (or in _speedups, if not built).
    method = _speedups().crc32c_method()
    if os.environ.get(_frame.PURE_PYTHON_ENV, "") not in ("", "0"):
        assert smdb.CRC32C_IMPLEMENTATION == "python"
    else:
        assert smdb.CRC32C_IMPLEMENTATION == "c"
        assert method in ("sse4.2", "slicing-by-8")


def test_c_frame_and_split_agree_with_python():
    c = _speedups()
    rng = random.Random(7)
    texts = ["", "{}", '{"a":"é ✓"}'] + ["".join(chr(rng.randrange(32, 0x2FF)) for _ in range(n)) for n in (1, 15, 300)]
    frames = [c.frame(t) for t in texts]
    for t, f in zip(texts, frames):
        assert f == _frame.frame_python(t)
    stream = b"".join(frames)
    bad_crc = bytearray(frames[2])
    bad_crc[-1] ^= 1
    cases = [
        (stream, 0, 1 << 20),
        (stream, len(frames[0]), 1 << 20),  # from an offset
        (stream[:-3], 0, 1 << 20),  # the last frame cut short
        (stream[:5], 0, 1 << 20),  # not even a header
        (stream + b"XXXX" + bytes(12), 0, 1 << 20),  # bad magic after good frames
        (frames[1] + bytes(bad_crc), 0, 1 << 20),  # CRC mismatch
        (stream, 0, 100),  # a length over the limit
    ]
    for data, pos, limit in cases:
        want = _frame.split_python(data, pos, limit)
        for buf in (data, bytearray(data), memoryview(data)):
            assert c.split(buf, pos, limit) == want, (data[:20], pos, limit)
