"""Shared fixtures. Unit tests need nothing from here; cluster tests share one Ray instance per session."""

from __future__ import annotations

import os
import uuid

import pytest

# Loopback-only clusters: without this, ray.init() rewrites "127.0.0.1:<port>" to the machine's own IP
# (services.resolve_ip_for_localhost) while the head node listens on 127.0.0.1 only, and the connect
# times out. Must be set before ray is imported (ray_constants reads it at import).
os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
# Ray Data's usage collection starts a daemon thread in the driver (ray.data._internal.usage.poller) that polls
# Prometheus every 10 s for the life of the process: in this pytest process it outlived the session and wrote
# to pytest's closed capture stream, so a fresh clone's `make test` ended with a "--- Logging error ---"
# traceback after the results line. The tests read no usage statistics: no poller.
os.environ.setdefault("RAY_DATA_USAGE_DISABLED", "1")


@pytest.fixture(scope="session")
def ray_cluster():
    """One real Ray cluster (a head node, loopback only) for the whole session.

    Tests that need node loss add and remove nodes on it (``ray_cluster.add_node(...)``); everything
    rafka creates is named by a per-test cluster name, so tests never see each other's actors.
    """
    import ray
    import ray._private.services as services
    from ray.cluster_utils import Cluster

    from protocol.names import RAY_NAMESPACE
    from rafka.cluster import WORKER_NICENESS

    # ray.init canonicalizes 127.0.0.1 to the machine's routable IP, where a loopback-only GCS does not
    # listen ("Timed out while waiting for GCS"): keep loopback addresses as given in this driver.
    services.resolve_ip_for_localhost = lambda host: host
    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 2,
            "include_dashboard": False,
            "node_ip_address": "127.0.0.1",
            # as LocalCluster and `rafka cluster start` run rafka's actors (rafka/cluster.py)
            "_system_config": {"worker_niceness": WORKER_NICENESS},
        },
    )
    ray.init(address=cluster.address, namespace=RAY_NAMESPACE, log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def cluster_name():
    """A fresh rafka cluster name per test, so actor names and GCS keys never collide."""
    return "t" + uuid.uuid4().hex[:10]
