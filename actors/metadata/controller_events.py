"""The controller's log lines for a commit (Kafka's controller.log / state-change.log): ``describe(records,
prior)`` -> ``(level, message)`` pairs, one per state change an operator looks for. Pure; called by the
controller shell on each commit. docs/internals.md ("Server logs") lists the lines.
"""

from __future__ import annotations

import logging

INFO, WARNING = logging.INFO, logging.WARNING


def _isr_line(tp: str, old: list, new: list, epoch: int) -> str:
    verb = "Shrunk" if set(new) < set(old) else "Expanded" if set(new) > set(old) else "Changed"
    return f"{verb} ISR of {tp} from {old} to {new} (partition epoch {epoch})"


def describe(records: list[dict], prior: dict) -> list[tuple[int, str]]:
    out: list[tuple[int, str]] = []
    state = {k: dict(v) for k, v in prior.items() if isinstance(k, tuple)}
    for r in records:
        t = r["type"]
        if t == "RegisterBroker":
            out.append((INFO, f"Registered broker {r['broker_id']} at broker epoch {r['broker_epoch']}"))
        elif t == "FenceBroker":
            out.append((WARNING, f"Fenced broker {r['broker_id']} (broker epoch {r['broker_epoch']})"))
        elif t == "Topic":
            out.append((INFO, f"Created topic {r['name']} with topic id {r['topic_id']}"))
        elif t == "RemoveTopic":
            out.append((INFO, f"Deleted topic {r['name']} with topic id {r['topic_id']}"))
        elif t == "Partition":
            tp = f"{r['topic']}-{r['partition']}"
            state[(r["topic"], r["partition"])] = dict(r)
            out.append(
                (
                    INFO,
                    f"Created partition {tp} with replicas {r['replicas']}, ISR {r['isr']}, leader {r['leader']}, "
                    f"leader epoch {r['leader_epoch']}",
                )
            )
        elif t == "PartitionChange":
            key = (r["topic"], r["partition"])
            tp = f"{r['topic']}-{r['partition']}"
            old = state.get(key) or {}
            state[key] = dict(r)
            if r["leader"] != old.get("leader"):
                if r["leader"] < 0:
                    out.append(
                        (
                            WARNING,
                            f"Partition {tp} has no leader (was {old.get('leader')}): OfflinePartition, "
                            f"ISR {r['isr']}, leader epoch {r['leader_epoch']}",
                        )
                    )
                else:
                    out.append(
                        (
                            INFO,
                            f"Elected leader {r['leader']} for partition {tp} (was {old.get('leader')}) at leader "
                            f"epoch {r['leader_epoch']}, ISR {r['isr']}",
                        )
                    )
            elif r["leader_epoch"] != old.get("leader_epoch"):
                out.append((INFO, f"Bumped leader epoch of {tp} to {r['leader_epoch']} (leader {r['leader']})"))
            if r["isr"] != old.get("isr") and old:
                out.append((INFO, _isr_line(tp, old.get("isr", []), r["isr"], r["partition_epoch"])))
            if r["replicas"] != old.get("replicas") and old:
                out.append(
                    (
                        INFO,
                        f"Reassigning {tp}: replicas {old.get('replicas')} -> {r['replicas']} "
                        f"(adding {r.get('adding', [])}, removing {r.get('removing', [])})",
                    )
                )
        elif t == "ConfigRecord":
            value = "(default)" if r["value"] is None else r["value"]
            out.append((INFO, f"Set {r['resource_type']} {r['resource']} config {r['name']}={value}"))
        elif t == "ProducerIds":
            out.append((INFO, f"Allocated producer ids up to {r['next_producer_id']} to broker {r['broker_id']}"))
    return out
