"""``rafka cluster start|stop``: a persistent local Ray head that outlives the command, plus detached
rafka actors on it; or, with ``--address``, the rafka actors alone on a Ray cluster that runs already.

start: ``ray start --head`` with its own ``--temp-dir`` (a fresh directory under /tmp) and free ports for
GCS, Ray Client and the dashboard agent (so it coexists with other Ray instances on the machine); then
this process attaches, starts the controller and brokers as detached actors, records everything in the
state file (``$RAFKA_HOME/cluster.json``, default ``~/.rafka``) and detaches. Any later process attaches
with ``rafka.connect()`` (which reads the state file) or the printed address.

stop: stops the rafka actors cleanly (logs closed), then ends exactly the Ray processes of that temp dir
(those whose command line names it, those with a file open under it -- every worker logs there, even one
orphaned by a dead raylet -- and their descendants) with SIGTERM, then SIGKILL after a grace period. It
never runs ``ray stop``, which would end every Ray instance on the machine.

With ``--address`` (``start_on``: deploying onto a Ray cluster someone else runs) no Ray process is started,
the brokers are placed one per node (actors/server/broker_placement.py), and ``stop`` stops the rafka actors it
started there (brokers, controller, exporter, CLI agent) and no Ray process at all.

``--redis-address`` gives the head it starts Ray's GCS fault tolerance: its GCS keeps its tables in that Redis
(RAY_REDIS_ADDRESS, under a storage namespace of its own recorded in the state file), so a GCS started again with
the same Redis and namespace recovers the Ray cluster; stop deletes that namespace's keys.

A head that crashed (its GCS killed, the state file left behind) can leave its raylet and the broker
workers running, still holding the log directories: ``start`` ends those leftovers of the recorded temp
dir before it starts a new head, and each broker's log directory lock (``.lock``) refuses a second
broker set on the same directories anyway.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from protocol.errors import ClusterNotFoundError, InvalidConfigError, KafkaError
from protocol.names import RAY_NAMESPACE
from rafka.cli.agent import AGENT_NAME, CliEntry, start_agent
from rafka.client_utils import read_state, state_file
from rafka.cluster import WORKER_NICENESS
from rafka.output import quiet_worker_pool_warnings


def last_data_dir_file():
    """``$RAFKA_HOME/last-data-dir``: the data directory of the last ``start``, where ``rafka logs`` reads the
    server logs once the cluster is stopped (the state file is gone then)."""
    return state_file().parent / "last-data-dir"


def free_ports(n: int) -> list[int]:
    """``n`` distinct free TCP ports from the ephemeral range (outside Ray's worker range 10002-19999).

    Every socket stays bound until all ``n`` are picked: ports picked one at a time can repeat, since the
    kernel may hand out a port again as soon as its probe socket is closed (two of `ray start`'s ports were
    once the same, and Ray refused to start)."""
    held: list[socket.socket] = []
    ports: list[int] = []
    try:
        while len(ports) < n:
            s = socket.socket()
            held.append(s)
            s.bind(("", 0))
            port = s.getsockname()[1]
            if not 10002 <= port <= 19999:
                ports.append(port)
    finally:
        for s in held:
            s.close()
    return ports


def free_port() -> int:
    """A free TCP port from the ephemeral range (outside Ray's worker range 10002-19999)."""
    return free_ports(1)[0]


def proc_table() -> tuple[dict[int, str], dict[int, int]]:
    cmd, parent = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                cmd[int(d)] = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
            parent[int(d)] = int(st[st.rindex(")") + 2 :].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return cmd, parent


def _has_open_file_under(pid: int, marker: str) -> bool:
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}").startswith(marker):
                return True
        except OSError:
            continue
    return False


def ray_processes(temp_dir: str) -> set[int]:
    """Pids of the Ray processes started with ``temp_dir`` (named on their command line, or holding a file
    open under it, as every worker does with its log files) and all their descendants."""
    cmd, parent = proc_table()
    marker = temp_dir.rstrip("/") + "/"
    found = {
        pid
        for pid, c in cmd.items()
        if marker in c or c.rstrip().endswith(temp_dir) or _has_open_file_under(pid, marker)
    }
    found.discard(os.getpid())
    changed = True
    while changed:
        changed = False
        for pid, ppid in parent.items():
            if ppid in found and pid not in found:
                found.add(pid)
                changed = True
    return found


def _kill(pids: set[int], grace_s: float = 5.0) -> int:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    alive = set(pids)
    while alive and time.monotonic() < deadline:
        time.sleep(0.1)
        alive = {p for p in alive if pid_alive(p)}
    for pid in alive:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def pid_alive(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def _ray_is_up(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1.0):
            return True
    except OSError:
        return False


def ensure_token() -> str:
    """The cluster's authentication mode: token (Ray 2.60's default) unless the user set
    ``RAY_AUTH_MODE``; a missing token is generated (``~/.ray/auth_token``, as ``ray get-auth-token
    --generate`` does) so every process of this user can attach."""
    mode = os.environ.get("RAY_AUTH_MODE", "token").lower()
    if mode != "token":
        return mode
    from ray._private.authentication.authentication_token_setup import _enable_token_auth, generate_and_save_token
    from ray._raylet import AuthenticationTokenLoader

    if not AuthenticationTokenLoader.instance().has_token(ignore_auth_mode=True):
        generate_and_save_token()
    _enable_token_auth()  # RAY_AUTH_MODE=token for `ray start` and this process (its cached config too)
    return mode


def _write_state(info: dict, agent: dict) -> None:
    state_file().parent.mkdir(parents=True, exist_ok=True)
    # the state file holds the CLI agent's token (rafka/cli/remote.py): readable by this user only
    fd = os.open(state_file(), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(fd, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps({**info, "cli_agent": agent}, indent=2))
    last_data_dir_file().write_text(info["data_dir"] + "\n")


def _refuse_if_recorded_running(state: dict | None) -> None:
    if state and state.get("attached") and _ray_is_up(state["address"].removeprefix("ray://")):
        raise KafkaError(
            f"the rafka cluster {state['cluster']!r} started from here on the Ray cluster at {state['address']} "
            "is recorded as running; stop it with `rafka cluster stop`"
        )


def start_on(
    address: str,
    brokers: int = 3,
    data_dir: str | None = None,
    cluster: str = "rafka",
    config: dict | None = None,
    *,
    entry: CliEntry,
    brokers_per_node: int | None = None,
    node_label: str | None = None,
    node_resource: str | None = None,
) -> dict:
    """Start the cluster on the running Ray cluster at ``address`` (its brokers one per node, by the placement
    options) and its CLI agent on this node; record them in the state file. ``data_dir`` is a path on each node
    (default /var/lib/rafka)."""
    state = read_state()
    _refuse_if_recorded_running(state)
    if state and not state.get("attached") and ray_processes(state["temp_dir"]):
        raise KafkaError(f"a rafka cluster started from here is running (temp dir {state['temp_dir']}); stop it first")
    import ray

    from rafka.cluster import deploy
    from rafka.ray_session import attach_ray

    data_dir = os.path.abspath(data_dir or "/var/lib/rafka")
    quiet_worker_pool_warnings()
    address = attach_ray(address) or address  # ClusterNotFoundError (exit 3) when nothing answers there
    try:
        d = deploy(
            address,
            brokers,
            data_dir,
            cluster,
            broker_config=dict(config or {}) or None,
            brokers_per_node=brokers_per_node,
            node_label=node_label,
            node_resource=node_resource,
        )
        from rafka.client_utils import bootstrap_servers

        info = {
            "cluster": cluster,
            "address": address,
            "client_address": None,
            "attached": True,
            "temp_dir": None,
            "data_dir": data_dir,
            "brokers": brokers,
            "nodes": d.server.node_addresses,
            "config": dict(config or {}),
            "started_at": time.time(),
            "bootstrap_servers": bootstrap_servers(cluster),
            "metrics_url": d.server.metrics_url(),
        }
        try:
            agent = start_agent(cluster, address, free_port(), secrets.token_urlsafe(24), entry, pick_port=free_port)
        except BaseException:
            d.stop()
            raise
        info["cli_agent"] = f"{agent['host']}:{agent['port']}"
    finally:
        ray.shutdown()
    _write_state(info, agent)
    return info


def _gcs_storage(redis_address: str | None, redis_password: str | None, cluster: str) -> dict | None:
    """Where the head's GCS keeps its tables: the Redis at ``redis_address`` (checked to answer first, so a wrong
    address is a clear error rather than a `ray start` that waits on it) under a namespace of this start's own."""
    if not redis_address:
        if redis_password:
            raise InvalidConfigError("--redis-password needs --redis-address")
        return None
    host, sep, port = redis_address.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise InvalidConfigError(f"--redis-address must be HOST:PORT, got {redis_address!r}")
    try:
        with socket.create_connection((host, int(port)), timeout=5) as conn:
            conn.sendall(b"PING\r\n")
            reply = conn.recv(64)
    except OSError as e:
        raise ClusterNotFoundError(
            f"no Redis answers at {redis_address} ({e}): GCS fault tolerance needs one"
        ) from None
    if not reply.startswith((b"+PONG", b"-NOAUTH")):
        raise ClusterNotFoundError(f"{redis_address} did not answer as a Redis does: {reply[:40]!r}")
    return {"redis_address": redis_address, "namespace": f"rafka-{cluster}-{secrets.token_hex(4)}"}


def _drop_gcs_storage(storage: dict, password: str | None) -> None:
    """Delete a stopped head's GCS tables from its Redis (Ray's own cleanup), so they never come back."""
    from ray._private.gcs_utils import cleanup_redis_storage

    host, _, port = storage["redis_address"].rpartition(":")
    try:
        cleanup_redis_storage(host, int(port), password or "", False, storage["namespace"])
    except Exception as e:  # noqa: BLE001 - the cluster is stopped either way; say what is left behind
        print(
            f"rafka: warning: the GCS tables in Redis at {storage['redis_address']} (namespace "
            f"{storage['namespace']}) were not deleted: {e}",
            file=sys.stderr,
        )


def start(
    brokers: int = 3,
    data_dir: str | None = None,
    cluster: str = "rafka",
    num_cpus: int | None = None,
    port: int | None = None,
    config: dict | None = None,
    *,
    entry: CliEntry,
    redis_address: str | None = None,
    redis_password: str | None = None,
) -> dict:
    """Start the Ray head, the cluster on it and its CLI agent (running ``entry``'s verbs); record them in the
    state file. The cluster's description, as ``rafka cluster start`` prints it. ``redis_address`` (HOST:PORT):
    the head's GCS keeps its tables there (Ray's GCS fault tolerance)."""
    gcs_storage = _gcs_storage(redis_address, redis_password, cluster)
    state = read_state()
    _refuse_if_recorded_running(state)
    if state and state.get("attached"):  # a deployment recorded here whose Ray is gone: nothing to end
        state_file().unlink(missing_ok=True)
        state = None
    if state:
        leftovers = ray_processes(state["temp_dir"])
        if _ray_is_up(state["address"]) and leftovers:
            raise KafkaError(
                f"a rafka cluster is already running at {state['address']} "
                f"(temp dir {state['temp_dir']}); stop it with `rafka cluster stop`"
            )
        # the recorded head is gone (crashed): end whatever is left of it (raylet, broker workers still
        # holding the log directories) before another head starts on the same data
        if leftovers:
            print(
                f"rafka: the cluster recorded in {state_file()} is not running; ending "
                f"{len(leftovers)} leftover processes of its head",
                file=sys.stderr,
            )
            _kill(leftovers)
        shutil.rmtree(state["temp_dir"], ignore_errors=True)
        state_file().unlink(missing_ok=True)
    data_dir = os.path.abspath(data_dir or os.path.join(state_file().parent, "data"))
    os.makedirs(data_dir, exist_ok=True)
    temp_dir = tempfile.mkdtemp(prefix="rafka-ray-", dir="/tmp")
    # the user's --port is kept out of the other two, or Ray refuses to start
    gcs_port, client_port, agent_port = [p for p in free_ports(4) if p != port][:3]
    gcs_port = port or gcs_port
    ray_bin = os.path.join(os.path.dirname(sys.executable), "ray")
    cmd = [
        ray_bin if os.path.exists(ray_bin) else "ray",
        "start",
        "--head",
        "--temp-dir",
        temp_dir,
        "--port",
        str(gcs_port),
        "--ray-client-server-port",
        str(client_port),
        "--dashboard-agent-listen-port",
        str(agent_port),
        "--include-dashboard=false",
        "--disable-usage-stats",
        "--num-cpus",
        str(num_cpus or os.cpu_count() or 1),
    ]
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_worker_niceness": str(WORKER_NICENESS)}
    if gcs_storage:
        env["RAY_REDIS_ADDRESS"] = gcs_storage["redis_address"]
        env["RAY_external_storage_namespace"] = gcs_storage["namespace"]
        if redis_password:
            cmd += ["--redis-password", redis_password]
    ensure_token()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env=env)
    from actors.server import server_log

    # what `ray start` printed (its banner, the warnings of small machines) is kept with the server logs
    os.makedirs(server_log.logs_dir(data_dir), exist_ok=True)
    with open(os.path.join(server_log.logs_dir(data_dir), server_log.RAY_START_LOG), "a", encoding="utf-8") as f:
        f.write(f"$ {' '.join(cmd)}  (exit {proc.returncode})\n{proc.stdout}{proc.stderr}\n")
    server_log.route_ray_driver_logs(data_dir)
    if proc.returncode != 0:
        _kill(ray_processes(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise KafkaError(f"`ray start --head` failed: {' | '.join(tail)}")
    import ray
    from ray._private.services import get_node_ip_address

    from rafka.ray_session import use_token_auth_if_available

    use_token_auth_if_available()
    address = f"{get_node_ip_address()}:{gcs_port}"
    info = {
        "cluster": cluster,
        "address": address,
        "client_address": f"ray://{address.rsplit(':', 1)[0]}:{client_port}",
        "temp_dir": temp_dir,
        "data_dir": data_dir,
        "brokers": brokers,
        "config": dict(config or {}),
        "started_at": time.time(),
        "pids": sorted(ray_processes(temp_dir)),
    }
    if gcs_storage:
        info["gcs_storage"] = gcs_storage
    try:
        quiet_worker_pool_warnings()
        ray.init(address=address, namespace=RAY_NAMESPACE, log_to_driver=False, logging_level="WARNING")
        from actors.bootstrap import start_cluster

        server = start_cluster(cluster, brokers, data_dir, broker_config=dict(config or {}) or None)
        from rafka.client_utils import bootstrap_servers

        info["bootstrap_servers"] = bootstrap_servers(cluster)
        info["metrics_url"] = server.metrics_url()
        agent = start_agent(cluster, address, free_port(), secrets.token_urlsafe(24), entry, pick_port=free_port)
        info["cli_agent"] = f"{agent['host']}:{agent['port']}"
    except BaseException:
        if ray.is_initialized():
            ray.shutdown()
        _kill(ray_processes(temp_dir))
        shutil.rmtree(temp_dir, ignore_errors=True)
        raise
    ray.shutdown()
    # the password goes to the state file (this user's alone, as the agent's token) for stop's cleanup, not to output
    _write_state({**info, "redis_password": redis_password} if redis_password else info, agent)
    return info


def stop_on(state: dict) -> dict:
    """Stop what ``start_on`` started (the rafka actors and the CLI agent), leaving Ray running."""
    import ray

    from rafka.ray_session import attach_ray

    stopped = 0
    try:
        attach_ray(state["address"])
        from actors.bootstrap import ServerHandle

        server = ServerHandle.of_running(state["cluster"], state["brokers"], state["data_dir"])
        stopped = len(server.brokers)
        server.shutdown()
        try:
            ray.kill(ray.get_actor(AGENT_NAME.format(cluster=state["cluster"]), namespace=RAY_NAMESPACE))
        except ValueError:
            pass
    finally:
        if ray.is_initialized():
            ray.shutdown()
    state_file().unlink(missing_ok=True)
    return {
        "cluster": state["cluster"],
        "killed": 0,
        "brokers_stopped": stopped,
        "temp_dir": None,
        "data_dir": state["data_dir"],
    }


def stop() -> dict:
    state = read_state()
    if not state:
        raise ClusterNotFoundError(f"no cluster was started from here (no {state_file()})")
    if state.get("attached"):
        return stop_on(state)
    temp_dir = state["temp_dir"]
    if _ray_is_up(state["address"]):
        import ray

        from rafka.ray_session import use_token_auth_if_available

        use_token_auth_if_available()
        try:
            if not ray.is_initialized():
                quiet_worker_pool_warnings()
                ray.init(
                    address=state["address"], namespace=RAY_NAMESPACE, log_to_driver=False, logging_level="WARNING"
                )
            from actors.bootstrap import ServerHandle

            ServerHandle.of_running(state["cluster"], state["brokers"], state["data_dir"]).shutdown()
        except Exception as exc:  # noqa: BLE001 - the processes are ended below regardless
            print(
                f"rafka: warning: clean actor shutdown failed ({type(exc).__name__}: {exc}); ending the Ray processes",
                file=sys.stderr,
            )
        finally:
            if ray.is_initialized():
                ray.shutdown()
    killed = _kill(ray_processes(temp_dir))
    shutil.rmtree(temp_dir, ignore_errors=True)
    if state.get("gcs_storage"):
        _drop_gcs_storage(state["gcs_storage"], state.get("redis_password"))
    try:
        state_file().unlink()
    except FileNotFoundError:
        pass
    return {"cluster": state["cluster"], "killed": killed, "temp_dir": temp_dir, "data_dir": state["data_dir"]}
