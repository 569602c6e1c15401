"""Version negotiation with the real clients installed here, against the shared 3-broker cluster's Kafka
listeners (tests/e2e/conftest.py): confluent-kafka (librdkafka 2.16), kafka-python, aiokafka, kafkajs and kcat
(librdkafka 2.0.2) each connect, negotiate through ApiVersions (no fallback) and produce one record, which is
read back. Every request version each client sent (read from the client's own debug log) is one the
listener serves (serve/kafka_wire/versions.py). kcat's gzip batch is compressed because ApiVersions lists
Produce from v0 as Kafka 4 does (KAFKA-18659), and kcat posing as a 0.9 client (no ApiVersions, Produce v1)
still lists metadata but cannot produce: Produce v0-2 were removed in Kafka 4.0 (KIP-896)."""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import subprocess
import time
import uuid

from kio.schema.index import api_key_map

from serve.kafka_wire import versions

KEYS = {"".join(w.capitalize() for w in n.split("_")): k for k, n in api_key_map.items()}
ALIASES = {"ApiVersion": 18, "Offset": 2, "ListOffset": 2, "GroupCoordinator": 10}
LIBRDKAFKA_SENT = re.compile(r"Sent (\w+) \(v(\d+)")


def key_of(name: str) -> int:
    """The api key of a client's request class name (MetadataRequest, ApiVersionRequest_v0, ...)."""
    base = re.sub(r"(Request)?(_v\d+)?$", "", name)
    key = KEYS.get(base, ALIASES.get(base))
    assert key is not None, f"unknown request name {name!r}"
    return key


class Lines(logging.Handler):
    def __init__(self, *loggers: str):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.loggers = [logging.getLogger(n) for n in loggers]

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())

    def __enter__(self):
        for lg in self.loggers:
            lg.addHandler(self)
            lg.setLevel(logging.DEBUG)
        return self

    def __exit__(self, *exc):
        for lg in self.loggers:
            lg.removeHandler(self)
            lg.setLevel(logging.NOTSET)


def confluent(bootstrap: str, topic: str, value: bytes) -> list[tuple[int, int]]:
    import confluent_kafka

    with Lines("rafka-test-librdkafka") as h:
        p = confluent_kafka.Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "debug": "protocol"},
            logger=logging.getLogger("rafka-test-librdkafka"),
        )
        errors: list = []
        p.produce(topic, value, partition=0, on_delivery=lambda err, _m: errors.append(err))
        assert p.flush(30) == 0 and errors == [None], errors
        p.poll(0)
    return [(key_of(n), int(v)) for line in h.lines for n, v in LIBRDKAFKA_SENT.findall(line)]


def kafka_python(bootstrap: str, topic: str, value: bytes) -> list[tuple[int, int]]:
    from kafka import KafkaProducer

    with Lines("kafka") as h:
        p = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
        p.send(topic, value, partition=0).get(30)
        p.close()
    return [(key_of(n), int(v)) for line in h.lines for n, v in re.findall(r"Request \d+: (\w+)\(version=(\d+)", line)]


def aiokafka(bootstrap: str, topic: str, value: bytes) -> list[tuple[int, int]]:
    from aiokafka import AIOKafkaProducer

    async def go():
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
        await p.start()
        try:
            await p.send_and_wait(topic, value, partition=0)
        finally:
            await p.stop()

    with Lines("aiokafka") as h:
        asyncio.run(go())
    return [
        (key_of(n), int(v)) for line in h.lines for n, v in re.findall(r"Request to \S+ \d+: (\w+?)_v(\d+)\(", line)
    ]


def test_each_client_negotiates_served_versions_and_produces(kafkajs, bootstrap, e2e_topic):
    topic = e2e_topic(1, 1)
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (.ci/run installs the Debian package)"
    tag = uuid.uuid4().hex[:6]
    sent = {
        "confluent-kafka": confluent(bootstrap, topic, f"librdkafka-{tag}".encode()),
        "kafka-python": kafka_python(bootstrap, topic, f"kafka-python-{tag}".encode()),
        "aiokafka": aiokafka(bootstrap, topic, f"aiokafka-{tag}".encode()),
    }
    js = kafkajs("versions.js", bootstrap, topic, f"kafkajs-{tag}", timeout=120)
    assert js["error"] == 0
    sent["kafkajs"] = [tuple(p) for p in js["sent"]]
    # kcat (librdkafka 2.0.2) with gzip: compressed only if ApiVersions lists Produce v0 (librdkafka#4956). The
    # value is long and repetitive: librdkafka sends a batch uncompressed when gzip would make it larger
    kcat_value = f"kcat-{tag}" + "." * 400
    k = subprocess.run(
        [kcat, "-b", bootstrap, "-P", "-t", topic, "-p", "0", "-z", "gzip", "-d", "protocol,msg"],
        input=kcat_value + "\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert k.returncode == 0, k.stderr[-3000:]
    sent["kcat"] = [(key_of(n), int(v)) for n, v in LIBRDKAFKA_SENT.findall(k.stderr)]
    produced = [line for line in k.stderr.splitlines() if "Produce MessageSet with" in line]
    assert produced and all(line.rstrip().endswith("gzip)") for line in produced), produced
    assert "does not support compression" not in k.stderr

    for client, pairs in sent.items():
        assert pairs, f"{client}: no requests read from its debug log"
        refused = [(k, v) for k, v in pairs if not versions.supports(k, v)]
        assert not refused, f"{client} sent versions the listener does not serve: {refused}"
    by_client = {c: {k: sorted({v for kk, v in pairs if kk == k}) for k, _ in pairs} for c, pairs in sent.items()}
    # ApiVersions at each client's own version, answered at once (no UNSUPPORTED_VERSION fallback)
    expected_api_versions = {"confluent-kafka": [3], "kafka-python": [4], "aiokafka": [0], "kafkajs": [2], "kcat": [3]}
    assert {c: v[18] for c, v in by_client.items()} == expected_api_versions
    # the newest Metadata both librdkafka 2.16 and kafka-python send (v13, KIP-1102)
    assert by_client["confluent-kafka"][3] == [13] and by_client["kafka-python"][3] == [13]
    assert all(0 in v for v in by_client.values()), by_client  # each produced

    from kafka import KafkaConsumer, TopicPartition

    c = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    tp = TopicPartition(topic, 0)
    c.assign([tp])
    c.seek_to_beginning(tp)
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < 5 and time.monotonic() < deadline:
        for recs in c.poll(1000).values():
            got.extend(r.value for r in recs)
    c.close()
    assert sorted(got) == sorted(
        [f"{n}-{tag}".encode() for n in ("librdkafka", "kafka-python", "aiokafka", "kafkajs")] + [kcat_value.encode()]
    )


def test_a_pre_apiversions_client_lists_metadata_but_cannot_produce(bootstrap, e2e_topic):
    """kcat as a 0.9 client (``api.version.request=false``, ``broker.version.fallback=0.9.0``): Metadata v0 is
    still served, its Produce v1 closes the connection (KIP-896); the broker goes on serving others."""
    topic = e2e_topic(1, 1)
    kcat = shutil.which("kcat")
    assert kcat, "kcat is not installed (.ci/run installs the Debian package)"
    old = [kcat, "-b", bootstrap, "-X", "api.version.request=false", "-X", "broker.version.fallback=0.9.0"]
    md = subprocess.run([*old, "-L", "-t", topic, "-d", "protocol"], capture_output=True, text=True, timeout=60)
    assert md.returncode == 0 and f'topic "{topic}" with 1 partitions' in md.stdout, md.stderr[-2000:]
    assert ("MetadataRequest", "0") in LIBRDKAFKA_SENT.findall(md.stderr)
    pr = subprocess.run(
        [*old, "-P", "-t", topic, "-p", "0", "-d", "protocol", "-X", "message.timeout.ms=5000"],
        input="old\n",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert pr.returncode != 0, pr.stderr[-2000:]
    assert ("ProduceRequest", "1") in LIBRDKAFKA_SENT.findall(pr.stderr)
    ok = subprocess.run(
        [kcat, "-b", bootstrap, "-P", "-t", topic, "-p", "0"], input="new\n", capture_output=True, text=True, timeout=60
    )
    assert ok.returncode == 0, ok.stderr[-2000:]
    out = subprocess.run(
        [kcat, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-e", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.stdout.split() == ["new"]
