"""The error tables agree with the protocol crate's: every code of the shared vector
(protocol/testdata/error_codes.json, generated from protocol/src/codes.rs) has its class here,
with the same retryability and the same answer to "was it executed"."""

from __future__ import annotations

import json

from conftest import REPO
from smdb import errors

VECTOR = REPO / "protocol" / "testdata" / "error_codes.json"


def load():
    return json.loads(VECTOR.read_text())["codes"]


def test_every_code_has_a_class():
    names = [c["code"] for c in load()]
    assert names == errors._CODES
    for name in names:
        assert errors.BY_CODE[name].code == name


def test_retryability_matches_the_vector():
    for c in load():
        assert (c["code"] in errors.RETRYABLE) == c["retryable"], c["code"]
        assert errors.BY_CODE[c["code"]]("m").retryable == c["retryable"], c["code"]


def test_not_executed_matches_the_vector():
    for c in load():
        not_executed = c["retryable"] and c["execution"] == "not_executed"
        assert (c["code"] in errors.NOT_EXECUTED) == not_executed, c["code"]


def test_maybe_committed_no_primary_is_resent_only_when_safe():
    exc = errors.from_wire({"code": "NO_PRIMARY", "retryable": True, "details": {"maybe_committed": True}})
    assert errors.may_resend(exc, safe=True)
    assert not errors.may_resend(exc, safe=False)
    fresh = errors.from_wire({"code": "NO_PRIMARY", "retryable": True, "details": {}})
    assert errors.may_resend(fresh, safe=False)
    poisoned = errors.from_wire({"code": "WAL_IO_ERROR", "retryable": False})
    assert not errors.may_resend(poisoned, safe=True)
