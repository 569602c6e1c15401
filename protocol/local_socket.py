"""Same-node connections over Unix domain sockets. The replication and client listeners
(actors/replication_channel.py ``TokenListener``) serve a Unix socket beside their TCP port and name it in
their endpoint with the node it lives on (``node_key``); a peer on the same node connects there, any other
over TCP. The token handshake and the frames are the same on both.

Why: every hop of a replicated append is one message each way between two processes on a node (client or
Kafka listener -> leader, leader <-> each follower), and on the 2-core test machine a loopback TCP message
costs ~55 us of CPU on each side and a ping-pong 134 us, a Unix socket's 32 us and 73 us
(docs/internals.md, cost model). A peer falls back to TCP when the socket cannot be reached (another mount
namespace with the same host name, a listener that went away), so the Unix path is never needed for
correctness.

No Ray import: the Python clients use it too (protocol/data_channel.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import tempfile

# sun_path holds 108 bytes on Linux; a longer path is not served (TCP only)
MAX_PATH = 100


@functools.lru_cache(maxsize=1)
def node_key() -> str:
    """This OS instance: the host name and the kernel's boot id (two containers sharing a kernel differ by
    host name; a same-named one without the socket's directory falls back to TCP at connect)."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
    except OSError:
        boot = ""
    return f"{socket.gethostname()}/{boot}"


def socket_dir() -> str:
    """The node's directory of rafka's sockets (``RAFKA_SOCKET_DIR``, else a per-user one under the temp
    directory), private to the user."""
    d = os.environ.get("RAFKA_SOCKET_DIR") or os.path.join(tempfile.gettempdir(), f"rafka-sockets-{os.getuid()}")
    os.makedirs(d, mode=0o700, exist_ok=True)
    return d


def socket_path(tag: str) -> str | None:
    """A fresh socket path for this process (``<pid>-<tag>.sock``), or None: too long, or Unix sockets are
    off on this node (``RAFKA_UNIX_SOCKETS=0`` in the servers' environment: every peer uses TCP)."""
    if os.environ.get("RAFKA_UNIX_SOCKETS", "1") == "0":
        return None
    path = os.path.join(socket_dir(), f"{os.getpid()}-{tag}.sock")
    return path if len(path.encode()) <= MAX_PATH else None


def reap_stale() -> int:
    """Remove the sockets of processes that are gone (a SIGKILLed replica cannot unlink its own); returns
    how many. Sockets of live processes are kept, whoever they belong to."""
    removed = 0
    try:
        names = os.listdir(socket_dir())
    except OSError:
        return 0
    for name in names:
        pid, _, rest = name.partition("-")
        if not (pid.isdigit() and rest.endswith(".sock")):
            continue
        try:
            os.kill(int(pid), 0)
            continue
        except ProcessLookupError:
            pass
        except PermissionError:
            continue  # alive, someone else's
        with contextlib.suppress(OSError):
            os.unlink(os.path.join(socket_dir(), name))
            removed += 1
    return removed


def local_path(endpoint: dict) -> str | None:
    """The endpoint's Unix socket if it is on this node."""
    path = endpoint.get("uds")
    if isinstance(path, str) and path and endpoint.get("node") == node_key():
        return path
    return None


async def open_stream(endpoint: dict, timeout_s: float) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Connect to a listener's ``endpoint``: its Unix socket when on this node and reachable, else TCP
    (``host``, ``port``). Raises what the TCP connect raises."""
    path = local_path(endpoint)
    if path is not None:
        try:
            return await asyncio.wait_for(asyncio.open_unix_connection(path), timeout_s)
        except (OSError, asyncio.TimeoutError):
            pass  # not reachable from here after all: TCP
    return await asyncio.wait_for(asyncio.open_connection(endpoint["host"], endpoint["port"]), timeout_s)


def is_unix(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    return sock is not None and sock.family == socket.AF_UNIX
