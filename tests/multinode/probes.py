"""Small probes run inside network namespaces for the multi-node suites: a TCP server answering "ok", a connect
check, a UDP delivery count, a byte sink and a timed sender, and /proc state. Python or bash in `ip netns exec`."""

from __future__ import annotations

import subprocess
import sys
import time

from rafka.testkit import Namespace

# a TCP server answering "ok" to every connection, and a UDP counter printing how many datagrams it got
TCP_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64); print("up", flush=True)
while True:
    c, _ = s.accept(); c.sendall(b"ok"); c.close()
"""
UDP_COUNTER = """
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.bind(("0.0.0.0", int(sys.argv[1])))
print("up", flush=True); s.settimeout(float(sys.argv[2])); n = 0
try:
    while True:
        s.recv(100); n += 1
except socket.timeout:
    print(n)
"""
UDP_SENDER = """
import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(int(sys.argv[3])):
    try:
        s.sendto(b"x", (sys.argv[1], int(sys.argv[2])))
    except PermissionError:  # dropped by an output rule of this namespace
        pass
    if i % 50 == 0: time.sleep(0.001)
"""


def serve_tcp(ns: Namespace, port: int) -> subprocess.Popen:
    """A TCP server in ``ns`` on ``port`` (all addresses); returns once it listens. The caller ends it."""
    proc = subprocess.Popen(
        ns.exec_argv([sys.executable, "-c", TCP_SERVER, str(port)]), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def connects(ns: Namespace | None, address: str, port: int, timeout: float = 1.0) -> bool:
    """Whether a TCP connection from ``ns`` (None: the host) to address:port gets the server's "ok" in time."""
    script = f"exec 3<>/dev/tcp/{address}/{port} && head -c2 <&3"
    argv = ["timeout", str(timeout), "bash", "-c", script]
    out = subprocess.run(ns.exec_argv(argv) if ns else argv, capture_output=True, text=True, timeout=timeout + 10)
    return out.returncode == 0 and out.stdout == "ok"


def udp_delivered(src: Namespace, dst: Namespace, port: int, count: int = 1000) -> int:
    """How many of ``count`` datagrams sent from ``src`` to ``dst`` arrived."""
    argv = dst.exec_argv([sys.executable, "-c", UDP_COUNTER, str(port), "1.5"])
    counter = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        assert counter.stdout is not None and counter.stdout.readline().strip() == "up"
        send = [sys.executable, "-c", UDP_SENDER, dst.address, str(port), str(count)]
        subprocess.run(src.exec_argv(send), check=True, timeout=60)
        out, _ = counter.communicate(timeout=60)
        return int(out.strip())
    finally:
        counter.kill()
        counter.wait()


def proc_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat (R, S, T for stopped, ...), "" when gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0]
    except (OSError, IndexError):
        return ""


def wait_until(cond, timeout: float, every: float = 0.2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(every)
    return cond()


SINK_SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(8); print("up", flush=True)
while True:
    c, _ = s.accept(); n = 0
    while (b := c.recv(65536)):
        n += len(b)
    c.sendall(str(n).encode()); c.close()
"""
SEND_BYTES = """
import socket, sys, time
t = time.monotonic(); s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=60)
s.sendall(b"x" * int(sys.argv[3])); s.shutdown(socket.SHUT_WR); got = int(s.recv(100)); print(got, time.monotonic() - t)
"""


def serve_sink(ns: Namespace, port: int) -> subprocess.Popen:
    """A TCP server in ``ns`` that reads each connection to its end and answers how many bytes it got."""
    proc = subprocess.Popen(
        ns.exec_argv([sys.executable, "-c", SINK_SERVER, str(port)]), stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    return proc


def send_seconds(src: Namespace, dst: Namespace, port: int, nbytes: int) -> float:
    """Seconds to send ``nbytes`` from ``src`` to the sink on ``dst`` and hear them all counted."""
    out = subprocess.run(
        src.exec_argv([sys.executable, "-c", SEND_BYTES, dst.address, str(port), str(nbytes)]),
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    got, seconds = out.stdout.split()
    assert int(got) == nbytes
    return float(seconds)
