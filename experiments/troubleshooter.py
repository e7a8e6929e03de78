"""The troubleshooter's reasoning (pure: no fabric, no processes): which probe flows to send,
what their outcomes say, and what the counters say about the culprit.

The textbook's procedure, in the terms of this module:

1. *Is it the network?* Probe flows from every host (:func:`survey_flows`), and more until every
   directed link carries one (Pingmesh's coverage, Guo et al., SIGCOMM 2015), at a known rate; a
   flow is healthy when it delivered what it sent (:func:`symptom`). The verdict compares what
   the probes delivered with what a healthy fabric delivers (the fluid model: each probe at its
   rate, since the planner never loads a link beyond one probe).
2. *Which zone?* Every flow crosses *elements*: directed links ``("link", a, b)`` and transit
   switches ``("switch", s)``. With one faulty element, it lies on every unhealthy flow's path
   and on no healthy one's (a healthy flow exonerates everything it crossed: NetBouncer's rule,
   Tan et al., NSDI 2019). :func:`narrow` applies that after every round. While more than one
   suspect is left, :func:`split` halves the suspects by zone (pod, then rack, then link, in
   the fabric's own order) and :func:`cover` picks flows that cross the first half and avoid the
   rest, link-disjoint so they run at once (:func:`pack`), within the forwarding budget of the
   emulator. Each round halves the suspects: about ceil(log2(suspects)) rounds.
3. *Which layer?* :func:`verdict` reads the culprit's port counters over the probes: receive
   errors at the receiving port mean damaged frames (physical: corrupt); a port whose link runs
   below its nominal rate means a degraded link (physical); carrier changes mean a flapping
   link (physical); loss with none of these means frames vanished inside a switch (drop); a
   sender that could not send its rate while no switch saw anything means a slow host.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Callable, Iterable

import networkx as nx

from controller.faults import FAULTS
from controller.faults.base import Evidence
from controller.routing import compute_routes, port_peers

#: A flow is unhealthy when it lost more than this share of its packets (a healthy emulated path
#: loses none: the planner keeps every link below one probe's rate, and every switch's queue below
#: its buffer).
LOSS_BAD = 0.005
#: A sender that achieved less than this share of its probe rate was held back by its own host.
SLOW_SENDER = 0.9

Element = tuple           # ("link", a, b) | ("cable", a, b) with a < b | ("switch", name)


def link(a: str, b: str) -> Element:
    """The directed link element ``a -> b``."""
    return ("link", a, b)


def cable(a: str, b: str) -> Element:
    """The link between ``a`` and ``b`` as a whole (both directions: what a flap takes down)."""
    return ("cable", *sorted((a, b)))


def describe(e: Element) -> str:
    """``a->b``, ``a<->b``, ``switch s1``."""
    if e[0] == "link":
        return f"{e[1]}->{e[2]}"
    if e[0] == "cable":
        return f"{e[1]}<->{e[2]}"
    return f"{e[0]} {e[1]}"


@dataclass(frozen=True)
class Flow:
    """One probe flow: UDP from ``src`` to ``dst`` from source port ``sport``, along ``path``
    (the directed links it crosses, host to host, as the switches' tables send it)."""
    src: str
    dst: str
    sport: int
    path: tuple[tuple[str, str], ...]

    @property
    def switches(self) -> tuple[str, ...]:
        """The switches it crosses, in order."""
        return tuple(b for _a, b in self.path[:-1])

    @property
    def elements(self) -> frozenset:
        """Every element it crosses: its directed links, their cables and its switches."""
        return frozenset([link(a, b) for a, b in self.path] + [cable(a, b) for a, b in self.path]
                         + [("switch", s) for s in self.switches])


@dataclass(frozen=True)
class Outcome:
    """What one probe flow measured.

    Attributes:
        flow: the probe.
        rate_mbps: the rate it was to send at (frames on the wire).
        sent, received: datagrams.
        achieved_mbps: the rate the sender achieved (its own clock; below ``rate_mbps`` when its
            host held it back).
        loss_runs: runs of consecutive lost datagrams, as (first lost, first received again) in
            seconds from the flow's start.
    """
    flow: Flow
    rate_mbps: float
    sent: int
    received: int
    achieved_mbps: float
    loss_runs: tuple = ()

    @property
    def loss(self) -> float:
        """Lost share of what was sent (0 when nothing was sent)."""
        return 1 - self.received / self.sent if self.sent else 0.0


def symptom(o: Outcome) -> str:
    """``ok``, ``loss`` (more than :data:`LOSS_BAD` of the datagrams lost) or ``slow`` (the sender
    achieved less than :data:`SLOW_SENDER` of its rate and lost nothing beyond LOSS_BAD)."""
    if o.loss > LOSS_BAD:
        return "loss"
    if o.achieved_mbps < SLOW_SENDER * o.rate_mbps:
        return "slow"
    return "ok"


# --- paths on the pure fabric -----------------------------------------------------------------

def ecmp_paths(fabric_map: dict, src: str, dst: str, routes: dict | None = None, peer: dict | None = None,
               limit: int = 64) -> list[tuple[tuple[str, str], ...]]:
    """Every equal-cost path from host ``src`` to host ``dst`` the controller's routes allow (up
    to ``limit``), as directed links host to host. A probe flow takes one of them, chosen by the
    switches' hash of its 5-tuple.

    Raises:
        KeyError: an unknown host.
    """
    routes = routes or compute_routes(fabric_map)
    peer = peer or port_peers(fabric_map)
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    s, d = hosts[src], hosts[dst]
    out: list = []

    def walk(sw: str, sofar: tuple):
        if len(out) >= limit:
            return
        for p in routes[sw].get(d["ip"], ()):
            node = peer[(sw, p)]
            step = sofar + ((sw, node),)
            if node == dst:
                out.append(step)
            elif node not in {a for a, _ in sofar}:
                walk(node, step)
    walk(s["switch"], ((src, s["switch"]),))
    return out


def all_elements(fabric_map: dict) -> list[Element]:
    """Every directed link (both directions of every link), every cable and every switch."""
    out = []
    for l in fabric_map["links"]:
        out += [link(l["a"], l["b"]), link(l["b"], l["a"]), cable(l["a"], l["b"])]
    return out + [("switch", s["name"]) for s in fabric_map["switches"]]


def directed_links(fabric_map: dict) -> int:
    """How many directed links the fabric has (two per link)."""
    return 2 * len(fabric_map["links"])


class PathModel:
    """Which host pairs' equal-cost paths cross an element, on the pure fabric (networkx
    distances, the controller's routes). The live troubleshooter realises a path by choosing the
    source port whose traced path it is; the unit tests use the paths as they are.

    Args:
        fabric_map: the fabric.
        max_pairs: how many host pairs to look at per element, nearest first.
    """

    def __init__(self, fabric_map: dict, max_pairs: int = 24):
        self.map, self.max_pairs = fabric_map, max_pairs
        self.routes = compute_routes(fabric_map)
        self.peer = port_peers(fabric_map)
        g = nx.Graph()
        for l in fabric_map["links"]:
            g.add_edge(l["a"], l["b"])
        self.g = g
        self.hosts = [h["name"] for h in fabric_map["hosts"]]
        self._dist: dict[str, dict] = {}
        self._paths: dict[tuple[str, str], list] = {}

    def dist(self, node: str) -> dict:
        """Hop distances from ``node`` to every node."""
        if node not in self._dist:
            self._dist[node] = nx.single_source_shortest_path_length(self.g, node)
        return self._dist[node]

    def paths(self, src: str, dst: str) -> list:
        """The pair's equal-cost paths (:func:`ecmp_paths`), cached."""
        if (src, dst) not in self._paths:
            self._paths[(src, dst)] = ecmp_paths(self.map, src, dst, self.routes, self.peer)
        return self._paths[(src, dst)]

    def pairs_through(self, a: str, b: str) -> Iterable[tuple[str, str, tuple]]:
        """``(src, dst, path)`` with ``a -> b`` on an equal-cost path, nearest hosts first."""
        da, db = self.dist(a), self.dist(b)
        srcs = sorted((h for h in self.hosts if da[h] < db[h] or h == a), key=lambda h: (da[h], h))
        dsts = sorted((h for h in self.hosts if db[h] < da[h] or h == b), key=lambda h: (db[h], h))
        n = 0
        for s in srcs:
            for d in dsts:
                if s == d:
                    continue
                for p in self.paths(s, d):
                    if (a, b) in p:
                        yield s, d, p
                        n += 1
                        break
                if n >= self.max_pairs:
                    return

    def through(self, e: Element) -> Iterable[tuple[str, str, tuple]]:
        """``(src, dst, path)`` crossing element ``e``."""
        if e[0] == "link":
            yield from self.pairs_through(e[1], e[2])
        elif e[0] == "cable":
            a = list(self.pairs_through(e[1], e[2]))
            b = list(self.pairs_through(e[2], e[1]))
            for i in range(max(len(a), len(b))):
                yield from (x[i] for x in (a, b) if i < len(x))
        else:
            for p in sorted(self.g.neighbors(e[1])):
                yield from self.pairs_through(p, e[1])


def zone_key(fabric_map: dict) -> Callable[[Element], tuple]:
    """A sort key that puts elements of one zone together: by the pod or rack (a host group: the
    lower end's group), then by layer from the hosts up, then by name. Halving a list sorted by it
    tests pod by pod, then rack by rack, then link by link."""
    hosts = {h["name"]: h for h in fabric_map["hosts"]}
    layers = list(fabric_map.get("layers") or [])
    layer_of = {s["name"]: s["layer"] for s in fabric_map["switches"]}
    below: dict[str, str] = {}          # switch -> the first host group under it
    for h in sorted(hosts.values(), key=lambda h: h["name"]):
        below.setdefault(h["switch"], h.get("group") or h["switch"])
    for s in fabric_map["switches"]:
        for p in s["ports"]:
            if p["peer"] in below and s["name"] not in below:
                below[s["name"]] = below[p["peer"]]

    def rank(node: str) -> int:
        if node in hosts:
            return len(layers)
        return layers.index(layer_of[node]) if layer_of.get(node) in layers else 0

    def group(node: str) -> str:
        return (hosts[node].get("group") or hosts[node]["switch"]) if node in hosts else below.get(node, "~")

    def key(e: Element) -> tuple:
        if e[0] == "link":
            low = e[1] if rank(e[1]) >= rank(e[2]) else e[2]
            return (group(low), -max(rank(e[1]), rank(e[2])), e[1], e[2])
        return (group(e[1]), -rank(e[1]), e[1], "")
    return key


def split(suspects: Iterable[Element], key: Callable[[Element], tuple]) -> tuple[list[Element], list[Element]]:
    """The suspects in zone order, halved (the first half gets the odd one)."""
    s = sorted(suspects, key=key)
    mid = (len(s) + 1) // 2
    return s[:mid], s[mid:]


def narrow(suspects: set, outcomes: Iterable[Outcome]) -> set:
    """The suspects still possible after ``outcomes``, one faulty element assumed: on the path of
    every flow that lost datagrams, on no healthy flow's path. A slow sender's flow says nothing
    about the fabric (it is not counted either way)."""
    s = set(suspects)
    for o in outcomes:
        sym = symptom(o)
        if sym == "loss":
            s &= o.flow.elements
        elif sym == "ok":
            s -= o.flow.elements
    return s


def pack(flows: list[Flow], rate_mbps: float, budget_mbps: float) -> list[list[Flow]]:
    """Flows into rounds that run at once: no two flows of a round share a directed link (each
    probe has its links to itself), and a round forwards at most ``budget_mbps`` in switch hops
    (the rate times the switches each flow crosses: the emulator's forwarding budget). First fit in
    the given order."""
    rounds: list[tuple[list[Flow], set, float]] = []
    for f in flows:
        cost = rate_mbps * len(f.switches)
        for r in rounds:
            if not (r[1] & set(f.path)) and r[2] + cost <= budget_mbps:
                r[0].append(f)
                r[1].update(f.path)
                rounds[rounds.index(r)] = (r[0], r[1], r[2] + cost)
                break
        else:
            rounds.append(([f], set(f.path), cost))
    return [r[0] for r in rounds]


def cover(targets: list[Element], avoid: set, candidates: Callable[[Element], Iterable[Flow]]) -> list[Flow]:
    """Probe flows that together cross every element of ``targets`` and, where a choice exists,
    none of ``avoid`` (the other suspects): for each target not yet crossed, the first candidate
    flow through it that crosses the fewest avoided elements (none, when possible).
    ``candidates(element)`` gives flows through an element (traced on the live fabric, or the pure
    model's paths in tests). A target no candidate crosses (without crossing all of ``avoid`` as
    well: such a flow tells nothing) is left out."""
    chosen: list[Flow] = []
    crossed: set = set()
    for t in targets:
        if t in crossed:
            continue
        best = None
        for f in candidates(t):
            if avoid and avoid <= f.elements:
                continue                  # it crosses every other suspect too: it would tell nothing
            bad = len(f.elements & avoid)
            if best is None or bad < best[0]:
                best = (bad, f)
                if bad == 0:
                    break
        if best is not None:
            chosen.append(best[1])
            crossed |= best[1].elements
    return chosen


def survey_flows(fabric_map: dict, candidates: Callable[[str, str], Iterable[Flow]], seed: int = 0) -> list[Flow]:
    """Step 1's probes: one flow from every host to a host in another group (pod or rack), as far
    away as the fabric allows, and one to a host under the same switch, so every host's uplink
    and downlink and every layer carry a probe. ``candidates(src, dst)`` gives flows for a pair."""
    hosts = [h["name"] for h in fabric_map["hosts"]]
    n = len(hosts)
    out = []
    for i, src in enumerate(hosts):
        for dst in (hosts[(i + n // 2) % n], hosts[i ^ 1] if (i ^ 1) < n else None):
            if dst is None or dst == src:
                continue
            f = next(iter(candidates(src, dst)), None)
            if f is not None:
                out.append(f)
    rng = random.Random(seed)
    rng.shuffle(out)
    return out


# --- the verdict ------------------------------------------------------------------------------

@dataclass(frozen=True)
class Verdict:
    """What the troubleshooter concludes.

    Attributes:
        culprit: the place, as a fault names it: a link direction ``a->b``, a link ``a<->b`` (a
            flap takes both), a switch, a host; None when nothing is wrong or nothing was found.
        kind: the fault class (a registered injector's kind: corrupt, degrade, drop, flap,
            slow_host) or None.
        layer: physical, switch or host.
        why: the evidence, one sentence per finding.
    """
    culprit: str | None
    kind: str | None
    layer: str | None
    why: tuple[str, ...] = field(default_factory=tuple)


def port_of(counters: list[dict], switch: str, peer: str) -> dict | None:
    """The port counters row of ``switch``'s port toward ``peer`` (None if none)."""
    return next((r for r in counters if r["switch"] == switch and r["peer"] == peer), None)


def _kinds(symptom_seen: str) -> list:
    """The registered fault kinds (controller.faults.FAULTS) that show ``symptom_seen`` to the probes,
    in the order the troubleshooter asks them (their ``DIAGNOSIS_ORDER``)."""
    return sorted((c for c in FAULTS.values() if symptom_seen in c.SYMPTOMS), key=lambda c: (c.DIAGNOSIS_ORDER, c.NAME))


def _recognised(ev: Evidence, symptom_seen: str, lead: tuple[str, ...],
                targets: tuple[str, ...] | None = None) -> Verdict | None:
    """The first kind that recognises its fault in ``ev`` (with ``targets``: only kinds whose
    TARGET is one of them), as a Verdict whose ``why`` starts with ``lead``; None if none does."""
    for cls in _kinds(symptom_seen):
        if targets is not None and cls.TARGET not in targets:
            continue
        got = cls.recognise(ev)
        if got is not None:
            culprit, why = got
            return Verdict(culprit, cls.NAME, cls.LAYER, lead + tuple(why))
    return None


def _evidence(e: Element, delta: list[dict], switches: set[str]) -> Evidence:
    """What the counters say of suspect ``e``, for the fault kinds to recognise
    (controller.faults.base.Evidence). A cable's direction is the one whose receiving port counted
    receive errors, if one did."""
    if e[0] == "switch":
        return Evidence("switch", e[1])
    a, b = e[1], e[2]
    both = e[0] == "cable"
    if both:                            # which direction's counters say more
        for x, y in ((a, b), (b, a)):
            r = port_of(delta, y, x) if y in switches else None
            if r is not None and r["rx_errors"]:
                a, b = x, y
                break
    rx = port_of(delta, b, a) if b in switches else None
    tx = port_of(delta, a, b) if a in switches else None
    return Evidence("cable" if both else "link", a, b, rx=rx, tx=tx, ends=tuple(r for r in (tx, rx) if r is not None),
                    b_is_switch=b in switches)


def verdict(culprits: set, outcomes: list[Outcome], delta: list[dict], switches: set[str]) -> Verdict:
    """The fault class of the remaining suspects from the symptoms and the switch-port counters:
    each registered fault kind (controller.faults.FAULTS) says which symptom it shows and
    recognises its own evidence (``SYMPTOMS``, ``recognise``), asked in ``DIAGNOSIS_ORDER``; this
    function names none of them.

    Args:
        culprits: the suspects left after the rounds (one element when localisation succeeded).
        outcomes: every probe outcome of the diagnosis.
        delta: the switch ports' counters over the diagnosis (controller.portstats rows, counters
            as differences, ``carrier_changes`` among them; rate and state as read at the end).
        switches: the fabric's switch names.

    Returns: the :class:`Verdict`; ``culprit`` None when the suspects are not one element.
    """
    slow = {o.flow.src for o in outcomes if symptom(o) == "slow"}
    lossy = [o for o in outcomes if symptom(o) == "loss"]
    if slow and not lossy:
        return _slow_verdict(slow, outcomes, delta)
    if len(culprits) != 1:
        return _several_verdict(culprits, delta, switches)
    (e,) = culprits
    lead = (f"every lossy probe crossed {describe(e)} and every healthy one avoided it",)
    if e[0] == "switch":
        lead = (f"every lossy probe crossed {e[1]} and every healthy one avoided it",)
    return (_recognised(_evidence(e, delta, switches), "loss", lead)
            or Verdict(describe(e), None, None, lead + ("no counter explains it",)))


def _slow_verdict(slow: set, outcomes: list[Outcome], delta: list[dict]) -> Verdict:
    """Probes were slow and none lost: one host whose every probe was slow, recognised by a kind
    that shows as ``slow``; otherwise no culprit."""
    srcs = {o.flow.src for o in outcomes}
    if len(slow) == 1:
        (h,) = slow
        if not [o for o in outcomes if o.flow.src == h and symptom(o) == "ok"]:
            lead = (f"every probe from {h} sent below {SLOW_SENDER:.0%} of its rate and lost nothing",
                    f"probes to {h} and from the {len(srcs) - 1} other hosts were healthy")
            ev = Evidence("host", h, rx=next((r for r in delta if r["peer"] == h), None))
            found = _recognised(ev, "slow", lead)
            if found is not None:
                return found
    return Verdict(None, None, None, (f"senders {sorted(slow)} were slow; no single host explains it",))


def _several_verdict(culprits: set, delta: list[dict], switches: set[str]) -> Verdict:
    """More or fewer than one suspect: a switch and links touching it (which probes cannot tell
    apart) are told apart by the counters; otherwise no culprit, and why."""
    sws = [e for e in culprits if e[0] == "switch"]
    if len(sws) == 1 and all(e[0] == "switch" or sws[0][1] in e[1:] for e in culprits):
        # a switch and links that touch it: every probe through the switch crossed them too (a
        # spine of a 2-leaf fabric), so probes cannot tell them apart; the counters can
        x = sws[0][1]
        links = [c for c in sorted(culprits) if c[0] != "switch"]
        named = ", ".join(describe(c) for c in links)
        lead = (f"the probes could not tell {x} from its links {named}",)
        for e in links:
            found = _recognised(_evidence(e, delta, switches), "loss", lead, targets=("link",))
            if found is not None:
                return found
        found = _recognised(Evidence("switch", x), "loss",
                            (f"every lossy probe crossed {x} and its links {named}, which no probe can cross "
                             "apart from it",
                             "none of those links' ports counted receive errors, carrier changes or a lower rate"))
        if found is not None:
            return found
    if not culprits:
        return Verdict(None, None, None, ("every element some probe crossed was cleared by a healthy probe",))
    return Verdict(None, None, None, (f"{len(culprits)} suspects left: "
                                      + ", ".join(describe(e) for e in sorted(culprits)[:6]),))


# --- the procedure ----------------------------------------------------------------------------

@dataclass
class Step:
    """One probe round: which step it served, what it tested, its flows and outcomes, and how
    many suspects were left after it."""
    step: str
    tested: list
    outcomes: list
    suspects_after: int


@dataclass
class Localisation:
    """The rounds and what is left: ``suspects`` (elements), ``steps`` (:class:`Step`),
    ``network_ok`` (step 1 found every probe healthy)."""
    suspects: set
    steps: list
    network_ok: bool

    @property
    def outcomes(self) -> list[Outcome]:
        """Every probe outcome, in order."""
        return [o for s in self.steps for o in s.outcomes]


def localise(fabric_map: dict, run: Callable[[list[Flow]], list[Outcome]],
             flows_through: Callable[[Element], Iterable[Flow]], flows_between: Callable[[str, str], Iterable[Flow]],
             rate_mbps: float, budget_mbps: float, max_rounds: int = 24, seed: int = 0) -> Localisation:
    """Steps 1 and 2 (module docstring): survey every host's probes, then halve the suspects
    until one is left (or no probe can tell the rest apart).

    Args:
        run: runs one round of flows at once, returning their outcomes.
        flows_through: probe flows crossing an element; flows_between: probe flows for a host pair.
        rate_mbps: every probe's rate; budget_mbps: the forwarding budget of one round
            (:func:`pack`).
        max_rounds: a bound on the rounds of step 2.
    """
    steps: list[Step] = []
    suspects = set(all_elements(fabric_map))
    survey = survey_flows(fabric_map, flows_between, seed)
    crossed = {e for f in survey for e in f.elements}
    survey += cover([e for e in all_elements(fabric_map) if e[0] == "link" and e not in crossed], set(), flows_through)
    for flows in pack(survey, rate_mbps, budget_mbps):
        outs = run(flows)
        suspects = narrow(suspects, outs)
        steps.append(Step("survey", [describe(("link", f.src, f.dst)) for f in flows], outs, len(suspects)))
    outcomes = [o for s in steps for o in s.outcomes]
    if all(symptom(o) == "ok" for o in outcomes):
        return Localisation(set(), steps, True)
    if not any(symptom(o) == "loss" for o in outcomes):
        return Localisation(set(), steps, False)      # slow senders only: the verdict reads them
    key = zone_key(fabric_map)
    stuck = 0                                         # rounds in a row that told nothing
    for _ in range(max_rounds):
        if len(suspects) <= 1 or stuck > len(suspects):
            break
        order = sorted(suspects, key=key)
        if stuck:                                     # halves told nothing: one suspect at a time, in turn
            one = order[(stuck - 1) % len(order)]
            half, rest = [one], [e for e in order if e != one]
        else:
            half, rest = split(order, key)
        flows = cover(half, set(rest), flows_through)
        if not flows:
            stuck += 1
            continue
        before = set(suspects)
        for batch in pack(flows, rate_mbps, budget_mbps):
            outs = run(batch)
            suspects = narrow(suspects, outs)
            steps.append(Step("bisect", [describe(e) for e in half], outs, len(suspects)))
        stuck = stuck + 1 if suspects == before else 0
    return Localisation(suspects, steps, False)


def matches(v: Verdict, truth: dict) -> bool:
    """Whether a verdict names the injected fault (``truth``: the fault as written): the same
    kind, and the same place (a link direction for corrupt and degrade, either direction of the
    link for a flap, the switch, the host)."""
    if v.kind != truth["kind"] or v.culprit is None:
        return False
    if truth["kind"] == "flap":
        ends = lambda s: frozenset(s.replace("<->", "->").split("->"))     # noqa: E731
        return ends(v.culprit) == ends(truth["link"])
    place = truth.get("link") or truth.get("switch") or truth.get("host")
    if "<->" in place:
        a, b = place.split("<->")
        return v.culprit in (f"{a}->{b}", f"{b}->{a}")
    return v.culprit == place


# --- the hidden fault -------------------------------------------------------------------------

#: Sizes of a random hidden fault: within what the procedure detects (the docs give the smallest
#: measured).
RANDOM_SIZES = {"corrupt": (0.02, 0.10), "drop": (0.02, 0.10), "degrade": (0.2, 0.5), "slow_host": (0.2, 0.5)}
#: A random flap's down and up times in seconds (a probe of PROBE_S sees a down period).
RANDOM_FLAP_S = (0.3, 0.6)


def random_fault(fabric_map: dict, seed: int, kinds: tuple[str, ...] | None = None) -> dict:
    """One fault drawn from ``seed`` (kind, place, size), as a scenario writes it. ``kinds``: the
    kinds to draw from (default all five, in turn by seed so that 5 consecutive seeds cover
    every kind)."""
    rng = random.Random(seed)
    kinds = kinds or ("corrupt", "degrade", "drop", "flap", "slow_host")
    kind = kinds[seed % len(kinds)]
    links = fabric_map["links"]
    l = rng.choice(links)
    a, b = (l["a"], l["b"]) if rng.random() < 0.5 else (l["b"], l["a"])
    lo, hi = RANDOM_SIZES.get(kind, (0, 0))
    size = round(rng.uniform(lo, hi), 3)
    if kind == "corrupt":
        return {"kind": kind, "link": f"{a}->{b}", "frame_fraction": size}
    if kind == "degrade":
        return {"kind": kind, "link": f"{a}->{b}", "rate_fraction": size}
    if kind == "drop":
        sw = rng.choice(fabric_map["switches"])
        return {"kind": kind, "switch": sw["name"], "frame_fraction": size}
    if kind == "flap":
        return {"kind": kind, "link": f"{a}<->{b}", "down_s": round(rng.uniform(*RANDOM_FLAP_S), 2),
                "up_s": round(rng.uniform(*RANDOM_FLAP_S), 2)}
    return {"kind": "slow_host", "host": rng.choice(fabric_map["hosts"])["name"], "rate_fraction": size}


def rounds_bound(n_elements: int) -> int:
    """ceil(log2(n)): the rounds a bisection of ``n`` suspects needs."""
    return max(1, math.ceil(math.log2(max(2, n_elements))))
