"""`rafka cluster balance --dry-run|--execute` (Cruise Control's proposals, Redpanda's balancer) and
`rafka cluster balancer-status`: the controller's partition balancer plan (heal the brokers down past
replica.auto.heal.delay.ms, then replicas and leaders within the tolerance), shown or started.
"""

from __future__ import annotations

from rafka.cli.support import EXIT_OK, UsageError, connect, print_result, table


def _brokers(plan: dict) -> str:
    reps, leads = plan.get("replicas_per_broker") or {}, plan.get("leaders_per_broker") or {}
    reps0, leads0 = plan.get("replicas_before") or reps, plan.get("leaders_before") or leads
    rows = [
        [b, f"{reps0.get(b, 0)} -> {reps.get(b, 0)}", f"{leads0.get(b, 0)} -> {leads.get(b, 0)}"]
        for b in sorted(reps, key=int)
    ]
    lo, hi = plan.get("replica_band") or (0, 0)
    llo, lhi = plan.get("leader_band") or (0, 0)
    return (
        table(rows, ["BROKER", "REPLICAS", "PREFERRED-LEADERS"])
        + f"\ntolerance: replicas {lo}..{hi}, leaders {llo}..{lhi} per broker;"
        + (" balanced" if plan.get("balanced") else " NOT balanced")
    )


def render_plan(plan: dict) -> str:
    """A plan as the operator reads it: moves, elections, what cannot be healed, the brokers after it."""
    out = []
    moves = plan.get("moves") or []
    if moves:
        rows = [
            [
                m["topic"],
                m["partition"],
                m["reason"],
                ",".join(map(str, m["replicas"])),
                ",".join(map(str, m["target"])),
            ]
            for m in moves
        ]
        out.append(table(rows, ["TOPIC", "PARTITION", "REASON", "REPLICAS", "TARGET"]))
    else:
        out.append("no moves")
    if plan.get("elections"):
        out.append(
            "preferred leader elections: " + ", ".join(f"{e['topic']}-{e['partition']}" for e in plan["elections"])
        )
    if plan.get("deferred"):
        out.append(f"{plan['deferred']} more move(s) held back by num.concurrent.partition.movements.per.broker")
    if plan.get("in_progress"):
        out.append(f"{plan['in_progress']} reassignment(s) in progress")
    if plan.get("lost_brokers"):
        out.append(f"lost brokers (down past replica.auto.heal.delay.ms): {plan['lost_brokers']}")
    if plan.get("down_brokers"):
        out.append(f"down brokers (within replica.auto.heal.delay.ms): {plan['down_brokers']}")
    unhealable = plan.get("unhealable") or []
    if unhealable:
        rows = [[u["topic"], u["partition"], ",".join(map(str, u["replicas"])), u["reason"]] for u in unhealable]
        out.append("cannot be healed:\n" + table(rows, ["TOPIC", "PARTITION", "REPLICAS", "REASON"]))
    if plan.get("balance_skipped"):
        out.append(f"balance not planned: {plan['balance_skipped']}")
    out.append(_brokers(plan))
    return "\n".join(out)


def cmd_cluster_balance(args) -> int:
    from rafka.admin.admin import Admin

    if args.dry_run == args.execute:
        raise UsageError("balance needs exactly one of --dry-run (show the plan) or --execute (start it)")
    plan = Admin(connect(args)).balance_plan(execute=args.execute)
    head = "started:" if args.execute else "plan (dry run, nothing started):"
    print_result(args, plan, head + "\n" + render_plan(plan))
    return EXIT_OK


def cmd_cluster_balancer_status(args) -> int:
    from rafka.admin.admin import Admin

    st = Admin(connect(args)).partition_balancer_status()
    last = st.get("last_plan")
    text = (
        f"heal delay {st['heal_delay_ms']} ms; join balancing {'on' if st['auto_balance'] else 'off'}"
        f"{' (balancing now)' if st['balancing'] else ''}; moves started {st['moves_started']}; "
        f"reassignments in progress {len(st['reassignments'])}; "
        f"partitions that cannot be healed {len(st['unhealable_partitions'])}"
    )
    if last:
        text += "\nlast round:\n" + render_plan(last)
    print_result(args, st, text)
    return EXIT_OK


def register(cl, common) -> None:
    """Add the verbs to the ``cluster`` sub-parser."""
    s = cl.add_parser(
        "balance", parents=[common], help="show (--dry-run) or start (--execute) the partition balancer's plan"
    )
    s.add_argument("--dry-run", action="store_true", help="show the plan, start nothing")
    s.add_argument("--execute", action="store_true", help="start the plan's reassignments")
    s.set_defaults(func=cmd_cluster_balance)
    s = cl.add_parser("balancer-status", parents=[common], help="the partition balancer's state and last round")
    s.set_defaults(func=cmd_cluster_balancer_status)
