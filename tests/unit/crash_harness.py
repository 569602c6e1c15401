"""Deterministic crash points for storage.Log: run an operation in a child process that dies by SIGKILL at
its N-th mutating system call, then reopen the directory and check what recovery made of it.

Counting happens at the OS boundary, in the child only: ``os.pwrite``/``os.write``/``os.ftruncate``/
``os.truncate``/``os.fsync``/``os.fdatasync``/``os.replace``/``os.rename``/``os.remove``/``os.unlink``/
``os.rmdir``/``os.mkdir`` (so ``os.makedirs`` and ``shutil.rmtree``), ``os.open`` when it creates or
truncates a file, and ``open()`` in a writing mode, whose file object writes through a counting raw
``FileIO``: a buffered file reaches the kernel only when its buffer is flushed, so that flush is the
crash point (a kill before it loses the buffer, as a real crash does). The child kills itself *before*
the chosen call; with ``torn`` a write first lands half of its bytes (a torn write). Kernel writes made
before the kill stay, user-space buffers are lost: exactly a process crash.

Children are forked by a small server process (``serve``), started once per test session from a clean
interpreter: forking the test process itself would fork whatever threads it runs (a Ray driver in a
full pytest session). Requests and answers are JSON lines on the server's stdin/stdout.

Scenarios (``SCENARIOS``, built in crash_scenarios.py) name a template directory built once, a
``setup`` that brings a copy of it to the operation's start (not counted) and the ``op`` (counted).
``sweep`` kills the op at every crash point in turn (and tears every write once), reopens each result and
checks (``check_log``): segment files exactly the log's segments, no leftovers, segments contiguous,
offsets dense (increasing for compacted logs), every batch valid, offset and time indexes agreeing with
the batches (in memory and, after a clean close, on disk), ListOffsets by timestamp finding every batch,
reads returning the batches, the leader epoch cache equal to what the batch headers imply, and producer
state that detects a retried batch; plus the scenario's own rule relating the result to the states
before and after the operation.
"""

from __future__ import annotations

import builtins
import io
import json
import os
import shutil
import signal
import struct
import subprocess
import sys
import traceback
from dataclasses import dataclass, field

from storage.control import CONTROL_ABORT, parse_control_record
from storage.log import Log
from storage.records import decode_records, iter_batch_headers
from storage.txn_index import ABORTED_TXN, AbortedTxn

UNIT_DIR = os.path.dirname(os.path.abspath(__file__))
ROOT_DIR = os.path.dirname(os.path.dirname(UNIT_DIR))
WRITE_KINDS = ("pwrite", "write", "filewrite")

# ---------------------------------------------------------------------------------------------- interception

_OS = {
    n: getattr(os, n)
    for n in (
        "pwrite",
        "write",
        "ftruncate",
        "truncate",
        "fsync",
        "fdatasync",
        "replace",
        "rename",
        "remove",
        "unlink",
        "rmdir",
        "mkdir",
        "open",
    )
}
_OPEN = builtins.open


def _fd_name(fd: int) -> str:
    try:
        target = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return f"fd{fd}"
    return "<dir>" if os.path.isdir(target) else os.path.basename(target)


def _name(path) -> str:
    return os.path.basename(os.fsdecode(path)) if not isinstance(path, int) else _fd_name(path)


class _Killer:
    """Counts mutating calls; before the chosen one (a number, or ``select``) it reports and dies."""

    def __init__(self, crash_at, torn, select, report_fd):
        self.n, self.crash_at, self.torn, self.select, self.fd = 0, crash_at, torn, select, report_fd
        self.matched, self.armed = 0, False

    def hit(self, kind: str, name: str, half=None) -> None:
        self.n += 1
        _OS["write"](self.fd, (json.dumps([self.n, kind, name]) + "\n").encode())
        chosen = self.n == self.crash_at
        if self.select is not None:  # [kind, substring, occurrence, after]: the call after it when `after`
            skind, sub, occ, after = self.select
            if self.armed:
                chosen = True
            elif kind == skind and sub in name:
                self.matched += 1
                if self.matched == occ:
                    self.armed = after
                    chosen = not after
        if chosen:
            if self.torn and half is not None:
                half()
            os.kill(os.getpid(), signal.SIGKILL)


def _install(k: _Killer) -> None:
    def pwrite(fd, data, offset):
        k.hit("pwrite", _fd_name(fd), lambda: _OS["pwrite"](fd, bytes(data[: len(data) // 2]), offset))
        return _OS["pwrite"](fd, data, offset)

    def write(fd, data):
        k.hit("write", _fd_name(fd), lambda: _OS["write"](fd, bytes(data[: len(data) // 2])))
        return _OS["write"](fd, data)

    def on_fd(kind):
        def f(fd, *a, **kw):
            k.hit(kind, _fd_name(fd))
            return _OS[kind](fd, *a, **kw)

        return f

    def on_path(kind, only_if_absent=False):
        def f(path, *a, **kw):
            if not only_if_absent or not os.path.lexists(path):
                k.hit(kind, _name(path))
            return _OS[kind](path, *a, **kw)

        return f

    def rename(kind):
        def f(src, dst, *a, **kw):
            k.hit(kind, f"{_name(src)}>{_name(dst)}")
            return _OS[kind](src, dst, *a, **kw)

        return f

    def os_open(path, flags, mode=0o777, **kw):
        if flags & os.O_TRUNC or (flags & os.O_CREAT and kw.get("dir_fd") is None and not os.path.lexists(path)):
            k.hit("create", _name(path))
        return _OS["open"](path, flags, mode, **kw)

    class CountingFileIO(io.FileIO):
        def write(self, b):
            k.hit("filewrite", _name(self.name), lambda: io.FileIO.write(self, bytes(memoryview(b)[: len(b) // 2])))
            return io.FileIO.write(self, b)

        def truncate(self, size=None):
            k.hit("ftruncate", _name(self.name))
            return io.FileIO.truncate(self, size)

    def counting_open(
        file, mode="r", buffering=-1, encoding=None, errors=None, newline=None, closefd=True, opener=None
    ):
        if isinstance(file, int) or not any(c in mode for c in "wax+"):
            return _OPEN(file, mode, buffering, encoding, errors, newline, closefd, opener)
        if "w" in mode or not os.path.exists(file):
            k.hit("create", _name(file))
        raw = CountingFileIO(file, mode.replace("b", "").replace("t", ""), closefd=closefd, opener=opener)
        if buffering == 0:
            return raw
        size = io.DEFAULT_BUFFER_SIZE if buffering in (-1, 1) else buffering
        buffered = (io.BufferedRandom if "+" in mode else io.BufferedWriter)(raw, size)
        if "b" in mode:
            return buffered
        return io.TextIOWrapper(buffered, encoding, errors, newline, line_buffering=buffering == 1)

    os.pwrite, os.write = pwrite, write
    for kind in ("ftruncate", "fsync", "fdatasync"):
        setattr(os, kind, on_fd(kind))
    os.truncate, os.remove, os.unlink, os.rmdir = (
        on_path("truncate"),
        on_path("remove"),
        on_path("unlink"),
        on_path("rmdir"),
    )
    os.mkdir = on_path("mkdir", only_if_absent=True)
    os.replace, os.rename = rename("replace"), rename("rename")
    os.open = os_open
    builtins.open = counting_open


# ---------------------------------------------------------------------------------------------- server


def _child(req: dict, report_fd: int) -> None:
    from crash_scenarios import SCENARIOS

    devnull = _OS["open"](os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    sc = SCENARIOS[req["scenario"]]
    state = sc.setup(req["dir"])
    killer = _Killer(req.get("crash_at"), req.get("torn", False), req.get("select"), report_fd)
    _install(killer)
    sc.op(req["dir"], state)
    os._exit(0)


def serve() -> None:
    """The fork server: one JSON request per stdin line, one JSON answer per stdout line."""
    import crash_scenarios  # noqa: F401  (import once, before forking)

    out = sys.stdout.buffer
    for line in sys.stdin.buffer:
        req = json.loads(line)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            try:
                _child(req, w)
            except BaseException:
                os.write(w, (json.dumps(["error", traceback.format_exc()]) + "\n").encode())
                os._exit(3)
            os._exit(0)
        os.close(w)
        chunks = []
        while True:
            data = os.read(r, 65536)
            if not data:
                break
            chunks.append(data)
        os.close(r)
        _, status = os.waitpid(pid, 0)
        points, error = [], None
        for ln in b"".join(chunks).decode().splitlines():
            item = json.loads(ln)
            if item[0] == "error":
                error = item[1]
            else:
                points.append(item)
        if os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL:
            verdict = "killed"
        elif os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0:
            verdict = "completed"
        else:
            verdict = "failed"
        out.write((json.dumps({"status": verdict, "points": points, "error": error}) + "\n").encode())
        out.flush()


@dataclass
class Run:
    status: str  # killed | completed | failed
    points: list  # [n, kind, file name] of every mutating call reached (the last one is where it died)
    error: str | None = None

    @property
    def last(self):
        return tuple(self.points[-1][1:]) if self.points else None


class CrashServer:
    """The parent's handle on the fork server (one per test module)."""

    def __init__(self, log_path: str):
        self._err = open(log_path, "wb")
        code = f"import sys; sys.path[:0] = [{ROOT_DIR!r}, {UNIT_DIR!r}]; import crash_harness; crash_harness.serve()"
        self.proc = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, cwd=ROOT_DIR
        )
        self.log_path = log_path
        self.runs = 0

    def run(self, scenario: str, d: str, crash_at=None, torn=False, select=None) -> Run:
        req = {"scenario": scenario, "dir": d, "crash_at": crash_at, "torn": torn, "select": select}
        self.proc.stdin.write((json.dumps(req) + "\n").encode())
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            with open(self.log_path) as f:
                raise RuntimeError(f"crash server died: {f.read()[-3000:]}")
        self.runs += 1
        ans = json.loads(line)
        return Run(ans["status"], ans["points"], ans["error"])

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self._err.close()


# ---------------------------------------------------------------------------------------------- views and checks


@dataclass
class SegView:
    base: int
    name: str
    batches: list  # (position, header, bytes)

    @property
    def next_offset(self) -> int:
        return self.batches[-1][1].next_offset if self.batches else self.base


@dataclass
class View:
    """A log directory as recovery left it: its segments, batches and offsets."""

    segments: list
    log_start: int
    leo: int
    epochs: list = field(default_factory=list)

    @property
    def batches(self) -> list[bytes]:
        return [b for s in self.segments for _, _, b in s.batches]

    @property
    def headers(self):
        return [h for s in self.segments for _, h, _ in s.batches]

    def records(self, from_offset=None):
        lo = self.log_start if from_offset is None else from_offset
        return [
            (r.offset, r.timestamp, r.key, r.value, r.headers)
            for r in decode_records(b"".join(self.batches), include_control=True)
            if r.offset >= lo
        ]


def scan_dir(d: str, strict: bool = True) -> list[SegView]:
    """The segment files of ``d`` in offset order; ``strict=False`` stops each file at its first bad batch."""
    out = []
    for name in sorted(n for n in os.listdir(d) if n.endswith(".log")):
        with _OPEN(os.path.join(d, name), "rb") as f:
            data = f.read()
        batches = []
        try:
            for pos, h in iter_batch_headers(data):
                batches.append((pos, h, data[pos : pos + h.size_in_bytes]))
        except Exception:
            if strict:
                raise
        out.append(SegView(int(name[:20]), name, batches))
    return out


def view_of(lg: Log, strict: bool = True) -> View:
    return View(scan_dir(lg.dir, strict), lg.log_start_offset, lg.log_end_offset, lg.epoch_cache.entries())


def header_epochs(headers, log_start: int) -> list[tuple[int, int]]:
    """The leader epoch entries the batch headers imply, anchored at the log start offset (Kafka's rule)."""
    entries = []
    for h in headers:
        e = h.partition_leader_epoch
        if e >= 0 and (not entries or e > entries[-1][0]):
            entries.append((e, h.base_offset))
    below = [i for i, (_, o) in enumerate(entries) if o <= log_start]
    if below:
        entries = [(entries[below[-1]][0], log_start)] + entries[below[-1] + 1 :]
    return entries


def _check_indexes(seg, sv: SegView, oi_entries, ti_entries, where: str) -> None:
    by_pos = {p: h for p, h, _ in sv.batches}
    running, max_at = -1, {}
    for _, h, _ in sv.batches:
        running = max(running, h.max_timestamp)
        max_at[h.last_offset] = running
    prev = None
    for off, pos in oi_entries:
        assert pos in by_pos and by_pos[pos].last_offset == off, (
            f"{where}: offset index entry ({off}, {pos}) names no batch ending at {off}"
        )
        assert prev is None or off > prev, f"{where}: offset index not increasing at {off}"
        prev = off
    prev = None
    for ts, off in ti_entries:
        assert max_at.get(off) == ts, (
            f"{where}: time index entry ({ts}, {off}) but the max timestamp there is {max_at.get(off)}"
        )
        assert prev is None or ts > prev, f"{where}: time index not increasing at {ts}"
        prev = ts


def read_index_files(seg) -> tuple[list, list]:
    """The entries of a segment's index files as they are on disk."""
    out = []
    for path, fmt in ((seg.index_path, ">ii"), (seg.time_index_path, ">qi")):
        st = struct.Struct(fmt)
        with _OPEN(path, "rb") as f:
            raw = f.read()
        assert len(raw) % st.size == 0, f"{path}: torn entry on disk"
        entries = [st.unpack_from(raw, i) for i in range(0, len(raw), st.size)]
        out.append([(seg.base_offset + a, b) if fmt == ">ii" else (a, seg.base_offset + b) for a, b in entries])
    return out[0], out[1]


def check_log(lg: Log, where: str = "") -> View:
    """Every invariant of a recovered log (see the module docstring); returns its view."""
    d, strict = lg.dir, not lg.config.compact
    names = os.listdir(d)
    leftovers = [n for n in names if n.endswith((".swap", ".cleaned", ".deleted", ".tmp"))]
    assert not leftovers, f"{where}: leftover files {leftovers}"
    v = view_of(lg)
    assert [s.name for s in v.segments] == [os.path.basename(s.log_path) for s in lg.segments], (
        f"{where}: segment files {[s.name for s in v.segments]} are not the log's segments"
    )
    bases = {s.base for s in v.segments}
    orphans = [n for n in names if n.endswith((".index", ".timeindex", ".txnindex")) and int(n[:20]) not in bases]
    assert not orphans, f"{where}: index files without a segment: {orphans}"
    for prev, cur in zip(v.segments, v.segments[1:]):
        ok = cur.base == prev.next_offset if strict else cur.base >= prev.next_offset
        assert ok, f"{where}: segment {cur.base} does not continue segment {prev.base} (ends at {prev.next_offset})"
    hs = v.headers
    for a, b in zip(hs, hs[1:]):
        ok = b.base_offset == a.next_offset if strict else b.base_offset > a.last_offset
        assert ok, f"{where}: batch at {b.base_offset} after a batch ending at {a.last_offset}: offsets not dense"
    for s in v.segments:
        for _, h, _ in s.batches:
            assert h.base_offset >= s.base, f"{where}: batch {h.base_offset} below its segment {s.base}"
    assert lg.log_end_offset == v.segments[-1].next_offset, (
        f"{where}: LEO {lg.log_end_offset} but the last batch ends at {v.segments[-1].next_offset}"
    )
    assert v.segments[0].base <= lg.log_start_offset <= lg.log_end_offset
    assert lg.high_watermark <= lg.log_end_offset and lg.recovery_point <= lg.log_end_offset
    for seg, sv in zip(lg.segments, v.segments):
        oi, ti = seg.offset_index, seg.time_index
        _check_indexes(
            seg,
            sv,
            [oi.entry(i) for i in range(oi.entries)],
            [ti.entry(i) for i in range(ti.entries)],
            f"{where}: segment {sv.base}",
        )
        top = max((h.max_timestamp for _, h, _ in sv.batches), default=-1)
        assert seg.max_timestamp_so_far == top, (
            f"{where}: segment {sv.base} max timestamp {seg.max_timestamp_so_far}, batches say {top}"
        )
        assert seg.next_offset == sv.next_offset
    log_start, leo = lg.log_start_offset, lg.log_end_offset
    got, off = b"", log_start
    while off < leo:
        r = lg.read(off, 1 << 20)
        got, off = got + r.records, r.next_offset
    live = [b for h, b in zip(hs, v.batches) if h.last_offset >= log_start]
    assert got == b"".join(live), f"{where}: reading {log_start}..{leo} does not return the batches"
    check_list_offsets(lg, v, where)
    check_epochs(lg, v, where)
    return v


def check_list_offsets(lg: Log, v: View, where: str) -> None:
    recs = [(r[0], r[1]) for r in v.records()]
    epoch_of = {}
    for h in v.headers:
        for o in range(h.base_offset, h.last_offset + 1):
            epoch_of[o] = h.partition_leader_epoch
    for h in v.headers:
        if h.last_offset < lg.log_start_offset:
            continue
        want = next(((o, t, epoch_of[o]) for o, t in recs if t >= h.max_timestamp), None)
        got = lg.fetch_offset_by_timestamp(h.max_timestamp)
        assert got == want, f"{where}: ListOffsets({h.max_timestamp}) = {got}, the batches say {want}"
    if recs:
        o, t = max(recs, key=lambda r: (r[1], -r[0]))
        assert lg.fetch_offset_by_timestamp(-3) == (o, t, epoch_of[o]), f"{where}: ListOffsets(max timestamp)"


def check_epochs(lg: Log, v: View, where: str) -> None:
    got, log_start = lg.epoch_cache.entries(), lg.log_start_offset
    live = [h for h in v.headers if h.last_offset >= log_start]
    if not live:
        assert got == [] or (len(got) == 1 and got[0][1] == log_start), (
            f"{where}: epochs {got} for an empty log at {log_start}"
        )
        return
    if not lg.config.compact:
        want = header_epochs(v.headers, log_start)
        assert got == want, f"{where}: leader epoch cache {got}, the batch headers imply {want}"
        return
    for h in live:  # compaction may remove an epoch's first batches: the cache still covers every batch
        if h.partition_leader_epoch >= 0:
            e = lg.epoch_cache.epoch_for_offset(max(h.base_offset, log_start))
            assert e == h.partition_leader_epoch, f"{where}: epoch cache says {e} at {h.base_offset}"
    assert got and got[0][1] >= log_start and got[-1][1] < lg.log_end_offset


def aborted_txns_of(v: View) -> list[AbortedTxn]:
    """The aborted transactions the batches of ``v`` imply (a model of producer state): the LSO at each
    abort is the first offset of the earliest other open transaction, else one past the marker."""
    open_: dict[int, int] = {}
    out = []
    for h, b in zip(v.headers, v.batches):
        if h.producer_id < 0 or not h.is_transactional:
            continue
        if not h.is_control:
            open_.setdefault(h.producer_id, h.base_offset)
            continue
        recs = decode_records(b, include_control=True)
        first = open_.pop(h.producer_id, None)
        if recs and first is not None and parse_control_record(recs[0])[0] == CONTROL_ABORT:
            lso = min(open_.values()) if open_ else h.base_offset + 1
            out.append(AbortedTxn(h.producer_id, first, h.base_offset, lso))
    return out


def check_txn_indexes(lg: Log, final: View, before: View, after: View, where: str, on_disk: bool = False) -> None:
    """Each segment's aborted transaction index lists exactly the aborted transactions of the operation's
    whole history (the longer of before/after) whose marker that segment holds -- in memory, and with
    ``on_disk`` in the ``.txnindex`` files too."""
    last = [v.headers[-1].last_offset if v.headers else -1 for v in (before, after)]
    model = aborted_txns_of(after if last[1] > last[0] else before)
    for seg, sv in zip(lg.segments, final.segments):
        markers = {h.base_offset for _, h, _ in sv.batches if h.is_control}
        want = [t for t in model if t.last_offset in markers]
        got = seg.txn_index.entries()
        if on_disk:
            with _OPEN(seg.txn_index_path, "rb") as f:
                raw = f.read()
            assert len(raw) % ABORTED_TXN.size == 0, f"{where}: {seg.txn_index_path}: torn entry on disk"
            got = [AbortedTxn(*ABORTED_TXN.unpack_from(raw, i)[1:]) for i in range(0, len(raw), ABORTED_TXN.size)]
        assert got == want, f"{where}: txn index of segment {sv.base} is {got}, the batches imply {want}"
    start, end = lg.log_start_offset, lg.log_end_offset
    kept = {h.base_offset for h in final.headers if h.is_control}
    want = [t for t in model if t.last_offset in kept and t.last_offset >= start]
    got = lg.collect_aborted_transactions(start, end)
    assert got == want, f"{where}: collect_aborted_transactions({start}, {end}) = {got}, expected {want}"


def check_producer_retry(lg: Log, v: View, where: str) -> None:
    """Re-append the last idempotent batch still in the log: it must come back a duplicate with its offsets."""
    log_start = lg.log_start_offset
    cands = [
        (h, b)
        for h, b in zip(v.headers, v.batches)
        if h.producer_id >= 0 and not h.is_control and h.last_offset >= log_start
    ]
    if not cands:
        return
    h, b = cands[-1]
    if h.records_count != h.last_offset_delta + 1:
        return  # emptied by the cleaner (kept for its sequence numbers): not a batch a producer would resend
    info = lg.append_as_leader(b, max(lg.latest_epoch, 0), now_ms=NOW)
    assert info.duplicate and (info.first_offset, info.last_offset) == (h.base_offset, h.last_offset), (
        f"{where}: retried batch (seq {h.base_sequence}) at {h.base_offset}..{h.last_offset} came back {info}"
    )


NOW = 1_700_000_000_000


def verify(d: str, config, expect, before: View, after: View, where: str) -> View:
    """Reopen a crashed directory, check it, close it cleanly, check the files on disk and the clean
    reopen. ``expect(before, after, final)`` is the scenario's rule."""
    lg = Log(d, config, now_ms=NOW)
    try:
        final = check_log(lg, where)
        expect(before, after, final)
        check_txn_indexes(lg, final, before, after, where)
        check_producer_retry(lg, final, where)
    finally:
        lg.close()
    lg = Log(d, config, now_ms=NOW)
    try:
        for seg in lg.segments:
            sv = next(s for s in final.segments if s.base == seg.base_offset)
            oi, ti = read_index_files(seg)
            _check_indexes(seg, sv, oi, ti, f"{where} (index files on disk after a clean close)")
        check_txn_indexes(lg, check_log(lg, f"{where} (clean reopen)"), before, after, where, on_disk=True)
    finally:
        lg.close()
    return final


def copy_dir(src: str, dst: str) -> str:
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    return dst
