"""The Kafka-client step of ``make demo``: unmodified Kafka clients talk to rafka over Kafka's wire protocol
(serve/kafka_wire, one listener per broker). librdkafka (confluent-kafka) reads the click topic that was
posted over HTTP and must see every event once, in each user's order; an idempotent librdkafka producer
(acks=all) writes a topic that rafka's own Python consumer reads back exactly; kcat, if installed, lists
the cluster's metadata."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import uuid

KAFKA_TOPIC = "clicks-from-kafka-client"


def _read_with_librdkafka(bootstrap: str, topic: str, partitions: int, ends: dict[int, int]) -> dict:
    """Every record of ``topic`` up to ``ends`` through confluent-kafka (assign from the beginning)."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "demo-wire-" + uuid.uuid4().hex[:6],
            "enable.auto.commit": False,
            "broker.address.family": "v4",
        }
    )
    c.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen: set[int] = set()
    dups = order_breaks = got = 0
    last_seq: dict[str, int] = {}
    pos = {p: 0 for p in range(partitions)}
    t = time.monotonic()
    deadline = t + 120
    while any(pos[p] < ends[p] for p in pos) and time.monotonic() < deadline:
        for m in c.consume(num_messages=5000, timeout=1.0):
            if m.error():
                continue
            pos[m.partition()] = m.offset() + 1
            ev = json.loads(m.value())
            dups += ev["id"] in seen
            seen.add(ev["id"])
            order_breaks += ev["seq"] <= last_seq.get(ev["user"], 0)
            last_seq[ev["user"]] = ev["seq"]
            got += 1
    secs = time.monotonic() - t
    c.close()
    return {"seen": seen, "dups": dups, "order_breaks": order_breaks, "got": got, "secs": secs, "users": len(last_seq)}


def wire_part(cluster, admin, topic: str, partitions: int, events: list[dict], console) -> list:
    """Run the step; returns its ``(check, passed, detail)`` rows for the demo's summary."""
    from confluent_kafka import Producer

    import rafka
    from rafka import TopicPartition

    bootstrap = cluster.bootstrap_servers
    console.rule("Real Kafka clients over Kafka's wire protocol")
    console.print(f"  bootstrap.servers = [bold]{bootstrap}[/] (one listener per broker)")
    checks: list = []

    c = rafka.Consumer(cluster)
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    ends = {tp.partition: o for tp, o in c.end_offsets(tps).items()}
    c.close()
    r = _read_with_librdkafka(bootstrap, topic, partitions, ends)
    want = {e["id"] for e in events}
    console.print(
        f"  librdkafka (confluent-kafka) read {r['got']:,} records of {topic!r} in {r['secs']:.1f} s "
        f"({r['got'] / max(r['secs'], 1e-9):,.0f} records/s)"
    )
    checks.append(
        (
            "Kafka client: librdkafka reads every click once, in order",
            r["seen"] == want and r["dups"] == 0 and r["order_breaks"] == 0,
            f"{len(r['seen']):,}/{len(want):,} events, {r['dups']} duplicates, {r['order_breaks']} out of order, "
            f"{r['users']} users",
        )
    )

    admin.create_topic(KAFKA_TOPIC, num_partitions=3, replication_factor=3, configs={"min.insync.replicas": "2"})
    n = 5000
    sent = [(f"user-{i % 97}".encode(), json.dumps({"i": i}).encode()) for i in range(n)]
    errors: list = []
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "broker.address.family": "v4",
        }
    )
    t = time.monotonic()
    for k, v in sent:
        while True:
            try:
                p.produce(KAFKA_TOPIC, v, k, on_delivery=lambda err, _m: err and errors.append(err))
                break
            except BufferError:
                p.poll(0.05)
    left = p.flush(60)
    prod_s = time.monotonic() - t
    cons = rafka.Consumer(cluster, auto_offset_reset="earliest")
    ktps = [TopicPartition(KAFKA_TOPIC, q) for q in range(3)]
    cons.assign(ktps)
    kends = cons.end_offsets(ktps)
    back: list[tuple[bytes, bytes]] = []
    where: dict[bytes, set[int]] = {}
    deadline = time.monotonic() + 60
    while any(cons.position(tp) < kends[tp] for tp in ktps) and time.monotonic() < deadline:
        for tp, recs in cons.poll(timeout_ms=1000).items():
            for rec in recs:
                back.append((rec.key, rec.value))
                where.setdefault(rec.key, set()).add(tp.partition)
    cons.close()
    in_order = all(
        [v for k, v in back if k == key] == [v for k2, v in sent if k2 == key] for key in {k for k, _ in sent}
    )
    console.print(
        f"  librdkafka producer (idempotent, acks=all) wrote {n:,} keyed records in {prod_s:.1f} s; "
        f"rafka's Python consumer read {len(back):,} back"
    )
    checks.append(
        (
            "Kafka client: librdkafka's records read back by rafka's client",
            not errors
            and left == 0
            and sorted(back) == sorted(sent)
            and in_order
            and all(len(ps) == 1 for ps in where.values()),
            f"{len(back):,}/{n:,} records, {len(errors)} delivery errors, one partition per key, per-key order kept",
        )
    )

    kcat = shutil.which("kcat")
    if kcat:
        out = subprocess.run(
            [kcat, "-b", bootstrap, "-L", "-J", "-X", "broker.address.family=v4"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        md = json.loads(out.stdout) if out.returncode == 0 and out.stdout.strip() else {}
        names = {t["topic"] for t in md.get("topics", [])}
        console.print(f"  kcat -L: {len(md.get('brokers', []))} brokers, topics {sorted(names)}")
        checks.append(
            (
                "Kafka client: kcat lists the cluster",
                {topic, KAFKA_TOPIC} <= names and len(md.get("brokers", [])) == len(cluster.broker_ids()),
                f"{len(md.get('brokers', []))} brokers, {len(names)} topics",
            )
        )
    return checks
