"""The OS process behind an actor: /proc state, and killing a frozen worker only by its Ray title."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from actors.server.worker_process import kill_worker, process_state, stopped


def _wait_state(pid, want, timeout=30.0):
    deadline = time.monotonic() + timeout
    while process_state(pid) not in want and time.monotonic() < deadline:
        time.sleep(0.01)
    return process_state(pid)


def test_stopped_and_killed_only_by_its_worker_title():
    child = subprocess.Popen(["bash", "-c", "exec -a 'ray::FakeActor' sleep 60"])
    try:
        # running, sleeping, or in a disk wait while exec loads the binary (a loaded machine: seconds): alive and
        # not stopped either way
        assert _wait_state(child.pid, ("S", "R")) in ("S", "R", "D") and not stopped(child.pid)
        os.kill(child.pid, signal.SIGSTOP)
        assert _wait_state(child.pid, ("T",)) == "T" and stopped(child.pid)
        assert not kill_worker(child.pid, "ReplicaActor")  # another actor's title: never signalled
        assert stopped(child.pid)
        assert kill_worker(child.pid, "FakeActor")  # SIGKILL needs no cooperation from a stopped process
        child.wait(5)
        assert process_state(child.pid) is None and not stopped(child.pid)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_no_process_no_kill():
    assert process_state(None) is None and process_state(2**22 + 12345) is None
    assert not kill_worker(None, "FakeActor") and not kill_worker(os.getpid(), "FakeActor")
