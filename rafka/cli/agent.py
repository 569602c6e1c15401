"""The cluster's CLI agent: one actor on the head node, attached to Ray once, that runs CLI verbs for
``rafka`` processes so they answer in a fraction of a second (the client side and the frames are in
rafka/cli/remote.py).

It listens on a loopback port with a random token that only the state file (mode 0600) holds, and runs
each connection's verb in its own thread with that thread's stdout, stderr and stdin routed to the
connection (``_Router``), so concurrent verbs (a consumer streaming while a producer sends) do not mix.
Ctrl-C on the client raises KeyboardInterrupt in the verb's thread, as a local Ctrl-C would; a client that
disappears is treated the same way. The actor restarts if its process dies and binds the same port again.
"""

from __future__ import annotations

import codecs
import ctypes
import hmac
import os
import queue
import socket
import socketserver
import sys
import threading
import traceback
from typing import Any, Callable, NamedTuple

from rafka.cli.remote import recv_frame, send_frame
from rafka.cli.support import EXIT_ERROR, EXIT_OK, EXIT_USAGE

AGENT_NAME = "cli-agent:{cluster}"


class CliEntry(NamedTuple):
    """The CLI the agent runs, handed to it by rafka/cli/main.py (``main.ENTRY``): the agent sits below the
    parser, which holds ``rafka cluster start``, which starts the agent."""

    build_parser: Callable[[], Any]
    run: Callable[[Any], int]


OUT_BUFFER = 64 * 1024

_local = threading.local()


class _Router:
    """Installed as sys.stdout / sys.stderr / sys.stdin of the agent process: a thread running a verb
    reaches its own connection's stream, any other thread the process's original one."""

    def __init__(self, attr: str, fallback: Any):
        self._attr, self._fallback = attr, fallback

    def current(self) -> Any:
        session = getattr(_local, "session", None)
        return getattr(session, self._attr) if session is not None else self._fallback

    def __getattr__(self, name: str) -> Any:
        return getattr(self.current(), name)

    def write(self, text: str) -> int:
        return self.current().write(text)

    def flush(self) -> None:
        self.current().flush()

    def isatty(self) -> bool:
        return self.current().isatty()

    def __iter__(self):
        return iter(self.current())


class _Out:
    """A verb's stdout or stderr: text buffered up to OUT_BUFFER or a flush, sent as ``{o|e: text}``."""

    def __init__(self, session: _Session, key: str, tty: bool):
        self._session, self._key, self._tty = session, key, tty
        self._buf: list[str] = []
        self._size = 0
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            self._buf.append(text)
            self._size += len(text)
            full = self._size >= OUT_BUFFER
        if full:
            self.flush()
        return len(text)

    def flush(self) -> None:
        with self._lock:
            text, self._buf, self._size = "".join(self._buf), [], 0
        if text:
            self._session.send({self._key: text})

    def isatty(self) -> bool:
        return self._tty

    def writable(self) -> bool:
        return True

    @property
    def encoding(self) -> str:
        return "utf-8"


class _In:
    """A verb's stdin: what the client pumps (``{i: bytes}``) decoded as UTF-8 lines; end of input on ``eof``.
    Waits in short slices so a Ctrl-C (an asynchronous KeyboardInterrupt) lands promptly."""

    def __init__(self, tty: bool):
        self._tty = tty
        self._chunks: queue.Queue[bytes | None] = queue.Queue()
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="surrogateescape")
        self._pending = ""
        self._eof = False

    def feed(self, data: bytes | None) -> None:
        self._chunks.put(data)

    def _more(self) -> bool:
        while True:
            try:
                chunk = self._chunks.get(timeout=0.1)
            except queue.Empty:
                continue
            if chunk is None:
                self._pending += self._decoder.decode(b"", final=True)
                self._eof = True
                return False
            self._pending += self._decoder.decode(chunk)
            return True

    def readline(self, size: int = -1) -> str:
        while "\n" not in self._pending and not self._eof:
            self._more()
        cut = self._pending.find("\n") + 1 or len(self._pending)
        line, self._pending = self._pending[:cut], self._pending[cut:]
        return line

    def read(self, size: int = -1) -> str:
        while not self._eof:
            self._more()
        text, self._pending = self._pending, ""
        return text

    def __iter__(self):
        return self

    def __next__(self) -> str:
        line = self.readline()
        if not line:
            raise StopIteration
        return line

    def isatty(self) -> bool:
        return self._tty

    def readable(self) -> bool:
        return True


class _Session:
    """One client connection: its streams, and the verb thread Ctrl-C is raised in."""

    def __init__(self, sock: socket.socket, tty: dict):
        self.sock = sock
        self.send_lock = threading.Lock()
        self.stdout = _Out(self, "o", bool(tty.get("stdout")))
        self.stderr = _Out(self, "e", bool(tty.get("stderr")))
        self.stdin = _In(bool(tty.get("stdin")))
        self.verb_thread = threading.get_ident()
        self.done = False
        self.state_lock = threading.Lock()

    def send(self, frame: dict) -> None:
        try:
            send_frame(self.sock, frame, self.send_lock)
        except OSError as exc:  # the client went away (or `| head` closed its stdout): the verb stops
            raise BrokenPipeError(f"the rafka client disconnected: {exc}") from None

    def interrupt(self) -> None:
        """Ctrl-C: KeyboardInterrupt in the verb's thread, unless the verb already finished."""
        with self.state_lock:
            if not self.done:
                ctypes.pythonapi.PyThreadState_SetAsyncExc(
                    ctypes.c_ulong(self.verb_thread), ctypes.py_object(KeyboardInterrupt)
                )

    def listen(self) -> None:
        """The client's frames after the hello: stdin, its end, Ctrl-C; a closed connection is a Ctrl-C."""
        while True:
            try:
                frame = recv_frame(self.sock)
            except (OSError, ValueError, ConnectionError):
                frame = None
            if frame is None:
                self.stdin.feed(None)
                self.interrupt()
                return
            if "i" in frame:
                self.stdin.feed(bytes(frame["i"]))
            elif "eof" in frame:
                self.stdin.feed(None)
            elif "int" in frame:
                self.interrupt()


def run_verb(parser, run: Callable[[Any], int], argv: list[str], address: str | None) -> int:
    """Parse (with the agent's one parser) and ``run`` one verb in this thread (its streams are the
    session's); the exit code."""
    try:
        args = parser.parse_args(argv)
        if not getattr(args, "remote", False):
            print(f"rafka: `{' '.join(argv[:2])}` does not run in the CLI agent", file=sys.stderr)
            return EXIT_USAGE
        if args.address is None:
            args.address = address
        return run(args)
    except SystemExit as exc:  # argparse's errors (the client parsed the same argv first, so rare)
        return exc.code if isinstance(exc.code, int) else EXIT_USAGE
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return EXIT_OK
    except Exception:  # noqa: BLE001 - the verb's failure is the client's to see, not the agent's end
        traceback.print_exc(file=sys.stderr)
        return EXIT_ERROR


class _Server(socketserver.ThreadingTCPServer):
    """Rebinds the recorded port at once after a restart (TIME_WAIT); one daemon thread per connection."""

    allow_reuse_address = True
    daemon_threads = True


class CliAgent:
    """The actor: a threaded TCP server on ``host:port`` (the port is fixed by ``rafka cluster start`` so a
    restarted agent binds the same one)."""

    def __init__(self, cluster: str, address: str, token: str, entry: CliEntry, host: str = "127.0.0.1", port: int = 0):
        self.cluster, self.address, self._token = cluster, address, token
        if not isinstance(sys.stdout, _Router):
            sys.stdout, sys.stderr = _Router("stdout", sys.stdout), _Router("stderr", sys.stderr)
            sys.stdin = _Router("stdin", sys.stdin)
        os.environ.setdefault("RAY_DEDUP_LOGS", "0")
        agent = self
        # the verbs' modules and the parser (its entry points are read from disk) load once, not per command
        from rafka.admin.admin import Admin  # noqa: F401
        from rafka.consumer.consumer import Consumer  # noqa: F401
        from rafka.producer.producer import Producer  # noqa: F401

        self._parser, self._run = entry.build_parser(), entry.run

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                agent._serve(self.request)

        self._server = _Server((host, port), Handler)
        self.host, self.port = self._server.server_address[:2]
        threading.Thread(target=self._server.serve_forever, name="rafka-cli-agent", daemon=True).start()

    def endpoint(self) -> dict:
        return {"host": self.host, "port": self.port, "pid": os.getpid()}

    def _serve(self, sock: socket.socket) -> None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.settimeout(10.0)
        try:
            hello = recv_frame(sock)
        except (OSError, ValueError, ConnectionError):
            return
        if not isinstance(hello, dict) or not hmac.compare_digest(str(hello.get("token", "")), self._token):
            try:
                send_frame(sock, {"error": "bad token: the state file belongs to another cluster"})
            except OSError:
                pass
            return
        argv = [str(a) for a in hello.get("argv") or ()]
        sock.settimeout(None)
        session = _Session(sock, hello.get("tty") or {})
        try:
            send_frame(sock, {"ok": 1})
        except OSError:
            return
        threading.Thread(target=session.listen, name="rafka-cli-session", daemon=True).start()
        _local.session = session
        code = 1
        try:
            code = run_verb(self._parser, self._run, argv, self.address)
        finally:
            try:
                with session.state_lock:
                    session.done = True
                _local.session = None
                try:
                    session.stdout.flush()
                    session.stderr.flush()
                    session.send({"x": int(code)})
                except BrokenPipeError:
                    pass
            except KeyboardInterrupt:  # a Ctrl-C that raced the verb's end
                _local.session = None


def start_agent(
    cluster: str, address: str, port: int, token: str, entry: CliEntry, pick_port=None, attempts: int = 3
) -> dict:
    """Start the agent (detached, restarted if its process dies, on this node) running ``entry``'s verbs, and
    return its endpoint.

    ``port`` was free when it was probed, but any process may bind it before the agent does (an outgoing
    connection takes a free port of the same range): the agent's constructor then fails with EADDRINUSE,
    which Ray does not retry (a failed creation is a dead actor, whatever ``max_restarts``), so with
    ``pick_port`` another port is tried, up to ``attempts`` in all."""
    import ray
    from ray.exceptions import RayActorError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from protocol.names import RAY_NAMESPACE

    node = ray.get_runtime_context().get_node_id()
    agent = ray.remote(CliAgent).options(
        name=AGENT_NAME.format(cluster=cluster),
        namespace=RAY_NAMESPACE,
        lifetime="detached",
        num_cpus=0,
        max_restarts=-1,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
    )
    while True:
        attempts -= 1
        actor = agent.remote(cluster, address, token, entry, "127.0.0.1", port)
        try:
            ep = ray.get(actor.endpoint.remote(), timeout=60)
        except RayActorError as e:
            if pick_port is None or attempts <= 0 or "Address already in use" not in str(e):
                raise
            port = pick_port()
            continue
        return {"host": ep["host"], "port": ep["port"], "token": token}
