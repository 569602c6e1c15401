"""The CLI's help: examples per verb (shown under ``rafka <group> <verb> --help``) and the parser class that
answers a mistyped verb with the nearest one ("did you mean 'topic'?"), as git and kubectl do."""

from __future__ import annotations

import argparse
import difflib
import re
import sys

EXAMPLES: dict[str, list[str]] = {
    "cluster start": ["rafka cluster start --brokers 3", "rafka cluster start -c auto.create.topics.enable=false"],
    "cluster stop": ["rafka cluster stop"],
    "cluster info": ["rafka cluster info", "rafka cluster info --json"],
    "cluster health": ["rafka cluster health", "rafka cluster health --json || echo unhealthy: $?"],
    "cluster configs": ["rafka cluster configs", "rafka cluster configs --broker 1 --json"],
    "cluster balance": ["rafka cluster balance --dry-run", "rafka cluster balance --execute --json"],
    "cluster balancer-status": ["rafka cluster balancer-status", "rafka cluster balancer-status --json"],
    "topic create": ["rafka topic create clicks -p 6 -r 3 -c min.insync.replicas=2", "rafka topic create a b c"],
    "topic list": ["rafka topic list", "rafka topic list -i --json"],
    "topic describe": ["rafka topic describe clicks", "rafka topic describe clicks -a"],
    "topic delete": ["rafka topic delete clicks"],
    "topic add-partitions": ["rafka topic add-partitions clicks -n 6"],
    "topic alter-config": [
        "rafka topic alter-config clicks --set retention.ms=86400000",
        "rafka topic alter-config clicks --delete retention.ms",
    ],
    "topic produce": [
        "echo hello | rafka topic produce clicks",
        "printf 'user-1:home\\n' | rafka topic produce clicks --key-separator : -H src=cli --print-acks",
    ],
    "topic consume": [
        "rafka topic consume clicks -n 10",
        "rafka topic consume clicks -o -5 -e -f '%p:%o %k=%v %h\\n'",
        "rafka topic consume clicks -o 0:100 -o 1:s@2026-11-26T09:00:00 -E hex",
        "rafka topic consume clicks -g my-group -e",
    ],
    "topic trim-prefix": ["rafka topic trim-prefix clicks -p 0 -o 1000", "rafka topic delete-records clicks -o end"],
    "topic elect-leaders": ["rafka topic elect-leaders", "rafka topic elect-leaders clicks -p 0 --type unclean"],
    "topic reassign": [
        "rafka topic reassign clicks -p 0 --replicas 2,0,1",
        "rafka topic reassign clicks -p 0 --cancel",
    ],
    "topic reassignments": ["rafka topic reassignments --json"],
    "group list": ["rafka group list"],
    "group describe": ["rafka group describe my-group"],
    "group seek": ["rafka group seek my-group --to start", "rafka group seek my-group --to 42 --topic clicks"],
    "group delete": ["rafka group delete my-group"],
    "group reset-offsets": [
        "rafka group reset-offsets my-group --topic clicks --to-earliest",
        "rafka group reset-offsets my-group --topic clicks:0,1 --shift-by -100 --execute",
    ],
    "perf produce": ["rafka perf produce --topic clicks --records 100000 --record-size 100 --acks all"],
    "perf consume": ["rafka perf consume --topic clicks --records 100000"],
    "logs": ["rafka logs -n 50", "rafka logs --broker 1 -f", "rafka logs --controller --json"],
    "job list": ["rafka job list"],
    "job run": ["rafka job run clickstream --topic clicks"],
    "serve start": ["rafka serve start --port 8082"],
    "serve status": ["rafka serve status"],
    "serve stop": ["rafka serve stop"],
    "txn list": ["rafka txn list", "rafka txn list --state Ongoing"],
    "txn describe": ["rafka txn describe my-transactional-id"],
    "txn describe-producers": ["rafka txn describe-producers --topic clicks --partition 0"],
    "txn find-hanging": ["rafka txn find-hanging --topic clicks --partition 0"],
    "txn abort": ["rafka txn abort --topic clicks --partition 0 --producer-id 4000"],
    "txn abort-hanging": ["rafka txn abort-hanging --topic clicks"],
    "verify": ["rafka verify --local --faults 3", "rafka verify --seed 7 --rate 5000 --json"],
}

_INVALID = re.compile(r"invalid choice: '([^']*)' \(choose from (.*)\)")


class Parser(argparse.ArgumentParser):
    """argparse with a nearest-verb suggestion for an invalid choice."""

    def error(self, message: str):  # type: ignore[override]
        m = _INVALID.search(message)
        if m:
            choices = re.findall(r"'([^']*)'", m.group(2)) or [c.strip() for c in m.group(2).split(",")]
            near = difflib.get_close_matches(m.group(1), choices, n=1, cutoff=0.5)
            if near:
                message += f"; did you mean {near[0]!r}?"
        self.print_usage(sys.stderr)
        self.exit(2, f"{self.prog}: error: {message}\n")


def leaf_parsers(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()):
    """``(verb path, parser)`` of every verb that takes no sub-verb (aliases once)."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path), parser
        return
    for action in subs:
        seen: set[int] = set()
        for name, sub in action.choices.items():
            if id(sub) not in seen:
                seen.add(id(sub))
                yield from leaf_parsers(sub, (*path, name))


def add_examples(parser: argparse.ArgumentParser) -> None:
    """Put each verb's examples under its --help (keeping the lines as written)."""
    for path, sub in leaf_parsers(parser):
        lines = EXAMPLES.get(path)
        if lines:
            sub.epilog = "examples:\n" + "\n".join(f"  {line}" for line in lines)
            sub.formatter_class = argparse.RawDescriptionHelpFormatter
