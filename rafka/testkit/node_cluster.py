"""Real Ray nodes on one machine, each in its own network namespace (network.py): its own address, loopback, Ray temp
dir and data directory (``root/nodes/<name>/data``, given to every process of the node as RAFKA_DATA_DIR); `ray
start --head` on node 0, `ray start --address` on the others. Kafka's KafkaClusterTestKit for rafka: tests,
benchmarks and `rafka verify` run on it. Process faults (kill, freeze, restart with or without disk) are methods
here; network faults are on ``cluster.net``. Needs root."""

from __future__ import annotations

import atexit
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import weakref
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from rafka.testkit.network import PREFIX, Namespace, Network, kill_netns_processes, netns_pids, pid_alive, signal_pids

HERE = os.path.dirname(os.path.abspath(__file__))
GCS_PROBE = os.path.join(HERE, "gcs_probe.py")
DELAY_PROXY = os.path.join(HERE, "delay_proxy.py")  # run as a script in a namespace
WORKER_PORTS = range(10002, 20000)  # Ray's default worker port range: the GCS port must lie outside it
CLIENT_NAMESPACE = "client"
REDIS_NAMESPACE = "redis"  # the external Redis of GCS fault tolerance: a machine of its own, outliving the head
REDIS_PORT = 6379
STARTUP_TIMED_OUT = "timed out during startup"  # `ray start` giving up on its node's registration (Ray's node.py)
START_ATTEMPTS = 3
# not passed on from this process to the nodes: its own cluster's address and data dir, and the tests' loopback-only
# switch (RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0, tests/conftest.py), with which `ray start --address` refuses to run
INHERITED_NOT = ("RAY_ADDRESS", "RAFKA_DATA_DIR", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")


class NodeClusterError(RuntimeError):
    """A node did not start, join or answer in time; the message holds what its command printed."""


@dataclass
class Node:
    """One Ray node: its namespace, directories and start options; ``node_id`` is Ray's id of its current start,
    ``killed_at`` the wall-clock time of its last kill_node."""

    index: int
    ns: Namespace
    data_dir: str
    temp_dir: str
    log_path: str
    num_cpus: int
    labels: dict[str, str] = field(default_factory=dict)
    resources: dict[str, float] = field(default_factory=dict)
    node_id: str = ""
    killed_at: float = 0.0

    @property
    def name(self) -> str:
        return self.ns.name

    @property
    def address(self) -> str:
        return self.ns.address

    @property
    def is_head(self) -> bool:
        return self.index == 0


def ray_bin() -> str:
    path = os.path.join(os.path.dirname(sys.executable), "ray")
    return path if os.path.exists(path) else "ray"


def ensure_token() -> None:
    """A Ray auth token exists for `ray start` (``~/.ray/auth_token``, or RAY_AUTH_TOKEN[_PATH]): generated as
    `ray get-auth-token --generate` does (and as rafka.cli.clusterctl.ensure_token), in a child process so this
    process's Ray config is left alone."""
    path = os.environ.get("RAY_AUTH_TOKEN_PATH") or os.path.expanduser("~/.ray/auth_token")
    if os.environ.get("RAY_AUTH_TOKEN") or os.path.exists(path):
        return
    subprocess.run(
        [ray_bin(), "get-auth-token", "--generate"],
        env={**os.environ, "RAY_AUTH_MODE": "token"},
        capture_output=True,
        check=True,
        timeout=120,
    )


def ray_start_argv(
    node: Node, head_address: str, gcs_port: int, client_server_port: int, system_config: Mapping[str, Any]
) -> list[str]:
    """`ray start`'s command line for ``node``: the head (index 0) with the GCS and Ray Client ports and
    ``system_config``, the others joining ``head_address``; each with its own address, temp dir, CPUs, labels and
    resources, no dashboard and no usage stats."""
    argv = [ray_bin(), "start", "--node-ip-address", node.address, "--temp-dir", node.temp_dir]
    if node.is_head:
        argv += ["--head", "--port", str(gcs_port), "--ray-client-server-port", str(client_server_port)]
        argv += ["--include-dashboard=false"]
        if system_config:
            argv += ["--system-config", json.dumps(dict(system_config))]
    else:
        argv += ["--address", head_address]
    argv += ["--num-cpus", str(node.num_cpus), "--disable-usage-stats"]
    if node.labels:
        argv += ["--labels", ",".join(f"{k}={v}" for k, v in node.labels.items())]
    if node.resources:
        argv += ["--resources", json.dumps(node.resources)]
    return argv


def processes_under(path: str) -> set[int]:
    """Pids of live processes naming ``path`` on their command line or holding a file open under it."""
    marker = path.rstrip("/") + "/"
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            hit = marker in cmd or cmd.rstrip().endswith(path)
            if not hit:
                fd_dir = f"/proc/{entry}/fd"
                hit = any(os.readlink(os.path.join(fd_dir, fd)).startswith(marker) for fd in os.listdir(fd_dir))
        except OSError:
            continue
        if hit and pid_alive(int(entry)):
            found.add(int(entry))
    return found


_LIVE: weakref.WeakSet[NodeCluster] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for cluster in list(_LIVE):
        cluster.close()


class NodeCluster:
    """``n`` Ray nodes, one per namespace, started when built (``start_seconds`` says how long that took), and
    stopped by ``close`` (also as a context manager, at exit, and when the start fails halfway): every process by
    pid (SIGTERM, then SIGKILL), every namespace, link and nft table, the temp dirs, and ``root`` when it made it.

    ``labels``/``resources`` are per node (a list of n mappings); ``env`` goes to every node's processes;
    ``system_config`` to the head's `ray start --system-config`. ``gcs_ft``: Ray's GCS fault tolerance, with a
    redis-server in a namespace of its own (``redis_address``) given to the head as RAY_REDIS_ADDRESS, so a head
    killed and started again (``restart_node(0)``) recovers the same Ray cluster. Drivers run on a node
    (``python``); from the host, use Ray Client at ``client_address``."""

    def __init__(
        self,
        n: int = 3,
        root: str | None = None,
        *,
        num_cpus: int = 2,
        labels: Sequence[Mapping[str, str]] | None = None,
        resources: Sequence[Mapping[str, float]] | None = None,
        env: Mapping[str, str] | None = None,
        system_config: Mapping[str, Any] | None = None,
        gcs_port: int = 6379,
        client_server_port: int = 10001,
        start_timeout: float = 180.0,
        keep_logs: bool = False,
        gcs_ft: bool = False,
    ):
        if n < 1:
            raise ValueError("a cluster needs at least one node")
        for name, per_node in (("labels", labels), ("resources", resources)):
            if per_node is not None and len(per_node) != n:
                raise ValueError(f"{name} has {len(per_node)} entries for {n} nodes")
        if gcs_port in WORKER_PORTS or client_server_port in WORKER_PORTS:
            raise ValueError(
                f"Ray's ports must lie outside its worker port range {WORKER_PORTS.start}-{WORKER_PORTS.stop - 1}"
            )
        self.gcs_port = gcs_port
        self.client_server_port = client_server_port
        self.system_config = dict(system_config or {})
        self.extra_env = dict(env or {})
        self.keep_logs = keep_logs
        self.nodes: list[Node] = []
        self._popens: list[subprocess.Popen] = []
        self._frozen: dict[int, set[int]] = {}
        self._client: Namespace | None = None
        self._closed = False
        self._owns_root = root is None
        self.root = os.path.abspath(root) if root else tempfile.mkdtemp(prefix="rafka-nodes-", dir="/tmp")
        self.net: Network | None = None
        self.temp_root = ""
        self.start_seconds = 0.0
        self.redis_address = ""
        _LIVE.add(self)
        try:
            ensure_token()
            self.net = Network()
            # short: a node's Unix sockets live under it (<temp>/session_<date>_<pid>/sockets/..., 107 bytes at most)
            self.temp_root = f"/tmp/{PREFIX}{self.net.id}"
            for i in range(n):
                ns = self.net.add(f"n{i}")
                node_dir = os.path.join(self.root, "nodes", ns.name)
                node = Node(
                    index=i,
                    ns=ns,
                    data_dir=os.path.join(node_dir, "data"),
                    temp_dir=os.path.join(self.temp_root, ns.name),
                    log_path=os.path.join(node_dir, "ray-start.log"),
                    num_cpus=num_cpus,
                    labels=dict(labels[i]) if labels else {},
                    resources=dict(resources[i]) if resources else {},
                )
                os.makedirs(node.data_dir, exist_ok=True)
                os.makedirs(node.temp_dir, exist_ok=True)
                self.nodes.append(node)
            if gcs_ft:
                self._start_redis()
            t0 = time.monotonic()
            self._ray_start([self.nodes[0]])
            self._ray_start(self.nodes[1:])
            self._wait_joined(self.nodes, {}, start_timeout)
            self.start_seconds = time.monotonic() - t0
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> NodeCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- addresses and environment --

    @property
    def network(self) -> Network:
        if self.net is None:
            raise NodeClusterError("the cluster is closed")
        return self.net

    @property
    def head(self) -> Node:
        return self.nodes[0]

    @property
    def head_address(self) -> str:
        """The GCS address drivers on the nodes pass to ``ray.init`` (also their RAY_ADDRESS)."""
        return f"{self.head.address}:{self.gcs_port}"

    @property
    def client_address(self) -> str:
        """Ray Client's address, for a driver on the host (through the bridge's .1)."""
        return f"ray://{self.head.address}:{self.client_server_port}"

    def node(self, i: int) -> Node:
        return self.nodes[i]

    def env(self, i: int | None = None) -> dict[str, str]:
        """The environment of node ``i``'s processes (a driver's too); ``i=None``: a node-less one (the client
        namespace, the host's probes)."""
        env = {k: v for k, v in os.environ.items() if k not in INHERITED_NOT}
        # a node's raylet waits this long for its dashboard agent's ports (a Python process that took 20 s to start
        # on these 2 loaded cores, past Ray's wait, failing a head's restart)
        env.update(
            {"RAY_AUTH_MODE": "token", "RAY_USAGE_STATS_ENABLED": "0", "RAY_agent_register_timeout_ms": "120000"}
        )
        env.update(self.extra_env)
        if i is not None:
            env["RAFKA_DATA_DIR"] = self.nodes[i].data_dir
        if i == 0 and self.redis_address:  # Ray's GCS fault tolerance: the head's GCS keeps its tables in Redis
            env["RAY_REDIS_ADDRESS"] = self.redis_address
            env["RAY_external_storage_namespace"] = f"{PREFIX}{self.network.id}"
        return env

    def _start_redis(self, timeout: float = 30.0) -> None:
        """redis-server in its own namespace (no persistence: it is the store that outlives the head, not a
        database), up once it answers PING."""
        ns = self.network.add(REDIS_NAMESPACE)
        redis_dir = os.path.join(self.root, "redis")
        os.makedirs(redis_dir, exist_ok=True)
        argv = ["redis-server", "--port", str(REDIS_PORT), "--bind", "0.0.0.0", "--protected-mode", "no"]
        argv += ["--save", "", "--appendonly", "no", "--dir", redis_dir]
        log = open(os.path.join(redis_dir, "redis.log"), "a", encoding="utf-8")
        self._popens.append(subprocess.Popen(ns.exec_argv(argv), stdout=log, stderr=subprocess.STDOUT))
        log.close()
        ping = ns.exec_argv(["redis-cli", "-p", str(REDIS_PORT), "ping"])
        deadline = time.monotonic() + timeout
        while subprocess.run(ping, capture_output=True, text=True).stdout.strip() != "PONG":
            if time.monotonic() > deadline:
                raise NodeClusterError(f"redis-server did not answer in {timeout} s (see {redis_dir}/redis.log)")
            time.sleep(0.1)
        self.redis_address = f"{ns.address}:{REDIS_PORT}"

    # -- starting and waiting --

    def _ray_start(self, nodes: Sequence[Node], timeout: float = 180.0) -> None:
        """`ray start` on ``nodes`` at once, in their namespaces; a node whose start Ray gave up on (its own 30 s
        wait for the raylet's registration, passed when several nodes start at once on 2 busy cores) is started
        again, alone, after its processes are ended; raises naming each node whose start failed otherwise."""
        pending = list(nodes)
        for attempt in range(START_ATTEMPTS):
            batches = [pending] if attempt == 0 else [[n] for n in pending]
            failed = [f for batch in batches for f in self._ray_start_once(batch, timeout)]
            if not failed:
                return
            if attempt == START_ATTEMPTS - 1 or any(STARTUP_TIMED_OUT not in why for _, why in failed):
                raise NodeClusterError("; ".join(why for _, why in failed))
            pending = [node for node, _ in failed]
            for node in pending:
                kill_netns_processes(node.ns.netns)
                shutil.rmtree(node.temp_dir, ignore_errors=True)
                os.makedirs(node.temp_dir)

    def _ray_start_once(self, nodes: Sequence[Node], timeout: float) -> list[tuple[Node, str]]:
        procs = []
        for node in nodes:
            argv = node.ns.exec_argv(
                ray_start_argv(node, self.head_address, self.gcs_port, self.client_server_port, self.system_config)
            )
            log = open(node.log_path, "a", encoding="utf-8")
            log.write(f"$ {' '.join(argv)}\n")
            log.flush()
            procs.append(
                (node, log, subprocess.Popen(argv, env=self.env(node.index), stdout=log, stderr=subprocess.STDOUT))
            )
        failed = []
        for node, log, proc in procs:
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = proc.wait()
            log.close()
            if rc != 0:
                with open(node.log_path, encoding="utf-8", errors="replace") as f:
                    tail = " | ".join(f.read().strip().splitlines()[-3:])
                failed.append((node, f"{node.name} ({node.address}): `ray start` exit {rc}: {tail}"))
        return failed

    def _probe(self, *args: str, timeout: float) -> tuple[int, dict | list]:
        proc = subprocess.run(
            [sys.executable, GCS_PROBE, self.head_address, *args],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=timeout + 30,
        )
        try:
            return proc.returncode, json.loads(proc.stdout.strip().splitlines()[-1])
        except (IndexError, ValueError):
            raise NodeClusterError(f"the GCS probe failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}") from None

    def nodes_info(self, timeout: float = 30.0) -> list[dict]:
        """The GCS's node table: node_id, address, alive, labels, resources, end_time_ms, death (dead ones too)."""
        rc, out = self._probe("nodes", timeout=timeout)
        assert isinstance(out, list)
        return out

    def _wait(self, spec: dict, timeout: float) -> dict:
        rc, out = self._probe("wait", json.dumps({**spec, "timeout": timeout}), timeout=timeout)
        assert isinstance(out, dict)
        if rc != 0:
            raise NodeClusterError(f"the GCS did not reach {spec} in {timeout} s; its nodes: {out['nodes']}")
        return out

    def _wait_joined(self, nodes: Sequence[Node], old_ids: Mapping[int, str], timeout: float) -> dict:
        spec = {"alive": [[n.address, [old_ids[n.index]] if n.index in old_ids else []] for n in nodes]}
        out = self._wait(spec, timeout)
        for n in nodes:
            n.node_id = next(
                e["node_id"]
                for e in out["nodes"]
                if e["alive"] and e["address"] == n.address and e["node_id"] != old_ids.get(n.index)
            )
        return out

    def wait_dead(self, i: int, timeout: float = 120.0) -> float:
        """Wait until the GCS marks node ``i``'s current start dead; seconds from its kill_node to the GCS's death
        time (the GCS's own end_time_ms, so the probe's start-up is not counted)."""
        node = self.nodes[i]
        out = self._wait({"dead": [node.node_id]}, timeout)
        entry = next(e for e in out["nodes"] if e["node_id"] == node.node_id)
        if entry["end_time_ms"] and node.killed_at:
            return entry["end_time_ms"] / 1000 - node.killed_at
        return out["elapsed_s"]

    def alive(self, i: int) -> bool:
        """Whether the GCS lists node ``i``'s current start as alive."""
        return any(e["node_id"] == self.nodes[i].node_id and e["alive"] for e in self.nodes_info())

    # -- process faults --

    def kill_node(self, i: int) -> int:
        """A lost machine: SIGKILL every process of node ``i``'s namespace until none is left; how many died."""
        node = self.nodes[i]
        self._frozen.pop(i, None)
        node.killed_at = time.time()
        return kill_netns_processes(node.ns.netns)

    def freeze_node(self, i: int) -> int:
        """SIGSTOP every process of node ``i``'s namespace; how many."""
        pids = netns_pids(self.nodes[i].ns.netns)
        signal_pids(pids, signal.SIGSTOP)
        self._frozen.setdefault(i, set()).update(pids)
        return len(pids)

    def thaw_node(self, i: int) -> int:
        """SIGCONT what freeze_node stopped (and anything else in the namespace); how many."""
        pids = self._frozen.pop(i, set()) | netns_pids(self.nodes[i].ns.netns)
        signal_pids(pids, signal.SIGCONT)
        return len(pids)

    def restart_node(self, i: int, wipe_disk: bool = False, timeout: float = 180.0) -> float:
        """`ray start` node ``i`` again with the same address, labels and resources (a fresh Ray temp dir), after
        killing whatever is left of it; ``wipe_disk`` empties its data dir first (a replaced machine). Seconds until
        the GCS lists it alive. Node 0 comes back as a new head (a new Ray cluster unless GCS fault tolerance is
        configured through ``env``/``system_config``)."""
        node = self.nodes[i]
        if netns_pids(node.ns.netns):
            self.kill_node(i)
        shutil.rmtree(node.temp_dir, ignore_errors=True)
        os.makedirs(node.temp_dir)
        if wipe_disk:
            shutil.rmtree(node.data_dir, ignore_errors=True)
            os.makedirs(node.data_dir)
        t0 = time.monotonic()
        self._ray_start([node])
        self._wait_joined([node], {i: node.node_id}, timeout)
        return time.monotonic() - t0

    # -- commands on a node --

    def _argv_env(self, i: int | None, argv: Sequence[str], env: Mapping[str, str] | None) -> tuple[list[str], dict]:
        ns = self.client_namespace() if i is None else self.nodes[i].ns
        full = {**self.env(i), "RAY_ADDRESS": self.head_address, **(env or {})}
        return ns.exec_argv(list(argv)), full

    def run(
        self,
        i: int | None,
        argv: Sequence[str],
        *,
        timeout: float = 120.0,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        **kw: Any,
    ) -> subprocess.CompletedProcess:
        """Run ``argv`` in node ``i``'s namespace (``None``: the client namespace) with the node's environment and
        RAY_ADDRESS; its output captured as text."""
        full_argv, full_env = self._argv_env(i, argv, env)
        proc = subprocess.run(full_argv, env=full_env, capture_output=True, text=True, timeout=timeout, **kw)
        if check and proc.returncode != 0:
            raise NodeClusterError(
                f"`{' '.join(argv)}` on {'client' if i is None else self.nodes[i].name} exit {proc.returncode}: {proc.stderr.strip()[-3000:]}"
            )
        return proc

    def popen(
        self, i: int | None, argv: Sequence[str], *, env: Mapping[str, str] | None = None, **kw: Any
    ) -> subprocess.Popen:
        """Start ``argv`` in node ``i``'s namespace (``None``: the client namespace); ended by close if still running."""
        full_argv, full_env = self._argv_env(i, argv, env)
        proc = subprocess.Popen(full_argv, env=full_env, **kw)
        self._popens.append(proc)
        return proc

    def python(
        self, i: int, code: str, *, args: Sequence[str] = (), timeout: float = 120.0, parse_json: bool = True
    ) -> Any:
        """Run a Python driver on node ``i`` (source text, or the path of a script); its ``ray.init()`` attaches to
        the cluster through RAY_ADDRESS. With ``parse_json`` the last line of its stdout is parsed as JSON and
        returned; else its stdout."""
        argv = [sys.executable, code, *args] if os.path.isfile(code) else [sys.executable, "-c", code, *args]
        proc = self.run(i, argv, timeout=timeout)
        if not parse_json:
            return proc.stdout
        lines = proc.stdout.strip().splitlines()
        try:
            return json.loads(lines[-1])
        except (IndexError, ValueError):
            raise NodeClusterError(
                f"the driver on {self.nodes[i].name} printed no JSON last: {proc.stdout[-2000:]!r}"
            ) from None

    def delay_proxy(
        self, i: int | None, listen_port: int, target: tuple[str, int], delay_ms: float
    ) -> subprocess.Popen:
        """A DelayProxy in node ``i``'s namespace (``None``: the client namespace) on ``listen_port`` (all
        addresses), to ``target``, every byte ``delay_ms`` late each way: the slow link netem would give. Returns
        once it listens; ended by close (or by kill_node)."""
        argv = [
            sys.executable,
            DELAY_PROXY,
            "--listen",
            f"0.0.0.0:{listen_port}",
            "--target",
            f"{target[0]}:{target[1]}",
        ]
        proc = self.popen(i, [*argv, "--delay-ms", str(delay_ms)], stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline() if proc.stdout else ""
        if not line.startswith("listening"):
            raise NodeClusterError(f"the delay proxy did not start (exit {proc.wait(timeout=10)})")
        return proc

    def client_namespace(self) -> Namespace:
        """A namespace without Ray on the same bridge, for Kafka clients (kcat, confluent-kafka); made once."""
        if self._client is None:
            self._client = self.network.add(CLIENT_NAMESPACE)
        return self._client

    # -- teardown --

    def _copy_logs(self) -> None:
        for node in self.nodes:
            src = os.path.join(node.temp_dir, "session_latest", "logs")
            if os.path.isdir(src):
                shutil.copytree(
                    src,
                    os.path.join(os.path.dirname(node.data_dir), "ray-logs"),
                    dirs_exist_ok=True,
                    ignore_dangling_symlinks=True,
                )

    def close(self, grace_s: float = 5.0) -> None:
        """Stop everything it started, even after a half-done start: its commands, then every process of every
        namespace (SIGTERM, SIGCONT for frozen ones, ``grace_s`` to exit, SIGKILL), then the network, any process
        still using a temp dir, the temp dirs and (when it made it) ``root``. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors: list[str] = []
        for proc in self._popens:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
        if self.net is not None:
            all_ns = list(self.net.namespaces.values())
            pids = set().union(*(netns_pids(ns.netns) for ns in all_ns)) if all_ns else set()
            signal_pids(pids, signal.SIGTERM)
            signal_pids(pids, signal.SIGCONT)
            deadline = time.monotonic() + grace_s
            while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
                time.sleep(0.1)
            for ns in all_ns:
                try:
                    kill_netns_processes(ns.netns)
                except Exception as e:
                    errors.append(str(e))
            if self.keep_logs:
                self._copy_logs()
            try:
                self.net.close()
            except Exception as e:
                errors.append(str(e))
        if self.temp_root:
            stray = processes_under(self.temp_root)
            signal_pids(stray, signal.SIGKILL)
            shutil.rmtree(self.temp_root, ignore_errors=True)
        if self._owns_root:
            shutil.rmtree(self.root, ignore_errors=True)
        _LIVE.discard(self)
        if errors:
            raise NodeClusterError("; ".join(errors))
