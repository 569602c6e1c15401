"""The ports `rafka cluster start` hands to `ray start --head` (no Ray)."""

from __future__ import annotations

import socket

from rafka.cli.clusterctl import free_ports


def test_free_ports_are_distinct_bindable_and_outside_rays_worker_range():
    # Ports picked one at a time can repeat (the kernel reuses a closed probe's port); the CI once saw
    # gcs_server and client_server given the same port. Many draws make a repeat likely if the picker
    # released each probe before taking the next.
    for _ in range(20):
        ports = free_ports(30)
        assert len(ports) == 30
        assert len(set(ports)) == 30, sorted(ports)
        assert all(not 10002 <= p <= 19999 for p in ports)
    # the ports are released: each can be bound again
    for p in free_ports(3):
        with socket.socket() as s:
            s.bind(("", p))
