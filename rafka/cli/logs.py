"""``rafka logs``: the brokers' and the controller's Kafka-style log files (actors/server/server_log.py).

    rafka logs                      every file, merged by time (controller.log, broker-N.log)
    rafka logs --broker 1 -n 50     the last 50 lines of broker 1's log
    rafka logs --controller -f      controller.log, then new lines as they are written (Ctrl-C stops)
    rafka logs --data-dir D --json  one JSON object per line: file, time, level, context, message, logger

The files are read from disk, so the command needs no Ray connection: it works against a running cluster and
after ``rafka cluster stop``. The data directory is ``--data-dir``, else the running cluster's (the state
file), else the last one ``rafka cluster start`` used (``$RAFKA_HOME/last-data-dir``), else
``$RAFKA_HOME/data`` (``~/.rafka/data``).
"""

from __future__ import annotations

import json
import os
import re
import time

from actors.server import server_log
from rafka.cli.clusterctl import last_data_dir_file
from rafka.cli.support import EXIT_OK, UsageError, echo, output_stream
from rafka.cli.types import index as _index
from rafka.client_utils import read_state, state_file

LINE = re.compile(
    r"^\[(?P<time>[^\]]+)\] (?P<level>[A-Z]+) \[(?P<context>[^\]]*)\] (?P<message>.*) \((?P<logger>[^()]*)\)$"
)


def resolve_data_dir(given: str | None) -> str:
    if given:
        return os.path.abspath(given)
    state = read_state()
    if state and state.get("data_dir"):
        return state["data_dir"]
    try:
        last = last_data_dir_file().read_text().strip()
        if last:
            return last
    except OSError:
        pass
    return str(state_file().parent / "data")


def _entries(path: str, text: str):
    """(time, path, entry) per log line; a line not starting a new entry (a traceback) joins the previous one."""
    entry: list[str] = []
    for line in text.splitlines():
        if line.startswith("[") and entry:
            yield entry[0][1:24], path, "\n".join(entry)
            entry = []
        entry.append(line)
    if entry:
        yield entry[0][1:24], path, "\n".join(entry)


def _selected(args, data_dir: str) -> list[str]:
    files = server_log.log_files(data_dir)
    if args.controller or args.broker:
        want = {server_log.controller_log(data_dir)} if args.controller else set()
        want |= {server_log.broker_log(data_dir, b) for b in args.broker or ()}
        missing = sorted(w for w in want if w not in files)
        if missing:
            have = ", ".join(os.path.basename(f) for f in files) or "none"
            raise UsageError(
                f"no such log file: {', '.join(missing)} (files in {server_log.logs_dir(data_dir)}: {have})"
            )
        files = [f for f in files if f in want]
    return files


def _emit(args, path: str, entry: str) -> None:
    if not args.json:
        echo(entry)
        return
    first, _, rest = entry.partition("\n")
    m = LINE.match(first)
    d = m.groupdict() if m else {"time": None, "level": None, "context": None, "message": first, "logger": None}
    if rest:
        d["message"] += "\n" + rest
    echo(json.dumps({"file": os.path.basename(path), **d}))


def cmd_logs(args) -> int:
    data_dir = resolve_data_dir(args.data_dir)
    files = _selected(args, data_dir)
    if not files:
        raise FileNotFoundError(
            f"no log files in {server_log.logs_dir(data_dir)} (start a cluster with `rafka cluster start`, "
            "or pass --data-dir)"
        )
    n = args.lines if args.lines is not None else (10 if args.follow else None)
    offsets: dict[str, tuple[int, int]] = {}  # path -> (inode, bytes read)
    entries: list[tuple[str, str, str]] = []  # (time, path, entry) of every file
    for f in files:
        with open(f, "rb") as fh:
            ino = os.fstat(fh.fileno()).st_ino
            data = fh.read()
        data = data[: data.rfind(b"\n") + 1]  # whole lines only: a line being written is --follow's
        offsets[f] = (ino, len(data))
        entries += _entries(f, data.decode("utf-8", errors="replace"))
    # a stable sort, not a merge of per-file runs: a broker's file also takes its replica processes' lines, and
    # one process's timestamp can land after another's later one (a file is in time order only nearly)
    merged = sorted(entries, key=lambda e: e[0])
    if n is not None:
        merged = merged[-n:] if n else []
    for _, path, entry in merged:
        _emit(args, path, entry)
    if not args.follow:
        return EXIT_OK
    return _follow(args, files, offsets)


def _follow(args, files: list[str], offsets: dict[str, tuple[int, int]]) -> int:
    """Poll the files for appended lines (a rotated file -- new inode or shorter -- is read from its start)."""
    while True:
        time.sleep(0.2)
        fresh = []
        for f in files:
            try:
                st = os.stat(f)
            except FileNotFoundError:
                continue
            ino, pos = offsets.get(f, (st.st_ino, 0))
            if st.st_ino != ino or st.st_size < pos:
                pos = 0
            if st.st_size == pos:
                offsets[f] = (st.st_ino, pos)
                continue
            with open(f, "rb") as fh:
                fh.seek(pos)
                data = fh.read()
            cut = data.rfind(b"\n") + 1  # whole lines only: a line being written is read next time
            offsets[f] = (st.st_ino, pos + cut)
            fresh += _entries(f, data[:cut].decode("utf-8", errors="replace"))
        for _, path, entry in sorted(fresh, key=lambda e: e[0]):
            _emit(args, path, entry)
        output_stream().flush()


def register(groups, common) -> None:
    s = groups.add_parser(
        "logs",
        parents=[common],
        help="the brokers' and controller's log files (no Ray needed; works after `cluster stop`)",
        description=__doc__.split("\n\n")[0],
    )
    s.add_argument("-b", "--broker", type=int, action="append", default=None, help="broker N's log (repeatable)")
    s.add_argument("--controller", action="store_true", help="the controller's log")
    s.add_argument("-f", "--follow", action="store_true", help="keep printing new lines (Ctrl-C stops)")
    s.add_argument("-n", "--lines", type=_index, default=None, help="only the last N lines (default: all; 10 with -f)")
    s.add_argument("--data-dir", default=None, help="the cluster's data directory (default: the started one)")
    s.set_defaults(func=cmd_logs)
