"""ApiVersions and the version table (serve/kafka_wire/versions.py, apis.py) without Ray: the advertised table
is Kafka 4's floors and exactly what the handlers serve (Produce listed from v0 as Kafka 4 does, KAFKA-18659),
every advertised version's request and response go through kio and the listener's codec, the versions this
audit added are answered by the real handlers, and on a raw localhost socket: an unknown ApiVersions version
gets a v0-header answer with UNSUPPORTED_VERSION and the ranges, an invalid client software name gets
INVALID_REQUEST, and a version older than Kafka 4's floor closes the connection with a log line naming the
client id, its address, the api and the version."""

from __future__ import annotations

import asyncio
import datetime
import logging
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import UnknownEntity, load_request_schema, load_response_schema
from kio.schema.api_versions.v0 import ApiVersionsResponse as ApiVersionsResponseV0
from kio.schema.api_versions.v3 import ApiVersionsRequest as ApiVersionsRequestV3
from kio.schema.api_versions.v3 import ApiVersionsResponse as ApiVersionsResponseV3
from kio.schema.api_versions.v4 import ApiVersionsRequest as ApiVersionsRequestV4
from kio.schema.api_versions.v4 import ApiVersionsResponse as ApiVersionsResponseV4
from kio.schema.fetch.v17 import request as fetch17
from kio.schema.fetch.v17 import response as fetch17r
from kio.schema.index import api_key_map, schema_name_map
from kio.schema.join_group.v0 import request as jg0
from kio.schema.join_group.v0 import response as jg0r
from kio.schema.join_group.v1 import request as jg1
from kio.schema.join_group.v1 import response as jg1r
from kio.schema.metadata.v13 import request as md13
from kio.schema.metadata.v13 import response as md13r
from kio.static.primitive import Records, i64Timedelta
from test_wire_group_apis import JOINED, GroupBackend, ask
from test_wire_listener import TID, Client, FakeBackend, listening

from serve.kafka_wire import codec, versions
from serve.kafka_wire.apis import KafkaApis
from serve.kafka_wire.topic_ids import topic_uuid

st.register_type_strategy(Records, st.binary(max_size=64))
# kio's native reader cannot build a timedelta of more than ~2**53 ms (encoding can): no client sends one
st.register_type_strategy(
    i64Timedelta, st.integers(-(2**50), 2**50).map(lambda ms: i64Timedelta.parse(datetime.timedelta(milliseconds=ms)))
)

SERVED = [(k, v) for k, (lo, hi) in sorted(versions.SUPPORTED.items()) for v in range(lo, hi + 1)]
S = datetime.timedelta(seconds=1)


def kio_range(api_key: int) -> tuple[int, int]:
    """The versions kio has schemas for: Kafka 4's validVersions (kio is generated from Kafka 4's JSON)."""
    vs = sorted(schema_name_map[api_key_map[api_key]])
    return vs[0], vs[-1]


def test_advertised_is_kafka4s_floors_and_what_the_handlers_serve():
    served = versions.SUPPORTED
    assert set(served) == set(KafkaApis.HANDLERS) | {versions.API_VERSIONS}  # a handler for every key, no more
    for key, (lo, hi) in served.items():
        k_lo, k_hi = kio_range(key)
        assert lo == k_lo, f"api key {key}: served from v{lo}, Kafka 4's floor is v{k_lo}"
        assert lo <= hi <= k_hi
    # the one place where ApiVersions lists more than is served, as Kafka 4 does: Produce v0-2 (KAFKA-18659)
    adv = versions.advertised()
    assert adv[versions.PRODUCE] == (0, served[versions.PRODUCE][1])
    assert {k: r for k, r in adv.items() if k != versions.PRODUCE} == {
        k: r for k, r in served.items() if k != versions.PRODUCE
    }
    # the newest versions the clients here send (wire-notes): librdkafka and kafka-python Metadata 13,
    # kafka-python ApiVersions 4, @platformatic/kafka Fetch 17; JoinGroup keeps Kafka 4's v0-1
    assert (served[3], served[18], served[1][1], served[11]) == ((0, 13), (0, 4), 17, (0, 9))


@pytest.mark.parametrize(("api_key", "version"), SERVED, ids=[f"{k}v{v}" for k, v in SERVED])
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck), database=None, derandomize=True)
@given(data=st.data())
def test_each_served_version_decodes_and_encodes_with_kio(api_key, version, data):
    req_cls, resp_cls = load_request_schema(api_key, version), load_response_schema(api_key, version)
    request = data.draw(st.from_type(req_cls))
    frame = codec.encode_request(9, request, client_id="unit")
    header, decoded = codec.decode_request(frame[4:], api_key, version)  # the listener's own decode path
    assert (header.request_api_key, header.request_api_version, header.correlation_id) == (api_key, version, 9)
    assert codec.encode_request(9, decoded, client_id="unit") == frame
    response = data.draw(st.from_type(resp_cls))
    out = codec.encode_response(9, response)
    cid, back = codec.decode_response(out[4:], resp_cls)
    assert cid == 9 and codec.encode_response(9, back) == out


def test_advertised_but_removed_produce_versions_are_refused():
    """Produce v0-2: listed (KAFKA-18659), but kio has no schema for them and the listener refuses them."""
    apis = KafkaApis(FakeBackend())
    for version in range(versions.advertised()[versions.PRODUCE][0], versions.SUPPORTED[versions.PRODUCE][0]):
        with pytest.raises(UnknownEntity):
            load_request_schema(versions.PRODUCE, version)
        payload = struct.pack(">hhih", versions.PRODUCE, version, 1, 3) + b"old" + b"\x00" * 16
        with pytest.raises(codec.RequestError, match=f"version {version} is not served: served versions 3..11"):
            asyncio.run(apis.handle(payload))


def test_the_versions_this_audit_added_are_answered_by_the_handlers():
    """Metadata v13 (a top-level error code), ApiVersions v4 and Fetch v17 through the real handlers."""
    with listening(FakeBackend()) as (port, _acc, _run, _loop):
        c = Client(port)
        c.send(codec.encode_request(1, ApiVersionsRequestV4(client_software_name="unit", client_software_version="1")))
        cid, av = c.recv(ApiVersionsResponseV4)
        assert (cid, av.error_code) == (1, 0)
        assert {k.api_key: (k.min_version, k.max_version) for k in av.api_keys} == versions.advertised()
        md = md13.MetadataRequest(
            topics=None, allow_auto_topic_creation=False, include_topic_authorized_operations=False
        )
        c.send(codec.encode_request(2, md))
        cid, mr = c.recv(md13r.MetadataResponse)
        assert (cid, mr.error_code, [t.name for t in mr.topics]) == (2, 0, ["t"])
        assert [len(t.partitions) for t in mr.topics] == [2]
        part = fetch17.FetchPartition(
            partition=0,
            current_leader_epoch=-1,
            fetch_offset=0,
            last_fetched_epoch=-1,
            log_start_offset=-1,
            partition_max_bytes=1 << 20,
        )
        fr = fetch17.FetchRequest(
            cluster_id=None,
            replica_state=fetch17.ReplicaState(replica_id=-1, replica_epoch=-1),
            max_wait=datetime.timedelta(0),
            min_bytes=1,
            max_bytes=1 << 20,
            isolation_level=0,
            session_id=0,
            session_epoch=-1,
            topics=(fetch17.FetchTopic(topic_id=topic_uuid(TID), partitions=(part,)),),
            forgotten_topics_data=(),
            rack_id="",
        )
        c.send(codec.encode_request(3, fr))
        cid, f = c.recv(fetch17r.FetchResponse)
        (p,) = f.responses[0].partitions
        assert (cid, f.error_code, p.error_code, p.high_watermark, p.records) == (3, 0, 0, 0, b"")


def test_join_group_v0_and_v1_kafka4_keeps_them():
    """JoinGroup v0 has no rebalance timeout (the coordinator uses the session timeout: -1), v1 has one."""
    backend = GroupBackend()
    backend.answers["join_group"] = JOINED
    with listening(backend) as (port, _acc, _run, _loop):
        r0 = ask(
            port,
            jg0.JoinGroupRequest(
                group_id="g",
                session_timeout=10 * S,
                member_id="",
                protocol_type="consumer",
                protocols=(jg0.JoinGroupRequestProtocol(name="range", metadata=b"s0"),),
            ),
            jg0r.JoinGroupResponse,
        )
        req0 = backend.calls[-1]
        r1 = ask(
            port,
            jg1.JoinGroupRequest(
                group_id="g",
                session_timeout=10 * S,
                rebalance_timeout=25 * S,
                member_id="m-1",
                protocol_type="consumer",
                protocols=(jg1.JoinGroupRequestProtocol(name="range", metadata=b"s1"),),
            ),
            jg1r.JoinGroupResponse,
        )
        req1 = backend.calls[-1]
    assert (req0.session_timeout_ms, req0.rebalance_timeout_ms, req0.protocols) == (10000, -1, [("range", b"s0")])
    assert req0.effective_rebalance_timeout_ms() == 10000
    assert (req1.rebalance_timeout_ms, req1.require_known_member_id) == (25000, False)
    for r in (r0, r1):
        assert (r.error_code, r.generation_id, r.protocol_name, r.leader, r.member_id) == (0, 3, "range", "m-1", "m-1")
        assert [m.member_id for m in r.members] == ["m-1", "m-2"]


def _exact(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("closed")
        buf += chunk
    return buf


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    sock.settimeout(seconds)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False


def _flexible_api_versions(version: int, correlation_id: int, client_id: str, name: str, sw_version: str) -> bytes:
    """An ApiVersions request at any version in v3's layout (header v2: client_id, empty tagged fields;
    body: compact strings, empty tagged fields), as a client newer than this broker sends it."""
    cid = client_id.encode()
    body = b"".join(bytes([len(s.encode()) + 1]) + s.encode() for s in (name, sw_version)) + b"\x00"
    payload = struct.pack(">hhih", 18, version, correlation_id, len(cid)) + cid + b"\x00" + body
    return struct.pack(">i", len(payload)) + payload


def test_api_versions_v99_gets_a_v0_header_unsupported_version_and_the_ranges():
    with listening(FakeBackend()) as (port, _acc, _run, _loop):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(_flexible_api_versions(99, 41, "future-client", "future-kafka", "9.9"))
        (size,) = struct.unpack(">i", _exact(s, 4))
        payload = _exact(s, size)
        # response header v0: the correlation id, then the body at once (no tagged-field byte of header v1)
        assert struct.unpack_from(">ih", payload, 0) == (41, 35)
        cid, resp = codec.decode_response(payload, ApiVersionsResponseV0)  # and the whole body is v0's
        assert (cid, resp.error_code) == (41, 35)
        ranges = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        assert ranges == versions.advertised()
        assert ranges[18] == (0, 4) and ranges[0] == (0, 11)
        # the client falls back to a version in that range on the same connection (it stays open)
        s.sendall(codec.encode_request(42, ApiVersionsRequestV3(client_software_name="a", client_software_version="1")))
        (size,) = struct.unpack(">i", _exact(s, 4))
        cid, resp = codec.decode_response(_exact(s, size), ApiVersionsResponseV3)
        assert (cid, resp.error_code) == (42, 0)
        s.close()


def test_api_versions_with_an_invalid_client_software_name_gets_invalid_request():
    """Kafka's ApiVersionsRequest.isValid (KIP-511): INVALID_REQUEST (42) and no api keys; the connection
    stays open and a valid request is answered."""
    with listening(FakeBackend()) as (port, _acc, _run, _loop):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        for cid, (name, ver) in enumerate([("bad name", "1.0"), ("ok", "-1"), ("", "1"), ("ok", "1.0.")]):
            s.sendall(_flexible_api_versions(3, cid, "c", name, ver))
            (size,) = struct.unpack(">i", _exact(s, 4))
            got, resp = codec.decode_response(_exact(s, size), ApiVersionsResponseV3)
            assert (got, resp.error_code, resp.api_keys) == (cid, 42, ()), (name, ver)
        s.sendall(_flexible_api_versions(3, 9, "c", "confluent-kafka-python", "2.16.1-rdkafka-2.16.0"))
        (size,) = struct.unpack(">i", _exact(s, 4))
        got, resp = codec.decode_response(_exact(s, size), ApiVersionsResponseV3)
        assert (got, resp.error_code, len(resp.api_keys)) == (9, 0, len(versions.SUPPORTED))
        s.close()


@pytest.mark.parametrize(
    ("api_key", "version", "expected"),
    [
        (0, 2, "api key 0 (Produce) version 2 is not served: served versions 3..11 (older versions were removed"),
        (1, 3, "api key 1 (Fetch) version 3 is not served: served versions 4..17 (older versions were removed"),
        (8, 1, "api key 8 (OffsetCommit) version 1 is not served: served versions 2..9 (older versions were removed"),
        (19, 1, "api key 19 (CreateTopics) version 1 is not served: served versions 2..7 (older versions were"),
    ],
    ids=["produce-v2", "fetch-v3", "offset-commit-v1", "create-topics-v1"],
)
def test_a_version_below_kafka4s_floor_closes_the_connection_and_logs_the_client(caplog, api_key, version, expected):
    caplog.set_level(logging.INFO, logger="rafka.kafka_wire")
    with listening(FakeBackend()) as (port, _acc, _run, _loop):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        me = s.getsockname()
        cid = b"legacy-app-7"
        payload = struct.pack(">hhih", api_key, version, 5, len(cid)) + cid + b"\x00" * 24  # header v1, any body
        s.sendall(struct.pack(">i", len(payload)) + payload)
        assert _closed_within(s, 5), "a refused version must close the connection, with no answer"
        deadline = time.monotonic() + 5
        while not any(expected in r.getMessage() for r in caplog.records) and time.monotonic() < deadline:
            time.sleep(0.02)
        s.close()
    (line,) = [r for r in caplog.records if expected in r.getMessage()]
    msg = line.getMessage()
    assert line.levelno == logging.WARNING and "closing connection" in msg
    assert "refused client id 'legacy-app-7' at 127.0.0.1" in msg
    assert f"('127.0.0.1', {me[1]})" in msg  # the connection: the client's address and port


def test_header_client_id_reads_every_header_version():
    raw = struct.pack(">hhih", 0, 9, 1, 3) + b"abc" + b"\x00"
    assert codec.header_client_id(raw) == "abc"
    assert codec.header_client_id(struct.pack(">hhih", 0, 9, 1, -1)) is None  # null
    assert codec.header_client_id(struct.pack(">hhih", 0, 9, 1, 9) + b"ab") is None  # cut short
    assert codec.header_client_id(struct.pack(">hhi", 0, 9, 1)) is None
