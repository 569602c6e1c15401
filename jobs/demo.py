"""``make demo``: rafka's main job in one command, the full pipeline.

Starts an embedded 3-broker cluster and the HTTP gateway (Ray Serve, REST-proxy API), creates a
replicated topic (6 partitions, RF 3, min.insync.replicas 2) and posts a generated web-click stream keyed
by user to it over HTTP (1,000 records per request; the gateway's producer is idempotent, acks=all),
killing one broker part-way; consumes everything back and checks that nothing was lost or duplicated and
that every user's clicks kept their order; has a consumer group of three ("click-counters", manual
commits) process the topic while one member crashes part-way (the survivors take over from its last
commit; lag printed before and after); restarts the dead broker and copies the clicks exactly once
through a transactional consume-transform-produce step across a SIGKILLed broker (jobs/demo_eos.py); lets
real Kafka clients (librdkafka, kcat) read and write over Kafka's wire protocol (jobs/demo_wire.py); then
runs the Spark job on RayDP (jobs/clickstream.py: per-page counts and per-user sessions into a compacted
results topic and Parquet, offsets committed for its group), posts more events over HTTP and runs the job
again, which processes only the new ones; the results are checked against a plain-Python computation.
Prints a summary and shuts down cleanly.

    python -m jobs.demo [--records 60000] [--more 10000] [--users 500] [--data-dir DIR] [--port 8082]

Exit status 0 when every check passed.
"""

from __future__ import annotations

import argparse
import base64
import json
import random
import sys
import tempfile
import time

from rich.console import Console
from rich.table import Table

PAGES = ["/", "/search", "/product/{}", "/cart", "/checkout", "/account", "/help", "/blog/{}"]
TOPIC = "clicks"


class ClickStream:
    """Generated web clicks: ``(key, value)`` pairs, key = user, value = a JSON event. Successive
    ``take(n)`` calls continue the stream (ids, per-user ``seq`` and timestamps go on), so a second
    batch after a pipeline run is new data, not a replay."""

    def __init__(self, users: int, seed: int = 7):
        self.users = users
        self.rng = random.Random(seed)
        self.seqs = [0] * users
        self.next_id = 0
        # event time: one click every 100 ms starting three hours ago, so light users' clicks are far
        # apart (several sessions) and heavy users' are close (long sessions)
        self.t0 = int(time.time() * 1000) - 3 * 3600 * 1000
        self.events: list[dict] = []  # everything generated, for the plain-Python cross-checks

    def take(self, n: int) -> list[tuple[bytes, bytes]]:
        rng, out = self.rng, []
        for _ in range(n):
            i = self.next_id
            self.next_id += 1
            u = min(int(rng.paretovariate(1.2)) - 1, self.users - 1)  # a few heavy users, a long tail
            self.seqs[u] += 1
            page = rng.choice(PAGES).format(rng.randrange(1000))
            event = {
                "id": i,
                "user": f"user-{u:04d}",
                "seq": self.seqs[u],
                "page": page,
                "ts": self.t0 + 100 * i,
                "referrer": rng.choice(["google", "direct", "newsletter", "ads", None]),
                "device": rng.choice(["mobile", "desktop", "tablet"]),
            }
            self.events.append(event)
            out.append((event["user"].encode(), json.dumps(event, separators=(",", ":")).encode()))
        return out


def post_records(url: str, topic: str, pairs: list[tuple[bytes, bytes]], per_request: int = 1000) -> dict:
    """Produce ``pairs`` through the HTTP gateway (REST-proxy v2, binary embedded format), one request of
    ``per_request`` records at a time, so each user's clicks keep their order. Returns counts of acked and
    failed records and the first error message."""
    import requests

    acked, failed, first_error = 0, 0, None
    with requests.Session() as http:
        for i in range(0, len(pairs), per_request):
            body = {
                "records": [
                    {"key": base64.b64encode(k).decode(), "value": base64.b64encode(v).decode()}
                    for k, v in pairs[i : i + per_request]
                ]
            }
            resp = http.post(
                f"{url}/topics/{topic}",
                json=body,
                timeout=120,
                headers={"Content-Type": "application/vnd.kafka.binary.v2+json"},
            )
            if resp.status_code != 200:
                failed += len(body["records"])
                first_error = first_error or f"HTTP {resp.status_code}: {resp.text[:200]}"
                continue
            for o in resp.json()["offsets"]:
                if o.get("error_code"):
                    failed += 1
                    first_error = first_error or f"{o['error_code']}: {o.get('error')}"
                else:
                    acked += 1
    return {"acked": acked, "failed": failed, "first_error": first_error}


def partition_table(admin, title: str) -> tuple[Table, dict]:
    (desc,) = admin.describe_topics([TOPIC])
    table = Table(title=title, title_justify="left")
    for col in ("partition", "leader", "replicas", "ISR", "offline"):
        table.add_column(col)
    state = {}
    for p in desc["partitions"]:
        state[p["partition"]] = (p["leader"], list(p["isr"]))
        table.add_row(
            str(p["partition"]),
            str(p["leader"]),
            str(p["replicas"]),
            str(p["isr"]),
            str(p.get("offline_replicas") or ""),
        )
    return table, state


GROUP = "click-counters"
JOB_GROUP = "clickstream"
RESULTS = "clickstream-results"
SESSION_GAP_MS = 30 * 60 * 1000


def lag_table(admin, title: str) -> tuple[Table, dict]:
    (g,) = admin.describe_groups([GROUP])
    table = Table(title=f"{title} (group state {g['state']})", title_justify="left")
    for col in ("partition", "committed", "log end", "lag"):
        table.add_column(col, justify="right")
    lags = {}
    for o in sorted(g["offsets"], key=lambda o: o["partition"]):
        if o["topic"] == TOPIC:
            lags[o["partition"]] = o["lag"]
            table.add_row(str(o["partition"]), str(o["committed"]), str(o["log_end"]), str(o["lag"]))
    return table, lags


def group_part(cluster, admin, records: int, ends: dict, console: Console) -> list:
    """Three consumers in group ``click-counters`` count clicks per user with manual commits; one of
    them dies part-way (stops polling and heartbeating, never closes or leaves); after its session
    times out the survivors take its partitions over from its last commit and finish."""
    import rafka
    from protocol.errors import KafkaError

    session_ms = 3000
    console.print(
        f"Consumer group [bold]{GROUP}[/]: 3 members, manual commits, session timeout "
        f"{session_ms / 1000:.0f} s; one member crashes part-way ..."
    )
    # the group starts from the beginning of the log (kafka-consumer-groups --reset-offsets --to-earliest)
    admin.reset_consumer_group_offsets(GROUP, "earliest", topics=[TOPIC])
    table, lag_before = lag_table(admin, "Group lag right after producing")
    console.print(table)

    class CommitOnRevoke(rafka.ConsumerRebalanceListener):
        def __init__(self):
            self.consumer = None

        def on_partitions_revoked(self, revoked):
            try:  # commit what was processed before the partitions move (Kafka's usual pattern)
                self.consumer.commit({tp: self.consumer.position(tp) for tp in revoked})
            except KafkaError:
                pass  # the member already lost them; the new owner re-processes from the last commit

        def on_partitions_lost(self, lost):
            pass  # not ours any more: nothing to commit

    members = []
    for _ in range(3):
        lst = CommitOnRevoke()
        c = rafka.Consumer(
            cluster,
            group_id=GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=session_ms,
            heartbeat_interval_ms=300,
            max_poll_interval_ms=60000,
            fetch_max_wait_ms=100,
            max_poll_records=200,
        )
        lst.consumer = c
        c.subscribe([TOPIC], listener=lst)
        members.append(c)
    clicks: dict[str, int] = {}
    processed: dict[int, int] = {}  # event id -> times processed
    since_commit = [0, 0, 0]
    polls = [0, 0, 0]
    victim = None
    victim_uncommitted = 0
    killed_at = None
    gen_at_kill = -1
    t0 = time.monotonic()
    deadline = t0 + 120
    all_tps = set(ends)

    def finished(alive) -> bool:
        owned = [c.assignment() for c in alive]
        gens = {c.group_metadata()["generation_id"] for c in alive}
        return (
            len(gens) == 1
            and set().union(*owned) == all_tps
            and sum(map(len, owned)) == len(all_tps)
            and all(c.position(tp) >= ends[tp] for c in alive for tp in c.assignment())
        )

    while time.monotonic() < deadline:
        alive = [i for i in range(3) if i != victim]
        if victim is not None and finished([members[i] for i in alive]):
            break
        for i in alive:
            c = members[i]
            for recs in c.poll(timeout_ms=50).values():
                for r in recs:
                    ev = json.loads(r.value)
                    clicks[ev["user"]] = clicks.get(ev["user"], 0) + 1
                    processed[ev["id"]] = processed.get(ev["id"], 0) + 1
                    since_commit[i] += 1
            if victim is None and sum(processed.values()) >= records // 3 and since_commit[i]:
                # it crashes mid-batch: records processed since its last commit were never committed
                victim = i
                victim_parts = sorted(tp.partition for tp in members[victim].assignment())
                victim_uncommitted = since_commit[victim]
                gen_at_kill = members[victim].group_metadata()["generation_id"]
                members[victim]._group._stop.set()  # crash: its heartbeats stop, it never polls, commits or leaves
                killed_at = time.monotonic()
                console.print(
                    f"  [bold red]member {victim} crashed[/] owning partitions {victim_parts} after "
                    f"{sum(processed.values()):,} records processed, {victim_uncommitted:,} of its own "
                    "not yet committed"
                )
                continue
            polls[i] += 1
            if polls[i] % 5 == 0 and c.assignment():
                try:
                    c.commit()
                    since_commit[i] = 0
                except KafkaError:
                    pass  # a rebalance is under way: the next poll rejoins, the next commit covers it
    survivors = [members[i] for i in range(3) if i != victim]
    done = victim is not None and finished(survivors)
    took_over_s = None
    if done:
        for c in survivors:
            c.commit()
        took_over_s = time.monotonic() - killed_at
    new_gen = survivors[0].group_metadata()["generation_id"] if survivors else -1
    table, lag_after = lag_table(admin, "Group lag after the survivors finished")
    console.print(table)
    for c in survivors:
        c.close()
    distinct = len(processed)
    dups = sum(processed.values()) - distinct
    console.print(
        f"  {sum(processed.values()):,} records processed ({distinct:,} distinct, {dups:,} re-processed after "
        f"the crash; the victim had {victim_uncommitted:,} uncommitted) in {time.monotonic() - t0:.1f} s; "
        f"{len(clicks)} users counted"
        + (f"; survivors done {took_over_s:.1f} s after the crash" if took_over_s is not None else "")
    )
    return [
        (
            "group: nothing lost after a member crash",
            done and distinct == records and all(processed.get(i) for i in range(records)),
            f"{distinct:,}/{records:,} events processed at least once, {dups:,} re-processed",
        ),
        (
            "group: rebalanced and lag 0",
            done
            and victim is not None
            and new_gen > gen_at_kill
            and all(v == 0 for v in lag_after.values())
            and len(lag_after) == len(ends),
            f"lag {sum(v or 0 for v in lag_before.values()):,} -> {sum(v or 0 for v in lag_after.values())}, "
            f"generation {gen_at_kill} -> {new_gen}",
        ),
    ]


def expected_results(events: list[dict]) -> tuple[dict[str, int], set[tuple]]:
    """Page totals and sessions ``(user, start, end, clicks)`` computed in plain Python, for the checks."""
    pages: dict[str, int] = {}
    by_user: dict[str, list[int]] = {}
    for e in events:
        pages[e["page"]] = pages.get(e["page"], 0) + 1
        by_user.setdefault(e["user"], []).append(e["ts"])
    sessions = set()
    for user, times in by_user.items():
        times.sort()
        start = end = times[0]
        clicks = 0
        for t in times:
            if t - end > SESSION_GAP_MS:
                sessions.add((user, start, end, clicks))
                start, clicks = t, 0
            end = max(end, t)
            clicks += 1
        sessions.add((user, start, end, clicks))
    return pages, sessions


def run_table(res: dict) -> Table:
    ranges = ", ".join(f"p{p}:{s}-{e}" for p, (s, e) in sorted(res["ranges"].items()))
    table = Table(
        title=f"Clickstream run {res['run']}: {res['records']:,} new records in {res['elapsed_s']:.1f} s "
        f"(offsets {ranges or 'none'})",
        title_justify="left",
    )
    for col in ("page", "total clicks"):
        table.add_column(col, justify="right" if col != "page" else "left")
    for page, n in res["top_pages"][:8]:
        table.add_row(page, f"{n:,}")
    return table


def pipeline_part(cluster, url: str, stream: "ClickStream", more: int, data_dir: str, console: Console) -> list:
    """The Spark pipeline on RayDP: the clickstream job (jobs/clickstream.py) reads the click topic,
    counts clicks per page and sessionizes users, writes a compacted results topic and Parquet, and
    commits its group's offsets; more events arrive over HTTP and a second run processes only them."""
    import os

    import pyarrow.parquet as pq

    from jobs import clickstream
    from jobs.spark import init_spark, stop_spark

    console.rule("[bold]Spark on Ray: the clickstream job")
    console.print("Starting Spark through RayDP (1 executor) ...")
    t = time.monotonic()
    spark = init_spark("rafka-demo", num_executors=1, executor_cores=1, executor_memory="1G")
    console.print(f"  Spark {spark.version} up in {time.monotonic() - t:.1f} s")
    out_dir = os.path.join(data_dir, "clickstream")
    step = lambda s: console.print(f"  [dim]{s}[/]")  # noqa: E731
    try:
        first = clickstream.run(
            cluster,
            spark,
            topic=TOPIC,
            group=JOB_GROUP,
            results_topic=RESULTS,
            parquet_dir=out_dir,
            session_gap_ms=SESSION_GAP_MS,
            progress=step,
        )
        console.print(run_table(first))
        console.print(f"{more:,} more click events arrive over HTTP ...")
        posted = post_records(url, TOPIC, stream.take(more))
        second = clickstream.run(
            cluster,
            spark,
            topic=TOPIC,
            group=JOB_GROUP,
            results_topic=RESULTS,
            parquet_dir=out_dir,
            session_gap_ms=SESSION_GAP_MS,
            progress=step,
        )
        console.print(run_table(second))
        idle = clickstream.run(
            cluster,
            spark,
            topic=TOPIC,
            group=JOB_GROUP,
            results_topic=RESULTS,
            parquet_dir=out_dir,
            session_gap_ms=SESSION_GAP_MS,
        )
    finally:
        stop_spark()
    results = clickstream.read_results(cluster, RESULTS)
    want_pages, want_sessions = expected_results(stream.events)
    got_sessions = {(s["user"], s["start"], s["end"], s["clicks"]) for s in results["sessions"]}
    parquet_clicks: dict[str, int] = {}
    runs = []
    for run_dir in sorted(os.listdir(os.path.join(out_dir, "page_counts"))):
        rows = pq.read_table(os.path.join(out_dir, "page_counts", run_dir)).to_pylist()
        runs.append(f"{run_dir}: {len(rows):,} pages")
        for r in rows:
            parquet_clicks[r["page"]] = parquet_clicks.get(r["page"], 0) + r["clicks"]
    console.print(f"Parquet under {out_dir}: " + "; ".join(runs))
    users = len({s[0] for s in want_sessions})
    console.print(
        f"Sessions (gap {SESSION_GAP_MS // 60000} min): {len(got_sessions):,} for {users} users in "
        f"{RESULTS}; a session that spans both runs is continued, not split"
    )
    total = len(stream.events)
    return [
        (
            "pipeline: more events acknowledged over HTTP",
            posted["acked"] == more and not posted["failed"],
            f"{posted['acked']:,}/{more:,}" + (f", {posted['first_error']}" if posted["first_error"] else ""),
        ),
        (
            "pipeline: second run read only the new records",
            first["records"] + second["records"] == total and second["records"] == more and idle["records"] == 0,
            f"run 1: {first['records']:,}, run 2: {second['records']:,}, run 3: {idle['records']}",
        ),
        (
            "pipeline: page totals = plain Python",
            results["pages"] == want_pages,
            f"{len(want_pages):,} pages, {sum(results['pages'].values()):,} clicks counted",
        ),
        (
            "pipeline: sessions = plain Python",
            got_sessions == want_sessions,
            f"{len(got_sessions):,} sessions (expected {len(want_sessions):,})",
        ),
        ("pipeline: Parquet = topic results", parquet_clicks == want_pages, f"{len(runs)} run directories"),
    ]


def run(
    records: int, users: int, data_dir: str | None, console: Console, more: int = 10000, gateway_port: int = 8082
) -> bool:
    import rafka
    from jobs.demo_eos import eos_part
    from jobs.demo_wire import wire_part
    from rafka import TopicPartition
    from serve.gateway import start_gateway, stop_gateway

    t_start = time.monotonic()
    console.rule("[bold]rafka demo: Kafka's design on Ray")
    console.print("Starting an embedded cluster: 1 controller + 3 brokers (Ray actors) ...")
    tmp = None
    if data_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="rafka-demo-")
        data_dir = tmp.name
    cluster = rafka.LocalCluster(
        brokers=3,
        data_dir=data_dir,
        num_cpus=2,
        broker_config={
            "replica.lag.time.max.ms": 5000,
            "group.min.session.timeout.ms": 1000,
            "group.initial.rebalance.delay.ms": 200,
            "listeners": "PLAINTEXT://127.0.0.1:0",  # Kafka's wire protocol, on free loopback ports
        },
    )
    ok = False
    stream = ClickStream(users)
    try:
        console.print(f"  up in {time.monotonic() - t_start:.1f} s, logs under {data_dir}")
        admin = rafka.Admin(cluster)
        t = time.monotonic()
        admin.create_topic(TOPIC, num_partitions=6, replication_factor=3, configs={"min.insync.replicas": "2"})
        console.print(
            f"Created topic [bold]{TOPIC}[/]: 6 partitions x 3 replicas, min.insync.replicas=2 "
            f"({time.monotonic() - t:.1f} s)"
        )
        before_table, before = partition_table(admin, "Leaders and ISR before the failure")
        console.print(before_table)

        ctl = admin.describe_cluster()["controller_id"]
        led = {b: sum(1 for leader, _ in before.values() if leader == b) for b in range(3)}
        victim = ctl  # the broker hosting the controller: partition leaders and the controller fail over
        kill_at = records // 3

        console.print("Starting the HTTP gateway (Ray Serve, REST-proxy API) ...")
        t = time.monotonic()
        url = start_gateway(cluster, port=gateway_port)
        console.print(f"  {url} up in {time.monotonic() - t:.1f} s (OpenAPI page: {url}/docs)")
        console.print(
            f"Producing {records:,} click events from {users} users over HTTP (1,000 records per "
            f"request, keyed by user; the gateway's producer is idempotent, acks=all); broker {victim} "
            f"(the controller's host, leader of {led[victim]} partitions) dies after {kill_at:,} ..."
        )
        pairs = stream.take(records)
        sent_bytes = sum(len(v) for _, v in pairs)
        t_prod = time.monotonic()
        first = post_records(url, TOPIC, pairs[:kill_at])
        t_kill = time.monotonic()
        cluster.kill_broker(victim)
        console.print(f"  [bold red]killed broker {victim}[/] at record {kill_at:,}; producing on")
        rest = post_records(url, TOPIC, pairs[kill_at:])
        prod_s = time.monotonic() - t_prod
        acked = first["acked"] + rest["acked"]
        errors = [e for e in (first["first_error"], rest["first_error"]) if e]
        console.print(
            f"  {acked:,} acknowledged, {first['failed'] + rest['failed']} failed in {prod_s:.1f} s "
            f"({records / prod_s:,.0f} records/s, {sent_bytes / prod_s / 1e6:.1f} MB/s)"
        )
        after_table, after = partition_table(admin, f"Leaders and ISR after broker {victim} died")
        console.print(after_table)

        console.print("Consuming everything back from the beginning ...")
        consumer = rafka.Consumer(cluster, auto_offset_reset="earliest")
        tps = [TopicPartition(TOPIC, p) for p in range(6)]
        consumer.assign(tps)
        ends = consumer.end_offsets(tps)
        seen_ids: set[int] = set()
        dups = 0
        last_seq: dict[str, int] = {}
        order_breaks = 0
        offsets_ok = True
        next_offset = {tp: 0 for tp in tps}
        got = 0
        t_cons = time.monotonic()
        deadline = t_cons + 120
        while any(consumer.position(tp) < ends[tp] for tp in tps) and time.monotonic() < deadline:
            for tp, recs in consumer.poll(timeout_ms=1000).items():
                for r in recs:
                    if r.offset != next_offset[tp]:
                        offsets_ok = False
                    next_offset[tp] = r.offset + 1
                    ev = json.loads(r.value)
                    if ev["id"] in seen_ids:
                        dups += 1
                    seen_ids.add(ev["id"])
                    if ev["seq"] <= last_seq.get(ev["user"], 0):
                        order_breaks += 1
                    last_seq[ev["user"]] = ev["seq"]
                    got += 1
        cons_s = time.monotonic() - t_cons
        consumer.close()
        missing = records - len(seen_ids)
        group_checks = group_part(cluster, admin, records, {tp: ends[tp] for tp in tps}, console)
        eos_checks = eos_part(cluster, admin, list(stream.events), victim, console)
        wire_checks = wire_part(cluster, admin, TOPIC, 6, list(stream.events), console)
        pipeline_checks = pipeline_part(cluster, url, stream, more, data_dir, console)
        checks = (
            [
                (
                    "every record acknowledged over HTTP",
                    acked == records and not errors,
                    f"{acked:,}/{records:,}" + (f", first error: {errors[0]}" if errors else ""),
                ),
                ("nothing lost", missing == 0, f"{len(seen_ids):,} distinct events read, {missing} missing"),
                ("nothing duplicated", dups == 0 and got == records, f"{got:,} records read, {dups} duplicates"),
                ("per-user order kept", order_breaks == 0, f"{len(last_seq)} users, {order_breaks} out of order"),
                (
                    "offsets dense per partition",
                    offsets_ok and sum(ends.values()) == records,
                    f"high watermarks sum to {sum(ends.values()):,}",
                ),
                (
                    "a new leader took over",
                    all(after[p][0] not in (victim, -1) for p in after)
                    and all(victim not in isr for _, isr in after.values()),
                    f"broker {victim} out of every ISR",
                ),
            ]
            + group_checks
            + eos_checks
            + wire_checks
            + pipeline_checks
        )
        summary = Table(title="Summary", title_justify="left")
        summary.add_column("check")
        summary.add_column("result")
        summary.add_column("detail")
        for name, passed, detail in checks:
            summary.add_row(name, "[green]PASS[/]" if passed else "[red]FAIL[/]", detail)
        console.print(summary)
        console.print(
            f"produce: {records / prod_s:,.0f} records/s (acks=all, RF 3, across a broker failure); "
            f"consume: {got / cons_s:,.0f} records/s; "
            f"failure injected {t_kill - t_prod:.1f} s into the run"
            if t_kill
            else ""
        )
        ok = all(passed for _, passed, _ in checks)
    finally:
        console.print("Shutting down the gateway and the cluster ...")
        stop_gateway()
        cluster.stop()
        if tmp is not None:
            tmp.cleanup()
    console.rule(f"[bold]{'all checks passed' if ok else 'SOME CHECKS FAILED'} in {time.monotonic() - t_start:.0f} s")
    return ok


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=60000)
    ap.add_argument("--users", type=int, default=500)
    ap.add_argument("--more", type=int, default=10000, help="events sent after the first Spark run")
    ap.add_argument("--port", type=int, default=8082, help="the HTTP gateway's port (loopback)")
    ap.add_argument("--data-dir", default=None, help="keep the logs here (default: a temporary directory)")
    args = ap.parse_args(argv)
    if not sys.stdout.isatty():
        # without a terminal (make demo > file, CI) Ray Data logs its progress as INFO lines every 10 s, dozens
        # between the demo's own steps; its warnings and errors still show
        import logging

        import ray.data  # noqa: F401  (configures the ray.data logger on import)

        logging.getLogger("ray.data").setLevel(logging.WARNING)
    return 0 if run(args.records, args.users, args.data_dir, Console(), more=args.more, gateway_port=args.port) else 1


if __name__ == "__main__":
    sys.exit(main())
