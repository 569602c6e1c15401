"""The CLI agent's port: `rafka cluster start` probes a free port for it after `ray start`, and any process may
bind that port before the agent does. The agent's creation then fails (EADDRINUSE) and Ray does not retry a
failed creation, so `start_agent` tries another port (rafka/cli/agent.py)."""

from __future__ import annotations

import socket
import uuid

import pytest
import ray
from ray.exceptions import RayActorError

from protocol.names import RAY_NAMESPACE
from rafka.cli.agent import AGENT_NAME, start_agent
from rafka.cli.clusterctl import free_port
from rafka.cli.main import ENTRY
from rafka.cli.remote import recv_frame, send_frame


def _kill(name: str) -> None:
    try:
        ray.kill(ray.get_actor(AGENT_NAME.format(cluster=name), namespace=RAY_NAMESPACE))
    except ValueError:
        pass


def test_agent_takes_another_port_when_its_probed_port_was_taken(ray_cluster):
    held = socket.socket()
    held.bind(("127.0.0.1", 0))
    held.listen()  # another process took the probed port first
    taken = held.getsockname()[1]
    moved, stuck = "ap" + uuid.uuid4().hex[:6], "ap" + uuid.uuid4().hex[:6]
    try:
        ep = start_agent(moved, "unused", taken, "tok", ENTRY, pick_port=free_port)
        assert ep["port"] != taken
        with socket.create_connection(("127.0.0.1", ep["port"]), timeout=30) as s:  # it serves there
            send_frame(s, {"token": "wrong", "argv": ["topic", "list"]})
            assert "bad token" in recv_frame(s)["error"]
        # without another port to try, the bind error is the caller's, at once (not a 60 s wait)
        with pytest.raises(RayActorError, match="Address already in use"):
            start_agent(stuck, "unused", taken, "tok", ENTRY)
    finally:
        held.close()
        _kill(moved)
        _kill(stuck)
