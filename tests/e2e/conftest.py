"""End-to-end tests: the Serve HTTP gateway and the Spark jobs (RayDP) against a real rafka cluster on the
session's Ray (tests/conftest.py). Fixtures private to one suite live in that suite's module."""

from __future__ import annotations

import itertools
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
import requests
from support import SMALL_INTERNAL_TOPICS

import rafka

_names = itertools.count()
KAFKAJS = Path(__file__).parent / "kafkajs"


@pytest.fixture(scope="package")
def e2e_cluster(ray_cluster, tmp_path_factory):
    """One 3-broker rafka cluster (stopped when the package is done) shared by the gateway, Spark and Kafka wire
    suites (they only create their own topics); its brokers' Kafka listeners are on ephemeral loopback ports."""
    cluster = rafka.LocalCluster(
        brokers=3,
        name="e" + uuid.uuid4().hex[:8],
        data_dir=tmp_path_factory.mktemp("rafka-e2e"),
        broker_config={
            **SMALL_INTERNAL_TOPICS,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            # a new group's first rebalance waits this long for more members (Kafka's 3 s default): every
            # group these suites form (wire clients, the gateway's consumers, kafkajs) would pay it
            "group.initial.rebalance.delay.ms": 100,
        },
    )
    yield cluster
    cluster.stop()


@pytest.fixture(scope="package")
def e2e_admin(e2e_cluster):
    return rafka.Admin(e2e_cluster)


@pytest.fixture
def e2e_topic(e2e_admin):
    """``e2e_topic(partitions, rf, **configs)`` -> a fresh topic name; deleted after the test, so the shared
    cluster does not accumulate replica actors (each one is a process polling its leader)."""
    made: list[str] = []

    def make(partitions: int = 1, rf: int = 1, **configs) -> str:
        name = f"e{next(_names)}-{uuid.uuid4().hex[:6]}"
        e2e_admin.create_topic(name, partitions, rf, {k.replace("_", "."): v for k, v in configs.items()})
        made.append(name)
        return name

    yield make
    existing = set(e2e_admin.list_topics())
    if [t for t in made if t in existing]:
        e2e_admin.delete_topics([t for t in made if t in existing])


@pytest.fixture(scope="package")
def bootstrap(e2e_cluster) -> str:
    """The Kafka clients' ``bootstrap.servers`` of the shared cluster."""
    return e2e_cluster.bootstrap_servers


@pytest.fixture(scope="package")
def gateway(e2e_cluster):
    """One REST gateway (Ray Serve) on the e2e cluster, shared by test_http_gateway.py (``gw``) and
    test_web_console.py (``console``): one Serve start and shutdown for both. A short delivery timeout so a
    NOT_ENOUGH_REPLICAS produce fails in seconds rather than after Kafka's two minutes of retries; an 8 MiB
    body limit and a 5 s body timeout (test_http_gateway's BODY_LIMIT, BODY_TIMEOUT_S), so the edge tests
    stay short. Stopped when the package is done: its app is deleted and nothing answers on its port."""
    from rafka.cli.clusterctl import free_port
    from serve.gateway import start_gateway, stop_gateway

    url = start_gateway(
        e2e_cluster,
        port=free_port(),
        max_request_bytes=8 << 20,
        body_timeout_s=5.0,
        producer_config={"delivery_timeout_ms": 8000, "request_timeout_ms": 4000, "linger_ms": 5},
    )
    yield url
    assert stop_gateway() is True
    with pytest.raises(requests.ConnectionError):
        requests.get(f"{url}/health", timeout=5)


@pytest.fixture(scope="package")
def kafkajs():
    """``kafkajs(script, *args, timeout=150)`` runs ``node tests/e2e/kafkajs/<script> <args>`` and returns the JSON
    summary the script prints on its last line of stdout (a non-zero exit fails the test with its output).
    kafkajs 2.2.4 (npm, pure JavaScript) is installed once per run from tests/e2e/kafkajs's lock file (``npm ci``
    into its gitignored node_modules): no Node.js, no npm or no registry fails the tests."""
    node, npm = shutil.which("node"), shutil.which("npm")
    assert node and npm, "the kafkajs tests need Node.js and npm (Node 20)"
    r = subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=KAFKAJS, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, f"npm ci failed (registry unreachable?):\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    assert (KAFKAJS / "node_modules" / "kafkajs" / "package.json").exists()

    def run(script: str, *args: str, timeout: float = 150) -> dict:
        r = subprocess.run(
            [node, str(KAFKAJS / script), *args], cwd=KAFKAJS, capture_output=True, text=True, timeout=timeout
        )
        assert r.returncode == 0, f"node {script} {' '.join(args)} failed:\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}"
        return json.loads(r.stdout.strip().splitlines()[-1])

    return run


@pytest.fixture
def failover_cluster(ray_cluster, tmp_path):
    """A 3-broker cluster of its own for a test that kills a broker (not the shared ``e2e_cluster``), listeners
    on ephemeral loopback ports, a dead broker fenced after 4 s."""
    cluster = rafka.LocalCluster(
        brokers=3,
        name="wf" + uuid.uuid4().hex[:8],
        data_dir=tmp_path,
        broker_config={
            **SMALL_INTERNAL_TOPICS,
            "listeners": "PLAINTEXT://127.0.0.1:0",
            "replica.lag.time.max.ms": 2000,
            # a dead broker is fenced after this much silence (Kafka's default 9 s): keeps the test short
            "broker.session.timeout.ms": 4000,
            "broker.heartbeat.interval.ms": 500,
            # transactions past their timeout are aborted within this (Kafka's default 10 s)
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 500,
        },
    )
    yield cluster
    cluster.stop()
