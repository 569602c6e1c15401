"""rafka's web console: brokers, topics, consumer groups and a message browser, served by the HTTP gateway
(serve/http.py mounts it under ``/console``), in the manner of Kafka UI and Redpanda Console.

Pages are rendered on the server (Jinja2 templates in ``serve/console_templates``), with plain HTML forms for
the actions (create / delete a topic, add partitions, reset a group's offsets with a preview first): no
JavaScript and no asset from a CDN, so the console works offline and in any browser. This module is the
view layer only: ``ConsoleViews`` reads the cluster through ``rafka.Admin`` / ``rafka.Consumer`` (blocking
calls: the gateway runs them on its worker threads) and returns ``(template, context)``; ``render`` turns
that into HTML.

    /console                         -> /console/topics
    /console/brokers                 brokers: alive, controller, rack, log dir
    /console/topics                  topics (internal ones with ?internal=1) + the create form
    /console/topics/{t}              partitions (leader, replicas, ISR, offline, log start, HW, size),
                                     configs with their source, add partitions, delete
    /console/topics/{t}/messages     browse: partition, offset or timestamp, key/value as text/JSON/hex
    /console/groups                  groups and their state
    /console/groups/{g}              members, assignment, lag per partition, reset offsets (preview, apply)
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from protocol.names import INTERNAL_TOPICS
from rafka.structs import TopicPartition

log = logging.getLogger("rafka.console")
TEMPLATES = Path(__file__).with_name("console_templates")
FORMATS = ("text", "json", "hex")
MAX_BROWSE = 500
_env = None


def render(template: str, **context: Any) -> str:
    """``template`` (a file in serve/console_templates) filled with ``context``; autoescaped HTML."""
    global _env
    if _env is None:
        import jinja2

        _env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(str(TEMPLATES)),
            autoescape=True,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        _env.filters["bytes"] = human_bytes
    return _env.get_template(template).render(**context)


def human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"


def show_bytes(b: bytes | None, fmt: str) -> str | None:
    """A key or value for the browser: UTF-8 text (undecodable bytes as \\xNN), pretty JSON when it parses,
    or hex."""
    if b is None:
        return None
    if fmt == "hex":
        return bytes(b).hex(" ")
    text = bytes(b).decode("utf-8", errors="backslashreplace")
    if fmt == "json":
        try:
            return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
        except ValueError:
            return text
    return text


class ConsoleError(Exception):
    """A bad form value: the page shows it (HTTP 400), like a Kafka error."""


def _int(value: str | None, what: str, default: int | None = None, minimum: int | None = None) -> int | None:
    if value is None or str(value).strip() == "":
        return default
    try:
        n = int(str(value).strip())
    except ValueError:
        raise ConsoleError(f"{what} must be a whole number, got {value!r}") from None
    if minimum is not None and n < minimum:
        raise ConsoleError(f"{what} must be at least {minimum}, got {n}")
    return n


class ConsoleViews:
    """The console's pages over one cluster. Every method blocks (Ray calls)."""

    def __init__(self, cluster: str, admin):
        self.cluster, self.admin = cluster, admin

    def _base(self, **ctx: Any) -> dict:
        return {"cluster": self.cluster, "now": time.strftime("%Y-%m-%d %H:%M:%S"), "message": None, **ctx}

    # -- brokers ------------------------------------------------------------------------------------------
    def brokers(self) -> tuple[str, dict]:
        desc = self.admin.describe_cluster()
        leaders: dict[int, int] = {}
        for d in self.admin.describe_topics(self.admin.list_topics()):
            for p in d["partitions"]:
                leaders[p["leader"]] = leaders.get(p["leader"], 0) + 1
        rows = [
            {
                "id": b["id"],
                "alive": b.get("alive", True),
                "controller": b["id"] == desc["controller_id"],
                "rack": b.get("rack") or "-",
                "log_dir": b.get("log_dir") or "-",
                "epoch": b.get("epoch", "-"),
                "leaders": leaders.get(b["id"], 0),
            }
            for b in sorted(desc["brokers"], key=lambda b: b["id"])
        ]
        return "brokers.html", self._base(page="brokers", desc=desc, brokers=rows)

    # -- topics -------------------------------------------------------------------------------------------
    def topics(self, internal: bool = False, message: str | None = None) -> tuple[str, dict]:
        names = sorted(n for n in self.admin.list_topics() if internal or n not in INTERNAL_TOPICS)
        rows = []
        for d in self.admin.describe_topics(names) if names else []:
            parts = d["partitions"]
            rows.append(
                {
                    "name": d["name"],
                    "internal": d["name"] in INTERNAL_TOPICS,
                    "partitions": len(parts),
                    "replicas": len(parts[0]["replicas"]) if parts else 0,
                    "under_replicated": sum(1 for p in parts if len(p["isr"]) < len(p["replicas"])),
                    "offline": sum(1 for p in parts if p["leader"] < 0),
                }
            )
        return "topics.html", self._base(page="topics", topics=rows, internal=internal, message=message)

    def topic(self, name: str, message: str | None = None) -> tuple[str, dict]:
        (d,) = self.admin.describe_topics([name])
        tps = {p["partition"]: TopicPartition(name, p["partition"]) for p in d["partitions"]}
        starts = self.admin.list_offsets({tp: "earliest" for tp in tps.values()}) if tps else {}
        ends = self.admin.list_offsets({tp: "latest" for tp in tps.values()}) if tps else {}
        logs = self._logs(list(tps.values()))
        sizes = {tp: st.get("size_bytes") for tp, st in logs.items()}
        parts = []
        for p in d["partitions"]:
            tp = tps[p["partition"]]
            parts.append(
                {
                    **p,
                    "offline_replicas": p.get("offline_replicas") or [],
                    "log_start": starts[tp].offset,
                    "high_watermark": ends[tp].offset,
                    "messages": ends[tp].offset - starts[tp].offset,
                    "size": sizes.get(tp),
                    "segments": logs.get(tp, {}).get("segments"),
                }
            )
        configs = self.admin.describe_config_entries(name)
        return "topic.html", self._base(
            page="topics",
            topic=d,
            partitions=parts,
            configs=configs,
            total_messages=sum(p["messages"] for p in parts),
            total_size=sum(s for s in sizes.values() if s is not None) if sizes else None,
            message=message,
        )

    def _logs(self, tps: list[TopicPartition]) -> dict[TopicPartition, dict]:
        """Each partition's leader state (``ReplicaActor.state``: size_bytes, segments); {} where it did not
        answer."""
        md = self.admin.metadata
        calls = {}
        for tp in tps:
            try:
                leader = md.leader(tp)
            except Exception as e:  # noqa: BLE001 - a partition without metadata shows "-"
                log.debug("console: leader of %s: %s", tp, e)
                leader = None
            if leader is not None:
                calls[tp] = md.transport.call(leader[0], "state")
        out: dict[TopicPartition, dict] = {}
        for tp, call in calls.items():
            try:
                out[tp] = md.transport.get(call, timeout=5)
            except Exception as e:  # noqa: BLE001 - a replica restarting: its size is unknown for now
                log.debug("console: state of %s: %s", tp, e)
                out[tp] = {}
        return out

    def create_topic(self, form: dict) -> str:
        from rafka.admin.admin import NewTopic

        name = (form.get("name") or "").strip()
        if not name:
            raise ConsoleError("a topic needs a name")
        partitions = _int(form.get("partitions"), "partitions", -1)
        rf = _int(form.get("replication_factor"), "replication factor", -1)
        configs = {}
        for line in (form.get("configs") or "").splitlines():
            if line.strip():
                if "=" not in line:
                    raise ConsoleError(f"configs are key=value lines, got {line.strip()!r}")
                k, v = line.split("=", 1)
                configs[k.strip()] = v.strip()
        self.admin.create_topics([NewTopic(name, partitions, rf, configs)])
        return name

    def delete_topic(self, name: str, form: dict) -> None:
        if (form.get("confirm") or "").strip() != name:
            raise ConsoleError(f"type the topic's name ({name}) to confirm its deletion")
        self.admin.delete_topics([name])

    def add_partitions(self, name: str, form: dict) -> int:
        (d,) = self.admin.describe_topics([name])
        add = _int(form.get("count"), "partitions to add", None, 1)
        if add is None:
            raise ConsoleError("how many partitions to add?")
        total = len(d["partitions"]) + add
        self.admin.create_partitions({name: total})
        return total

    # -- messages -----------------------------------------------------------------------------------------
    def messages(self, name: str, query: dict) -> tuple[str, dict]:
        from rafka.consumer.consumer import Consumer

        (d,) = self.admin.describe_topics([name])
        partitions = sorted(p["partition"] for p in d["partitions"])
        partition = _int(query.get("partition"), "partition", partitions[0] if partitions else 0, 0)
        if partition not in partitions:
            raise ConsoleError(f"topic {name!r} has no partition {partition} (0..{len(partitions) - 1})")
        limit = min(_int(query.get("limit"), "limit", 50, 1) or 50, MAX_BROWSE)
        fmt = query.get("format") or "text"
        if fmt not in FORMATS:
            raise ConsoleError(f"format must be one of {', '.join(FORMATS)}")
        tp = TopicPartition(name, partition)
        start = self.admin.list_offsets({tp: "earliest"})[tp].offset
        end = self.admin.list_offsets({tp: "latest"})[tp].offset
        ts_text = (query.get("timestamp") or "").strip()
        offset = _int(query.get("offset"), "offset", None)
        if ts_text:
            ts = _timestamp(ts_text)
            found = self.admin.list_offsets({tp: ts})[tp].offset
            offset = end if found < 0 else found
        elif offset is None:
            offset = max(start, end - limit)  # the newest page
        elif offset < 0:
            offset = max(start, end + offset)
        offset = min(max(offset, start), end)
        records = []
        if offset < end:
            c = Consumer(self.admin.cluster_name, enable_auto_commit=False, max_poll_records=limit)
            try:
                c.assign([tp])
                c.seek(tp, offset)
                deadline = time.monotonic() + 10
                while len(records) < limit and c.position(tp) < end and time.monotonic() < deadline:
                    for recs in c.poll(timeout_ms=500, max_records=limit - len(records)).values():
                        records.extend(recs)
            finally:
                c.close()
        rows = [
            {
                "offset": r.offset,
                "timestamp": r.timestamp,
                "time": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(r.timestamp / 1000)) + "Z",
                "key": show_bytes(r.key, fmt),
                "value": show_bytes(r.value, fmt),
                "headers": [(k, show_bytes(v, fmt)) for k, v in r.headers or ()],
                "size": (len(r.key) if r.key else 0) + (len(r.value) if r.value else 0),
            }
            for r in records[:limit]
        ]
        return "messages.html", self._base(
            page="topics",
            topic=name,
            partitions=partitions,
            partition=partition,
            log_start=start,
            high_watermark=end,
            offset=offset,
            timestamp=ts_text,
            limit=limit,
            format=fmt,
            formats=FORMATS,
            records=rows,
            prev_offset=max(start, offset - limit),
            next_offset=offset + len(rows),
        )

    # -- groups -------------------------------------------------------------------------------------------
    def groups(self) -> tuple[str, dict]:
        rows = sorted(self.admin.list_groups(), key=lambda g: g["group_id"])
        return "groups.html", self._base(page="groups", groups=rows)

    def group(self, group_id: str, message: str | None = None, plan: list | None = None, form=None):
        d = self.admin.describe_groups([group_id])[0]
        topics = sorted({o["topic"] for o in d["offsets"]})
        return "group.html", self._base(
            page="groups",
            group=d,
            total_lag=sum(o["lag"] or 0 for o in d["offsets"]),
            topics=topics,
            message=message,
            plan=plan,
            form=form or {},
        )

    def reset_plan(self, group_id: str, form: dict) -> list[dict]:
        """What the reset in ``form`` would set (``rafka.admin.group_admin.reset_plan``: kafka-consumer-groups
        --reset-offsets --dry-run, clamped to each partition's log range): ``[{topic, partition, current,
        log_start, log_end, new}]``."""
        from rafka.admin import group_admin

        topic = (form.get("topic") or "").strip()
        strategy = form.get("strategy") or "earliest"
        value = form.get("value")
        to: Any
        if strategy in ("earliest", "latest"):
            to = strategy
        elif strategy == "offset":
            to = _int(value, "offset")
        elif strategy == "shift":
            to = {"shift_by": _int(value, "shift")}
        elif strategy == "datetime":
            to = {"timestamp": _timestamp(value or "")}
        else:
            raise ConsoleError(f"unknown reset strategy {strategy!r}")
        if to is None or to == {"shift_by": None}:
            raise ConsoleError(f"reset to {strategy} needs a value")
        try:
            plan = group_admin.reset_plan(self.admin, group_id, to, [topic] if topic else None)
        except ValueError as e:
            raise ConsoleError(str(e)) from None
        if not plan:
            raise ConsoleError(f"group {group_id!r} has no committed offsets: pick a topic to reset")
        return plan

    def apply_reset(self, group_id: str, plan: list[dict]) -> None:
        self.admin.alter_consumer_group_offsets(
            group_id, {TopicPartition(r["topic"], r["partition"]): r["new"] for r in plan}
        )


def _timestamp(text: str) -> int:
    """Milliseconds since the epoch or an ISO date-time (UTC unless it names a zone), as the CLI reads them."""
    from rafka.cli.data import parse_timestamp
    from rafka.cli.support import UsageError

    try:
        return parse_timestamp(text.strip())
    except UsageError as e:
        raise ConsoleError(str(e)) from None
