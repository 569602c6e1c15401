"""The Linux plumbing of a test cluster (root only): a bridge with a private /24 and network namespaces on it, each
with ``lo`` up, one veth to the bridge, its own address and no default route (iproute2), and the faults between
them as nftables rules in a table ``inet rafka_nemesis`` of each namespace (heal deletes those tables).

The root namespace holds the bridge's .1: the only way out of a namespace, and the way in for a driver on the host
(Ray Client) and for tests connecting to listeners. NodeCluster (node_cluster.py) puts a Ray node in each."""

from __future__ import annotations

import atexit
import functools
import ipaddress
import json
import os
import random
import secrets
import signal
import subprocess
import time
import weakref
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

NEMESIS_TABLE = "rafka_nemesis"
# always present in every namespace, so conntrack follows each connection from its first packet (what the
# `ct direction` of drop_one_way relies on); removed with the namespace
TRACK_TABLE = "rafka_track"
IFACE = "eth0"  # the veth's end inside each namespace (every namespace has its own interface names)
PREFIX = "rfk"  # of every bridge, veth and namespace a Network makes, then its 6-hex-digit id
OWNERS_DIR = "/run/rafka-testkit"  # <id> -> the pid of the process that made that Network (sweep_stale)
SUBNET_POOL = [ipaddress.IPv4Network(f"10.{a}.{b}.0/24") for a in range(200, 251) for b in range(256)]


class NetworkError(RuntimeError):
    """A command of iproute2, nft or tc failed; the message holds its command line and stderr."""


# ---- pure parts: names, addresses, rule text (unit-tested without root) ----


def new_id() -> str:
    return secrets.token_hex(3)


def bridge_name(net_id: str) -> str:
    return f"{PREFIX}{net_id}br"  # 11 chars: Linux names are <= 15


def veth_name(net_id: str, index: int) -> str:
    if not 0 <= index < 1000:
        raise ValueError(f"namespace index {index} out of 0..999")
    return f"{PREFIX}{net_id}v{index}"  # <= 13 chars, the host's end of namespace ``index``'s veth


def netns_name(net_id: str, name: str) -> str:
    return f"{PREFIX}{net_id}-{name}"


def pick_subnet(
    used: Iterable[ipaddress.IPv4Network], rng: random.Random | None = None, pool: Sequence[ipaddress.IPv4Network] = ()
) -> ipaddress.IPv4Network:
    """A random /24 of ``pool`` (10.200-250.x.0/24) that overlaps none of ``used`` (the host's routes)."""
    used = list(used)
    free = [n for n in (pool or SUBNET_POOL) if not any(n.overlaps(u) for u in used)]
    if not free:
        raise NetworkError("no free /24 left in 10.200.0.0-10.250.255.0")
    return (rng or random.Random()).choice(free)


def host_address(subnet: ipaddress.IPv4Network, index: int) -> ipaddress.IPv4Address:
    """The address of namespace ``index`` (0-based): .2 upward; .1 is the root namespace's, on the bridge."""
    if not 0 <= index < subnet.num_addresses - 3:
        raise ValueError(f"no address for namespace {index} in {subnet}")
    return subnet.network_address + 2 + index


@dataclass(frozen=True)
class Rule:
    """One nft rule of a namespace's nemesis table: its chain (``input`` or ``output``), its text, and the fault
    that added it (``kind``, for the record)."""

    chain: str
    text: str
    kind: str


def _set(addresses: Iterable[str]) -> str:
    items = sorted(set(addresses), key=lambda a: ipaddress.IPv4Address(a))
    return items[0] if len(items) == 1 else "{ " + ", ".join(items) + " }"


def isolate_rules() -> list[Rule]:
    """Everything in and out of the namespace's veth dropped (its loopback stays)."""
    return [
        Rule("input", f'iifname "{IFACE}" drop', "isolate"),
        Rule("output", f'oifname "{IFACE}" drop', "isolate"),
    ]


def block_rules(peers: Iterable[str], kind: str = "partition") -> list[Rule]:
    """Every packet to and from ``peers`` dropped, both ways (one side of a partition)."""
    peers = list(peers)
    if not peers:
        return []
    s = _set(peers)
    return [Rule("input", f"ip saddr {s} drop", kind), Rule("output", f"ip daddr {s} drop", kind)]


def one_way_rules(dst: str, replies: bool = True) -> list[Rule]:
    """In the source namespace: what it sends to ``dst`` dropped. With ``replies`` its answers on the connections
    ``dst`` opened still pass (conntrack's reply direction): the source cannot reach ``dst``, ``dst`` can reach the
    source. Without, every packet to ``dst`` is dropped (TCP then fails both ways; what UDP sees)."""
    if replies:
        return [Rule("output", f"ip daddr {dst} ct direction original drop", "drop_one_way")]
    return [Rule("output", f"ip daddr {dst} drop", "drop_one_way")]


def lossy_rules(percent: int) -> list[Rule]:
    """``percent`` % of the packets in each direction of the veth dropped at random."""
    if not 0 <= percent <= 100:
        raise ValueError(f"loss percent {percent} out of 0..100")
    return [
        Rule("input", f'iifname "{IFACE}" numgen random mod 100 < {percent} drop', "lossy"),
        Rule("output", f'oifname "{IFACE}" numgen random mod 100 < {percent} drop', "lossy"),
    ]


def partition_blocks(groups: Sequence[Iterable[str]]) -> dict[str, list[str]]:
    """Member -> the members of the other groups ({a,b}|{c,d,e}); a name in two groups is an error."""
    sets = [set(g) for g in groups]
    seen: set[str] = set()
    for g in sets:
        if seen & g:
            raise ValueError(f"{sorted(seen & g)} in more than one group")
        seen |= g
    return {m: sorted(set().union(*(o for j, o in enumerate(sets) if j != i))) for i, g in enumerate(sets) for m in g}


def nemesis_script(rules: Sequence[Rule], table: str = NEMESIS_TABLE) -> str:
    """An ``nft -f`` script that replaces the table with exactly ``rules`` in one transaction (declaring the table
    first makes the delete work when it does not exist yet)."""
    chains = []
    for chain in ("input", "output"):
        body = "".join(f"\t\t{r.text}\n" for r in rules if r.chain == chain)
        chains.append(f"\tchain {chain} {{\n\t\ttype filter hook {chain} priority -10; policy accept;\n{body}\t}}\n")
    return f"table inet {table}\ndelete table inet {table}\ntable inet {table} {{\n{''.join(chains)}}}\n"


def track_script(table: str = TRACK_TABLE) -> str:
    """A table whose only rule needs conntrack: it makes the kernel track every connection of the namespace."""
    return (
        f"table inet {table} {{\n\tchain output {{\n\t\ttype filter hook output priority -300; policy accept;\n"
        "\t\tct state invalid counter\n\t}\n}\n"
    )


# ---- commands ----


def run(argv: Sequence[str], *, input: str | None = None, check: bool = True, timeout: float = 30) -> str:
    proc = subprocess.run(list(argv), input=input, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode != 0:
        raise NetworkError(f"`{' '.join(argv)}` failed ({proc.returncode}): {proc.stderr.strip()}")
    return proc.stdout


def netns_exec(netns: str, argv: Sequence[str]) -> list[str]:
    return ["ip", "netns", "exec", netns, *argv]


def netns_pids(netns: str) -> set[int]:
    """Every process whose network namespace is ``netns``."""
    out = run(["ip", "netns", "pids", netns], check=False)
    return {int(p) for p in out.split()}


def host_subnets() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network routed or assigned on the host (all routing tables, every interface's address)."""
    nets = []
    for r in json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"]) or "[]"):
        dst = r.get("dst", "")
        if dst and dst != "default":
            try:
                nets.append(ipaddress.IPv4Network(dst, strict=False))
            except ValueError:
                pass
    for link in json.loads(run(["ip", "-j", "-4", "addr"]) or "[]"):
        for a in link.get("addr_info", []):
            nets.append(ipaddress.IPv4Network(f"{a['local']}/{a['prefixlen']}", strict=False))
    return nets


def signal_pids(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def pid_alive(pid: int) -> bool:
    """The process runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


def kill_netns_processes(netns: str, grace_s: float = 0.0, timeout: float = 15.0) -> int:
    """End every process of ``netns``: SIGTERM and ``grace_s`` to exit when ``grace_s`` > 0, then SIGKILL until none
    is left (a process may fork while it is being killed). The number of processes signalled."""
    seen: set[int] = set()
    pids = netns_pids(netns)
    if grace_s > 0 and pids:
        seen |= pids
        signal_pids(pids, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and any(pid_alive(p) for p in netns_pids(netns)):
            time.sleep(0.1)
    deadline = time.monotonic() + timeout
    while True:
        pids = {p for p in netns_pids(netns) if pid_alive(p)}
        if not pids:
            return len(seen)
        if time.monotonic() > deadline:
            raise NetworkError(f"processes {sorted(pids)} of {netns} survive SIGKILL")
        seen |= pids
        signal_pids(pids, signal.SIGKILL)
        time.sleep(0.05)


@functools.cache
def _netem_probe() -> tuple[bool, str]:
    ns = f"{PREFIX}probe{new_id()}"
    run(["ip", "netns", "add", ns])
    try:
        run(netns_exec(ns, ["ip", "link", "set", "lo", "up"]))
        proc = subprocess.run(
            netns_exec(ns, ["tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms"]),
            capture_output=True,
            text=True,
            timeout=30,
        )
        return proc.returncode == 0, (proc.stderr or proc.stdout).strip() or "netem works"
    finally:
        run(["ip", "netns", "del", ns], check=False)


def netem_available() -> bool:
    """Whether ``tc qdisc ... netem`` works in this kernel (probed once, in a throwaway namespace). On the kernel
    these tests were written on it does not: "Error: Specified qdisc kind is unknown." (see netem_message)."""
    return _netem_probe()[0]


def netem_message() -> str:
    """What the netem probe said (tc's error when netem is missing)."""
    return _netem_probe()[1]


# ---- the network ----


@dataclass(frozen=True)
class Namespace:
    """One namespace on the bridge: its short ``name``, the kernel's ``netns`` name, ``address`` on the bridge and
    ``veth``, the host's end of its link."""

    name: str
    netns: str
    address: str
    veth: str
    index: int

    def exec_argv(self, argv: Sequence[str]) -> list[str]:
        return netns_exec(self.netns, argv)


_LIVE: weakref.WeakSet[Network] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for net in list(_LIVE):
        net.close()


class Network:
    """A bridge, its /24 and namespaces on it; faults between them, each undone by ``heal``. ``close`` (also at
    exit, and as a context manager) ends every process left in its namespaces and deletes them, the veths and the
    bridge. Namespaces are named by the caller (``add("n0")``); methods take that name or the Namespace."""

    def __init__(self, subnet: str | None = None):
        self.id = new_id()
        self.bridge = bridge_name(self.id)
        self.namespaces: dict[str, Namespace] = {}
        self._rules: dict[str, list[Rule]] = {}
        self._throttled: set[str] = set()
        self._closed = False
        _LIVE.add(self)
        try:
            self._record_owner()
            self.subnet = ipaddress.IPv4Network(subnet) if subnet else pick_subnet(host_subnets())
            self.gateway = str(self.subnet.network_address + 1)
            run(["ip", "link", "add", self.bridge, "type", "bridge"])
            run(["ip", "addr", "add", f"{self.gateway}/{self.subnet.prefixlen}", "dev", self.bridge])
            run(["ip", "link", "set", self.bridge, "up"])
            clash = [n for n in host_subnets() if n == self.subnet]
            if len(clash) > 2:  # our route + our address; another harness picked the same /24 at the same time
                raise NetworkError(f"{self.subnet} is in use on the host")
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> Network:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _record_owner(self) -> None:
        os.makedirs(OWNERS_DIR, exist_ok=True)
        with open(os.path.join(OWNERS_DIR, self.id), "w") as f:
            f.write(str(os.getpid()))

    # -- namespaces --

    def add(self, name: str) -> Namespace:
        """A new namespace ``name`` with ``lo`` up and a veth to the bridge holding the next address."""
        if name in self.namespaces:
            raise ValueError(f"namespace {name} exists")
        index = max((ns.index for ns in self.namespaces.values()), default=-1) + 1
        ns = Namespace(
            name, netns_name(self.id, name), str(host_address(self.subnet, index)), veth_name(self.id, index), index
        )
        self.namespaces[name] = ns
        run(["ip", "netns", "add", ns.netns])
        run(["ip", "link", "add", ns.veth, "type", "veth", "peer", "name", IFACE, "netns", ns.netns])
        run(["ip", "link", "set", ns.veth, "master", self.bridge, "up"])
        inside = [
            ["ip", "link", "set", "lo", "up"],
            ["ip", "addr", "add", f"{ns.address}/{self.subnet.prefixlen}", "dev", IFACE],
            ["ip", "link", "set", IFACE, "up"],
        ]
        for argv in inside:
            run(ns.exec_argv(argv))
        run(ns.exec_argv(["nft", "-f", "-"]), input=track_script())
        return ns

    def ns(self, which: str | Namespace) -> Namespace:
        return which if isinstance(which, Namespace) else self.namespaces[which]

    def address(self, which: str | Namespace) -> str:
        return self.ns(which).address

    def pids(self, which: str | Namespace) -> set[int]:
        return netns_pids(self.ns(which).netns)

    # -- faults --

    def _add_rules(self, which: str | Namespace, rules: list[Rule]) -> None:
        ns = self.ns(which)
        self._rules.setdefault(ns.name, []).extend(rules)
        run(ns.exec_argv(["nft", "-f", "-"]), input=nemesis_script(self._rules[ns.name]))

    def isolate(self, which: str | Namespace) -> None:
        """Cut a namespace off from every peer on the bridge, the host's .1 included, both ways."""
        self._add_rules(which, isolate_rules())

    def partition(self, groups: Sequence[Iterable[str | Namespace]]) -> None:
        """Split into ``groups`` ({a,b}|{c,d,e}): traffic between groups dropped (in both members' namespaces),
        inside a group allowed. Namespaces in no group, and the host, keep their links."""
        names = [[self.ns(m).name for m in g] for g in groups]
        for member, others in partition_blocks(names).items():
            self._add_rules(member, block_rules([self.address(o) for o in others]))

    def drop_one_way(self, src: str | Namespace, dst: str | Namespace, *, replies: bool = True) -> None:
        """``src``'s packets to ``dst`` dropped: ``src`` cannot open a connection to ``dst`` (nor send on one it
        opened), while ``dst`` still reaches ``src`` and gets its answers. ``replies=False`` drops every packet from
        ``src`` to ``dst``, answers included."""
        self._add_rules(src, one_way_rules(self.address(dst), replies))

    def lossy(self, which: str | Namespace, percent: int) -> None:
        """Drop ``percent`` % of the packets in and out of a namespace at random (nft ``numgen random``)."""
        self._add_rules(which, lossy_rules(percent))

    def throttle(
        self, which: str | Namespace, rate: str = "1mbit", burst: str = "32kbit", latency: str = "50ms"
    ) -> None:
        """Slow link: a tc token bucket (tbf) of ``rate`` on both ends of the namespace's veth (tbf works here,
        netem does not)."""
        ns = self.ns(which)
        tbf = ["root", "tbf", "rate", rate, "burst", burst, "latency", latency]
        run(ns.exec_argv(["tc", "qdisc", "replace", "dev", IFACE, *tbf]))
        run(["tc", "qdisc", "replace", "dev", ns.veth, *tbf])
        self._throttled.add(ns.name)

    def delay(self, which: str | Namespace, ms: float) -> None:
        """Delay every packet in and out of a namespace by netem; raises NetworkError where the kernel lacks netem
        (then put a DelayProxy in front of a listener)."""
        if not netem_available():
            raise NetworkError(f"netem is not in this kernel ({netem_message()}): use testkit.DelayProxy")
        ns = self.ns(which)
        netem = ["root", "netem", "delay", f"{ms}ms"]
        run(ns.exec_argv(["tc", "qdisc", "replace", "dev", IFACE, *netem]))
        run(["tc", "qdisc", "replace", "dev", ns.veth, *netem])
        self._throttled.add(ns.name)

    def rules(self, which: str | Namespace) -> list[Rule]:
        """The fault rules now in a namespace's nemesis table."""
        return list(self._rules.get(self.ns(which).name, []))

    def heal(self) -> None:
        """Undo every fault: delete each namespace's nemesis table and its qdiscs."""
        for name in list(self._rules):
            ns = self.namespaces[name]
            run(ns.exec_argv(["nft", "delete", "table", "inet", NEMESIS_TABLE]), check=False)
            del self._rules[name]
        for name in list(self._throttled):
            ns = self.namespaces[name]
            run(ns.exec_argv(["tc", "qdisc", "del", "dev", IFACE, "root"]), check=False)
            run(["tc", "qdisc", "del", "dev", ns.veth, "root"], check=False)
            self._throttled.discard(name)

    # -- teardown --

    def close(self) -> None:
        """End every process left in the namespaces (SIGKILL), delete the namespaces (their veths go with them),
        any veth left, the bridge and the owner record. Idempotent."""
        if self._closed:
            return
        self._closed = True
        errors = []
        for ns in list(self.namespaces.values()):
            try:
                kill_netns_processes(ns.netns)
            except Exception as e:  # keep deleting the rest
                errors.append(str(e))
            run(["ip", "netns", "del", ns.netns], check=False)
            run(["ip", "link", "del", ns.veth], check=False)
        if hasattr(self, "bridge"):
            run(["ip", "link", "del", self.bridge], check=False)
        try:
            os.unlink(os.path.join(OWNERS_DIR, self.id))
        except FileNotFoundError:
            pass
        _LIVE.discard(self)
        if errors:
            raise NetworkError("; ".join(errors))


def leftovers(net_id: str) -> list[str]:
    """What is left on the host of Network ``net_id``: its namespaces and links (empty after close)."""
    found = [n for n in run(["ip", "netns", "list"]).split() if n.startswith(f"{PREFIX}{net_id}")]
    found += [
        link["ifname"]
        for link in json.loads(run(["ip", "-j", "link"]) or "[]")
        if link["ifname"].startswith(f"{PREFIX}{net_id}")
    ]
    return found


def sweep_stale() -> list[str]:
    """Remove what Networks of dead processes left (a test run killed by SIGKILL cannot clean up): the
    namespaces, their processes and links of every id in OWNERS_DIR whose owner pid is gone. What was removed."""
    removed: list[str] = []
    if not os.path.isdir(OWNERS_DIR):
        return removed
    for net_id in os.listdir(OWNERS_DIR):
        path = os.path.join(OWNERS_DIR, net_id)
        try:
            with open(path) as f:
                owner = int(f.read().strip() or 0)
        except (OSError, ValueError):
            continue
        if owner and pid_alive(owner):
            continue
        for name in leftovers(net_id):
            if name in run(["ip", "netns", "list"]).split():
                kill_netns_processes(name)
                run(["ip", "netns", "del", name], check=False)
            else:
                run(["ip", "link", "del", name], check=False)
            removed.append(name)
        os.unlink(path)
    return removed
