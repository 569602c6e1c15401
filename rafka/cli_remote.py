"""The CLI's fast path: a verb runs in the cluster's CLI agent (rafka/cli_agent.py) instead of this process.

Attaching to Ray costs a CLI process ~1-1.5 s (``import ray`` alone is most of a second) before a verb does
anything. ``rafka cluster start`` therefore starts one agent actor on the head node, already attached, that
listens on a loopback port recorded (with a random token) in the state file. For the verbs that only talk to
the cluster (topic, group, txn, cluster info/health/configs) the CLI sends its argv there and relays what the
verb prints, the exit code, its stdin (``topic produce``) and Ctrl-C; this process never imports Ray.

When there is no agent (a cluster attached with ``--address`` / ``RAY_ADDRESS``, a state file from another
machine, the agent restarting) the verb runs here as before. ``RAFKA_CLI_AGENT=0`` forces that path.

Frames both ways: a 4-byte big-endian length, then a msgpack map. Client -> agent: ``{token, argv, tty}``,
then ``{i: bytes}`` (stdin), ``{eof: 1}``, ``{int: 1}`` (Ctrl-C). Agent -> client: ``{ok: 1}`` or
``{error: text}`` after the hello, then ``{o: text}`` (stdout), ``{e: text}`` (stderr) and ``{x: code}`` last.
"""

from __future__ import annotations

import os
import socket
import struct
import sys
import threading
from typing import Any

import msgpack

MAX_FRAME = 64 * 1024 * 1024
CONNECT_TIMEOUT_S = 0.5
HELLO_TIMEOUT_S = 5.0
_LEN = struct.Struct(">I")


class AgentGone(ConnectionError):
    """The agent's connection ended before it sent the verb's exit code (the agent process died)."""


def send_frame(sock: socket.socket, obj: dict, lock: threading.Lock | None = None) -> None:
    body = msgpack.packb(obj, use_bin_type=True)
    data = _LEN.pack(len(body)) + body
    if lock is None:
        sock.sendall(data)
    else:
        with lock:
            sock.sendall(data)


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(min(n - len(buf), 1 << 20))
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def recv_frame(sock: socket.socket) -> dict | None:
    """The next frame, or None when the peer closed the connection."""
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    (size,) = _LEN.unpack(head)
    if size > MAX_FRAME:
        raise ConnectionError(f"CLI agent frame of {size} bytes exceeds {MAX_FRAME}")
    body = _recv_exact(sock, size)
    if body is None:
        return None
    obj = msgpack.unpackb(body, raw=False)
    if not isinstance(obj, dict):
        raise ConnectionError("CLI agent frame is not a map")
    return obj


def agent_endpoint(args) -> dict | None:
    """The recorded agent of the started cluster, when this verb may use it: no ``--address``, no
    ``RAY_ADDRESS``, no other ``--cluster`` and ``RAFKA_CLI_AGENT`` not ``0``."""
    if os.environ.get("RAFKA_CLI_AGENT", "1") == "0":
        return None
    if getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"):
        return None
    from rafka.cluster import read_state

    state = read_state() or {}
    agent = state.get("cli_agent")
    if not isinstance(agent, dict) or not {"host", "port", "token"} <= agent.keys():
        return None
    if getattr(args, "cluster", None) not in (None, state.get("cluster")):
        return None
    return agent


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def run_remote(argv: list[str], args, out, err=None) -> int | None:
    """Run ``argv`` in the cluster's CLI agent; its stdout goes to ``out``, its stderr to ``err`` (default
    sys.stderr). Returns the verb's exit code, or None when no agent answered (the caller runs the verb here)."""
    agent = agent_endpoint(args)
    if agent is None:
        return None
    try:
        sock = socket.create_connection((agent["host"], int(agent["port"])), timeout=CONNECT_TIMEOUT_S)
    except OSError:
        return None
    err = err or sys.stderr
    wants_stdin = bool(getattr(args, "stdin", False))
    try:
        sock.settimeout(HELLO_TIMEOUT_S)
        tty = {"stdin": _isatty(sys.stdin) and wants_stdin, "stdout": _isatty(out), "stderr": _isatty(err)}
        send_frame(sock, {"token": agent["token"], "argv": list(argv), "tty": tty})
        reply = recv_frame(sock)
        if reply is None or not reply.get("ok"):
            sock.close()
            return None  # a stale state file (another process on that port, a new token): run it here
        sock.settimeout(None)
    except (OSError, ValueError, msgpack.UnpackException):
        sock.close()
        return None
    lock = threading.Lock()
    if wants_stdin:
        threading.Thread(target=_pump_stdin, args=(sock, lock), name="rafka-cli-stdin", daemon=True).start()
    try:
        return _relay(sock, lock, out, err)
    except (AgentGone, OSError, ValueError, msgpack.UnpackException) as exc:
        err.write(f"rafka: {exc}\n")
        return 1
    finally:
        sock.close()


def _pump_stdin(sock: socket.socket, lock: threading.Lock) -> None:
    """This process's stdin, as it arrives, to the verb in the agent; end of input as ``eof``."""
    try:
        fd = sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        fd = None
    try:
        while True:
            chunk = os.read(fd, 65536) if fd is not None else sys.stdin.buffer.read1(65536)
            if not chunk:
                break
            send_frame(sock, {"i": chunk}, lock)
        send_frame(sock, {"eof": 1}, lock)
    except OSError:
        return


def _relay(sock: socket.socket, lock: threading.Lock, out, err) -> int:
    interrupts = 0
    while True:
        try:
            frame = recv_frame(sock)
            if frame is None:
                raise AgentGone("the cluster's CLI agent went away before the command finished")
            if "o" in frame:
                try:
                    out.write(frame["o"])
                    out.flush()
                except BrokenPipeError:  # `rafka topic consume ... | head`: stop the verb, exit quietly
                    return 0
            elif "e" in frame:
                err.write(frame["e"])
                err.flush()
            elif "x" in frame:
                return int(frame["x"])
        except KeyboardInterrupt:
            # Ctrl-C goes to the verb (produce flushes what was typed, consume stops); a second one leaves now
            interrupts += 1
            if interrupts > 1:
                return 130
            try:
                send_frame(sock, {"int": 1}, lock)
            except OSError:
                return 130
