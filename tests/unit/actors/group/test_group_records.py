"""__consumer_offsets record codecs (golden bytes, field by field) and coordinator partitioning."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.group.records import (
    CoordinatorRecord,
    GroupMetadataKey,
    GroupMetadataValue,
    MemberMetadata,
    OffsetCommitKey,
    OffsetCommitValue,
    decode_key,
    decode_record,
    decode_value,
    encode_key,
    encode_value,
    java_string_hashcode,
    kafka_abs,
    partition_for,
)
from protocol.errors import CorruptMessageError


def i16(n):
    return struct.pack(">h", n)


def i32(n):
    return struct.pack(">i", n)


def i64(n):
    return struct.pack(">q", n)


def s(x):
    return i16(len(x.encode())) + x.encode()


# ------------------------------------------------------------------------------ golden bytes


def test_offset_commit_key_golden():
    key = OffsetCommitKey("grp", "topic-a", 7)
    want = i16(1) + i16(3) + b"grp" + i16(7) + b"topic-a" + i32(7)
    assert encode_key(key) == want
    assert want == bytes.fromhex("000100036772700007746f7069632d6100000007")
    assert decode_key(want) == key


def test_offset_commit_value_v3_golden():
    v = OffsetCommitValue(offset=1234, leader_epoch=5, metadata="meta", commit_timestamp=1_700_000_000_000)
    want = i16(3) + i64(1234) + i32(5) + i16(4) + b"meta" + i64(1_700_000_000_000)
    assert encode_value(v) == want
    assert want[:2] == b"\x00\x03" and want[2:10] == bytes.fromhex("00000000000004d2")
    assert want[10:14] == b"\x00\x00\x00\x05" and want[-8:] == bytes.fromhex("0000018bcfe56800")
    assert decode_value(OffsetCommitKey("g", "t", 0), want) == v


def test_offset_commit_value_with_expire_timestamp_is_v1():
    v = OffsetCommitValue(offset=9, leader_epoch=-1, metadata="", commit_timestamp=100, expire_timestamp=200)
    want = i16(1) + i64(9) + i16(0) + i64(100) + i64(200)
    assert encode_value(v) == want
    assert decode_value(OffsetCommitKey("g", "t", 0), want) == v


def test_offset_commit_value_old_versions_decode():
    k = OffsetCommitKey("g", "t", 0)
    v0 = i16(0) + i64(42) + s("x") + i64(77)
    assert decode_value(k, v0) == OffsetCommitValue(42, -1, "x", 77, -1)
    v2 = i16(2) + i64(42) + s("x") + i64(77)
    assert decode_value(k, v2) == OffsetCommitValue(42, -1, "x", 77, -1)
    # key version 0 (Kafka's legacy offset key) has the same body
    assert decode_key(i16(0) + s("g") + s("t") + i32(0)) == k


def test_group_metadata_key_golden():
    assert encode_key(GroupMetadataKey("my-group")) == bytes.fromhex("00020008") + b"my-group"
    assert decode_key(b"\x00\x02\x00\x01g") == GroupMetadataKey("g")


def test_group_metadata_value_v3_golden():
    members = (
        MemberMetadata("c1-abc", None, "c1", "/10.0.0.1", 300_000, 10_000, b"SUB", b"ASSIGN"),
        MemberMetadata("i2-xyz", "i2", "c2", "/10.0.0.2", 60_000, 45_000, b"", b"A"),
    )
    v = GroupMetadataValue("consumer", 3, "range", "c1-abc", 1_650_000_000_123, members)
    want = (
        i16(3)
        + s("consumer")
        + i32(3)
        + s("range")
        + s("c1-abc")
        + i64(1_650_000_000_123)
        + i32(2)
        + s("c1-abc")
        + i16(-1)
        + s("c1")
        + s("/10.0.0.1")
        + i32(300_000)
        + i32(10_000)
        + i32(3)
        + b"SUB"
        + i32(6)
        + b"ASSIGN"
        + s("i2-xyz")
        + s("i2")
        + s("c2")
        + s("/10.0.0.2")
        + i32(60_000)
        + i32(45_000)
        + i32(0)
        + i32(1)
        + b"A"
    )
    assert encode_value(v) == want
    assert want[:16] == bytes.fromhex("00030008") + b"consumer" + bytes.fromhex("00000003")
    assert decode_value(GroupMetadataKey("g"), want) == v


def test_empty_group_metadata_value_has_null_protocol_and_leader():
    v = GroupMetadataValue("consumer", 4, None, None, 99, ())
    want = i16(3) + s("consumer") + i32(4) + i16(-1) + i16(-1) + i64(99) + i32(0)
    assert encode_value(v) == want
    assert decode_value(GroupMetadataKey("g"), want) == v


def test_group_metadata_value_old_versions_decode():
    k = GroupMetadataKey("g")
    member_v0 = s("m") + s("c") + s("h") + i32(5000) + i32(1) + b"S" + i32(1) + b"A"
    v0 = i16(0) + s("consumer") + i32(1) + s("range") + s("m") + i32(1) + member_v0
    got = decode_value(k, v0)
    assert got == GroupMetadataValue(
        "consumer", 1, "range", "m", -1, (MemberMetadata("m", None, "c", "h", 5000, 5000, b"S", b"A"),)
    )
    member_v1 = s("m") + s("c") + s("h") + i32(7000) + i32(5000) + i32(1) + b"S" + i32(1) + b"A"
    v2 = i16(2) + s("consumer") + i32(1) + s("range") + s("m") + i64(55) + i32(1) + member_v1
    assert decode_value(k, v2).members[0].rebalance_timeout == 7000
    assert decode_value(k, v2).current_state_timestamp == 55


def test_tombstones_and_record_wrapper():
    rec = CoordinatorRecord(OffsetCommitKey("g", "t", 1), None)
    assert rec.value_bytes() is None and rec.durable
    assert decode_record(rec.key_bytes(), None) == rec
    grec = CoordinatorRecord(GroupMetadataKey("g"), None)
    assert decode_record(grec.key_bytes(), grec.value_bytes()) == grec


@pytest.mark.parametrize(
    "key,value",
    [
        (b"\x00\x09\x00\x01g", None),  # unknown record type
        (b"\x00\x01\x00\x05gr", None),  # truncated string
        (encode_key(OffsetCommitKey("g", "t", 0)) + b"x", None),  # trailing bytes
        (encode_key(OffsetCommitKey("g", "t", 0)), i16(9) + i64(1)),  # unknown value version
        (encode_key(GroupMetadataKey("g")), i16(3) + s("consumer") + i32(1) + i16(-1) + i16(-1) + i64(1) + i32(5)),
    ],
)
def test_corrupt_records_raise_corrupt_message(key, value):
    with pytest.raises(CorruptMessageError):
        decode_record(key, value)


names = st.text(min_size=0, max_size=12)
member_st = st.builds(
    MemberMetadata,
    names,
    st.none() | names,
    names,
    names,
    st.integers(0, 2**31 - 1),
    st.integers(0, 2**31 - 1),
    st.binary(max_size=20),
    st.binary(max_size=20),
)


@settings(max_examples=60, deadline=None)
@given(
    group=names,
    topic=names,
    partition=st.integers(0, 2**31 - 1),
    value=st.builds(
        OffsetCommitValue,
        st.integers(-1, 2**63 - 1),
        st.integers(-1, 2**31 - 1),
        names,
        st.integers(0, 2**62),
        st.just(-1) | st.integers(0, 2**62),
    ),
)
def test_offset_records_round_trip(group, topic, partition, value):
    if value.expire_timestamp >= 0:  # v1 carries no leader epoch
        value = OffsetCommitValue(value.offset, -1, value.metadata, value.commit_timestamp, value.expire_timestamp)
    rec = CoordinatorRecord(OffsetCommitKey(group, topic, partition), value)
    assert decode_record(rec.key_bytes(), rec.value_bytes()) == rec


@settings(max_examples=60, deadline=None)
@given(
    group=names,
    value=st.builds(
        GroupMetadataValue,
        names,
        st.integers(0, 2**31 - 1),
        st.none() | names,
        st.none() | names,
        st.integers(-1, 2**62),
        st.lists(member_st, max_size=4).map(tuple),
    ),
)
def test_group_records_round_trip(group, value):
    rec = CoordinatorRecord(GroupMetadataKey(group), value)
    assert decode_record(rec.key_bytes(), rec.value_bytes()) == rec


# ------------------------------------------------------------------------------ partitioning


@pytest.mark.parametrize(
    "text,expected",
    [
        ("", 0),
        ("a", 97),
        ("hello", 99162322),
        ("Hello", 69609650),
        ("Aa", 2112),
        ("BB", 2112),
        ("polygenelubricants", -(2**31)),  # the classic Integer.MIN_VALUE string
        ("\U0001f600", 0xD83D * 31 + 0xDE00),  # UTF-16 surrogate pair, not the code point
    ],
)
def test_java_string_hashcode_known_values(text, expected):
    assert java_string_hashcode(text) == expected


@settings(max_examples=80, deadline=None)
@given(st.text(max_size=40))
def test_java_hashcode_equals_polynomial_definition(text):
    units = [
        int.from_bytes(text.encode("utf-16-be", "surrogatepass")[i : i + 2], "big")
        for i in range(0, len(text.encode("utf-16-be", "surrogatepass")), 2)
    ]
    n = len(units)
    h = sum(u * pow(31, n - 1 - i, 2**32) for i, u in enumerate(units)) % 2**32
    assert java_string_hashcode(text) == (h - 2**32 if h >= 2**31 else h)


def test_partition_for_uses_utils_abs_not_to_positive():
    assert kafka_abs(-5) == 5 and kafka_abs(-(2**31)) == 0 and kafka_abs(7) == 7
    # "my-group" hashes negative: Utils.abs gives 1906497762 % 50 = 12 (toPositive would give 36).
    assert java_string_hashcode("my-group") == -1906497762
    assert partition_for("my-group", 50) == 12
    assert partition_for("polygenelubricants", 50) == 0
    assert partition_for("hello", 50) == 99162322 % 50 == 22
    assert partition_for("console-consumer-12345", 50) == 158455506 % 50
    assert all(0 <= partition_for(f"g{i}", 3) < 3 for i in range(100))
    with pytest.raises(ValueError):
        partition_for("g", 0)
