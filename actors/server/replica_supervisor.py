"""A broker's supervision of its replica actors (the Ray side of ``supervision.ReplicaSupervision``): a
``supervise()`` long-poll per replica and a ``ping()`` probe per process; on a death or a freeze the kill,
``replicas_offline`` to the controller, the recreation and ``replicas_online``. Used by the broker shell on
its event loop; calls the replicas, the controller (through controller_link) and worker_process.
docs/internals.md ("Liveness") has the rules.
"""

from __future__ import annotations

import asyncio
import logging

from ray.exceptions import RayActorError, RayTaskError

from actors.replica_host import process_class, process_handle
from actors.server.controller_link import ControllerUnavailable
from actors.server.supervision import ReplicaSupervision
from actors.server.worker_process import actor_pid, kill_worker, stopped
from protocol.clock import monotonic_ms
from protocol.control_messages import NO_LEADER, LeaderAndIsrPartitionState
from protocol.errors import RequestTimedOutError

log = logging.getLogger("rafka.broker")


class ReplicaSupervisor:
    def __init__(self, broker):
        self.b = broker
        cfg = broker.config
        session_ms = int(cfg.get("broker.session.timeout.ms", 9000))
        self.session_s = session_ms / 1000
        # a probe per replica every heartbeat interval, but at most ~10 per session timeout (short test
        # heartbeats times many replicas would keep a small machine busy)
        self.interval_s = max(int(cfg.get("broker.heartbeat.interval.ms", 2000)), session_ms // 10) / 1000
        self.state = ReplicaSupervision(session_ms)
        self._handles: dict[tuple, tuple[int, object]] = {}  # key -> (incarnation seq, handle)
        self._polls: dict[tuple, asyncio.Task] = {}
        self._probing: set[tuple] = set()  # (key, seq) with a ping in flight
        self._tasks: set[asyncio.Task] = set()

    def _spawn(self, coro) -> None:
        t = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    # ---- the broker tells us --------------------------------------------------------------------------
    def watch(self, key: tuple, handle, pid: int | None = None) -> None:
        """A replica actor was just bound to ``key`` (the caller holds the partition's lock); ``pid`` when its
        bind answered it: its log is open, so it is judged by its answers from now on (a replica frozen
        before the first probe answered would otherwise be judged by its death only, and never die)."""
        inc = self.state.started(key, monotonic_ms(), pid)
        old = self._polls.pop(key, None)
        if old is not None:
            old.cancel()
        self._handles[key] = (inc.seq, handle)
        self._polls[key] = asyncio.get_running_loop().create_task(self._long_poll(key, inc.seq, handle))

    def unwatch(self, key: tuple, forget: bool = False) -> int | None:
        """The replica is being stopped on purpose (StopReplica, shutdown): its end is no death. Returns
        its process id when known."""
        inc = self.state.current.get(key)
        pid = inc.pid if inc is not None else None
        self.state.forget(key) if forget else self.state.stopped(key)
        self._handles.pop(key, None)
        t = self._polls.pop(key, None)
        if t is not None:
            t.cancel()
        return pid

    async def call(self, key: tuple, handle, ref):
        """A broker -> replica call (LeaderAndIsr's become_leader/become_follower), bounded like StopReplica:
        while no answer comes, every session timeout the replica's process is checked; a stopped (frozen)
        one is killed -- its death is then handled like any other: reported, the replica recreated -- and
        the call fails with REQUEST_TIMED_OUT instead of holding the partition's lock forever. A process
        that still runs is only slow (a long log recovery on a loaded machine) and is waited for."""
        fut = asyncio.wrap_future(ref.future())
        while True:
            try:
                return await asyncio.wait_for(asyncio.shield(fut), self.session_s)
            except asyncio.TimeoutError:
                inc = self.state.current.get(key)
                pid = (
                    inc.pid
                    if inc is not None and inc.pid
                    else await asyncio.to_thread(actor_pid, process_handle(handle))
                )
                if stopped(pid) and kill_worker(pid, process_class(handle)):
                    log.warning(
                        "broker %s: replica %s-%s frozen in a call: killed its process %s", self.b.broker_id, *key, pid
                    )
                    raise RequestTimedOutError(
                        f"replica {key[0]}-{key[1]} did not answer within {self.session_s * 1000:.0f} ms and its "
                        "process is stopped: killed"
                    ) from None

    async def stop(self, key: tuple, handle, delete: bool, pid: int | None, abandon: bool = False) -> dict:
        """StopReplica of an unwatched replica, bounded: one that does not answer within the session
        timeout (frozen) has its process killed, so it never wakes to write into a log being deleted or
        reopened by its successor. The handle is killed either way. ``abandon``: its log dir failed, the log is
        closed without writing (actors/server/log_dirs.py)."""
        try:
            ref = handle.stop.remote(delete, True) if abandon else handle.stop.remote(delete)
            return await asyncio.wait_for(ref, self.session_s)
        except asyncio.TimeoutError:
            if pid is None:  # frozen before its first probe answered: GCS knows its process
                pid = await asyncio.to_thread(actor_pid, process_handle(handle))
            if kill_worker(pid, process_class(handle)):
                log.warning("broker %s: replica %s-%s did not stop: killed its process %s", self.b.broker_id, *key, pid)
            raise RequestTimedOutError(
                f"replica {key[0]}-{key[1]} did not stop within {self.session_s * 1000:.0f} ms: killed"
            ) from None
        finally:
            self.b.pool.end(handle)

    # ---- detection ------------------------------------------------------------------------------------
    async def _long_poll(self, key, seq, handle) -> None:
        try:
            res = await handle.supervise.remote()
        except asyncio.CancelledError:
            return
        except RayActorError as e:
            await self.on_death(key, seq, handle, f"died ({type(e).__name__})")
        except RayTaskError as e:
            log.warning("broker %s: supervise() of %s failed: %s", self.b.broker_id, key, e)
        else:
            if isinstance(res, dict) and res.get("reason") == "log_dir_failure":  # its log dir failed: all go
                self.b.log_dir_failures.report(res.get("log_dir"), res.get("error_message") or "I/O error")

    async def probe_loop(self) -> None:
        while not self.b.stopping:
            await asyncio.sleep(self.interval_s)
            now = monotonic_ms()
            self.state.tick(now)
            # one ping per process: the replicas of a ReplicaHost share its answer (actors/replica_host.py)
            by_process: dict = {}
            for key, (seq, h) in list(self._handles.items()):
                if (key, seq) not in self._probing:
                    self._probing.add((key, seq))
                    by_process.setdefault(process_handle(h)._actor_id, (h, []))[1].append((key, seq))
            for h, members in by_process.values():
                self._spawn(self._probe(members, h, now))
            for inc in self.state.frozen(now):
                current = self._handles.get(inc.key)
                # a process that still runs is only slow
                if current is not None and current[0] == inc.seq and stopped(inc.pid):
                    self._spawn(
                        self.on_death(
                            inc.key,
                            inc.seq,
                            current[1],
                            f"frozen: answered nothing for {inc.timer.silent_ms(now)} ms, its process is stopped",
                            frozen=True,
                        )
                    )

    async def _probe(self, members: list, handle, sent: int) -> None:
        """Ping the process of ``handle``; its answer is that of every ``(key, seq)`` it runs."""
        try:
            pid = await handle.ping.remote()
        except (RayActorError, RayTaskError):
            return  # the long-polls report deaths
        finally:
            self._probing.difference_update(members)
        pid = pid if isinstance(pid, int) and not isinstance(pid, bool) else None
        for key, seq in members:
            self.state.answered(key, seq, sent, pid)

    # ---- reaction -------------------------------------------------------------------------------------
    async def on_death(self, key, seq, handle, why: str, frozen: bool = False) -> None:
        b = self.b
        if b.stopping:
            return
        inc = self.state.current.get(key)
        pid = inc.pid if inc is not None and inc.seq == seq else None
        if not self.state.died(key, seq, monotonic_ms()):
            return
        log.warning("broker %s: replica %s-%s %s: recreating it", b.broker_id, key[0], key[1], why)
        if frozen and kill_worker(pid, process_class(handle)):
            log.warning("broker %s: killed the frozen replica process %s", b.broker_id, pid)
        b.pool.end(handle)
        async with b._lock(key):
            if b.replicas.get(key) is not handle:
                return  # stopped, or already replaced by a newer LeaderAndIsr
            del b.replicas[key]
            if self._handles.get(key, (None,))[0] == seq:
                del self._handles[key]
            self._polls.pop(key, None)
        await b.replica_gone(key)
        await self._recover(key)

    async def _recover(self, key) -> None:
        b = self.b
        state = await self._report("replicas_offline", key)
        if state is None:
            return
        delay = self.state.restart_delay_ms(key)
        if delay:
            log.warning("broker %s: %s-%s keeps dying: recreating it in %d ms", b.broker_id, *key, delay)
            await asyncio.sleep(delay / 1000)
        if b.stopping:
            return
        res = await b._apply(state)
        if res.error_code:
            log.warning("broker %s: recreating %s-%s failed: %s", b.broker_id, *key, res.error_message)
        if state.leader == NO_LEADER:  # it was the only ISR member: hand the leadership back
            state = await self._report("replicas_online", key)
            if state is not None:
                await b._apply(state)

    async def _report(self, method: str, key) -> LeaderAndIsrPartitionState | None:
        """Tell the controller; the partition's state after the change, or None (gone, or this broker
        incarnation was fenced: its registration brings the full partition set anyway)."""
        b = self.b
        while not b.stopping:
            try:
                res = await b.link.call(method, b.broker_id, b.broker_epoch, [list(key)])
            except ControllerUnavailable:
                continue
            except (asyncio.TimeoutError, RayTaskError) as e:
                log.warning("broker %s: %s for %s failed: %s", b.broker_id, method, key, e)
                await asyncio.sleep(0.2)
                continue
            pr = res["partitions"][0]
            if pr["error_code"]:
                log.warning("broker %s: %s for %s-%s refused: %s", b.broker_id, method, *key, pr["error_message"])
                return None
            return pr.get("state")
        return None
