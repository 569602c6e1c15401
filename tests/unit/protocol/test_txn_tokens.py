"""Verification tokens (protocol/txn_tokens.py): what a token binds, what ``check`` refuses, and the cluster key
(created once in KV, then the same for every reader)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol.txn_tokens import TOKEN_BYTES, TOKEN_KEY, check, load_key, sign

KEY = bytes(range(32))
ARGS = ("tx", 7, 0, 1000, "t", 0)


class DictKV:
    """GcsKV's get / put_if_absent over a dict."""

    def __init__(self, racer: bytes | None = None):
        self.d: dict = {}
        self.racer = racer  # another process that creates the key between our get and put

    def get(self, k):
        return self.d.get(k)

    def put_if_absent(self, k, v) -> bool:
        if self.racer is not None:
            self.d.setdefault(k, self.racer)
        if k in self.d:
            return False
        self.d[k] = v
        return True


def test_a_token_checks_for_exactly_what_it_was_signed_for():
    tok = sign(KEY, *ARGS)
    assert len(tok) == TOKEN_BYTES and check(KEY, tok, *ARGS)
    for i, other in enumerate(("ty", 8, 1, 1001, "u", 1)):
        changed = list(ARGS)
        changed[i] = other
        assert not check(KEY, tok, *changed), i
    assert not check(b"z" * 32, tok, *ARGS)


@pytest.mark.parametrize(
    "token, tid, start",
    [
        (b"", "tx", 1000),
        (b"\0" * 15, "tx", 1000),
        ("not bytes", "tx", 1000),
        (None, "tx", 1000),
        (b"\0" * 16, None, 1000),
    ]
    + [(b"\0" * 16, "tx", bad) for bad in (-1, "1000", True, 1 << 63)],
)
def test_malformed_tokens_and_values_are_refused_not_raised(token, tid, start):
    assert not check(KEY, token, tid, 7, 0, start, "t", 0)


@given(st.text(max_size=20), st.text(max_size=20), st.integers(0, 2**62), st.integers(0, 2**31 - 1))
def test_the_id_and_topic_cannot_be_shifted_into_each_other(tid, topic, start, p):
    """The message length-prefixes its strings: ("ab", "c") and ("a", "bc") sign differently."""
    tok = sign(KEY, tid, 7, 0, start, topic, p)
    assert check(KEY, tok, tid, 7, 0, start, topic, p)
    if tid:
        assert not check(KEY, tok, tid[:-1], 7, 0, start, tid[-1] + topic, p)


def test_the_key_is_created_once_and_every_reader_gets_the_same():
    kv = DictKV()
    first = load_key(kv)
    assert len(first) == 32 and kv.d[TOKEN_KEY] == first
    assert load_key(kv) == first
    raced = DictKV(racer=b"r" * 32)  # another process created it first: its key is the one
    assert load_key(raced) == b"r" * 32


def test_a_key_that_is_not_one_is_an_error():
    kv = DictKV()
    kv.d[TOKEN_KEY] = "not bytes"
    with pytest.raises(ValueError):
        load_key(kv)
