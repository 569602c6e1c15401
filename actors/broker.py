"""The broker's Ray shell (Kafka's BrokerServer as an actor): one detached async actor per broker id
(``broker_name(cluster, id)``) owning ``data_dir/broker-{id}/``, its replicas (in replica hosts, or a process
each), its link to the controller and its coordinators. Created by actors/bootstrap.py; called by the
controller, the replicas, the clients and the exporter. Calls actors/server/ and actors/replication/
(``leader_and_isr`` decides). docs/internals.md ("Broker") has its lifecycle.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import time

import ray
from ray.exceptions import RayActorError, RayTaskError

from actors.metadata.kv import BoundedKVReads, GcsKV, KVUnavailableError
from actors.metadata.log_recovery import read_node_metadata_log
from actors.replica import (
    ReplicaActor,  # imported here, at actor start, not on the event loop of the first LeaderAndIsr
)
from actors.replication import leader_and_isr as lai
from actors.replication.replica_config import host_max_partitions
from actors.server import auto_topic_creation as atc
from actors.server import coordinator_host as ch
from actors.server import listeners as wire
from actors.server import server_log
from actors.server.broker_config import broker_overrides
from actors.server.broker_config import validate as validate_broker_config
from actors.server.broker_placement import DEFAULT_RACK_LABEL
from actors.server.controller_link import ControllerLink, ControllerUnavailable
from actors.server.log_dirs import BrokerLogDirs, LogDirFailures, ReplicaLogDirMoves
from actors.server.replica_hosts import ReplicaHosts
from actors.server.replica_pool import ReplicaPool
from actors.server.replica_supervisor import ReplicaSupervisor
from protocol.control_messages import (
    LeaderAndIsrPartitionState,
    LeaderAndIsrRequest,
    LeaderAndIsrResponse,
    StopReplicaRequest,
)
from protocol.errors import (
    CoordinatorNotAvailableError,
    KafkaError,
    KafkaStorageError,
    RequestTimedOutError,
    StaleControllerEpochError,
    UnknownServerError,
    error_response,
)
from protocol.kv import METADATA_VERSION, read_cluster
from storage.log_dirs import describe_failure
from storage.partition_metadata import prepare_partition_dir

_REPLICA_CLS = ReplicaActor if hasattr(ReplicaActor, "options") else ray.remote(ReplicaActor)

log = logging.getLogger("rafka.broker")

NODE_DATA_DIR_ENV = "RAFKA_DATA_DIR"


def _election_done(task: asyncio.Task) -> None:
    """The early election's outcome: ``register`` elects again if it failed."""
    if not task.cancelled() and task.exception() is not None:
        log.info("early controller election: %s", task.exception())


def _err_dict(exc: BaseException) -> dict:
    if isinstance(exc, RayTaskError) and isinstance(getattr(exc, "cause", None), KafkaError):
        exc = exc.cause
    code, msg = error_response(exc)
    return {"error_code": code, "error_message": msg}


class BrokerActor:
    def __init__(self, cluster: str, broker_id: int, data_dir: str, config: dict | None = None, node_index: int = 0):
        # the node's own data directory, when its machine sets one (``RAFKA_DATA_DIR`` in ``ray start``'s
        # environment: a volume mounted elsewhere on that node), wins over the cluster's
        data_dir = os.environ.get(NODE_DATA_DIR_ENV) or data_dir
        self.cluster, self.broker_id, self.data_dir = cluster, int(broker_id), data_dir
        self.config = broker_overrides(config or {}, self.broker_id)
        validate_broker_config(self.config)  # a broker that cannot run with its config does not start
        self.node_index = int(node_index)  # this broker's index among its node's brokers (listener ports)
        self.directory_id = ""  # meta.properties' directory.id, read at start
        # ``log.dirs`` (JBOD), else ``log.dir``, else data_dir/broker-{id}: actors/server/log_dirs.py
        self.log_dirs = BrokerLogDirs(self.config, os.path.join(data_dir, f"broker-{broker_id}"), self.broker_id)
        self.dir = self.log_dirs.first
        server_log.configure(server_log.broker_log(data_dir, self.broker_id), f"Broker id={self.broker_id}")
        ctx = ray.get_runtime_context()
        self.node_id = ctx.get_node_id()
        self.node_address = ray.util.get_node_ip_address()
        if "broker.rack" not in self.config:  # the rack from the node's label (a Kubernetes zone, ...)
            rack = ctx.get_node_labels().get(self.config.get("broker.rack.label", DEFAULT_RACK_LABEL))
            if rack:
                self.config["broker.rack"] = rack
        self.log_dir_failures = LogDirFailures(self, self.log_dirs)
        self.log_dir_moves = ReplicaLogDirMoves(self, self.log_dirs)  # AlterReplicaLogDirs
        self.last_states: dict[tuple[str, int], LeaderAndIsrPartitionState] = {}  # each replica's last LeaderAndIsr
        self.link = ControllerLink(self)
        self.supervisor = ReplicaSupervisor(self)
        hosted = host_max_partitions(self.config)
        if hosted > 1:  # replicas share ReplicaHost processes (actors/server/replica_hosts.py)
            self.pool: ReplicaPool | ReplicaHosts = ReplicaHosts(self, hosted)
        else:
            self.pool = ReplicaPool(self, _REPLICA_CLS)
        self.controller_epoch = -1
        self.broker_epoch = -1
        self.replicas: dict[tuple[str, int], object] = {}
        self.topic_ids: dict[tuple[str, int], str] = {}
        self.topic_configs: dict[str, dict] = {}
        self.stopping = False
        self.latest_version = -1
        self._cache: dict | None = None
        self._cache_version = -1
        self._pid_next = 0
        self._pid_end = 0
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self._pid_lock: asyncio.Lock | None = None
        self._sessions: list[tuple[int, asyncio.Future]] = []
        self._tasks: list[asyncio.Task] = []
        self._kv = GcsKV(cluster)
        self._kv_reads = BoundedKVReads()  # metadata reads on the request path give up while the GCS is down
        self._stale_warned_at = 0.0
        self.coordinators = {k: ch.CoordinatorHost(self, kind) for k, kind in ch.KINDS.items()}
        self.wire: wire.Listeners | None = None  # the Kafka wire listener (serve/kafka_wire)

    # ---- start and controller link -------------------------------------------------------------------
    async def start(self) -> dict:
        """Lock the log directory, elect or find the controller, register, then heartbeat and watch it."""
        self._pid_lock = asyncio.Lock()
        self._loop = asyncio.get_running_loop()
        lock_timeout = int(self.config.get("broker.session.timeout.ms", 9000)) / 1000
        # every log dir locked (KafkaStorageError when held) and identified: a new directory id when a disk was
        # replaced (the controller then knows its replicas are gone, and never elects them while they catch up)
        await asyncio.to_thread(self.log_dirs.acquire, lock_timeout)
        self.directory_id = self.log_dirs.directory_id
        loop = asyncio.get_running_loop()
        # the election first, in the background: the controller's process starts (a worker and its imports)
        # while this broker starts its Kafka listener; ``register`` below waits for the same election
        loop.create_task(self.link.ensure()).add_done_callback(_election_done)
        try:
            self.wire = await wire.start(self)
        except BaseException:
            self.log_dirs.release()
            raise
        self._tasks = [loop.create_task(self.link.probe_loop()), loop.create_task(self.supervisor.probe_loop())]
        res = await self.link.register()
        self.pool.fill()  # warm replica actors, in the background (actors/server/replica_pool.py)
        self._tasks += [loop.create_task(self.link.heartbeat_loop()), loop.create_task(self.link.watch_loop())]
        log.info(
            "started (broker epoch %d, controller epoch %s, log dirs %s, pid %d)",
            self.broker_epoch,
            res.get("controller_epoch", self.controller_epoch),
            ",".join(self.log_dirs.dirs),
            os.getpid(),
        )
        return {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "controller_epoch": res.get("controller_epoch", self.controller_epoch),
            "node_id": self.node_id,
        }

    def suspend_heartbeats(self, duration_ms: int) -> dict:
        """Fault injection: behave like a hung broker (no heartbeats) for ``duration_ms``; the process and
        its replicas stay up, so only the controller's session timeout can notice."""
        self.link.hb_suspended_until = asyncio.get_running_loop().time() + duration_ms / 1000
        return {"error_code": 0}

    # ---- controller epoch fencing --------------------------------------------------------------------
    def _see_epoch(self, epoch: int) -> None:
        if epoch > self.controller_epoch:
            self.controller_epoch = epoch
            for e, fut in self._sessions:
                if e < epoch and not fut.done():
                    fut.set_result(
                        {
                            "error_code": StaleControllerEpochError.code,
                            "reason": "newer controller",
                            "controller_epoch": epoch,
                        }
                    )
            self._sessions = [(e, f) for e, f in self._sessions if not f.done()]

    def _stale(self, controller_epoch: int) -> dict | None:
        stale = lai.stale_controller_epoch(controller_epoch, self.controller_epoch)
        if stale is None:
            self._see_epoch(controller_epoch)
        return stale

    async def controller_session(self, controller_epoch: int) -> dict:
        """The controller's long-poll on this broker: returns only on shutdown or a newer controller."""
        stale = self._stale(controller_epoch)
        if stale:
            return stale
        fut = asyncio.get_running_loop().create_future()
        if self.stopping:
            return {"error_code": 0, "reason": "shutdown"}
        self._sessions.append((controller_epoch, fut))
        return await fut

    def node_metadata_log(self) -> list[dict]:
        """The metadata log the controllers that ran on this node left in its data directory (a whole-cluster
        restart's controller compares the nodes' logs: actors/metadata/log_recovery.py)."""
        return read_node_metadata_log(self.data_dir)

    def incarnation(self) -> dict:
        return {
            "broker_id": self.broker_id,
            "broker_epoch": self.broker_epoch,
            "controller_epoch": self.controller_epoch,
            "node_id": self.node_id,
            "pid": os.getpid(),
            "listener": wire.endpoint(self.wire),
        }

    # ---- LeaderAndIsr / StopReplica / UpdateMetadata --------------------------------------------------
    def _lock(self, key) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def _partition_dir(self, topic: str, p: int, is_new: bool = True) -> str:
        """Where the partition's log is, else the log dir with the fewest partitions (KafkaStorageError when its
        dir is offline, or when it is not new and a dir is offline: actors/server/log_dirs.py)."""
        return self.log_dirs.partition_path((topic, p), is_new)

    def _prepare_dir(self, topic: str, p: int, topic_id: str, is_new: bool = True) -> str:
        d = self._partition_dir(topic, p, is_new)
        try:
            prepare_partition_dir(d, topic_id)  # a stale log of a re-created topic is wiped (and logged)
        except OSError as e:  # the disk failed: its whole log dir goes offline
            why = describe_failure(e)
            self._loop.call_soon_threadsafe(self.log_dir_failures.report, self.log_dirs.dir_containing(d), why)
            raise KafkaStorageError(f"Error while preparing the log of {topic}-{p} in {d}: {why}") from e
        return d

    async def _create_replica(self, s: LeaderAndIsrPartitionState):
        """``(handle, pid)``: a warm pool actor (else a cold one) bound to the partition's directory, its log
        open. A warm actor that died meanwhile is replaced by the next; a bind refused (the directory's
        lock is held: another live replica of this partition on this broker) raises its Kafka error."""
        topic, p = s.topic, s.partition
        d = await asyncio.to_thread(self._prepare_dir, topic, p, s.topic_id, s.is_new)
        props = lai.replica_props(self.config, s.configs)
        for _attempt in range(3):
            h = self.pool.take()
            try:
                res = await h.bind.remote(self.cluster, topic, p, s.topic_id, self.broker_id, d, props)
            except RayActorError as e:  # a warm actor killed before we took it: the next one
                log.warning("broker %s: binding %s-%s to a replica actor failed: %s", self.broker_id, topic, p, e)
                self.pool.end(h)
                continue
            finally:
                self.pool.bound()
            if res.get("error_code"):
                self.pool.end(h)
                if res.get("log_dir_failure"):  # the log could not be opened: its disk failed
                    self.log_dir_failures.report(self.log_dirs.dir_containing(d), res.get("error_message") or "")
                raise KafkaStorageError(res.get("error_message") or f"binding replica {topic}-{p} failed")
            return h, res.get("pid")
        raise RuntimeError(f"no replica actor for {topic}-{p} could be started")

    async def _apply(self, s: LeaderAndIsrPartitionState):
        """One partition state of a LeaderAndIsr -> its ``LeaderAndIsrPartitionError``."""
        key = s.key
        async with self._lock(key):
            act = lai.replica_action(self.broker_id, s, self.topic_ids.get(key) if key in self.replicas else None)
            if act.kind == lai.NOT_A_REPLICA:
                return lai.partition_result(s, error=lai.not_a_replica_error())
            self.last_states[key] = s
            try:
                if act.kind == lai.RECREATE:
                    await self._stop_one(key, delete=True)
                if act.kind in (lai.CREATE, lai.RECREATE):
                    h, pid = await self._create_replica(s)
                    self.replicas[key] = h
                    self.topic_ids[key] = s.topic_id
                    self.supervisor.watch(key, h, pid)
                h = self.replicas[key]
                self.topic_configs[key[0]] = dict(s.configs)
                become = h.become_leader if act.make_leader else h.become_follower
                res = await self.supervisor.call(key, h, become.remote(act.state))
            except (RayActorError, RayTaskError, KafkaError, OSError, RuntimeError) as e:
                log.warning("broker %s: LeaderAndIsr for %s failed: %s", self.broker_id, key, e)
                return lai.partition_result(s, error=_err_dict(e))  # its supervisor reports and recreates it
            await self._notify_coordinator(key, act.make_leader, s.leader_epoch, h)
            return lai.partition_result(s, res)

    async def leader_and_isr(self, request: LeaderAndIsrRequest) -> dict:
        stale = self._stale(request.controller_epoch)
        if stale:
            return stale
        states = request.partition_states
        results = await asyncio.gather(*(self._apply(s) for s in states))
        if request.full:
            for key in lai.replicas_to_remove(list(self.replicas), states):
                async with self._lock(key):
                    await self._stop_one(key, delete=True)
            for d in self.log_dirs.online():
                try:
                    names = os.listdir(d)
                except OSError as e:
                    self.log_dir_failures.report(d, describe_failure(e))
                    continue
                for name in lai.stray_partition_dirs(names, states):
                    log.info("broker %s: deleting stray log %s in %s", self.broker_id, name, d)
                    shutil.rmtree(os.path.join(d, name), ignore_errors=True)
                    key = lai.parse_partition_dir(name)
                    if key is not None and self.log_dirs.dir_of(key) == d:
                        self.log_dirs.forget(key)
        return LeaderAndIsrResponse(partitions=tuple(results)).to_dict()

    async def replica_gone(self, key) -> None:
        """The supervisor removed a dead replica: its coordinator (if any) loses that partition."""
        await self._notify_coordinator(key, False, None, None)

    async def _stop_one(self, key, delete: bool) -> dict:
        pid = self.supervisor.unwatch(key, forget=delete)
        h = self.replicas.pop(key, None)
        if delete:
            self.last_states.pop(key, None)
        self.topic_ids.pop(key, None)
        await self._notify_coordinator(key, False, None, None)
        res = {"topic": key[0], "partition": key[1], "error_code": 0, "error_message": None}
        if h is not None:
            try:
                r = await self.supervisor.stop(key, h, delete, pid)
                res.update(error_code=r.get("error_code", 0), error_message=r.get("error_message"))
            except (RayActorError, RayTaskError, KafkaError) as e:
                res.update(_err_dict(e))
        if delete:
            d = self.log_dirs.dir_of(key)
            if d is not None and d not in self.log_dirs.offline:
                shutil.rmtree(os.path.join(d, lai.partition_dir_name(*key)), ignore_errors=True)
            self.log_dirs.forget(key)
        return res

    async def stop_replica(self, request: StopReplicaRequest) -> dict:
        stale = self._stale(request.controller_epoch)
        if stale:
            return stale

        async def one(key):
            async with self._lock(key):
                return await self._stop_one(key, request.delete_partitions)

        results = await asyncio.gather(*(one(key) for key in request.partitions))
        return {"error_code": 0, "error_message": None, "partitions": list(results)}

    async def update_metadata(self, controller_epoch: int, version: int) -> dict:
        stale = self._stale(controller_epoch)
        if stale:
            return stale
        self.latest_version = max(self.latest_version, version)
        return {"error_code": 0, "error_message": None}

    async def update_topic_config(self, controller_epoch: int, topic: str, configs: dict) -> dict:
        stale = self._stale(controller_epoch)
        if stale:
            return stale
        self.topic_configs[topic] = dict(configs)
        props = lai.replica_props(self.config, configs)
        keys = [k for k in self.replicas if k[0] == topic]
        res = await asyncio.gather(
            *(self.replicas[k].update_config.remote(props) for k in keys), return_exceptions=True
        )
        errors = [r for r in res if isinstance(r, BaseException) or r.get("error_code")]
        if errors:
            return {"error_code": UnknownServerError.code, "error_message": str(errors[0])}
        return {"error_code": 0, "error_message": None}

    # ---- client-facing --------------------------------------------------------------------------------
    async def metadata(self, fresh: bool = False) -> dict:
        """Cached cluster metadata (refreshed from GCS KV when the controller announced a newer version).
        ``fresh``: KV's metadata version is read first (one key), so that a topic the controller has just
        created is answered before its UpdateMetadata reaches this broker (the Kafka listener asks it when a
        Metadata request names a topic the cache lacks: an auto-created topic is listed on the next Metadata)."""
        try:
            if fresh and self._cache is not None:
                stored = await self._kv_reads.call(self._kv.get, METADATA_VERSION)
                self.latest_version = max(self.latest_version, int(stored or 0))
            if self._cache is None or self._cache_version < self.latest_version:
                self._cache = await self._kv_reads.call(read_cluster, self._kv)
                self._cache_version = self._cache["version"]
        except KVUnavailableError as e:  # the head node down: answer from the cache, as a Kafka broker does
            if self._cache is None:
                raise RequestTimedOutError(f"broker {self.broker_id}: cluster metadata not readable: {e}") from None
            self._stale_metadata_warning(e)
        return {"controller_epoch": self.controller_epoch, "broker_id": self.broker_id, **self._cache}

    def _stale_metadata_warning(self, e: Exception) -> None:
        now = time.monotonic()
        if now - self._stale_warned_at > 10:
            self._stale_warned_at = now
            log.warning(
                "broker %s: GCS KV unreadable (%s): answering from the metadata cache (version %s, newest announced %s)",
                self.broker_id,
                e,
                self._cache_version,
                self.latest_version,
            )

    async def init_producer_id(self) -> dict:
        """A fresh producer id (epoch 0) from this broker's block; a new block from the controller."""
        async with self._pid_lock:
            if self._pid_next >= self._pid_end:
                try:
                    first, count = await self.link.call(
                        "allocate_producer_ids", self.broker_id, self.broker_epoch, timeout_s=10
                    )
                except RayTaskError as e:
                    return {**_err_dict(e), "producer_id": -1, "producer_epoch": -1}
                except (ControllerUnavailable, asyncio.TimeoutError):
                    return {
                        "error_code": CoordinatorNotAvailableError.code,
                        "error_message": "controller unavailable",
                        "producer_id": -1,
                        "producer_epoch": -1,
                    }
                self._pid_next, self._pid_end = first, first + count
            pid = self._pid_next
            self._pid_next += 1
        return {"error_code": 0, "error_message": None, "producer_id": pid, "producer_epoch": 0}

    async def auto_create_topic(self, name: str) -> dict:
        """Auto-create ``name`` (actors/server/auto_topic_creation.py: ``auto.create.topics.enable``,
        ``num.partitions``, ``default.replication.factor`` of this broker's config) through the controller,
        without waiting for leaders: ``{error_code, error_message}``, 0 once the topic exists (created now
        or by someone else); the caller answers LEADER_NOT_AVAILABLE until its partitions have leaders."""
        try:
            spec = atc.creatable_topic(name, self.config)
            res = (await self.link.call("create_topics", [spec], 0, timeout_s=10))[0]
        except (KafkaError, RayTaskError) as e:
            return _err_dict(e)
        except (ControllerUnavailable, asyncio.TimeoutError) as e:
            return {"error_code": 5, "error_message": f"controller unavailable: {e}"}
        if res.get("error_code") in (7, 36):  # REQUEST_TIMED_OUT: no leaders yet; TOPIC_ALREADY_EXISTS: a race
            return {"error_code": 0, "error_message": None}
        if not res.get("error_code"):
            log.info("broker %s: auto-created topic %r (%s)", self.broker_id, name, spec)
        return {"error_code": res.get("error_code", 0), "error_message": res.get("error_message")}

    # ---- coordination (actors/server/coordinator_host.py) -------------------------------------------------------
    async def _fresh_metadata(self) -> dict:
        try:
            self._cache = await self._kv_reads.call(read_cluster, self._kv)
            self._cache_version = self._cache["version"]
        except KVUnavailableError as e:
            if self._cache is None:
                raise RequestTimedOutError(f"broker {self.broker_id}: cluster metadata not readable: {e}") from None
            self._stale_metadata_warning(e)
        return await self.metadata()

    async def _notify_coordinator(self, key, leader: bool, epoch: int | None, replica) -> None:
        kind = ch.KIND_BY_TOPIC.get(key[0])
        if kind is not None:
            await self.coordinators[kind.key_type].notify(key[1], leader, epoch, replica)

    async def find_coordinator(self, key: str, key_type: int = ch.GROUP_KEY) -> dict:
        """FindCoordinator of a group (key type 0) or transactional id (1) -> ``{error_code, error_message,
        broker_id, coordinator (the coordinator actor's name), partition}``; COORDINATOR_NOT_AVAILABLE (15)
        while the key's internal partition has no leader (the caller retries)."""
        return await ch.find_coordinator(self.coordinators, key, key_type)

    def replica_handles(self) -> dict:
        return dict(self.replicas)

    async def replica_handle(self, topic: str, partition: int):
        """The actor of this broker's replica of ``topic``-``partition``, or None: replicas are unnamed, the
        broker that hosts one is the authority for its handle (``actors/channels/replica_lookup.py``). While a
        LeaderAndIsr of the partition is under way (its replica being bound), the answer waits for it: a
        replica the controller already assigned here is found as soon as it exists, as a name was."""
        key = (topic, int(partition))
        lock = self._locks.get(key)
        if key not in self.replicas and lock is not None and lock.locked():
            async with lock:
                pass
        return self.replicas.get(key)

    def replica_pool(self) -> dict:
        """The warm pool's figures (actors/server/replica_pool.py ``describe``)."""
        return self.pool.describe()

    def describe_configs(self) -> list[dict]:
        """This broker's configs with Kafka's sources (actors/metadata/config_sources.py): DescribeConfigs of a broker
        resource, ``rafka cluster configs``."""
        from actors.metadata.config_sources import broker_entries

        return broker_entries(self.config)

    def hosted_partitions(self) -> list[tuple[str, int]]:
        return sorted(self.replicas)

    async def describe_log_dirs(self, partitions: list | None = None) -> list[dict]:
        """DescribeLogDirs of this broker (actors/server/log_dirs.py ``describe``): each log dir with its error,
        volume bytes and partitions (``[[topic, partition], ...]`` to name some; None: all), each partition's
        size and lag from its running replica (measured on disk when it does not answer within 5 s)."""
        wanted = None if partitions is None else [(str(t), int(p)) for t, p in partitions]
        keys = [k for k in self.replicas if wanted is None or k in wanted]

        async def figures(key):
            try:
                return key, await asyncio.wait_for(self.replicas[key].metrics.remote(), 5)
            except (RayActorError, RayTaskError, asyncio.TimeoutError, KeyError):
                return key, None

        sizes = {k: f for k, f in await asyncio.gather(*(figures(k) for k in keys)) if isinstance(f, dict)}
        sizes = {k: {"size": f.get("size", 0), **f} for k, f in sizes.items() if "log_end_offset" in f}
        return await asyncio.to_thread(self.log_dirs.describe, sizes, wanted)

    async def alter_replica_log_dirs(self, moves: list) -> list[dict]:
        """AlterReplicaLogDirs: ``[[log dir, topic, partition], ...]`` -> ``[{topic, partition, error_code,
        error_message}]`` (actors/server/log_dirs.py ``ReplicaLogDirMoves``)."""
        return await self.log_dir_moves.alter(list(moves))

    def log_dir_failures_seen(self) -> list[dict]:
        """The log dirs that failed since this broker started: ``[{log_dir, why, partitions, reported}]``."""
        return [dict(e) for e in self.log_dir_failures.handled]

    # ---- shutdown -------------------------------------------------------------------------------------
    def prepare_shutdown(self) -> dict:
        """Stop heartbeating and watching the controller (a cluster shutdown is under way)."""
        self.stopping = True
        self.pool.shutdown()
        wire.stop(self.wire)
        for t in self._tasks:
            t.cancel()
        for _, fut in self._sessions:
            if not fut.done():
                fut.set_result({"error_code": 0, "reason": "shutdown"})
        return {"error_code": 0}

    async def shutdown(self) -> dict:
        """Close every replica's log (no delete), then the broker can be killed."""
        log.info("shutting down: closing %d replica log(s)", len(self.replicas))
        self.prepare_shutdown()
        keys = list(self.replicas)
        res = await asyncio.gather(*(self._stop_one(k, delete=False) for k in keys))
        self.pool.shutdown()
        self.log_dirs.release()
        return {"error_code": 0, "partitions": list(res)}

    def ping(self) -> int:
        return self.broker_id


RemoteBroker = ray.remote(BrokerActor)
