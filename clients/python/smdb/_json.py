"""JSON for the wire: the standard library's C encoder and scanner, each made once.

``json.dumps`` and ``json.loads`` build an encoder object per call and run two regular
expressions around the scan; on a 150-byte request that overhead costs as much as the
encoding itself. Output is the same as ``json.dumps(o, separators=(",", ":"),
ensure_ascii=False)``, and anything the fast path cannot take goes to ``json`` itself."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional, Tuple, Union

_encoder = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_dumps_plain: Callable[[Any], str] = _encoder.encode


def _make() -> Tuple[Optional[Any], Optional[Any]]:
    """The C encoder (no circular-reference check: a cyclic object ends in RecursionError
    instead of ValueError) and the C scanner, or ``(None, None)`` where there are none."""
    from json import decoder, encoder, scanner

    make_enc = getattr(encoder, "c_make_encoder", None)
    make_scan = getattr(scanner, "c_make_scanner", None)
    esc = getattr(encoder, "c_encode_basestring", None)
    if make_enc is None or make_scan is None or esc is None:
        return None, None
    try:
        enc = make_enc(None, _encoder.default, esc, None, ":", ",", False, False, True)
        scan = make_scan(decoder.JSONDecoder())
        if "".join(enc({"a": [1, "é"]}, 0)) != '{"a":[1,"é"]}' or scan('{"a":1}', 0) != ({"a": 1}, 7):
            return None, None
    except Exception:
        return None, None
    return enc, scan


_c_encode, _c_scan = _make()


def dumps(o: Any) -> str:
    """Compact JSON text of ``o``."""
    if _c_encode is not None and o.__class__ is dict:
        return "".join(_c_encode(o, 0))
    return _dumps_plain(o)


def loads(s: Union[bytes, bytearray, str]) -> Any:
    """The value of one JSON text (UTF-8 bytes or str); ``ValueError`` when it is not one."""
    if _c_scan is None:
        return json.loads(s)
    if s.__class__ is not str:
        try:
            s = s.decode()  # type: ignore[union-attr]
        except UnicodeDecodeError:
            return json.loads(s)
    try:
        obj, end = _c_scan(s, 0)
    except StopIteration:
        return json.loads(s)  # raises json's own ValueError
    if end != len(s):
        return json.loads(s)  # surrounding whitespace, or raises "Extra data"
    return obj
