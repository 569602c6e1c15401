"""A broker's link to the controller (Kafka's BrokerLifecycleManager with its controller channel): the
election (creating the named controller actor), registration, heartbeats, and the judgement of each
controller incarnation's liveness; ``call(method, *args)`` runs a controller call on the live incarnation.
Called by the broker shell on its event loop; creates actors/controller.py, uses supervision's
``SessionTimer`` and worker_process. docs/internals.md ("Liveness") has how it judges and kills.
"""

from __future__ import annotations

import asyncio
import logging
import time

import ray
from ray.exceptions import ActorDiedError, RayActorError, RayTaskError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from actors.controller import RemoteController
from actors.server.supervision import SessionTimer
from actors.server.worker_process import kill_worker, process_state
from protocol.clock import monotonic_ms
from protocol.errors import (
    BrokerIdNotRegisteredError,
    InvalidConfigError,
    KafkaError,
    NotControllerError,
    StaleBrokerEpochError,
)
from protocol.kv import BROKERS
from protocol.names import RAY_NAMESPACE, controller_name

log = logging.getLogger("rafka.broker")

FETCH_TIMEOUT_KEY = "controller.quorum.fetch.timeout.ms"
FETCH_TIMEOUT_DEFAULT_MS = 2000  # Kafka's default
FIRST_CONTACT_S = 30.0  # a controller being created may wait for a worker process on a loaded node
REGISTERED_OR_STALE = (StaleBrokerEpochError.code, BrokerIdNotRegisteredError.code)  # register again
SILENT_VOTES = "controller_silent/"  # GCS KV: controller_silent/<epoch>/<broker id> -> {"at": wall ms}
VOTE_FRESH_MS = 10_000  # at least; a voter still hearing nothing refreshes its vote every probe


def silent_vote_key(epoch: int, broker_id: int) -> str:
    return f"{SILENT_VOTES}{epoch}/{broker_id}"


def silent_majority(votes: dict[int, int], brokers: int, now_ms: int, fresh_ms: int) -> bool:
    """Whether the brokers that find a controller on another node silent (``votes``: broker id -> wall ms of its
    latest vote) are a majority of the cluster's ``brokers``: only then is it deposed by silence. A broker cut off
    from the controller alone (a network partition) must not depose a controller the majority still reaches, as a
    KRaft controller is elected by a majority of the quorum."""
    fresh = sum(1 for at in votes.values() if now_ms - at <= fresh_ms)
    return fresh >= max(1, brokers) // 2 + 1


class ControllerUnavailable(Exception):
    """The controller incarnation a call went to died, resigned or was declared dead meanwhile."""


class ControllerRef:
    """One controller incarnation as this broker sees it."""

    def __init__(self, handle, info: dict, timeout_ms: int):
        self.handle = handle
        self.epoch = int(info["controller_epoch"])
        self.pid, self.node_id = info.get("pid"), info.get("node_id")
        self.timer = SessionTimer(timeout_ms, monotonic_ms())
        self.dead = asyncio.Event()
        self.why: str | None = None
        self.probing = False
        self.voting = False  # a silence vote is being written or counted
        self.voted = False  # this broker's silence vote for this incarnation is in KV
        self.alone_since: int | None = None  # when it first found itself alone in finding it silent (logged once)


class ControllerLink:
    def __init__(self, broker):
        self.b = broker
        raw = broker.config.get(FETCH_TIMEOUT_KEY, FETCH_TIMEOUT_DEFAULT_MS)
        try:
            self.timeout_ms = int(raw)
        except (TypeError, ValueError):
            raise InvalidConfigError(f"Invalid value {raw!r} for configuration {FETCH_TIMEOUT_KEY}") from None
        if self.timeout_ms <= 0:
            raise InvalidConfigError(f"{FETCH_TIMEOUT_KEY} must be positive, got {self.timeout_ms}")
        self.heartbeat_s = int(broker.config.get("broker.heartbeat.interval.ms", 2000)) / 1000
        self.current: ControllerRef | None = None
        self.hb_suspended_until = 0.0
        self._elect_lock = asyncio.Lock()
        self._register_lock = asyncio.Lock()

    # ---- election ------------------------------------------------------------------------------------
    def _options(self):
        return RemoteController.options(
            name=controller_name(self.b.cluster),
            namespace=RAY_NAMESPACE,
            get_if_exists=True,
            num_cpus=0,
            max_concurrency=1000,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=self.b.node_id, soft=False),
        )

    async def ensure(self, timeout_s: float = 60.0) -> ControllerRef:
        """The live controller, found by name or created (the election)."""
        async with self._elect_lock:
            ref = self.current
            if ref is not None and not ref.dead.is_set():
                return ref
            loop = asyncio.get_running_loop()
            deadline = loop.time() + timeout_s
            delay = 0.02
            while not self.b.stopping:
                h = self._options().remote(self.b.cluster, self.b.data_dir, self.b.config, self.b.broker_id)
                try:
                    info = await asyncio.wait_for(h.probe.remote(), FIRST_CONTACT_S)
                    if not info.get("resigned"):
                        ref = ControllerRef(h, info, self.timeout_ms)
                        self.b._see_epoch(ref.epoch)
                        self.current = ref
                        return ref
                except ActorDiedError:  # a dead controller still holding the name: free it
                    self._kill(h)
                except asyncio.TimeoutError:  # holding the name but silent: frozen
                    log.warning("broker %s: controller found by name does not answer: replacing it", self.b.broker_id)
                    self._kill(h)
                except (RayActorError, RayTaskError, ValueError) as e:
                    log.info("broker %s: controller not reachable yet (%s)", self.b.broker_id, type(e).__name__)
                if loop.time() > deadline:
                    raise ControllerUnavailable(f"no controller within {timeout_s:.0f}s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.5)
            raise ControllerUnavailable("broker is stopping")

    @staticmethod
    def _kill(handle) -> None:
        try:
            ray.kill(handle, no_restart=True)
        except Exception as e:  # noqa: BLE001 - already gone
            log.debug("ray.kill of a controller handle: %s", e)

    def declare_dead(self, ref: ControllerRef, why: str, frozen: bool = False) -> None:
        """Give up on this incarnation: free its name (and end its process when frozen here), so that
        the next ``ensure`` elects another."""
        if ref.dead.is_set():
            return
        ref.why = why
        ref.dead.set()
        if ref.voted:
            asyncio.get_running_loop().create_task(self._withdraw(ref))
        if self.current is ref:
            self.current = None
        log.warning("broker %s: controller epoch %s %s", self.b.broker_id, ref.epoch, why)
        if frozen and ref.node_id == self.b.node_id and kill_worker(ref.pid, "ControllerActor"):
            log.warning("broker %s: killed the frozen controller's process %s", self.b.broker_id, ref.pid)
        self._kill(ref.handle)

    # ---- calls ---------------------------------------------------------------------------------------
    async def call_on(self, ref: ControllerRef, method: str, *args, timeout_s: float | None = None):
        """One call to this incarnation; ControllerUnavailable if it dies or resigns first; an
        ``asyncio.TimeoutError`` after ``timeout_s`` (the incarnation may still be fine)."""
        call = asyncio.ensure_future(getattr(ref.handle, method).remote(*args))
        dead = asyncio.ensure_future(ref.dead.wait())
        try:
            done, _ = await asyncio.wait({call, dead}, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        finally:
            dead.cancel()
        if call in done:
            try:
                return call.result()
            except ActorDiedError as e:
                self.declare_dead(ref, f"died ({type(e).__name__})")
                raise ControllerUnavailable(ref.why) from None
            except RayTaskError as e:
                if isinstance(getattr(e, "cause", None), NotControllerError) or isinstance(e, NotControllerError):
                    self.declare_dead(ref, "resigned")
                    raise ControllerUnavailable(ref.why) from None
                raise
            except RayActorError as e:  # unavailable for a moment (never restarted: max_restarts=0)
                raise ControllerUnavailable(f"unavailable ({type(e).__name__})") from None
        call.cancel()
        if ref.dead.is_set():
            raise ControllerUnavailable(ref.why)
        raise asyncio.TimeoutError(f"controller {method} took over {timeout_s}s")

    async def call(self, method: str, *args, timeout_s: float = 60.0):
        """``method`` on the controller, on the next one when the current one dies, until ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            left = deadline - loop.time()
            try:
                ref = await self.ensure(max(1.0, left))
                return await self.call_on(ref, method, *args, timeout_s=max(0.05, left))
            except ControllerUnavailable:
                if loop.time() >= deadline or self.b.stopping:
                    raise
                await asyncio.sleep(0.05)

    # ---- registration and heartbeats -------------------------------------------------------------------
    async def register(self, if_epoch: int | None = None) -> dict:
        """Register (again). ``if_epoch``: only if this incarnation still has that broker epoch (a stale
        heartbeat answer racing a registration that already happened must not register twice)."""
        b = self.b
        async with self._register_lock:
            if if_epoch is not None and if_epoch != b.broker_epoch:
                return {}
            info = {
                "node_id": b.node_id,
                "rack": b.config.get("broker.rack"),
                "log_dir": b.dir,
                "directory_id": b.directory_id,
            }
            me = ray.get_runtime_context().current_actor
            while not b.stopping:
                try:
                    res = await self.call("register_broker", b.broker_id, info, me)
                except (ControllerUnavailable, asyncio.TimeoutError):
                    continue
                if res.get("error_code"):
                    raise KafkaError(res.get("error_message"))
                b._see_epoch(res["controller_epoch"])
                b.broker_epoch = res["broker_epoch"]
                return res
            return {}

    async def heartbeat_loop(self):
        while not self.b.stopping:
            await asyncio.sleep(self.heartbeat_s)
            ref = self.current
            if ref is None or asyncio.get_running_loop().time() < self.hb_suspended_until:
                continue
            await self._heartbeat(ref)

    async def _heartbeat(self, ref: ControllerRef) -> None:
        epoch, sent = self.b.broker_epoch, monotonic_ms()
        try:
            res = await self.call_on(
                ref, "heartbeat", self.b.broker_id, epoch, timeout_s=max(self.heartbeat_s, self.timeout_ms / 1000)
            )
        except (ControllerUnavailable, asyncio.TimeoutError, RayTaskError):
            return  # the watch and the probe deal with the controller
        ref.timer.answered(sent)
        if ref.voted:
            await self._withdraw(ref)
        self.b._see_epoch(res.get("controller_epoch", -1))
        if res.get("error_code") in REGISTERED_OR_STALE:
            log.warning("broker %s was fenced (%s): registering again", self.b.broker_id, res.get("error_message"))
            await self.register(if_epoch=epoch)

    async def watch_loop(self):
        """The long-poll on the current controller; elects the next one when it ends."""
        watched = None
        while not self.b.stopping:
            try:
                ref = await self.ensure()
            except ControllerUnavailable:
                await asyncio.sleep(0.2)
                continue
            if ref is not watched and watched is not None:
                # a new controller probes registered brokers itself; this heartbeat registers again if
                # it fenced us meanwhile
                await self._heartbeat(ref)
            watched = ref
            try:
                res = await self.call_on(ref, "broker_session", self.b.broker_id)
                if isinstance(res, dict) and res.get("reason") == "resigned":
                    self.declare_dead(ref, "resigned")
                await asyncio.sleep(0.05)  # resigned or shut down: look again
            except ControllerUnavailable:
                pass
            except RayTaskError as e:
                log.info("broker %s: controller session failed (%s)", self.b.broker_id, e)
                await asyncio.sleep(0.05)

    async def probe_loop(self):
        """Judge the current controller by its answers: silent past the timeout = frozen."""
        interval = max(0.02, self.timeout_ms / 4000)
        while not self.b.stopping:
            await asyncio.sleep(interval)
            ref = self.current
            if ref is None or ref.dead.is_set():
                continue
            now = monotonic_ms()
            ref.timer.tick(now)
            if not ref.probing:
                ref.probing = True
                asyncio.get_running_loop().create_task(self._probe(ref, now))
            if ref.timer.expired(now):
                why = f"answered nothing for {ref.timer.silent_ms(now)} ms ({FETCH_TIMEOUT_KEY}={self.timeout_ms})"
                if ref.node_id != self.b.node_id:
                    # another node: the timeout is all we have, and this broker may be the one cut off; deposed
                    # only when a majority of the brokers find it silent too
                    if not ref.voting:
                        ref.voting = True
                        asyncio.get_running_loop().create_task(self._vote_silent(ref, why))
                    continue
                state = process_state(ref.pid)
                if state in ("T", "t"):
                    self.declare_dead(ref, why + ", its process is stopped", frozen=True)
                elif state in (None, "Z"):
                    self.declare_dead(ref, why + ", its process is gone")
                # else: it runs, only slowly (a loaded machine): not frozen

    async def _probe(self, ref: ControllerRef, sent: int) -> None:
        try:
            info = await ref.handle.probe.remote()
        except ActorDiedError:
            self.declare_dead(ref, "died")
            return
        except (RayActorError, RayTaskError):
            return
        finally:
            ref.probing = False
        ref.timer.answered(sent)
        if ref.voted:
            await self._withdraw(ref)
        if info.get("resigned"):
            self.declare_dead(ref, "resigned")

    # ---- deposing a silent controller on another node: a majority's call ----------------------------------
    def _put_vote(self, epoch: int) -> tuple[dict[int, int], int]:
        """Write this broker's silence vote for controller ``epoch`` and read everyone's (GCS round trips: run
        off the event loop)."""
        kv = self.b._kv
        now = int(time.time() * 1000)
        kv.put(silent_vote_key(epoch, self.b.broker_id), {"at": now})
        prefix = f"{SILENT_VOTES}{epoch}/"
        votes = {}
        for k in kv.keys(prefix):
            v = kv.get(k)
            if v:
                votes[int(k.rsplit("/", 1)[1])] = int(v["at"])
        return votes, len(kv.keys(BROKERS))

    async def _vote_silent(self, ref: ControllerRef, why: str) -> None:
        try:
            votes, brokers = await asyncio.to_thread(self._put_vote, ref.epoch)
            ref.voted = True
        except Exception as e:  # noqa: BLE001 - no GCS: nobody can elect anyway; the next probe votes again
            log.info("broker %s: silence vote for controller epoch %s not written (%s)", self.b.broker_id, ref.epoch, e)
            return
        finally:
            ref.voting = False
        now = monotonic_ms()
        if ref.dead.is_set():
            return
        if not ref.timer.expired(now):  # it answered meanwhile
            await self._withdraw(ref)
            return
        fresh_ms = max(VOTE_FRESH_MS, 5 * self.timeout_ms)
        if silent_majority(votes, brokers, int(time.time() * 1000), fresh_ms):
            self.declare_dead(ref, f"{why}; silent to brokers {sorted(votes)} of {brokers}", frozen=True)
        elif ref.alone_since is None:
            ref.alone_since = now
            log.warning(
                "broker %s: controller epoch %s %s, but only brokers %s of %s find it silent: not deposing it "
                "(this broker may be the one cut off)",
                self.b.broker_id,
                ref.epoch,
                why,
                sorted(votes),
                brokers,
            )

    async def _withdraw(self, ref: ControllerRef) -> None:
        ref.voted = False
        ref.alone_since = None
        try:
            await asyncio.to_thread(self.b._kv.delete, silent_vote_key(ref.epoch, self.b.broker_id))
        except Exception as e:  # noqa: BLE001 - a stale vote ages out (VOTE_FRESH_MS)
            log.debug("broker %s: silence vote not withdrawn: %s", self.b.broker_id, e)
