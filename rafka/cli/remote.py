"""The CLI's fast path: a verb runs in the cluster's CLI agent (rafka/cli/agent.py) instead of this process.

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
import selectors
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


def _frame_size(head) -> int:
    (size,) = _LEN.unpack_from(head)
    if size > MAX_FRAME:
        raise ConnectionError(f"CLI agent frame of {size} bytes exceeds {MAX_FRAME}")
    return size


def _frame_body(body) -> dict:
    obj = msgpack.unpackb(bytes(body), raw=False)
    if not isinstance(obj, dict):
        raise ConnectionError("CLI agent frame is not a map")
    return obj


def recv_frame(sock: socket.socket) -> dict | None:
    """The next frame, or None when the peer closed the connection."""
    head = _recv_exact(sock, 4)
    if head is None:
        return None
    body = _recv_exact(sock, _frame_size(head))
    return None if body is None else _frame_body(body)


def agent_endpoint(args) -> dict | None:
    """The recorded agent of the started cluster, when this verb may use it: no ``--address``, no
    ``RAY_ADDRESS``, no other ``--cluster`` and ``RAFKA_CLI_AGENT`` not ``0``."""
    if os.environ.get("RAFKA_CLI_AGENT", "1") == "0":
        return None
    if getattr(args, "address", None) or os.environ.get("RAY_ADDRESS"):
        return None
    from rafka.client_utils import read_state

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
    try:
        return _relay(sock, out, err, _stdin_fd() if wants_stdin else None)
    except (AgentGone, OSError, ValueError, msgpack.UnpackException) as exc:
        err.write(f"rafka: {exc}\n")
        return 1
    finally:
        sock.close()


def _stdin_fd() -> int | None:
    try:
        return sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def _relay(sock: socket.socket, out, err, stdin_fd: int | None) -> int:
    """One thread waits on the agent's frames and this process's stdin together, so a Ctrl-C (raised in this
    thread, the main one, by Python's SIGINT handler) is sent before an end of input read after it: a line
    typed and then Ctrl-C, even with stdin closed right after, is an interrupted produce, as it is locally."""
    interrupts = 0
    sel = selectors.DefaultSelector()
    sel.register(sock, selectors.EVENT_READ, "agent")
    if stdin_fd is not None:
        try:
            sel.register(stdin_fd, selectors.EVENT_READ, "stdin")
        except (ValueError, OSError):  # a regular file is always readable: pump it without select
            stdin_fd = _pump_file(sock, stdin_fd)
    reader = _FrameReader(sock)
    try:
        while True:
            try:
                for key, _ in sel.select():
                    if key.data == "stdin":
                        chunk = os.read(stdin_fd, 65536)  # type: ignore[arg-type]
                        if chunk:
                            send_frame(sock, {"i": chunk})
                        else:
                            sel.unregister(stdin_fd)  # type: ignore[arg-type]
                            send_frame(sock, {"eof": 1})
                        continue
                    for frame in reader.read():
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
                    send_frame(sock, {"int": 1})
                except OSError:
                    return 130
    finally:
        sel.close()


def _pump_file(sock: socket.socket, fd: int) -> None:
    """stdin redirected from a regular file (not selectable): send it all, then its end."""
    while chunk := os.read(fd, 1 << 20):
        send_frame(sock, {"i": chunk})
    send_frame(sock, {"eof": 1})
    return None


class _FrameReader:
    """Frames from a socket that select() said is readable, without blocking on a partial frame."""

    def __init__(self, sock: socket.socket):
        self.sock, self.buf = sock, bytearray()

    def read(self) -> list[dict]:
        chunk = self.sock.recv(1 << 20)
        if not chunk:
            raise AgentGone("the cluster's CLI agent went away before the command finished")
        self.buf += chunk
        frames = []
        while len(self.buf) >= 4:
            size = _frame_size(self.buf)
            if len(self.buf) < 4 + size:
                break
            frames.append(_frame_body(self.buf[4 : 4 + size]))
            del self.buf[: 4 + size]
        return frames
