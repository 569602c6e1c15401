"""HTTP gateway throughput and latency: produce through Serve with 1 to 10,000 records per request, and one v3
streaming request.

    .venv/bin/python benchmarks/http_bench.py --json
    .venv/bin/python benchmarks/http_bench.py --seconds 5 --threads 4 --sizes 1000 --formats msgpack

Starts its own LocalCluster (3 brokers, a 6-partition topic with replication factor 3 by default) and the
gateway, then for each (format, records per request) runs ``--threads`` HTTP clients (one keep-alive
connection each) posting the same prepared body for ``--seconds``. Formats: ``json`` is the v2 binary
embedded format (base64 values in JSON), ``msgpack`` is rafka's raw-bytes content type. Every response is
checked (HTTP 200, no per-record error). Prints records/s, MB/s (values only) and request latency p50/p99.
Then one v3 streaming request (``--stream-records`` in chunks of ``--stream-chunk``, sent as fast as the
connection takes them while the reports are read back): records/s and the delay from a chunk's send to
its last report (queueing included, since the sender does not wait).
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import socket
import sys
import tempfile
import threading
import time

import msgpack
import requests

import rafka
from rafka.output import claim_stdout
from serve.gateway import start_gateway, stop_gateway

BINARY_V2 = "application/vnd.kafka.binary.v2+json"
MSGPACK = "application/vnd.rafka.msgpack"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def body_for(fmt: str, n: int, value_size: int) -> tuple[bytes, dict]:
    values = [os.urandom(value_size) for _ in range(n)]
    if fmt == "msgpack":
        return msgpack.packb({"records": [{"value": v} for v in values]}, use_bin_type=True), {
            "Content-Type": MSGPACK,
            "Accept": MSGPACK,
        }
    return json.dumps({"records": [{"value": base64.b64encode(v).decode()} for v in values]}).encode(), {
        "Content-Type": BINARY_V2
    }


def check(resp: requests.Response, fmt: str, n: int) -> None:
    if resp.status_code != 200:
        raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:300]}")
    body = msgpack.unpackb(resp.content) if fmt == "msgpack" else resp.json()
    offsets = body["offsets"]
    if len(offsets) != n or any(o["error_code"] is not None for o in offsets):
        raise RuntimeError(f"per-record errors: {[o for o in offsets if o['error_code'] is not None][:3]}")


def run_case(url: str, topic: str, fmt: str, n: int, value_size: int, threads: int, seconds: float) -> dict:
    body, headers = body_for(fmt, n, value_size)
    lat: list[float] = []
    errors: list[str] = []
    lock = threading.Lock()
    start_evt = threading.Event()
    deadline = [0.0]

    def client() -> None:
        mine = []
        with requests.Session() as s:
            start_evt.wait()
            while time.monotonic() < deadline[0]:
                t0 = time.perf_counter()
                try:
                    check(s.post(f"{url}/topics/{topic}", data=body, headers=headers, timeout=120), fmt, n)
                except Exception as exc:  # noqa: BLE001 - counted and reported
                    with lock:
                        errors.append(str(exc))
                    continue
                mine.append(time.perf_counter() - t0)
        with lock:
            lat.extend(mine)

    workers = [threading.Thread(target=client) for _ in range(threads)]
    for w in workers:
        w.start()
    t0 = time.monotonic()
    deadline[0] = t0 + seconds
    start_evt.set()
    for w in workers:
        w.join()
    elapsed = time.monotonic() - t0
    lat.sort()
    records = len(lat) * n

    def pct(q: float) -> float:
        return round(lat[min(len(lat) - 1, int(q * len(lat)))] * 1000, 2) if lat else float("nan")

    return {
        "format": fmt,
        "records_per_request": n,
        "requests": len(lat),
        "records": records,
        "elapsed_s": round(elapsed, 2),
        "requests_per_s": round(len(lat) / elapsed, 1),
        "records_per_s": round(records / elapsed, 1),
        "mb_per_s": round(records * value_size / elapsed / 1e6, 2),
        "latency_p50_ms": pct(0.50),
        "latency_p99_ms": pct(0.99),
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
    }


def run_v3_stream(url: str, cluster_id: str, topic: str, records: int, per_chunk: int, value_size: int) -> dict:
    """One v3 streaming request (chunked, kept open): ``records`` records sent ``per_chunk`` at a time while
    a reader takes the report lines back; records/s end to end and the delay from a chunk's send to its
    last record's report (p50/p99)."""
    import http.client
    from urllib.parse import urlparse

    where = urlparse(url)
    conn = http.client.HTTPConnection(where.hostname, where.port, timeout=120)
    conn.putrequest("POST", f"/v3/clusters/{cluster_id}/topics/{topic}/records")
    conn.putheader("Content-Type", "application/json")
    conn.putheader("Transfer-Encoding", "chunked")
    conn.endheaders()
    value = base64.b64encode(os.urandom(value_size)).decode()
    chunk = "".join(json.dumps({"value": {"type": "BINARY", "data": value}}) + "\n" for _ in range(per_chunk)).encode()
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    chunks = records // per_chunk
    sent_at: list[float] = []
    t0 = time.monotonic()
    conn.send(frame)
    sent_at.append(time.perf_counter())
    resp = conn.getresponse()
    delays, errors, got = [], 0, 0

    def sender() -> None:
        for _ in range(chunks - 1):
            conn.send(frame)
            sent_at.append(time.perf_counter())
        conn.send(b"0\r\n\r\n")

    th = threading.Thread(target=sender)
    th.start()
    while got < chunks * per_chunk:
        line = resp.readline()
        if not line:
            break
        got += 1
        errors += json.loads(line)["error_code"] != 200
        if got % per_chunk == 0:
            delays.append(time.perf_counter() - sent_at[got // per_chunk - 1])
    th.join()
    resp.read()
    conn.close()
    elapsed = time.monotonic() - t0
    delays.sort()
    return {
        "format": "v3-stream",
        "records_per_chunk": per_chunk,
        "records": got,
        "elapsed_s": round(elapsed, 2),
        "records_per_s": round(got / elapsed, 1),
        "mb_per_s": round(got * value_size / elapsed / 1e6, 2),
        "report_delay_p50_ms": round(delays[len(delays) // 2] * 1000, 2) if delays else None,
        "report_delay_p99_ms": round(delays[min(len(delays) - 1, int(0.99 * len(delays)))] * 1000, 2)
        if delays
        else None,
        "errors": errors + (chunks * per_chunk - got),
        "first_error": None,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--brokers", type=int, default=3)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--replication-factor", type=int, default=3)
    ap.add_argument("--acks", default="all")
    ap.add_argument("--replicas", type=int, default=1, help="gateway replicas")
    ap.add_argument("--threads", type=int, default=8, help="concurrent HTTP clients")
    ap.add_argument("--seconds", type=float, default=10.0, help="per case")
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--sizes", default="1,100,1000,10000", help="records per request, comma-separated")
    ap.add_argument("--formats", default="json,msgpack")
    ap.add_argument(
        "--producer-config", default="", help="gateway producer overrides, e.g. batch_size=98304,linger_ms=2"
    )
    ap.add_argument(
        "--stream-records", type=int, default=50000, help="records in the one v3 streaming request (0: skip that case)"
    )
    ap.add_argument("--stream-chunk", type=int, default=500, help="records per chunk of the streaming request")
    ap.add_argument("--json", action="store_true", help="print one JSON object")
    args = ap.parse_args()
    stdout = claim_stdout()
    with tempfile.TemporaryDirectory(prefix="rafka-http-bench-") as data_dir:
        cluster = rafka.LocalCluster(brokers=args.brokers, data_dir=data_dir, name="httpbench")
        try:
            rafka.Admin(cluster).create_topic(
                "bench",
                args.partitions,
                args.replication_factor,
                {"min.insync.replicas": str(min(2, args.replication_factor))},
            )
            t0 = time.monotonic()
            pconf = dict(kv.split("=", 1) for kv in args.producer_config.split(",") if kv)
            url = start_gateway(
                cluster,
                port=free_port(),
                acks=args.acks,
                num_replicas=args.replicas,
                producer_config={k: int(v) if v.isdigit() else v for k, v in pconf.items()},
            )
            startup = time.monotonic() - t0
            cases = []
            for fmt in args.formats.split(","):
                for n in (int(x) for x in args.sizes.split(",")):
                    cases.append(run_case(url, "bench", fmt, n, args.value_size, args.threads, args.seconds))
                    if not args.json:
                        print(json.dumps(cases[-1]), file=sys.stderr)
            if args.stream_records:
                cases.append(
                    run_v3_stream(url, cluster.name, "bench", args.stream_records, args.stream_chunk, args.value_size)
                )
            stop_gateway()
        finally:
            cluster.stop()
    out = {
        "benchmark": "http_gateway_produce",
        "brokers": args.brokers,
        "partitions": args.partitions,
        "replication_factor": args.replication_factor,
        "acks": args.acks,
        "gateway_replicas": args.replicas,
        "client_threads": args.threads,
        "producer_config": args.producer_config or None,
        "value_size": args.value_size,
        "gateway_start_s": round(startup, 2),
        "cases": cases,
    }
    print(json.dumps(out, indent=None if args.json else 2), file=stdout)
    return 1 if any(c["errors"] for c in cases) else 0


if __name__ == "__main__":
    sys.exit(main())
