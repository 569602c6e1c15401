"""The CLI agent's pure parts (rafka/cli/agent.py, rafka/cli/remote.py), no Ray: frames over a socket pair,
stdin lines rebuilt from arbitrary chunks, and per-thread routing of sys.stdout-like streams."""

from __future__ import annotations

import socket
import struct
import threading

import pytest

from rafka.cli.agent import _In, _local, _Router
from rafka.cli.remote import MAX_FRAME, recv_frame, send_frame


def test_frames_round_trip_and_a_closed_peer_is_none():
    a, b = socket.socketpair()
    with a, b:
        send_frame(a, {"o": "text", "i": b"\x00\xff", "x": 3})
        assert recv_frame(b) == {"o": "text", "i": b"\x00\xff", "x": 3}
        a.shutdown(socket.SHUT_WR)
        assert recv_frame(b) is None


def test_an_oversize_or_non_map_frame_is_refused():
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", MAX_FRAME + 1))
        with pytest.raises(ConnectionError, match="exceeds"):
            recv_frame(b)
    a, b = socket.socketpair()
    with a, b:
        a.sendall(struct.pack(">I", 1) + b"\x05")  # msgpack 5, not a map
        with pytest.raises(ConnectionError, match="not a map"):
            recv_frame(b)


def test_stdin_lines_from_chunks_split_anywhere_even_inside_a_character():
    data = "première ligne\nzweite Zeile ü\n\nno newline at the end".encode()
    for cut in range(1, len(data)):
        stdin = _In(tty=False)
        stdin.feed(data[:cut])
        stdin.feed(data[cut:])
        stdin.feed(None)
        assert list(stdin) == ["première ligne\n", "zweite Zeile ü\n", "\n", "no newline at the end"], cut


def test_readline_waits_for_the_line_and_read_for_the_end():
    stdin = _In(tty=True)
    got = []
    t = threading.Thread(target=lambda: got.append(stdin.readline()))
    t.start()
    stdin.feed(b"par")
    t.join(0.3)
    assert t.is_alive() and not got  # half a line: still waiting
    stdin.feed(b"tial\nrest")
    t.join(5)
    assert got == ["partial\n"] and stdin.isatty()
    stdin.feed(b" and more")
    stdin.feed(None)
    assert stdin.read() == "rest and more" and stdin.readline() == ""


class _Sink:
    def __init__(self):
        self.text = ""

    def write(self, t):
        self.text += t
        return len(t)

    def flush(self):
        pass

    def isatty(self):
        return False


class _FakeSession:
    def __init__(self):
        self.stdout = _Sink()


def test_router_sends_each_verb_threads_writes_to_its_own_session():
    fallback = _Sink()
    router = _Router("stdout", fallback)
    sessions = [_FakeSession() for _ in range(4)]
    barrier = threading.Barrier(4)

    def verb(s, i):
        _local.session = s
        barrier.wait()
        for n in range(200):
            router.write(f"{i}:{n}\n")
        _local.session = None

    threads = [threading.Thread(target=verb, args=(s, i)) for i, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    router.write("agent's own line\n")
    for i, s in enumerate(sessions):
        assert s.stdout.text == "".join(f"{i}:{n}\n" for n in range(200))
    assert fallback.text == "agent's own line\n"
