"""A broker's ``log.dirs`` (JBOD): ``BrokerLogDirs`` locks and identifies each directory (``.lock``,
``meta.properties``), knows which directory holds each partition and places new ones (storage/log_dirs.py
``next_log_dir``), and keeps the offline ones; ``LogDirFailures`` is Kafka's LogDirFailureChannel +
``ReplicaManager.handleLogDirFailure``: a directory failing (ENOSPC, EIO, EROFS) goes offline for the rest of the
broker's life, its replicas are stopped without writing and reported to the controller (``replicas_offline``),
which moves leadership away; ``ReplicaLogDirMoves`` is AlterReplicaLogDirs (a replica moved to another dir of its
broker: stopped, its directory copied, started again there). Used by the broker shell (actors/broker.py) on its event loop; it calls Ray only
through the broker (its supervisor and controller link).
docs/internals.md ("Log directories") has the rules.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import shutil
import time
from collections.abc import Iterable

from actors.replication.leader_and_isr import parse_partition_dir, partition_dir_name
from actors.server.controller_link import ControllerUnavailable
from actors.server.log_dir_lock import LogDirLock
from protocol.errors import KafkaError, KafkaStorageError, LogDirNotFoundError, error_response
from storage import meta_properties
from storage.log_dirs import configured_log_dirs, describe_failure, next_log_dir, partition_size, volume_bytes

log = logging.getLogger("rafka.broker")

Key = tuple[str, int]


class BrokerLogDirs:
    """The directories of one broker, in config order. Single owner: the broker's event loop (``acquire`` runs in
    a thread before anything else touches it)."""

    def __init__(self, config: dict, default_dir: str, broker_id: int):
        self.broker_id = int(broker_id)
        self.dirs = configured_log_dirs(config, default_dir)
        self.locks = {d: LogDirLock(d) for d in self.dirs}
        self.directory_ids: dict[str, str] = {}
        self.offline: dict[str, str] = {}  # dir -> why (the first failure's message)
        self.placement: dict[Key, str] = {}  # partition -> the dir holding its log

    # ---- start and stop ---------------------------------------------------------------------------
    def acquire(self, timeout_s: float) -> None:
        """Lock every directory (KafkaStorageError when another live broker holds one) and read or create its
        ``meta.properties``; a directory that cannot be written is offline from the start (Kafka starts a broker
        while one log dir is online), and the start fails only when none is. Then the partitions on disk."""
        try:
            for d in self.dirs:
                try:
                    os.makedirs(d, exist_ok=True)
                    self.locks[d].acquire(timeout_s)
                    props = meta_properties.load_or_create(d, self.broker_id)
                    self.directory_ids[d] = props["directory.id"]
                except KafkaStorageError as e:
                    if isinstance(e.__cause__, OSError) or "Failed to lock" in e.message:
                        self._offline_at_start(d, e)
                        continue
                    raise
                except OSError as e:
                    self._offline_at_start(d, e)
            if not self.online():
                raise KafkaStorageError(
                    f"Broker {self.broker_id}: no log directory of {', '.join(self.dirs)} is usable: "
                    + "; ".join(f"{d}: {why}" for d, why in self.offline.items())
                )
            self.scan()
        except BaseException:
            self.release()
            raise

    def _offline_at_start(self, d: str, e: BaseException) -> None:
        why = describe_failure(e) if isinstance(e, OSError) else getattr(e, "message", str(e))
        log.error("Failed to load log dir %s of broker %s: %s; it is offline", d, self.broker_id, why)
        self.offline[d] = why
        self.locks[d].release()

    def release(self) -> None:
        for lock in self.locks.values():
            lock.release()

    def scan(self) -> None:
        """Which directory holds each partition's log (the first, in config order, when two do)."""
        for d in self.online():
            try:
                names = os.listdir(d)
            except OSError as e:
                self.offline[d] = describe_failure(e)
                continue
            for name in names:
                key = parse_partition_dir(name)
                if key is None or not os.path.isdir(os.path.join(d, name)):
                    continue
                if key in self.placement and self.placement[key] != d:
                    log.warning(
                        "broker %s: %s-%s has a log in %s and in %s: using the first",
                        self.broker_id,
                        *key,
                        self.placement[key],
                        d,
                    )
                    continue
                self.placement[key] = d

    # ---- views ------------------------------------------------------------------------------------
    @property
    def first(self) -> str:
        return self.dirs[0]

    def online(self) -> list[str]:
        return [d for d in self.dirs if d not in self.offline]

    @property
    def directory_id(self) -> str:
        """What the broker registers as its directory id (KIP-858): its one directory's, or with several the
        sorted ids joined by ',' (a replaced or emptied disk changes it: the controller then takes this broker
        out of every ISR until it has caught up again)."""
        ids = sorted(self.directory_ids.values())
        return ids[0] if len(ids) == 1 else ",".join(ids)

    def counts(self) -> dict[str, int]:
        out = {d: 0 for d in self.dirs}
        for d in self.placement.values():
            out[d] = out.get(d, 0) + 1
        return out

    def dir_of(self, key: Key) -> str | None:
        return self.placement.get(key)

    def partitions_in(self, d: str) -> list[Key]:
        return sorted(k for k, v in self.placement.items() if v == d)

    def partition_path(self, key: Key, is_new: bool = True) -> str:
        """The directory of ``key``'s log: where it is, else in the online dir with the fewest partitions
        (recorded now). KafkaStorageError when its dir is offline, or every dir is, or (Kafka's
        ``LogManager.getOrCreateLog``) when the log is not found, the partition is not new (LeaderAndIsr's
        ``is_new``) and a dir is offline: its log may be on that dir, and an empty one elsewhere would hide it."""
        d = self.placement.get(key)
        if d is None:
            if not is_new and self.offline:
                raise KafkaStorageError(
                    f"Can not create log for {key[0]}-{key[1]} because log directories {','.join(self.offline)} "
                    "are offline"
                )
            d = self.placement[key] = next_log_dir(self.counts(), self.online())
        elif d in self.offline:
            raise KafkaStorageError(
                f"Log of {key[0]}-{key[1]} is in the offline log dir {d} of broker {self.broker_id}: {self.offline[d]}"
            )
        return os.path.join(d, partition_dir_name(*key))

    def forget(self, key: Key) -> None:
        """``key``'s log was deleted: a new one may go to another dir."""
        self.placement.pop(key, None)

    def mark_offline(self, d: str, why: str) -> bool:
        """``d`` failed; False when it already had (the first failure does the work)."""
        if d in self.offline or d not in self.locks:
            return False
        self.offline[d] = why
        return True

    def dir_containing(self, path: str) -> str | None:
        """The log dir ``path`` (a partition's directory, or a log dir) is in."""
        path = os.path.abspath(path)
        for d in self.dirs:
            if path == d or os.path.dirname(path) == d:
                return d
        return None

    def describe(self, sizes: dict[Key, dict] | None = None, wanted: Iterable[Key] | None = None) -> list[dict]:
        """DescribeLogDirs' view, one entry per dir: ``{log_dir, error_code, error_message, total_bytes,
        usable_bytes, partitions: [{topic, partition, size, offset_lag, is_future}]}``. ``sizes``: the replicas'
        own figures (``{key: {size, log_end_offset, high_watermark}}``); a partition without one is measured on
        disk with lag 0. ``wanted``: only those partitions (None: all). An offline dir has KAFKA_STORAGE_ERROR,
        no partitions and -1 bytes, as Kafka answers."""
        want = None if wanted is None else set(wanted)
        out = []
        for d in self.dirs:
            if d in self.offline:
                out.append(
                    {
                        "log_dir": d,
                        "error_code": KafkaStorageError.code,
                        "error_message": self.offline[d],
                        "total_bytes": -1,
                        "usable_bytes": -1,
                        "partitions": [],
                    }
                )
                continue
            total, usable = volume_bytes(d)
            parts = []
            for key in self.partitions_in(d):
                if want is not None and key not in want:
                    continue
                fig = (sizes or {}).get(key)
                if fig is not None:
                    size = int(fig.get("size", 0))
                    lag = max(int(fig.get("high_watermark", 0)) - int(fig.get("log_end_offset", 0)), 0)
                else:
                    size, lag = partition_size(os.path.join(d, partition_dir_name(*key))), 0
                parts.append(
                    {"topic": key[0], "partition": key[1], "size": size, "offset_lag": lag, "is_future": False}
                )
            out.append(
                {
                    "log_dir": d,
                    "error_code": 0,
                    "error_message": None,
                    "total_bytes": total,
                    "usable_bytes": usable,
                    "partitions": parts,
                }
            )
        return out


class LogDirFailures:
    """The broker's reaction to a failed log dir (one at a time per dir; later reports of the same dir do
    nothing). ``broker`` is the BrokerActor: its replicas, locks, supervisor, pool and controller link."""

    def __init__(self, broker, dirs: BrokerLogDirs):
        self.b, self.dirs = broker, dirs
        # one entry per failed dir: {log_dir, why, partitions, reported, at (wall clock), stopped_ms, reported_ms}
        self.handled: list[dict] = []

    def report(self, d: str | None, why: str) -> asyncio.Task | None:
        """A replica, a bind or the broker's own write found ``d`` failing: handle it in the background (the
        caller may hold a partition's lock). None when ``d`` is unknown or already offline."""
        d = self.dirs.dir_containing(d) if d else None
        if d is None or not self.dirs.mark_offline(d, why):
            return None
        return asyncio.get_running_loop().create_task(self._handle(d, why))

    async def _handle(self, d: str, why: str) -> dict:
        b = self.b
        keys = [k for k in self.dirs.partitions_in(d) if k in b.replicas]
        log.error(
            "Broker %s stopped serving replicas in dir %s (%s): %d partition(s) offline: %s",
            b.broker_id,
            d,
            why,
            len(keys),
            ", ".join(f"{t}-{p}" for t, p in keys),
        )
        t0 = time.monotonic()
        entry = {
            "log_dir": d,
            "why": why,
            "partitions": [list(k) for k in keys],
            "reported": False,
            "at": time.time(),
        }
        self.handled.append(entry)
        await asyncio.gather(*(self._stop(k) for k in keys))
        entry["stopped_ms"] = round((time.monotonic() - t0) * 1000, 1)  # every replica of the dir stopped
        if keys:
            entry["reported"] = await self._report(keys)
        entry["reported_ms"] = round((time.monotonic() - t0) * 1000, 1)  # the controller moved their leadership
        return entry

    async def _stop(self, key: Key) -> None:
        """Stop ``key``'s replica without writing (its log is on the failed dir); the coordinator of an internal
        partition loses it. Its directory is kept for the restart's recovery."""
        b = self.b
        async with b._lock(key):
            h = b.replicas.pop(key, None)
            if h is None:
                return
            pid = b.supervisor.unwatch(key, forget=False)
            b.topic_ids.pop(key, None)
            await b.replica_gone(key)
            try:
                await b.supervisor.stop(key, h, False, pid, abandon=True)
            except Exception as e:  # noqa: BLE001 - a replica that does not stop is killed by the supervisor
                log.warning("broker %s: stopping %s-%s of a failed log dir: %s", b.broker_id, *key, e)

    async def _report(self, keys: list[Key]) -> bool:
        """``replicas_offline`` for ``keys`` until the controller answers (leadership and the ISR move away)."""
        b = self.b
        while not b.stopping:
            try:
                res = await b.link.call("replicas_offline", b.broker_id, b.broker_epoch, [list(k) for k in keys])
            except ControllerUnavailable:
                await asyncio.sleep(0.2)
                continue
            except Exception as e:  # noqa: BLE001 - a timeout or the controller's error: asked again
                log.warning("broker %s: replicas_offline of a failed log dir: %s", b.broker_id, e)
                await asyncio.sleep(0.2)
                continue
            refused = [p for p in res.get("partitions", []) if p.get("error_code")]
            for p in refused:
                log.warning(
                    "broker %s: replicas_offline of %s-%s refused: %s",
                    b.broker_id,
                    p.get("topic"),
                    p.get("partition"),
                    p.get("error_message"),
                )
            return not refused
        return False


MOVE_SUFFIX = ".move"  # a partition directory being copied into its new log dir (no partition name parses from it)


def move_partition_dir(src_dir: str, dest_dir: str, name: str) -> None:
    """Copy ``src_dir/name`` into ``dest_dir`` under a temporary name, rename it into place, then remove the source
    (a crash before the rename leaves the source whole; after it, two equal copies, and the scan takes the first)."""
    tmp = os.path.join(dest_dir, name + MOVE_SUFFIX)
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(os.path.join(src_dir, name), tmp)
    os.rename(tmp, os.path.join(dest_dir, name))
    shutil.rmtree(os.path.join(src_dir, name))


class ReplicaLogDirMoves:
    """AlterReplicaLogDirs on one broker. Kafka copies into a future log while the replica serves; here the replica
    is stopped for the copy (its clients retry: NOT_LEADER_OR_FOLLOWER) and started again in the new dir at the
    partition state it had, so a move suits small partitions."""

    def __init__(self, broker, dirs: BrokerLogDirs):
        self.b, self.dirs = broker, dirs

    async def move(self, key: Key, dest: str) -> tuple[int, str | None]:
        """``(error_code, message)`` of moving ``key``'s replica to the log dir ``dest``: LOG_DIR_NOT_FOUND for a
        path that is not one of ``log.dirs``, KAFKA_STORAGE_ERROR when either dir is offline; a partition not
        hosted here gets ``dest`` as its dir when it is created (Kafka's preferred log dir)."""
        b, dirs = self.b, self.dirs
        dest = os.path.abspath(dest)
        if dest not in dirs.dirs:
            return error_response(LogDirNotFoundError(f"{dest} is not one of broker {b.broker_id}'s log.dirs"))
        if dest in dirs.offline:
            return error_response(KafkaStorageError(f"log dir {dest} is offline: {dirs.offline[dest]}"))
        async with b._lock(key):
            cur = dirs.dir_of(key)
            if cur == dest:
                return 0, None
            if cur is not None and cur in dirs.offline:
                return error_response(KafkaStorageError(f"log dir {cur} of {key[0]}-{key[1]} is offline"))
            h = b.replicas.get(key)
            if cur is None:
                dirs.placement[key] = dest
                return 0, None
            state = None
            if h is not None:
                if key not in self.b.last_states:
                    return error_response(KafkaStorageError(f"replica {key[0]}-{key[1]} is not started yet"))
                try:
                    st = await asyncio.wait_for(h.state.remote(), 30)
                except Exception as e:  # noqa: BLE001 - the replica is dying: its supervisor recreates it
                    return error_response(KafkaStorageError(f"replica {key[0]}-{key[1]} did not answer: {e}"))
                state = self._state_now(key, st)
                await b._stop_one(key, delete=False)
            name = partition_dir_name(*key)
            moved: str | None = None  # why the copy failed
            try:
                await asyncio.to_thread(move_partition_dir, cur, dest, name)
            except OSError as e:
                moved = describe_failure(e)
                log.error("broker %s: moving %s-%s to %s failed: %s", b.broker_id, *key, dest, moved)
                shutil.rmtree(os.path.join(dest, name + MOVE_SUFFIX), ignore_errors=True)
            else:
                dirs.placement[key] = dest
                log.info("broker %s: moved %s-%s from %s to %s", b.broker_id, *key, cur, dest)
        if state is not None:  # started again where its log now is (or where it was, if the copy failed)
            res = await b._apply(state)
            if res.error_code:
                return res.error_code, res.error_message
        if moved is not None:
            return error_response(KafkaStorageError(f"moving {key[0]}-{key[1]} to {dest} failed: {moved}"))
        return 0, None

    def _state_now(self, key: Key, st: dict):
        """The LeaderAndIsr state the replica runs at (its own view: the ISR it knows, its epochs)."""
        last = self.b.last_states[key]
        return dataclasses.replace(
            last,
            controller_epoch=max(int(st.get("controller_epoch", -1)), last.controller_epoch),
            leader=int(st["leader"]),
            leader_epoch=int(st["leader_epoch"]),
            isr=tuple(st["isr"]),
            partition_epoch=int(st["partition_epoch"]),
            replicas=tuple(st["replicas"]),
            is_new=False,
        )

    async def alter(self, moves: list) -> list[dict]:
        """``[[dir, topic, partition], ...]`` -> ``[{topic, partition, error_code, error_message}]``, in order."""
        out = []
        for d, t, p in moves:
            try:
                code, msg = await self.move((str(t), int(p)), str(d))
            except KafkaError as e:
                code, msg = error_response(e)
            out.append({"topic": t, "partition": int(p), "error_code": code, "error_message": msg})
        return out
