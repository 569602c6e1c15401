"""Fixtures of the multi-node suites: real Ray nodes, each in its own Linux network namespace (rafka.testkit).
Root only (CI runs as root); every cluster is closed after its test, however the test ends. The probes run
inside namespaces are in probes.py."""

from __future__ import annotations

import pytest

from rafka.testkit import NodeCluster, sweep_stale


@pytest.fixture
def node_cluster(tmp_path):
    """Factory: ``node_cluster(n, **kw)`` starts a NodeCluster of ``n`` nodes under tmp_path; all closed after the
    test, however it ends."""
    sweep_stale()  # what a killed earlier run left
    made: list[NodeCluster] = []

    def make(n: int = 3, **kw) -> NodeCluster:
        cluster = NodeCluster(n, root=str(tmp_path / f"cluster{len(made)}"), **kw)
        made.append(cluster)
        return cluster

    try:
        yield make
    finally:
        for cluster in made:
            cluster.close()
