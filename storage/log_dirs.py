"""A broker's log directories (Kafka's ``log.dirs``, JBOD): the configured list, where a new replica goes (Kafka's
``LogManager.nextLogDirs``: the online directory holding the fewest partitions), which errors are a directory's
failure (Kafka's LogDirFailureChannel takes any IOException), and the figures DescribeLogDirs reports. Pure but
for ``statvfs``/``scandir`` reads; used by the broker (actors/server/log_dirs.py) and by storage/log.py.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Iterable, Mapping

from protocol.errors import InvalidConfigError, KafkaStorageError

LOG_DIRS, LOG_DIR = "log.dirs", "log.dir"
# the errnos a disk gives when it is full, failing or gone read-only: named in the failure's message
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EIO, errno.EROFS, errno.EDQUOT})


def configured_log_dirs(config: Mapping, default: str) -> list[str]:
    """The broker's log directories, absolute, in config order: ``log.dirs`` (comma-separated), else ``log.dir``,
    else ``default`` (rafka's ``<data dir>/broker-<id>``). A repeated or empty entry is refused as Kafka's
    KafkaConfig does (InvalidConfigError)."""
    raw = config.get(LOG_DIRS)
    key = LOG_DIRS
    if raw in (None, ""):
        raw, key = config.get(LOG_DIR), LOG_DIR
    if raw in (None, ""):
        return [os.path.abspath(default)]
    items = list(raw) if isinstance(raw, (list, tuple)) else str(raw).split(",")
    dirs = [os.path.abspath(os.path.expanduser(str(d).strip())) for d in items if str(d).strip()]
    if not dirs:
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {key}: no directory given")
    if len(set(dirs)) != len(dirs):
        raise InvalidConfigError(f"Invalid value {raw!r} for configuration {key}: a directory is listed twice")
    return dirs


def next_log_dir(partition_counts: Mapping[str, int], online: Iterable[str]) -> str:
    """The directory a new replica goes to: the online one with the fewest partitions, the first configured on a
    tie (Kafka's ``LogManager.nextLogDirs`` orders by log count). KafkaStorageError when none is online."""
    dirs = list(online)
    if not dirs:
        raise KafkaStorageError("No log directory is online on this broker: every one of log.dirs has failed")
    return min(dirs, key=lambda d: (partition_counts.get(d, 0), dirs.index(d)))


def is_storage_failure(exc: BaseException | None) -> bool:
    """Whether ``exc`` is the disk failing (an OSError, or a KafkaStorageError raised from one), as opposed to a
    logic error that happens to carry KafkaStorageError's code."""
    if isinstance(exc, OSError):
        return True
    return isinstance(exc, KafkaStorageError) and isinstance(exc.__cause__, OSError)


def os_error_of(exc: BaseException) -> OSError | None:
    if isinstance(exc, OSError):
        return exc
    cause = exc.__cause__
    return cause if isinstance(cause, OSError) else None


def describe_failure(exc: BaseException) -> str:
    """One line naming the errno (ENOSPC, EIO, ...) of a directory's failure."""
    ose = os_error_of(exc)
    if ose is not None and ose.errno is not None:
        name = errno.errorcode.get(ose.errno, str(ose.errno))
        return f"{name}: {ose.strerror or ose}" + (f" ({ose.filename})" if ose.filename else "")
    return str(exc)


def volume_bytes(path: str) -> tuple[int, int]:
    """``(total, usable)`` bytes of the volume holding ``path`` (DescribeLogDirs v4's total_bytes/usable_bytes;
    usable is what an unprivileged writer may still use, Java's ``FileStore.getUsableSpace``); ``(-1, -1)`` when
    unreadable."""
    try:
        st = os.statvfs(path)
    except OSError:
        return -1, -1
    return st.f_blocks * st.f_frsize, st.f_bavail * st.f_frsize


SEGMENT_SUFFIXES = (".log",)


def partition_size(partition_dir: str) -> int:
    """The bytes of a partition's log segments (Kafka's ``UnifiedLog.size``: the ``.log`` files only); 0 when
    the directory cannot be read."""
    total = 0
    try:
        with os.scandir(partition_dir) as it:
            for e in it:
                if e.name.endswith(SEGMENT_SUFFIXES):
                    try:
                        total += e.stat().st_size
                    except OSError:
                        continue
    except OSError:
        return 0
    return total
