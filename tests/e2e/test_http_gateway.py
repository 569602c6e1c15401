"""The HTTP gateway (serve/http.py) against a real Ray Serve instance on the e2e rafka cluster: every route,
every error class, large batches, v3 streaming, msgpack, consumer instances and the OpenAPI page. (The
`rafka serve` verbs run on the CLI's own cluster, in tests/client/test_cli.py.)

Produced records are read back with ``rafka.Consumer`` and checked exactly (keys, values, partitions,
offsets)."""

from __future__ import annotations

import base64
import json
import os
import time
import uuid

import msgpack
import pytest
import requests

import rafka
from rafka.producer.partitioner import partition_for_key
from rafka.structs import TopicPartition

BINARY = "application/vnd.kafka.binary.v2+json"
JSONV2 = "application/vnd.kafka.json.v2+json"
V2 = "application/vnd.kafka.v2+json"
MSGPACK = "application/vnd.rafka.msgpack"


def b64(b: bytes) -> str:
    return base64.b64encode(b).decode()


BODY_LIMIT = 8 << 20  # the shared gateway's max_request_bytes (tests/e2e/conftest.py)
BODY_TIMEOUT_S = 5.0  # and its body timeout


@pytest.fixture(scope="module")
def gw(gateway):
    """The package's gateway (tests/e2e/conftest.py ``gateway``: an 8 MiB body limit, a 5 s body timeout,
    an 8 s delivery timeout)."""
    return gateway


def post(url: str, body, ctype: str = BINARY, **kw) -> requests.Response:
    data = body if isinstance(body, (bytes, str)) else json.dumps(body)
    return requests.post(url, data=data, headers={"Content-Type": ctype, **kw.pop("headers", {})}, timeout=60, **kw)


def read_back(cluster, topic: str, n: int, timeout_s: float = 30) -> list:
    """Every record of ``topic`` from the beginning (exactly ``n`` expected), sorted by (partition, offset)."""
    c = rafka.Consumer(cluster, auto_offset_reset="earliest")
    c.assign([TopicPartition(topic, p) for p in sorted(c.partitions_for_topic(topic))])
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < n and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=500).values():
            out.extend(recs)
    assert not any(c.poll(timeout_ms=200).values())
    c.close()
    assert len(out) == n
    return sorted(out, key=lambda r: (r.partition, r.offset))


def error(resp: requests.Response, status: int, code: int, kafka_code=None) -> dict:
    assert resp.status_code == status, resp.text
    body = resp.json()
    assert body["error_code"] == code and isinstance(body["message"], str) and body["message"], body
    assert "Traceback" not in resp.text
    if kafka_code is not None:
        assert body["kafka_error_code"] == kafka_code, body
    return body


# -- docs, health, clusters, topics ---------------------------------------------------------------------
def test_openapi_lists_every_route(gw):
    spec = requests.get(f"{gw}/openapi.json", timeout=30).json()
    paths = {p: set(ops) for p, ops in spec["paths"].items()}
    c, t, g, i = "{cluster_id}", "{topic}", "{group}", "/consumers/{group}/instances/{name}"
    expected = {
        "/health": {"get"},
        "/v3/clusters": {"get"},
        f"/v3/clusters/{c}": {"get"},
        "/topics": {"get"},
        f"/topics/{t}": {"get", "post"},
        f"/topics/{t}/partitions": {"get"},
        f"/topics/{t}/partitions/{{partition}}": {"get", "post"},
        f"/v3/clusters/{c}/topics": {"get", "post"},
        f"/v3/clusters/{c}/topics/{t}": {"get", "delete"},
        f"/v3/clusters/{c}/topics/{t}/partitions": {"get"},
        f"/v3/clusters/{c}/topics/{t}/partitions/{{partition}}": {"get"},
        f"/v3/clusters/{c}/topics/{t}/records": {"post"},
        f"/v3/clusters/{c}/consumer-groups": {"get"},
        f"/v3/clusters/{c}/consumer-groups/{g}": {"get"},
        f"/v3/clusters/{c}/consumer-groups/{g}/lags": {"get"},
        f"/v3/clusters/{c}/consumer-groups/{g}/lag-summary": {"get"},
        "/brokers": {"get"},
        f"/topics/{t}/partitions/{{partition}}/offsets": {"get"},
        f"/v3/clusters/{c}/brokers": {"get"},
        f"/v3/clusters/{c}/brokers/{{broker_id}}": {"get"},
        f"/v3/clusters/{c}/brokers/{{broker_id}}/configs": {"get"},
        f"/v3/clusters/{c}/brokers/{{broker_id}}/configs/{{name}}": {"get"},
        f"/v3/clusters/{c}/topics/{t}/configs": {"get"},
        f"/v3/clusters/{c}/topics/{t}/configs/{{name}}": {"get"},
        f"/v3/clusters/{c}/topics/-/partitions/-/reassignment": {"get"},
        f"/v3/clusters/{c}/topics/{t}/partitions/-/reassignment": {"get"},
        f"/v3/clusters/{c}/topics/{t}/partitions/{{partition}}/reassignment": {"get"},
        f"/consumers/{g}": {"post"},
        i: {"delete"},
        f"{i}/subscription": {"post", "get", "delete"},
        f"{i}/assignments": {"post", "get"},
        f"{i}/records": {"get"},
        f"{i}/offsets": {"post", "get"},
        f"{i}/positions": {"post"},
        f"{i}/positions/beginning": {"post"},
        f"{i}/positions/end": {"post"},
    }
    assert paths == expected
    docs = requests.get(f"{gw}/docs", timeout=30)
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


def test_health_and_clusters(gw, e2e_cluster):
    h = requests.get(f"{gw}/health", timeout=30).json()
    assert h["status"] == "ok" and h["cluster"] == e2e_cluster.name and h["brokers_alive"] == [0, 1, 2]
    assert h["controller_epoch"] >= 1 and h["controller_id"] in (0, 1, 2)
    (c,) = requests.get(f"{gw}/v3/clusters", timeout=30).json()["data"]
    assert c["cluster_id"] == e2e_cluster.name and c["controller_id"] == h["controller_id"]
    one = requests.get(f"{gw}/v3/clusters/{e2e_cluster.name}", timeout=30).json()
    assert one["metadata"]["self"].endswith(f"/v3/clusters/{e2e_cluster.name}")
    error(requests.get(f"{gw}/v3/clusters/nope", timeout=30), 404, 40404)


def test_topic_reads_v2_and_v3(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(3, 3, retention_ms="3600000")
    cid = e2e_cluster.name
    assert t in requests.get(f"{gw}/topics", timeout=30).json()
    d = requests.get(f"{gw}/topics/{t}", timeout=30).json()
    assert d["name"] == t and d["configs"]["retention.ms"] == "3600000"
    assert [p["partition"] for p in d["partitions"]] == [0, 1, 2]
    for p in d["partitions"]:
        assert sorted(r["broker"] for r in p["replicas"]) == [0, 1, 2] and all(r["in_sync"] for r in p["replicas"])
        assert [r["broker"] for r in p["replicas"] if r["leader"]] == [p["leader"]]
    assert requests.get(f"{gw}/topics/{t}/partitions", timeout=30).json() == d["partitions"]
    assert requests.get(f"{gw}/topics/{t}/partitions/2", timeout=30).json() == d["partitions"][2]
    error(requests.get(f"{gw}/topics/{t}/partitions/9", timeout=30), 404, 40402, 3)
    error(requests.get(f"{gw}/topics/no-such-topic", timeout=30), 404, 40401, 3)
    error(requests.get(f"{gw}/topics/no-such-topic/partitions", timeout=30), 404, 40401, 3)
    v3 = requests.get(f"{gw}/v3/clusters/{cid}/topics", timeout=30).json()
    assert t in [x["topic_name"] for x in v3["data"]]
    one = requests.get(f"{gw}/v3/clusters/{cid}/topics/{t}", timeout=30).json()
    assert (one["partitions_count"], one["replication_factor"], one["is_internal"]) == (3, 3, False)
    parts = requests.get(f"{gw}/v3/clusters/{cid}/topics/{t}/partitions", timeout=30).json()["data"]
    assert [p["partition_id"] for p in parts] == [0, 1, 2]
    assert [p["leader_id"] for p in parts] == [p["leader"] for p in d["partitions"]]
    p1 = requests.get(f"{gw}/v3/clusters/{cid}/topics/{t}/partitions/1", timeout=30).json()
    assert p1 == parts[1] and all(r["is_in_sync"] for r in p1["replicas"])
    error(requests.get(f"{gw}/v3/clusters/{cid}/topics/nope", timeout=30), 404, 40401, 3)
    error(requests.get(f"{gw}/v3/clusters/other/topics", timeout=30), 404, 40404)


# -- produce --------------------------------------------------------------------------------------------
def test_produce_v2_binary_round_trip(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(4, 1)  # 4 partitions for the key hashing; replication is test_v3_single_and_streaming's (RF 3)
    recs = [{"key": b64(b"user-%d" % (i % 5)), "value": b64(b"click %d" % i)} for i in range(20)]
    recs += [{"value": b64(b"pinned"), "partition": 3}, {"key": None, "value": b64(b"\x00\xff raw")}]
    r = post(f"{gw}/topics/{t}", {"records": recs})
    assert r.status_code == 200 and r.headers["content-type"].startswith(V2)
    body = r.json()
    assert body["key_schema_id"] is None and body["value_schema_id"] is None
    offs = body["offsets"]
    assert len(offs) == 22 and all(o["error_code"] is None and o["error"] is None for o in offs)
    for rec, o in zip(recs[:20], offs):
        assert o["partition"] == partition_for_key(base64.b64decode(rec["key"]), 4)
    assert offs[20]["partition"] == 3
    got = {(x.partition, x.offset): x for x in read_back(e2e_cluster, t, 22)}
    assert sorted(got) == sorted((o["partition"], o["offset"]) for o in offs)
    for rec, o in zip(recs, offs):
        x = got[(o["partition"], o["offset"])]
        assert x.value == base64.b64decode(rec["value"])
        assert x.key == (None if rec.get("key") is None else base64.b64decode(rec["key"]))
    per_part = {}
    for o in offs:  # offsets within a partition are contiguous from 0, in request order
        per_part.setdefault(o["partition"], []).append(o["offset"])
    assert all(v == list(range(len(v))) for v in per_part.values())


def test_produce_v2_json_format_and_partition_path(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(2, 1)
    values = [{"n": 1, "s": "é"}, [1, 2], "text", 7, None]
    r = post(
        f"{gw}/topics/{t}/partitions/1",
        {"records": [{"key": {"id": i}, "value": v} for i, v in enumerate(values)]},
        JSONV2,
    )
    offs = r.json()["offsets"]
    assert [(o["partition"], o["offset"]) for o in offs] == [(1, i) for i in range(5)]
    got = read_back(e2e_cluster, t, 5)
    assert [json.loads(x.key) for x in got] == [{"id": i} for i in range(5)]
    assert [None if x.value is None else json.loads(x.value) for x in got] == values


def test_large_batch_in_one_request(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(3, 3)  # 3 x RF 3: every broker leads one partition of the batch (9 replica processes, not 18)
    n = 5000
    recs = [{"key": b64(b"k%d" % (i % 97)), "value": b64(b"%06d" % i + b"x" * 94)} for i in range(n)]
    r = post(f"{gw}/topics/{t}", {"records": recs})
    offs = r.json()["offsets"]
    assert len(offs) == n and all(o["error_code"] is None for o in offs)
    got = {(x.partition, x.offset): x.value for x in read_back(e2e_cluster, t, n)}
    for i, o in enumerate(offs):
        assert got[(o["partition"], o["offset"])] == b"%06d" % i + b"x" * 94


def test_msgpack_produce(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(3, 1)
    recs = [{"key": b"k\x00%d" % i, "value": os.urandom(50), "partition": i % 3} for i in range(30)]
    recs.append(
        {"key": None, "value": b"with headers", "partition": 0, "headers": [["trace", b"\x01\x02"], ["n", None]]}
    )
    r = requests.post(
        f"{gw}/topics/{t}",
        data=msgpack.packb({"records": recs}, use_bin_type=True),
        headers={"Content-Type": MSGPACK},
        timeout=60,
    )
    assert r.status_code == 200 and r.headers["content-type"] == MSGPACK
    offs = msgpack.unpackb(r.content)["offsets"]
    assert [o["partition"] for o in offs] == [i % 3 for i in range(30)] + [0]
    got = {(x.partition, x.offset): x for x in read_back(e2e_cluster, t, 31)}
    for rec, o in zip(recs, offs):
        x = got[(o["partition"], o["offset"])]
        assert (x.key, x.value) == (rec["key"], rec["value"])
    assert got[(offs[-1]["partition"], offs[-1]["offset"])].headers == (("trace", b"\x01\x02"), ("n", None))


def test_v3_single_and_streaming(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(2, 3)
    url = f"{gw}/v3/clusters/{e2e_cluster.name}/topics/{t}/records"
    one = {
        "partition_id": 1,
        "key": {"type": "STRING", "data": "user-1"},
        "value": {"type": "JSON", "data": {"a": 1}},
        "headers": [{"name": "h", "value": b64(b"hv")}],
        "timestamp": "2026-01-02T03:04:05.678Z",
    }
    r = post(url, one, "application/json")
    rep = r.json()
    assert r.status_code == 200 and rep["error_code"] == 200 and rep["topic_name"] == t
    assert (rep["partition_id"], rep["offset"], rep["cluster_id"]) == (1, 0, e2e_cluster.name)
    assert rep["key"] == {"type": "STRING", "size": 6} and rep["value"] == {"type": "JSON", "size": 7}
    assert rep["timestamp"] == "2026-01-02T03:04:05.678Z"
    stream = "".join(
        json.dumps({"value": {"type": "BINARY", "data": b64(b"s%d" % i)}, "partition_id": 0}) + "\n" for i in range(3)
    ) + json.dumps({"key": {"type": "BINARY", "data": b64(b"kk")}, "value": None})
    r = post(url, stream, "application/json")
    reports = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    assert r.status_code == 200 and len(reports) == 4 and all(x["error_code"] == 200 for x in reports)
    assert [(x["partition_id"], x["offset"]) for x in reports[:3]] == [(0, 0), (0, 1), (0, 2)]
    assert reports[3]["partition_id"] == partition_for_key(b"kk", 2) and reports[3]["value"] is None
    got = {(x.partition, x.offset): x for x in read_back(e2e_cluster, t, 5)}
    first = got[(1, 0)]
    assert (first.key, first.value, first.headers) == (b"user-1", b'{"a":1}', (("h", b"hv"),))
    assert first.timestamp == 1767323045678
    assert [got[(0, i)].value for i in range(3)] == [b"s0", b"s1", b"s2"]
    error(post(url, {"value": {"type": "BINARY", "data": "!!"}}, "application/json"), 422, 42201)
    error(post(url, {"value": {"type": "AVRO", "data": 1}}, "application/json"), 422, 42201)
    error(post(url, '{"value": {"type": "JSON", "data": 1}} {"value"', "application/json"), 400, 40001)
    error(post(url, {"value": {"type": "JSON", "data": 1}}, BINARY), 415, 41501)
    error(post(f"{gw}/v3/clusters/{e2e_cluster.name}/topics/nope/records", one, "application/json"), 404, 40401, 3)


def test_v3_streaming_reports_each_record_while_the_body_is_still_open(gw, e2e_cluster, e2e_topic):
    """Confluent's v3 streaming mode over one chunked request: each record is produced as its JSON arrives
    and its report comes back before the client has finished sending; a bad record gets an error line and
    the stream goes on; a malformed tail ends it with an error line."""
    import http.client
    from urllib.parse import urlparse

    t = e2e_topic(1, 1)
    where = urlparse(gw)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    conn.putrequest("POST", f"/v3/clusters/{e2e_cluster.name}/topics/{t}/records")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()

    def send(data: bytes) -> None:
        conn.send(b"%x\r\n%s\r\n" % (len(data), data))

    def rec(i: int) -> bytes:
        return json.dumps({"value": {"type": "STRING", "data": f"s{i}"}}).encode() + b"\n"

    def report() -> dict:
        line = resp.readline()
        assert line.endswith(b"\n"), line
        return json.loads(line)

    send(rec(0))
    resp = conn.getresponse()  # the answer starts while the request body is still open
    assert resp.status == 200 and resp.getheader("content-type").startswith("application/json")
    first = report()
    assert (first["error_code"], first["offset"], first["value"]) == (200, 0, {"type": "STRING", "size": 2})
    send(rec(1))
    assert report()["offset"] == 1
    send(rec(2)[:15])  # a record cut in two chunks
    send(rec(2)[15:] + json.dumps({"value": {"type": "BINARY", "data": "!!"}}).encode() + rec(3))
    assert report()["offset"] == 2
    bad = report()
    assert (bad["error_code"], bad["kafka_error_code"]) == (422, 87) and "record 3" in bad["message"]
    assert report()["offset"] == 3  # the stream went on after the bad record
    send(rec(4) + b'{"value": nope}')
    send(b"")  # end of the chunked body
    assert report()["offset"] == 4
    end = report()
    assert end["error_code"] == 400 and "record 6 is not valid JSON" in end["message"]
    assert resp.read() == b""
    conn.close()
    # a client that vanishes mid-stream: what it sent is kept, the gateway goes on serving
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=60)
    conn.putrequest("POST", f"/v3/clusters/{e2e_cluster.name}/topics/{t}/records")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    send(rec(5))
    resp = conn.getresponse()
    assert report()["offset"] == 5
    send(rec(6)[:10])
    conn.sock.close()
    assert requests.get(f"{gw}/health", timeout=30).status_code == 200
    assert [r.value for r in read_back(e2e_cluster, t, 6)] == [b"s0", b"s1", b"s2", b"s3", b"s4", b"s5"]
    ok = post(f"{gw}/v3/clusters/{e2e_cluster.name}/topics/{t}/records", rec(7).decode(), "application/json")
    assert ok.status_code == 200 and ok.json()["offset"] == 6


def test_produce_error_classes(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(2, 1)
    ok = {"records": [{"value": b64(b"x")}]}
    error(post(f"{gw}/topics/{t}", ok, "text/plain"), 415, 41501)
    error(post(f"{gw}/topics/{t}", ok, "application/json"), 415, 41501)
    error(post(f"{gw}/topics/{t}", b"{not json"), 400, 40001)
    error(post(f"{gw}/topics/{t}", {"recs": []}), 400, 40001)
    error(post(f"{gw}/topics/{t}", {"records": []}), 400, 40001)
    error(post(f"{gw}/topics/{t}", b"\xc1", MSGPACK), 400, 40001)
    error(post(f"{gw}/topics/{t}", {"records": [{"value": "not base64!"}]}), 422, 42201, 87)
    error(post(f"{gw}/topics/{t}", {"records": [{"value": 5}]}), 422, 42201)
    error(post(f"{gw}/topics/{t}", {"records": [{"value": b64(b"x"), "partition": "0"}]}), 422, 42201)
    error(post(f"{gw}/topics/{t}", {"records": ["x"]}), 422, 42201)
    error(post(f"{gw}/topics/nope", ok), 404, 40401, 3)
    error(post(f"{gw}/topics/{t}", {"records": [{"value": b64(b"x"), "partition": 5}]}), 404, 40402, 3)
    error(post(f"{gw}/topics/{t}/partitions/2", ok), 404, 40402, 3)
    error(post(f"{gw}/topics/{t}/partitions/x", ok), 404, 40404)
    error(post(f"{gw}/topics/{t}", {"records": [{"value": b64(b"x" * (1024 * 1024 + 10))}]}), 413, 41301, 10)
    assert read_back(e2e_cluster, t, 0) == []  # nothing from the failed requests was written
    error(requests.get(f"{gw}/no/such/route", timeout=30), 404, 40404)
    error(requests.put(f"{gw}/topics/{t}", timeout=30), 405, 40501)


def test_not_enough_replicas_is_503(gw, e2e_cluster, e2e_topic):
    from concurrent.futures import ThreadPoolExecutor

    t = e2e_topic(1, 2, min_insync_replicas="3")
    with ThreadPoolExecutor(2) as pool:  # both wait out the delivery timeout: in parallel
        v2 = pool.submit(post, f"{gw}/topics/{t}", {"records": [{"value": b64(b"x")}]})
        v3 = pool.submit(
            post,
            f"{gw}/v3/clusters/{e2e_cluster.name}/topics/{t}/records",
            {"value": {"type": "STRING", "data": "x"}},
            "application/json",
        )
        r, v3 = v2.result(), v3.result()
    (o,) = r.json()["offsets"]  # v2: per-record errors in that record's entry, HTTP 200
    assert r.status_code == 200 and o["offset"] is None and o["error_code"] in (7, 19) and o["error"]
    assert error(v3, 503, 50301)["kafka_error_code"] in (7, 19)


# -- consumer instances ---------------------------------------------------------------------------------
def _create(gw: str, group: str, **cfg) -> str:
    r = post(f"{gw}/consumers/{group}", cfg, V2)
    assert r.status_code == 200, r.text
    assert r.json()["instance_id"] == cfg.get("name", r.json()["instance_id"])
    return r.json()["base_uri"]


def _poll(base: str, want: int, accept: str = BINARY, timeout_s: float = 60, **params) -> list:
    out, deadline = [], time.monotonic() + timeout_s
    while len(out) < want and time.monotonic() < deadline:
        r = requests.get(f"{base}/records", headers={"Accept": accept}, params=params, timeout=60)
        assert r.status_code == 200, r.text
        out.extend(msgpack.unpackb(r.content) if accept == MSGPACK else r.json())
    return out


def test_consumer_group_commit_and_resume(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(2, 3)
    group = f"g-{t}"
    values = [b"v%02d" % i for i in range(20)]
    post(f"{gw}/topics/{t}", {"records": [{"value": b64(v), "partition": i % 2} for i, v in enumerate(values)]})
    base = _create(
        gw, group, name="first", format="binary", **{"auto.offset.reset": "earliest", "auto.commit.enable": "false"}
    )
    assert base.endswith(f"/consumers/{group}/instances/first")
    error(post(f"{gw}/consumers/{group}", {"name": "first"}, V2), 409, 40902)
    assert requests.post(f"{base}/subscription", json={"topics": [t]}, timeout=30).status_code == 204
    assert requests.get(f"{base}/subscription", timeout=30).json() == {"topics": [t]}
    recs = _poll(base, 20)
    assert len(recs) == 20 and all(r["topic"] == t for r in recs)
    assert sorted(base64.b64decode(r["value"]) for r in recs) == values
    assert sorted((r["partition"], r["offset"]) for r in recs) == sorted((i % 2, i // 2) for i in range(20))
    # commit: partition 0 processed up to offset 5, partition 1 up to offset 2 (Confluent: the last processed)
    r = requests.post(
        f"{base}/offsets",
        json={"offsets": [{"topic": t, "partition": 0, "offset": 5}, {"topic": t, "partition": 1, "offset": 2}]},
        timeout=30,
    )
    assert r.status_code == 204
    got = requests.get(
        f"{base}/offsets", json={"partitions": [{"topic": t, "partition": 0}, {"topic": t, "partition": 1}]}, timeout=30
    ).json()
    assert [(o["partition"], o["offset"]) for o in got["offsets"]] == [(0, 6), (1, 3)]
    cid = e2e_cluster.name
    groups = requests.get(f"{gw}/v3/clusters/{cid}/consumer-groups", timeout=30).json()["data"]
    assert group in [g["consumer_group_id"] for g in groups]
    g = requests.get(f"{gw}/v3/clusters/{cid}/consumer-groups/{group}", timeout=30).json()
    assert g["state"] == "STABLE" and [c["client_id"] for c in g["consumers"]] == ["first"]
    assert sorted(a["partition_id"] for a in g["consumers"][0]["assignments"]) == [0, 1]
    lags = requests.get(f"{gw}/v3/clusters/{cid}/consumer-groups/{group}/lags", timeout=30).json()["data"]
    assert sorted((x["partition_id"], x["current_offset"], x["log_end_offset"], x["lag"]) for x in lags) == [
        (0, 6, 10, 4),
        (1, 3, 10, 7),
    ]
    assert requests.delete(base, timeout=60).status_code == 204
    error(requests.get(f"{base}/subscription", timeout=30), 404, 40403)
    # a second instance of the group resumes from the commit
    second = _create(gw, group, name="second", **{"auto.offset.reset": "earliest"})
    requests.post(f"{second}/subscription", json={"topic_pattern": t.replace("-", "[-]")}, timeout=30)
    rest = _poll(second, 11)
    assert sorted((r["partition"], r["offset"]) for r in rest) == [(0, o) for o in range(6, 10)] + [
        (1, o) for o in range(3, 10)
    ]
    assert requests.post(f"{second}/offsets", timeout=30).status_code == 204  # everything consumed
    lags = requests.get(f"{gw}/v3/clusters/{cid}/consumer-groups/{group}/lags", timeout=30).json()["data"]
    assert sorted((x["partition_id"], x["lag"]) for x in lags) == [(0, 0), (1, 0)]
    assert requests.delete(f"{second}/subscription", timeout=60).status_code == 204
    assert requests.get(f"{second}/subscription", timeout=30).json() == {"topics": []}
    assert requests.delete(second, timeout=60).status_code == 204
    error(requests.get(f"{gw}/v3/clusters/{cid}/consumer-groups/no-such-group", timeout=30), 404, 40404)


def test_consumer_first_get_after_subscribe_returns_records(gw, e2e_topic):
    """A new instance joins its group as it subscribes, and a records GET made while the group is forming
    waits for the assignment: no empty round trips before the first records (serve/consumers.py)."""
    t = e2e_topic(2, 1)
    values = [b"r%02d" % i for i in range(10)]
    post(f"{gw}/topics/{t}", {"records": [{"value": b64(v), "partition": i % 2} for i, v in enumerate(values)]})
    # the first GET right after subscribe returns records (before: [] until JoinGroup/SyncGroup completed)
    base = _create(gw, f"g-{t}-a", **{"auto.offset.reset": "earliest"})
    assert requests.post(f"{base}/subscription", json={"topics": [t]}, timeout=30).status_code == 204
    r = requests.get(f"{base}/records", headers={"Accept": BINARY}, timeout=60)
    assert r.status_code == 200 and r.json(), r.text
    got = r.json() + _poll(base, len(values) - len(r.json()))
    assert sorted(base64.b64decode(x["value"]) for x in got) == values
    assert requests.delete(base, timeout=60).status_code == 204
    # the join runs without any records GET: the assignment shows up on its own (before: only a GET joined)
    base = _create(gw, f"g-{t}-b")
    assert requests.post(f"{base}/subscription", json={"topics": [t]}, timeout=30).status_code == 204
    deadline, parts = time.monotonic() + 30, []
    while time.monotonic() < deadline and len(parts) < 2:
        parts = requests.get(f"{base}/assignments", timeout=30).json()["partitions"]
        time.sleep(0.05)
    assert parts == [{"topic": t, "partition": 0}, {"topic": t, "partition": 1}]
    assert requests.delete(base, timeout=60).status_code == 204


def test_consumer_assign_seek_formats_and_max_bytes(gw, e2e_cluster, e2e_topic):
    t = e2e_topic(2, 1)
    post(f"{gw}/topics/{t}/partitions/0", {"records": [{"key": {"k": i}, "value": {"i": i}} for i in range(6)]}, JSONV2)
    post(f"{gw}/topics/{t}/partitions/1", {"records": [{"value": b64(b"\xff\xfe")}]})
    base = _create(gw, f"g-{t}", format="json")
    r = requests.post(f"{base}/assignments", json={"partitions": [{"topic": t, "partition": 0}]}, timeout=30)
    assert r.status_code == 204
    assert requests.get(f"{base}/assignments", timeout=30).json() == {"partitions": [{"topic": t, "partition": 0}]}
    assert (
        requests.post(
            f"{base}/positions/beginning", json={"partitions": [{"topic": t, "partition": 0}]}, timeout=30
        ).status_code
        == 204
    )
    first = _poll(base, 1, JSONV2, max_bytes=1)  # max_bytes: at least one record, the rest stays for later
    assert [(r["key"], r["value"], r["offset"]) for r in first] == [({"k": 0}, {"i": 0}, 0)]
    rest = _poll(base, 5, JSONV2)
    assert [r["value"]["i"] for r in rest] == [1, 2, 3, 4, 5]
    requests.post(f"{base}/positions", json={"offsets": [{"topic": t, "partition": 0, "offset": 4}]}, timeout=30)
    again = _poll(base, 2, MSGPACK)
    assert [(r["offset"], r["value"]) for r in again] == [(4, b'{"i":4}'), (5, b'{"i":5}')]
    requests.post(f"{base}/positions/end", json={"partitions": [{"topic": t, "partition": 0}]}, timeout=30)
    r = requests.get(f"{base}/records", params={"timeout": 200}, headers={"Accept": JSONV2}, timeout=30)
    assert r.status_code == 200 and r.json() == []
    # a value that is not JSON: 422 in the json format, and it stays readable as binary
    requests.post(f"{base}/assignments", json={"partitions": [{"topic": t, "partition": 1}]}, timeout=30)
    requests.post(f"{base}/positions", json={"offsets": [{"topic": t, "partition": 1, "offset": 0}]}, timeout=30)
    deadline, resp = time.monotonic() + 30, None
    while time.monotonic() < deadline:
        resp = requests.get(f"{base}/records", headers={"Accept": JSONV2}, timeout=30)
        if resp.status_code != 200 or resp.json():
            break
    error(resp, 422, 42201, 87)
    (raw,) = _poll(base, 1, BINARY)
    assert base64.b64decode(raw["value"]) == b"\xff\xfe" and raw["offset"] == 0
    error(requests.get(f"{base}/records", headers={"Accept": "text/html"}, timeout=30), 406, 40601)
    error(requests.get(f"{base}/records", params={"max_bytes": 0}, timeout=30), 422, 42202)
    error(
        requests.post(f"{base}/positions", json={"offsets": [{"topic": t, "partition": 0, "offset": 1}]}, timeout=30),
        409,
        40903,
    )
    error(
        requests.post(f"{base}/positions", json={"offsets": [{"topic": t, "partition": 1, "offset": -1}]}, timeout=30),
        422,
        42201,
    )
    error(
        requests.post(f"{base}/assignments", json={"partitions": [{"topic": "nope", "partition": 0}]}, timeout=30),
        404,
        40401,
        3,
    )
    error(
        requests.post(f"{base}/assignments", json={"partitions": [{"topic": t, "partition": 7}]}, timeout=30),
        404,
        40402,
        3,
    )
    error(requests.post(f"{base}/assignments", data="[", timeout=30), 400, 40001)
    error(requests.post(f"{base}/subscription", json={"topics": [t]}, timeout=30), 409, 40903)
    assert requests.delete(base, timeout=60).status_code == 204
    error(requests.delete(base, timeout=60), 404, 40403)


def test_consumer_instance_errors_and_expiry(gw):
    error(post(f"{gw}/consumers/g-bad", {"format": "avro"}, V2), 422, 42204)
    error(post(f"{gw}/consumers/g-bad", {"auto.offset.reset": "sometimes"}, V2), 422, 42204)
    error(post(f"{gw}/consumers/g-bad", {"fetch.max.wait.ms": 5}, V2), 422, 42204)
    error(post(f"{gw}/consumers/g-bad", {"auto.commit.enable": "maybe"}, V2), 422, 42204)
    error(post(f"{gw}/consumers/g-bad", b"{", V2), 400, 40001)
    error(requests.get(f"{gw}/consumers/g-bad/instances/ghost/assignments", timeout=30), 404, 40403)
    base = _create(gw, "g-expiry", name="short", **{"consumer.instance.timeout.ms": 1500})
    assert requests.get(f"{base}/assignments", timeout=30).json() == {"partitions": []}
    time.sleep(3.5)
    error(requests.get(f"{base}/assignments", timeout=30), 404, 40403)
    base = _create(gw, "g-expiry", name="short")  # the name is free again


# -- bad input at the edges ------------------------------------------------------------------------------
def open_request(gw: str, path: str, headers: dict, timeout: float = 30):
    """A request whose head is sent and whose body the test writes (or withholds) by hand."""
    import http.client
    from urllib.parse import urlparse

    where = urlparse(gw)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=timeout)
    conn.putrequest("POST", path)
    for k, v in headers.items():
        conn.putheader(k, v)
    conn.endheaders()
    return conn


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def answer(conn) -> tuple[int, dict, float]:
    """(status, JSON body, seconds waited) of the response to an open request."""
    t0 = time.monotonic()
    resp = conn.getresponse()
    body = json.loads(resp.read())
    conn.close()
    return resp.status, body, time.monotonic() - t0


def test_json_nested_thousands_deep_is_400(gw, e2e_cluster, e2e_topic):
    """Python's JSON parser recursed into a RecursionError: a 500, and in the v3 streaming form a cut
    connection. Now a 400 with the standard error body everywhere; a stream reports the records before the
    deep one, then an error line, and ends cleanly."""
    t = e2e_topic(1, 1)
    deep = "[" * 5000 + "]" * 5000
    v3 = f"{gw}/v3/clusters/{e2e_cluster.name}/topics/{t}/records"
    for fmt in (JSONV2, BINARY):
        body = error(post(f"{gw}/topics/{t}", '{"records": [{"value": %s}]}' % deep, fmt), 400, 40001)
        assert "nested too deeply" in body["message"], body
    assert (
        "nested too deeply"
        in error(post(v3, '{"value": {"type": "JSON", "data": %s}}' % deep, "application/json"), 400, 40001)["message"]
    )
    two = '{"value": {"type": "STRING", "data": "x"}} {"value": {"type": "JSON", "data": %s}}' % deep
    error(post(v3, two, "application/json"), 400, 40001)  # a whole body: nothing of it is produced
    error(post(f"{gw}/consumers/g-deep", deep, V2), 400, 40001)
    conn = open_request(gw, v3.replace(gw, ""), {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    conn.send(chunk(b'{"value": {"type": "STRING", "data": "kept"}}\n'))
    resp = conn.getresponse()
    assert json.loads(resp.readline())["offset"] == 0
    conn.send(chunk(b'{"value": {"type": "JSON", "data": ' + deep[:3000].encode()))
    conn.send(chunk(deep[3000:].encode() + b"}}"))
    end = json.loads(resp.readline())
    assert end["error_code"] == 400 and "record 1 is nested too deeply" in end["message"], end
    assert resp.read() == b""  # the response ends cleanly (a cut connection raises here)
    conn.close()
    assert [r.value for r in read_back(e2e_cluster, t, 1)] == [b"kept"]


def test_body_limit_is_enforced_before_and_while_reading(gw, e2e_topic):
    """A Content-Length over the limit is refused before the body is read (none is ever sent here); a
    chunked body is refused once it passes the limit, while it is still open (no end chunk is sent).
    Before, the gateway read (buffered) the whole body first: both requests hung."""
    t = e2e_topic(1, 1)
    conn = open_request(gw, f"/topics/{t}", {"Content-Type": BINARY, "Content-Length": str(BODY_LIMIT + 1)})
    status, body, waited = answer(conn)
    assert (status, body["error_code"], body["kafka_error_code"]) == (413, 41301, 10), body
    assert f"declares {BODY_LIMIT + 1} bytes" in body["message"] and waited < BODY_TIMEOUT_S
    conn = open_request(gw, f"/topics/{t}", {"Content-Type": BINARY, "Transfer-Encoding": "chunked"})
    piece = b" " * (64 << 10)
    for _ in range(BODY_LIMIT // len(piece) + 2):
        conn.send(chunk(piece))
    status, body, waited = answer(conn)
    assert (status, body["error_code"]) == (413, 41301) and "passed" in body["message"] and waited < BODY_TIMEOUT_S
    assert post(f"{gw}/topics/{t}", {"records": [{"value": b64(b"fits")}]}).json()["offsets"][0]["offset"] == 0


def test_a_stalled_body_times_out_and_others_are_served(gw, e2e_cluster, e2e_topic):
    """Headers and part of a body, then silence: 408 after the body timeout, while other requests are
    answered meanwhile; a v3 stream that pauses longer than it gets an error line and ends cleanly."""
    t = e2e_topic(1, 1)
    conn = open_request(gw, f"/topics/{t}", {"Content-Type": BINARY, "Content-Length": "1000"})
    conn.send(b'{"records": [{"value": "')
    t0 = time.monotonic()
    assert requests.get(f"{gw}/health", timeout=30).status_code == 200  # served during the stall
    ok = post(f"{gw}/topics/{t}", {"records": [{"value": b64(b"meanwhile")}]})
    assert ok.status_code == 200
    status, body, _ = answer(conn)
    waited = time.monotonic() - t0
    assert (status, body["error_code"]) == (408, 40801) and "did not arrive within 5 s" in body["message"], body
    assert BODY_TIMEOUT_S - 0.5 <= waited < BODY_TIMEOUT_S + 10
    v3 = f"/v3/clusters/{e2e_cluster.name}/topics/{t}/records"
    conn = open_request(gw, v3, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
    conn.send(chunk(b'{"value": {"type": "STRING", "data": "streamed"}}\n'))
    resp = conn.getresponse()
    assert json.loads(resp.readline())["offset"] == 1
    t0 = time.monotonic()
    end = json.loads(resp.readline())  # nothing more is sent
    assert end["error_code"] == 408 and "paused for more than 5 s" in end["message"], end
    assert time.monotonic() - t0 >= BODY_TIMEOUT_S - 0.5
    assert resp.read() == b""
    conn.close()
    assert [r.value for r in read_back(e2e_cluster, t, 2)] == [b"meanwhile", b"streamed"]


def test_gateway_requests_are_counted_on_the_clusters_metrics_endpoint(gw, e2e_cluster, e2e_topic):
    """Each gateway replica publishes its request counts (serve/gateway_metrics.py); the cluster's one scrape
    URL shows them by route template and status: exactly the requests made here."""
    from prometheus_client.parser import text_string_to_metric_families

    def counts() -> dict:
        body = requests.get(e2e_cluster.metrics_url, timeout=60).text
        return {
            (s.labels["method"], s.labels["route"], s.labels["status"]): s.value
            for f in text_string_to_metric_families(body)
            for s in f.samples
            if s.name == "kafka_rest_gateway_requests_total"
        }

    ok, missing = ("GET", "/topics/{topic}", "200"), ("GET", "/topics/{topic}", "404")
    topic = e2e_topic(1, 1)
    before = counts()
    for _ in range(5):
        assert requests.get(f"{gw}/topics/{topic}", timeout=30).status_code == 200
    for _ in range(3):
        assert requests.get(f"{gw}/topics/no-such-topic-here", timeout=30).status_code == 404
    deadline = time.monotonic() + 30
    while True:
        after = counts()
        delta = {k: after.get(k, 0) - before.get(k, 0) for k in (ok, missing)}
        if delta == {ok: 5, missing: 3} or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert delta == {ok: 5, missing: 3}


def test_client_errors_are_one_info_line_in_the_serve_log(gw):
    """A 4xx answer is logged once, at INFO, in the gateway replica's Serve log (status, method, path, reason):
    exactly one line per request names the topic, so no ERROR line or traceback does."""
    import glob
    import uuid

    import ray

    marker = "no-such-topic-" + uuid.uuid4().hex[:8]
    assert requests.get(f"{gw}/topics/{marker}", timeout=30).status_code == 404
    assert post(f"{gw}/topics/{marker}", b"not json").status_code == 400
    logs = ray._private.worker._global_node.get_session_dir_path() + "/logs/serve/replica_*Gateway*.log"

    def lines():
        found = []
        for f in glob.glob(logs):
            with open(f, errors="replace") as fh:
                found += [x for x in fh if marker in x]
        return found

    deadline = time.monotonic() + 20
    while len(lines()) < 2 and time.monotonic() < deadline:
        time.sleep(0.2)
    got = lines()
    assert len(got) == 2, got
    assert got[0].startswith("INFO ") and f"-- 404 GET /topics/{marker}: " in got[0], got
    assert got[1].startswith("INFO ") and f"-- 400 POST /topics/{marker}: the body is not valid JSON" in got[1], got


def test_rest_proxy_admin_routes_and_every_v3_link_resolves(gw, e2e_cluster, e2e_admin):
    """Confluent REST Proxy parity: v2 /brokers and partition offsets; v3 brokers, broker and topic configs with
    their source, topic create/delete, a group's lag summary, reassignment listing; then every link (self /
    related) reachable from /v3/clusters answers 200."""
    cid = e2e_cluster.name
    v3 = f"{gw}/v3/clusters/{cid}"
    assert requests.get(f"{gw}/brokers", timeout=30).json() == {"brokers": [0, 1, 2]}
    brokers = requests.get(f"{v3}/brokers", timeout=30).json()["data"]
    assert [b["broker_id"] for b in brokers] == [0, 1, 2] and all(b["port"] > 0 for b in brokers)
    assert requests.get(f"{v3}/brokers/1", timeout=30).json()["broker_id"] == 1
    error(requests.get(f"{v3}/brokers/9", timeout=30), 404, 40404)
    confs = {c["name"]: c for c in requests.get(f"{v3}/brokers/0/configs", timeout=30).json()["data"]}
    assert confs["num.partitions"]["source"] == "DEFAULT_CONFIG" and confs["num.partitions"]["is_read_only"]
    name = "rest-admin-" + uuid.uuid4().hex[:6]
    made = requests.post(
        f"{v3}/topics",
        json={
            "topic_name": name,
            "partitions_count": 2,
            "replication_factor": 2,
            "configs": [{"name": "retention.ms", "value": "600000"}],
        },
        timeout=60,
    )
    assert made.status_code == 201 and made.json()["partitions_count"] == 2 and made.json()["replication_factor"] == 2
    again = requests.post(f"{v3}/topics", json={"topic_name": name, "partitions_count": 1}, timeout=60)
    error(again, 400, 40002)
    assert again.json()["kafka_error_code"] == 36
    error(requests.post(f"{v3}/topics", json={"partitions_count": 1}, timeout=60), 422, 40001)
    ret = requests.get(f"{v3}/topics/{name}/configs/retention.ms", timeout=30).json()
    assert (ret["value"], ret["source"], ret["is_default"]) == ("600000", "DYNAMIC_TOPIC_CONFIG", False)
    assert {c["name"] for c in requests.get(f"{v3}/topics/{name}/configs", timeout=30).json()["data"]} == set(
        e2e_admin.describe_configs(name)
    )
    with rafka.Producer(e2e_cluster, acks="all") as p:
        p.send_batch(name, [(None, b"x", 0)] * 7 + [(None, b"y", 1)] * 3)
    assert requests.get(f"{gw}/topics/{name}/partitions/0/offsets", timeout=30).json() == {
        "beginning_offset": 0,
        "end_offset": 7,
    }
    error(requests.get(f"{gw}/topics/{name}/partitions/5/offsets", timeout=30), 404, 40402)
    e2e_admin.alter_consumer_group_offsets("rest-lag", {TopicPartition(name, 0): 2, TopicPartition(name, 1): 3})
    summary = requests.get(f"{v3}/consumer-groups/rest-lag/lag-summary", timeout=30).json()
    assert (
        summary["max_lag"],
        summary["total_lag"],
        summary["max_lag_topic_name"],
        summary["max_lag_partition_id"],
    ) == (5, 5, name, 0)
    listed = requests.get(f"{v3}/topics/-/partitions/-/reassignment", timeout=30).json()
    assert listed["kind"] == "KafkaReassignmentList" and listed["data"] == []
    assert requests.get(f"{v3}/topics/{name}/partitions/-/reassignment", timeout=30).json()["data"] == []
    error(requests.get(f"{v3}/topics/{name}/partitions/0/reassignment", timeout=30), 404, 40404)

    seen, todo, bad = set(), [v3.replace(f"/clusters/{cid}", "/clusters")], []
    while todo and len(seen) < 400:  # every self/related link of every v3 body reachable from the cluster list
        url = todo.pop()
        if url in seen:
            continue
        seen.add(url)
        r = requests.get(url, timeout=30)
        if r.status_code != 200:
            bad.append((url, r.status_code, r.text[:300]))
            continue

        def links(node):
            if isinstance(node, dict):
                for k, v in node.items():
                    if k in ("self", "related") and isinstance(v, str):
                        yield v
                    else:
                        yield from links(v)
            elif isinstance(node, list):
                for v in node:
                    yield from links(v)

        todo.extend(u for u in links(r.json()) if u.startswith(gw) and "/consumers/" not in u)
    assert not bad, bad
    assert any(u.endswith("/brokers/0/configs") for u in seen) and any(
        u.endswith(f"/topics/{name}/configs") for u in seen
    )
    assert any(u.endswith("/consumer-groups/rest-lag/lag-summary") for u in seen)
    assert requests.delete(f"{v3}/topics/{name}", timeout=60).status_code == 204
    error(requests.delete(f"{v3}/topics/{name}", timeout=60), 404, 40401)
