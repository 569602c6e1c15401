"""A log whose disk fails (storage/log.py ``Log.fail``, Kafka's LogDirFailureChannel path) and the pure log-dir
helpers (storage/log_dirs.py): ``log.dirs`` parsing, the choice of a new replica's dir, which errors are a disk's.
ENOSPC is real here (a segment file that is /dev/full); EIO and EROFS are raised at the OS boundary (os.pwrite,
os.fsync) because only a real block device gives them: the Ray test with a loop-mounted ext4 shut down by
EXT4_IOC_SHUTDOWN proves that path (tests/cluster/test_log_dir_failures.py)."""

from __future__ import annotations

import errno
import os

import pytest

from protocol.errors import InvalidConfigError, KafkaStorageError, OffsetOutOfRangeError
from storage import segment as segment_mod
from storage.log import CLEAN_SHUTDOWN_FILE, Log, LogConfig
from storage.log_dirs import (
    configured_log_dirs,
    describe_failure,
    is_storage_failure,
    next_log_dir,
    partition_size,
    volume_bytes,
)
from storage.records import RecordBatchBuilder, decode_records
from storage.segment import log_file_name


def batch(n=3, ts=1000, value=b"v" * 20) -> bytes:
    b = RecordBatchBuilder(base_offset=0)
    for i in range(n):
        b.append(ts + i, b"k%d" % i, value)
    return b.build()


def values(log: Log) -> list[int]:
    return [r.offset for r in decode_records(log.read(0, 1 << 20).records)]


# ---- log.dirs and the choice of a dir -------------------------------------------------------------------
def test_log_dirs_from_config_log_dir_fallback_and_default(tmp_path):
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert configured_log_dirs({"log.dirs": f"{a}, {b}"}, "/x") == [a, b]
    assert configured_log_dirs({"log.dirs": [a, b]}, "/x") == [a, b]
    assert configured_log_dirs({"log.dir": a}, "/x") == [a]  # log.dir only when log.dirs is not set
    assert configured_log_dirs({"log.dirs": b, "log.dir": a}, "/x") == [b]
    assert configured_log_dirs({}, str(tmp_path / "broker-0")) == [str(tmp_path / "broker-0")]
    assert configured_log_dirs({"log.dirs": "rel"}, "/x") == [os.path.abspath("rel")]
    with pytest.raises(InvalidConfigError, match="listed twice"):
        configured_log_dirs({"log.dirs": f"{a},{a}/"}, "/x")
    with pytest.raises(InvalidConfigError, match="no directory"):
        configured_log_dirs({"log.dirs": " , "}, "/x")


def test_next_log_dir_is_the_online_dir_with_fewest_partitions_first_on_a_tie():
    assert next_log_dir({"/a": 2, "/b": 1, "/c": 1}, ["/a", "/b", "/c"]) == "/b"
    assert next_log_dir({}, ["/a", "/b"]) == "/a"
    assert next_log_dir({"/a": 0, "/b": 5}, ["/b"]) == "/b"  # /a offline
    with pytest.raises(KafkaStorageError, match="No log directory is online"):
        next_log_dir({"/a": 0}, [])


def test_storage_failures_are_os_errors_and_storage_errors_raised_from_them():
    assert is_storage_failure(OSError(errno.EIO, "Input/output error"))
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as e:
            raise KafkaStorageError("write failed") from e
    except KafkaStorageError as wrapped:
        assert is_storage_failure(wrapped)
        assert describe_failure(wrapped).startswith("ENOSPC: No space left on device")
    assert not is_storage_failure(KafkaStorageError("cannot roll below the active segment"))  # logic, not disk
    assert not is_storage_failure(ValueError("x"))
    assert describe_failure(OSError(errno.EROFS, "Read-only file system", "/d/f")) == (
        "EROFS: Read-only file system (/d/f)"
    )


def test_partition_size_counts_segment_files_and_volume_bytes(tmp_path):
    d = str(tmp_path / "t-0")
    log = Log(d, LogConfig())
    log.append_as_leader(batch(), 0, 2000)
    log.flush()
    assert partition_size(d) == log.size_in_bytes > 0
    assert partition_size(str(tmp_path / "missing")) == 0
    total, usable = volume_bytes(str(tmp_path))
    assert total > 0 and 0 <= usable <= total
    assert volume_bytes(str(tmp_path / "missing")) == (-1, -1)
    log.close()


# ---- a log whose disk fails ---------------------------------------------------------------------------
def test_enospc_on_a_real_full_device_takes_the_log_offline_and_tells_the_owner_once(tmp_path):
    d = tmp_path / "t-0"
    Log(str(d), LogConfig()).close()  # an empty log, shut down cleanly (its reopen does no recovery)
    os.remove(d / log_file_name(0))
    os.symlink("/dev/full", d / log_file_name(0))  # the active segment's file: every write gets ENOSPC
    told = []
    log = Log(str(d), LogConfig())
    log.on_dir_failure = lambda dir_, err: told.append((dir_, err))
    with pytest.raises(KafkaStorageError, match="ENOSPC") as raised:
        log.append_as_leader(batch(), 0, 2000)
    assert told == [(str(tmp_path), raised.value)] and log.failure is raised.value
    assert "offline until the broker restarts" in raised.value.message
    for op in (
        lambda: log.append_as_leader(batch(), 0, 2001),
        lambda: log.read(0, 100),
        lambda: log.flush(),
        lambda: log.truncate_to(0),
    ):
        with pytest.raises(KafkaStorageError, match="ENOSPC"):
            op()
    log.close()  # closes the files without writing
    assert len(told) == 1 and not (d / CLEAN_SHUTDOWN_FILE).exists()


@pytest.mark.parametrize("code", [errno.EIO, errno.EROFS, errno.ENOSPC])
def test_a_failed_append_keeps_what_was_acknowledged_and_the_reopen_recovers(tmp_path, monkeypatch, code):
    d = str(tmp_path / "t-0")
    log = Log(d, LogConfig())
    for i in range(3):
        log.append_as_leader(batch(ts=1000 + i), 0, 2000 + i)
    log.update_high_watermark(9)
    real_pwrite = os.pwrite
    calls = []

    def failing(fd, data, offset):  # half the batch reaches the file, then the device fails
        if calls:
            raise OSError(code, os.strerror(code))
        calls.append(1)
        return real_pwrite(fd, bytes(data)[: len(data) // 2], offset)

    def no_truncate(fd, size):  # nor can the half be cut off: the file keeps a torn batch
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(segment_mod.os, "pwrite", failing)
    monkeypatch.setattr(segment_mod.os, "ftruncate", no_truncate)
    told = []
    log.on_dir_failure = lambda dir_, err: told.append(dir_)
    with pytest.raises(KafkaStorageError, match=errno.errorcode[code]):
        log.append_as_leader(batch(ts=5000), 0, 6000)
    monkeypatch.undo()
    size = os.path.getsize(os.path.join(d, log_file_name(0)))
    assert size > log.size_in_bytes  # the torn half batch is on disk
    assert told == [str(tmp_path)]
    log.close()
    assert not os.path.exists(os.path.join(d, CLEAN_SHUTDOWN_FILE))
    again = Log(d, LogConfig())  # the restart: recovery cuts the torn half batch, every acknowledged one is there
    assert again.log_end_offset == 9 and values(again) == list(range(9))
    assert again.append_as_leader(batch(), 0, 7000).first_offset == 9
    again.close()


def test_fsync_eio_in_flush_and_checkpoint_failures_take_the_log_offline(tmp_path, monkeypatch):
    d = str(tmp_path / "t-0")
    log = Log(d, LogConfig())
    log.append_as_leader(batch(), 0, 2000)
    told = []
    log.on_dir_failure = lambda dir_, err: told.append(err.message)

    def eio(fd):
        raise OSError(errno.EIO, "Input/output error")

    monkeypatch.setattr(segment_mod.os, "fsync", eio)
    with pytest.raises(KafkaStorageError, match="EIO"):
        log.flush()
    assert len(told) == 1
    with pytest.raises(KafkaStorageError):
        log.append_as_leader(batch(), 0, 2001)
    monkeypatch.undo()
    log.close()
    assert Log(d, LogConfig()).log_end_offset == 3


def test_logic_errors_with_the_storage_code_do_not_take_the_log_offline(tmp_path):
    log = Log(str(tmp_path / "t-0"), LogConfig())
    log.append_as_leader(batch(), 0, 2000)
    with pytest.raises(KafkaStorageError, match="cannot roll"):
        log.roll(2000, new_base=1)
    with pytest.raises(OffsetOutOfRangeError):
        log.read(99, 10)
    assert log.failure is None
    assert log.append_as_leader(batch(), 0, 2001).first_offset == 3
    log.close()
