"""Shared fixtures. Unit tests need nothing from here; cluster tests share one Ray instance per session."""
from __future__ import annotations

import os
import uuid

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    """One real Ray cluster (a head node, loopback only) for the whole session.

    Tests that need node loss add and remove nodes on it (``ray_cluster.add_node(...)``); everything
    rafka creates is named by a per-test cluster name, so tests never see each other's actors.
    """
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_DEDUP_LOGS", "0")
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "include_dashboard": False, "node_ip_address": "127.0.0.1"},
    )
    ray.init(address=cluster.address, namespace="rafka", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@pytest.fixture
def cluster_name():
    """A fresh rafka cluster name per test, so actor names and GCS keys never collide."""
    return "t" + uuid.uuid4().hex[:10]
