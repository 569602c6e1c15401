"""The OS process behind an actor on this node: kill a frozen one for good.

A worker process stopped by SIGSTOP (or hung in the kernel) ignores ``ray.kill`` until it runs again:
Ray frees the actor's name at once, but the process lingers and, once woken, may still run a little of
its own code. A supervisor on the same node (a broker for its replicas, the controller's host broker)
that judged such a process dead ends it with SIGKILL, which needs no cooperation from the process, so
it never wakes up to write into files its successor owns.

``kill_worker(pid, actor_class)`` only signals a process whose command line is that actor class's Ray
worker title (``ray::<Class>...``), never a pid that was reused by something else. Returns whether it
sent the signal.

``actor_pid(handle)`` reads an actor's worker pid from GCS's actor table, for a supervisor that has not heard
the actor's own answer yet (a replica frozen right after it started).

``process_state(pid)`` is the kernel's one-letter state (``/proc/<pid>/stat``: R running, S sleeping, D
disk wait, T stopped by a signal, t stopped by a tracer, Z zombie) or None when there is no such process.
A supervisor on the same node uses it to tell a *frozen* process (``stopped``) from one that is only slow
to answer on a loaded machine: its liveness probe runs on its own thread, so silence from a process that
still runs is starvation, not a fault to act on.
"""

from __future__ import annotations

import os
import signal


def actor_pid(handle) -> int | None:
    """The OS pid of ``handle``'s worker process as GCS records it, or None (unknown, or GCS unreachable).
    Blocking: call it off the event loop."""
    try:
        import ray

        info = ray._private.state.state.actor_table(handle._actor_id.hex())
    except Exception:  # noqa: BLE001 - no answer means unknown, never a crash of the caller
        return None
    pid = (info or {}).get("Pid")
    return int(pid) if pid else None


def worker_title(pid: int) -> str | None:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return None


def kill_worker(pid: int | None, actor_class: str) -> bool:
    if not pid or pid == os.getpid():
        return False
    title = worker_title(pid)
    if title is None or f"ray::{actor_class}" not in title:
        return False
    try:
        os.kill(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def process_state(pid: int | None) -> str | None:
    if not pid:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][:1] or None
    except (OSError, IndexError):
        return None


def stopped(pid: int | None) -> bool:
    """The process exists and is stopped (SIGSTOP, a tracer): it cannot answer until someone resumes it."""
    return process_state(pid) in ("T", "t")
