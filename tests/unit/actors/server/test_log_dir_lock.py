"""Kafka's log directory ``.lock``: one holder at a time, released by the kernel when the holder dies."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from actors.server.log_dir_lock import LOCK_FILE, LogDirLock
from protocol.errors import KafkaStorageError


def test_a_second_holder_is_refused_with_a_storage_error(tmp_path):
    a = LogDirLock(str(tmp_path / "broker-0"))
    assert a.try_acquire() and a.held
    assert a.try_acquire()  # re-entrant for its owner
    b = LogDirLock(str(tmp_path / "broker-0"))  # same process, another open file: still refused
    assert not b.try_acquire()
    t0 = time.monotonic()
    with pytest.raises(KafkaStorageError) as e:
        b.acquire(timeout_s=0.2, interval_s=0.02)
    assert time.monotonic() - t0 >= 0.2
    assert LOCK_FILE in str(e.value) and str(tmp_path / "broker-0") in str(e.value)
    assert f"pid {os.getpid()}" in str(e.value)
    a.release()
    assert not a.held
    b.acquire(timeout_s=0.2)
    assert b.held
    b.release()


def test_a_killed_holder_releases_the_lock(tmp_path):
    d = str(tmp_path / "broker-1")
    code = (
        "import sys, time; sys.path.insert(0, %r); from actors.server.log_dir_lock import LogDirLock; "
        "LogDirLock(%r).acquire(5); print('locked', flush=True); time.sleep(60)" % (os.getcwd(), d)
    )
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "locked"
        mine = LogDirLock(d)
        assert not mine.try_acquire()
        assert mine.holder_pid() == child.pid
        # frozen, the holder keeps it
        os.kill(child.pid, signal.SIGSTOP)
        assert not mine.try_acquire()
        os.kill(child.pid, signal.SIGKILL)
        child.wait(10)
        mine.acquire(timeout_s=2)  # the kernel dropped the dead holder's lock
        assert mine.held and mine.holder_pid() == os.getpid()
        mine.release()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
