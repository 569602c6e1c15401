"""Small durable files: atomic rewrites (tmp + fsync + rename + directory fsync), markers (the clean-shutdown
file) and Kafka's offset checkpoints; the one implementation of these write orders, for the storage layer, the
broker's ``partition.metadata`` and the controller's metadata-log snapshot. Plain functions, one writer per file::

    offset checkpoint file := "0" NL offset NL          (version 0; ASCII decimal)
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger(__name__)

__all__ = [
    "TMP_SUFFIX",
    "fsync_dir",
    "write_atomically",
    "create_marker",
    "take_marker",
    "read_offset_checkpoint",
    "write_offset_checkpoint",
]

TMP_SUFFIX = ".tmp"  # the name an atomic rewrite writes before its rename


def fsync_dir(path: str) -> None:
    """Make the directory's entries (creations, renames, removals so far) durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _parent(path: str) -> str:
    return os.path.dirname(os.path.abspath(path))


def write_atomically(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data``: tmp file + fsync + rename + directory fsync."""
    tmp = path + TMP_SUFFIX
    with open(tmp, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    fsync_dir(_parent(path))


def create_marker(path: str) -> None:
    """Create the empty file ``path`` durably: the file fsynced, then the directory."""
    with open(path, "w") as f:
        f.flush()
        os.fsync(f.fileno())
    fsync_dir(_parent(path))


def take_marker(path: str) -> bool:
    """Whether the marker ``path`` existed; it is removed, durably, before this returns."""
    if not os.path.exists(path):
        return False
    os.remove(path)
    fsync_dir(_parent(path))
    return True


def read_offset_checkpoint(path: str) -> int | None:
    """The offset in a checkpoint file; None when missing or unreadable (logged)."""
    try:
        with open(path, "r", encoding="ascii") as f:
            lines = f.read().split("\n")
        if len(lines) >= 2 and lines[0] == "0" and int(lines[1]) >= 0:
            return int(lines[1])
        raise ValueError(f"unexpected content {lines[:2]!r}")
    except FileNotFoundError:
        return None
    except (OSError, ValueError, UnicodeDecodeError) as e:
        log.warning("checkpoint %s is unreadable (%s); ignoring it", path, e)
        return None


def write_offset_checkpoint(path: str, value: int) -> None:
    write_atomically(path, f"0\n{value}\n".encode("ascii"))
