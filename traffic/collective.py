"""Collective ranks over kernel TCP (issue 8): role ``collective`` of :mod:`traffic.agent`.

One agent per host runs that host's ranks (a thread each). Every rank holds a float32
array of ``elements`` values, seeded (``init: seeded``: integers drawn from
``numpy.random.default_rng(seed + rank)`` in [-1000, 1000), so every sum is exact in
float32) or the textbook's (``init: textbook``: rank g holds g * elements + i). It runs the
schedule of :mod:`common.collectives` for ``kind`` over TCP: at each step it sends its
chunk to the step's destination (on a sender thread) while it receives the step's chunk
from its source, then reduces (adds) or stores it. A rank cannot start step s + 1 before it
has the data of step s, exactly as in NCCL's ring.

GPU servers: every rank belongs to a server (``ranks[i]["server"]``, by default its host). Ranks
of one server exchange over the NVLink channel of :mod:`traffic.nvlink` (named pipes paced at
``nvlink.rate_bps``), never through the fabric; ranks of different servers over TCP or RoCEv2.
``algorithm`` ``hierarchical`` runs the two-level AllReduce of :mod:`common.hierarchical`
(reduce-scatter inside each server, AllReduce across servers per rail, all-gather inside each
server); ``ring`` (the default) the flat ring over all ranks. Both are schedules of
:class:`common.hierarchical.Move`: element ranges from one rank to another at each step.

Job (``job["role"] == "collective"``)::

    {"kind": "allreduce" | "reduce_scatter" | "all_gather" | "all_to_all",
     "algorithm": "ring" | "hierarchical",              # default ring
     "ranks": [{"rank", "host", "ip", "port", "server"}, ...],   # every rank, in ring order
     "nvlink": {"rate_bps": float, "dir": path},        # when a server holds two ranks or more
     "local_ranks": [rank, ...],                        # the ranks this agent runs
     "elements": int, "init": "seeded" | "textbook", "seed": int, "repeat": int,
     "dscp": int, "out": path, "out_dir": path, "deadline_unix_s": float,
     "stream": bool,    # optional: the benchmark's baseline (Rank._stream_iteration)
     "transport": "tcp" | "roce",                       # default tcp
     "roce": {traffic.roce job fields: "ifname", "mac", "ip", "mode", "line_rate_mbps",
              "dcqcn", "dscp", "cnp_dscp", "mtu_bytes", "rto_s", ...},   # transport roce
     "qps": [{"id", "src_rank", "dst_rank", "send_qpn", "recv_qpn", "udp_sport"}, ...]}  # roce

Transport ``roce``: every (source rank, destination rank) pair of the schedule is one
reliable-connection queue pair of :mod:`traffic.roce` (go-back-N, DCQCN or a fixed rate),
carrying the chunk's real bytes in its packets; each step's chunk is one SEND message, and a
step's send is done when its last PSN is acknowledged. One :class:`traffic.roce.Engine` per
host moves the frames of all its ranks on a thread of its own (:class:`RoceLinks`); pairs of
ranks on the same host hand the chunk over in memory. Each rank's ``connections`` then give
the UDP source port and 4791 (``proto`` udp), what ECMP hashes.

Protocol: the agent listens on every local rank's port, prints READY, reads the start time;
at the start every rank connects to the peers it sends to (all of them for all-to-all, its
successor on a ring) and accepts from those it receives from; then all ranks wait for the
common ``begin`` time (start + :data:`CONNECT_GRACE_S`) and run ``repeat`` iterations of
the collective (each from the initial array). Times are Unix seconds on the shared clock.

Result: per rank, the TCP connections it opened (``connections``: destination rank, source and
destination port: what ECMP hashes), when it had made them all (``connected_unix_s``), and per
iteration: ``steps`` ([step, phase, chunk sent, bytes sent, start, send done, receive done, end]),
``begin_unix_s``, ``end_unix_s``, transfers sent and
received; the final array of the last iteration is saved as ``<out_dir>/rank<r>.npy`` and
its float64 sum is in the record.
"""
from __future__ import annotations

import queue
import socket
import struct
import sys
import threading
import time
from pathlib import Path

import numpy as np

from common.hierarchical import Move, moves
from traffic.nvlink import Channel
from traffic.roce import EndBarrier, Engine, ReceiverQp, SenderQp, plugin_failure

#: Seconds from the start time to the collective's first step: the ranks connect meanwhile (each
#: rank records when it had connected, ``connected_unix_s``; a rank still connecting at ``begin``
#: starts its first iteration late, which that iteration's time then shows). 1.0 until 2026-12-07;
#: over 10 runs of the shipped placement scenario beside a CPU-heavy process, every rank had
#: connected 0.45 s or more before ``begin``.
CONNECT_GRACE_S = 0.5
HELLO = struct.Struct("!I")          # the connecting rank's number, first on every connection


def initial_array(rank: int, elements: int, init: str, seed: int) -> np.ndarray:
    """Rank ``rank``'s input (float32, ``elements`` long); see the module docstring.
    Raises ValueError for an unknown ``init``."""
    if init == "textbook":
        return (np.arange(elements, dtype=np.float64) + rank * elements).astype(np.float32)
    if init == "seeded":
        return np.random.default_rng(seed + rank).integers(-1000, 1000, elements).astype(np.float32)
    raise ValueError(f"collective init must be seeded or textbook, not {init!r}")


def server_layout(ranks: list[dict]) -> list[list[int]]:
    """The servers of a job's ``ranks`` (each ``{"rank", "server" or "host", ...}``) as lists of
    rank numbers, servers in order of their first rank, ranks in order within each: the layout
    :mod:`common.hierarchical` schedules on (rank i of every server is on rail i)."""
    out: dict[str, list[int]] = {}
    for r in sorted(ranks, key=lambda r: r["rank"]):
        out.setdefault(r.get("server") or r["host"], []).append(r["rank"])
    return list(out.values())


def _recv_exact(sock: socket.socket, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = sock.recv_into(view[got:])
        if n == 0:
            raise ConnectionError("peer closed the connection mid-chunk")
        got += n


class Rank:
    """One rank: its array, its connections and its step timings."""

    def __init__(self, rank: int, job: dict, listener: socket.socket | None):
        """``listener``: the rank's TCP listening socket (None over RoCE, where the queue pairs
        of :class:`RoceLinks` carry the chunks)."""
        self.rank, self.job, self.listener = rank, job, listener
        self.n = len(job["ranks"])
        self.kind = job["kind"]
        self.servers = server_layout(job["ranks"])
        self.steps = moves(job.get("algorithm", "ring"), self.kind, self.servers, job["elements"])
        mine = next(s for s in self.servers if rank in s)
        self.same_server = set(mine) - {rank}
        self.nvlink: Channel | None = (Channel(job["nvlink"]["dir"], job["nvlink"]["rate_bps"])
                                       if self.same_server else None)
        self.out_peers: dict[int, socket.socket] = {}
        self.in_peers: dict[int, socket.socket] = {}
        self.connections: list[dict] = []     # {"dst_rank", "src_port", "dst_port"} of every connection it opened
        self.connected_unix_s: float | None = None     # when every connection was made
        self.iterations: list[dict] = []
        self.error: str | None = None
        self.final: np.ndarray | None = None
        self.links: RoceLinks | None = None     # transport roce (set by run_collective)

    def peers(self) -> tuple[set, set]:
        """(ranks this rank sends to, ranks it receives from) over the whole schedule."""
        outs = {mv.dst for s in self.steps for mv in s if mv.src == self.rank}
        ins = {mv.src for s in self.steps for mv in s if mv.dst == self.rank}
        return outs, ins

    def connect(self, deadline_unix_s: float) -> None:
        """Open the NVLink pipes to and from the ranks of its server, connect to every other
        destination (retrying while it is not listening yet) and accept every other source.
        Over RoCE the queue pairs exist already: only their ports are recorded."""
        outs, ins = self.peers()
        if self.nvlink is not None:         # NVLink pipes: every reader first, then the writers
            for src in sorted(ins & self.same_server):
                self.nvlink.open_reader(src, self.rank)
            for dst in sorted(outs & self.same_server):
                self.nvlink.open_writer(self.rank, dst, deadline_unix_s)
        outs, ins = outs - self.same_server, ins - self.same_server
        if self.links is not None:
            self.connections = self.links.connections(self.rank)
            return
        by_rank = {r["rank"]: r for r in self.job["ranks"]}
        for d in sorted(outs):
            while True:
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setsockopt(socket.IPPROTO_IP, socket.IP_TOS, self.job.get("dscp", 0) << 2)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                try:
                    s.connect((by_rank[d]["ip"], by_rank[d]["port"]))
                    break
                except OSError:
                    s.close()
                    if time.time() > deadline_unix_s:
                        raise
                    time.sleep(0.02)
            s.sendall(HELLO.pack(self.rank))
            self.out_peers[d] = s
            self.connections.append({"dst_rank": d, "src_port": s.getsockname()[1], "dst_port": by_rank[d]["port"]})
        self.listener.settimeout(max(0.1, deadline_unix_s - time.time()))
        while set(self.in_peers) != ins:
            c, _ = self.listener.accept()
            buf = bytearray(HELLO.size)
            _recv_exact(c, memoryview(buf))
            self.in_peers[HELLO.unpack(buf)[0]] = c

    def _send_async(self, sends: list[tuple[int, memoryview]]):
        """Start sending each ``(destination rank, data)`` of ``sends``, in order; returns ``wait()``
        -> the Unix time the last was done (TCP: handed to the kernel, one after another on a
        thread; NVLink: written at its rate, on that thread; RoCE: every message acknowledged). ``wait`` raises TimeoutError at the deadline."""
        waits = []
        if self.links is not None:
            waits = [self.links.post(self.rank, dst, bytes(data)) for dst, data in sends
                     if dst not in self.same_server]
            sends = [(dst, data) for dst, data in sends if dst in self.same_server]
            if not sends:
                return lambda: max([w() for w in waits], default=time.time())
        done: dict[str, float] = {}

        def send():
            for dst, data in sends:
                if dst in self.same_server:
                    self.nvlink.send(dst, data)
                else:
                    self.out_peers[dst].sendall(data)
            done["t"] = time.time()
        th = threading.Thread(target=send, daemon=True)
        th.start()

        def wait() -> float:
            th.join(max(0.1, self.job["deadline_unix_s"] - time.time()))
            if "t" not in done:
                raise TimeoutError(f"rank {self.rank}: sending {len(sends)} chunk(s) did not finish")
            return max([done["t"]] + [w() for w in waits])
        return wait

    def _recv(self, src: int, view: memoryview) -> None:
        """Receive exactly ``len(view)`` bytes from rank ``src`` into ``view``.
        Raises ConnectionError / TimeoutError / ValueError (a message of another size)."""
        if src in self.same_server:
            self.nvlink.recv(src, view)
            return
        if self.links is None:
            _recv_exact(self.in_peers[src], view)
            return
        data = self.links.recv(src, self.rank, max(0.1, self.job["deadline_unix_s"] - time.time()))
        if len(data) != len(view):
            raise ValueError(f"rank {self.rank}: a {len(data)} B message from rank {src}, {len(view)} B expected")
        view[:] = data

    def run(self, begin_unix_s: float) -> None:
        """Run ``repeat`` iterations from ``begin_unix_s`` (the first waits for it)."""
        job = self.job
        x0 = initial_array(self.rank, job["elements"], job.get("init", "seeded"), job.get("seed", 0))
        for it in range(job.get("repeat", 1)):
            if it == 0:
                while time.time() < begin_unix_s:
                    time.sleep(min(0.005, max(0.0, begin_unix_s - time.time())))
            self.final = self._iteration(x0.copy(), it)

    def _iteration(self, buf: np.ndarray, it: int) -> np.ndarray:
        if self.job.get("stream"):
            return self._stream_iteration(buf, it)
        rec = {"iteration": it, "begin_unix_s": time.time(), "steps": [], "sent": 0, "received": 0}
        out = self.run_steps(buf, self.steps, rec)
        rec["end_unix_s"] = rec["steps"][-1][-1] if rec["steps"] else time.time()
        self.iterations.append(rec)
        return out

    def run_steps(self, buf: np.ndarray, steps: list[list[Move]], rec: dict, codec=None, tag=None) -> np.ndarray:
        """Run this rank's moves of ``steps`` on ``buf`` (float32, changed in place); returns the
        result (``buf``, or for all-to-all a separate output). Appends each step's record
        ``[step, phase, chunk sent, bytes sent, start, send done, receive done, end]`` to
        ``rec["steps"]`` and counts ``rec["sent"]`` and ``rec["received"]``.

        ``codec``: a :class:`common.compression.Compressor` for every move's data (None: float32).
        A reduce move sends the encoded partial sum (the receiver adds the decoded one); the first
        copy move of a range is encoded by the rank that owns it, which keeps the decoded values
        itself, and every later copy of that range forwards the same bytes, so every rank ends
        with the same array. ``tag`` keys a stateful codec's residual (with the step and rank).
        The encodes' error bounds go to ``rec["bounds"]`` as ``[lo, hi, max bound]``, the seconds
        spent encoding and decoding to ``rec["codec_s"]``.

        Raises:
            ConnectionError, TimeoutError, ValueError: a peer closed, the deadline passed, or a
                message of the wrong size came.
        """
        store = any(mv.op == "store" for st in steps for mv in st)
        out = buf.copy() if store else buf
        scratch = np.empty(max(mv.elements for st in steps for mv in st), dtype=np.float32)
        forward: dict[tuple[int, int], bytes] = {}      # copy moves: the owner's bytes, passed on as they came
        for step in steps:
            mine = [mv for mv in step if mv.src == self.rank]
            theirs = [mv for mv in step if mv.dst == self.rank]
            t0 = time.time()
            done: dict[str, float] = {}
            if codec is None:
                sends = [(mv.dst, memoryview(buf[mv.lo:mv.hi]).cast("B")) for mv in mine]
                nbytes = 4 * sum(mv.elements for mv in mine)
            else:
                tc = time.perf_counter()
                sends = [(mv.dst, self._encode(buf, mv, codec, forward, rec, tag)) for mv in mine]
                rec["codec_s"] = rec.get("codec_s", 0.0) + time.perf_counter() - tc
                nbytes = sum(len(d) for _, d in sends)
            wait = self._send_async(sends)
            for mv in theirs:
                sl = slice(mv.dst_lo, mv.dst_lo + mv.elements)
                if codec is None:
                    data = scratch[:mv.elements]
                    self._recv(mv.src, memoryview(data).cast("B"))
                else:
                    raw = bytearray(codec.wire_bytes(mv.elements))
                    self._recv(mv.src, memoryview(raw))
                    tc = time.perf_counter()
                    data = codec.decode(bytes(raw), mv.elements)
                    rec["codec_s"] = rec.get("codec_s", 0.0) + time.perf_counter() - tc
                    if mv.op == "copy":
                        forward[(mv.lo, mv.hi)] = bytes(raw)
                if mv.op == "store":       # all-to-all: the source's chunk lands in slot "src"
                    out[sl] = data
                elif mv.op == "reduce":
                    buf[sl] += data
                else:
                    buf[sl] = data
                rec["received"] += 1
            done["recv"] = time.time()
            done["send"] = wait()
            rec["sent"] += len(mine)
            m = mine[0] if mine else None
            rec["steps"].append([m.step if m else step[0].step, m.phase if m else step[0].phase,
                                 m.chunk if m else None, nbytes, t0, done["send"], done["recv"],
                                 max(done["send"], done["recv"])])
        return out

    def _encode(self, buf: np.ndarray, mv: Move, codec, forward: dict, rec: dict, tag) -> bytes:
        """The wire bytes of move ``mv`` under ``codec`` (:meth:`run_steps`)."""
        if mv.op == "copy" and (mv.lo, mv.hi) in forward:
            return forward[(mv.lo, mv.hi)]
        x = buf[mv.lo:mv.hi]
        data = codec.encode(np.ascontiguousarray(x), key=(tag, mv.phase, mv.step, self.rank))
        rec.setdefault("bounds", []).append([mv.lo, mv.hi, float(np.max(codec.error_bound(x), initial=0.0))])
        if mv.op == "copy":           # the owner keeps what every other rank will decode
            buf[mv.lo:mv.hi] = codec.decode(data, mv.elements)
            forward[(mv.lo, mv.hi)] = data
        return data

    def _stream_iteration(self, buf: np.ndarray, it: int) -> np.ndarray:
        """The baseline of ``bench/bench_collective.py`` (job ``"stream": true``): the bytes this
        rank sends over the whole schedule go out back to back on the same connections (so the
        same paths) while the bytes it receives come in, with no step waiting for the previous
        step's chunk and nothing reduced. Recorded as one step (phase ``stream``); the array
        is returned unchanged."""
        mine = [mv for step in self.steps for mv in step if mv.src == self.rank]
        theirs = [mv for step in self.steps for mv in step if mv.dst == self.rank]
        rec = {"iteration": it, "begin_unix_s": time.time(), "steps": [], "sent": 0, "received": 0}
        scratch = np.empty(max(mv.elements for st in self.steps for mv in st), dtype=np.float32)
        done: dict[str, float] = {}
        t0 = time.time()
        wait = self._send_async([(mv.dst, memoryview(buf[mv.lo:mv.hi]).cast("B")) for mv in mine])
        for mv in theirs:
            self._recv(mv.src, memoryview(scratch[:mv.elements]).cast("B"))
            rec["received"] += 1
        done["recv"] = time.time()
        done["send"] = wait()
        rec["sent"] = len(mine)
        nbytes = sum(4 * mv.elements for mv in mine)
        rec["steps"].append([0, "stream", None, nbytes, t0, done["send"], done["recv"], max(done["send"], done["recv"])])
        rec["end_unix_s"] = rec["steps"][-1][-1]
        self.iterations.append(rec)
        return buf

    def close(self) -> None:
        """Close every connection, the listener and the NVLink pipes."""
        for s in list(self.out_peers.values()) + list(self.in_peers.values()) + [self.listener]:
            if s is None:
                continue
            try:
                s.close()
            except OSError:
                pass
        if self.nvlink is not None:
            self.nvlink.close()

    def record(self) -> dict:
        """The rank's result record (module docstring)."""
        path = None
        if self.final is not None and self.job.get("out_dir"):
            path = str(Path(self.job["out_dir"]) / f"rank{self.rank}.npy")
            np.save(path, self.final)
        return {"rank": self.rank, "iterations": self.iterations, "error": self.error, "array": path,
                "connections": self.connections, "connected_unix_s": self.connected_unix_s,
                "array_sum": float(self.final.astype(np.float64).sum()) if self.final is not None else None,
                "elements": self.job["elements"]}


class RoceLinks:
    """The RoCEv2 transport of one agent's ranks (module docstring): a :class:`traffic.roce.Engine`
    with a sender QP for every pair whose source rank is local and a receiver QP for every pair
    whose destination rank is local, its loop on a thread of its own.

    Raises:
        OSError: the engine's sockets cannot be opened.
    """

    def __init__(self, job: dict):
        rj = job["roce"]
        local = set(job["local_ranks"])
        by_rank = {r["rank"]: r for r in job["ranks"]}
        self.out: dict[tuple[int, int], SenderQp] = {}
        self.inq: dict[tuple[int, int], queue.Queue] = {}
        self.qps = {(c["src_rank"], c["dst_rank"]): c for c in job["qps"]}
        senders, receivers = {}, {}
        for c in job["qps"]:
            src, dst = by_rank[c["src_rank"]], by_rank[c["dst_rank"]]
            if c["src_rank"] in local and c["dst_rank"] in local:
                self.inq[(c["src_rank"], c["dst_rank"])] = queue.Queue()      # same host: in memory
                continue
            if c["src_rank"] in local:
                q = SenderQp({"flow_id": c["id"], "qpn": c["send_qpn"], "udp_sport": c["udp_sport"],
                              "peer": {"mac": dst["mac"], "ip": dst["ip"], "qpn": c["recv_qpn"]}}, rj, rj["mac"], rj["ip"])
                senders[c["send_qpn"]] = self.out[(c["src_rank"], c["dst_rank"])] = q
            if c["dst_rank"] in local:
                rq = ReceiverQp({"flow_id": c["id"], "qpn": c["recv_qpn"], "expect_bytes": None,
                                 "peer": {"mac": src["mac"], "ip": src["ip"], "qpn": c["send_qpn"],
                                          "udp_sport": c["udp_sport"]}}, rj, rj["mac"], rj["ip"])
                inq = self.inq[(c["src_rank"], c["dst_rank"])] = queue.Queue()
                rq.on_message = inq.put
                receivers[c["recv_qpn"]] = rq
        self.engine = Engine(rj, senders, receivers)
        self.stop = threading.Event()
        self.error: str | None = None
        self.thread: threading.Thread | None = None

    def start(self, deadline_unix_s: float, barrier: EndBarrier | None = None) -> None:
        """Start the QPs' clocks and the engine's loop (it runs until :meth:`close`; with
        ``barrier``, the agent's end barrier, it ends once every agent of the run is done)."""
        self.engine.start_clock()
        senders = list(self.engine.senders.values())

        def loop():
            try:
                self.error = self.engine.loop(lambda now: self.stop.is_set() and all(q.finished for q in senders),
                                              deadline_unix_s, barrier)
            except Exception as e:  # recorded; the ranks then time out
                e = plugin_failure(e, self.engine.job) or e
                self.error = f"{type(e).__name__}: {e}"
        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()

    def connections(self, rank: int) -> list[dict]:
        """The queue pairs ``rank`` sends on, as connections: destination rank, UDP source port, 4791."""
        return [{"dst_rank": d, "src_port": c["udp_sport"], "dst_port": 4791, "proto": "udp"}
                for (s, d), c in sorted(self.qps.items()) if s == rank]

    def post(self, src: int, dst: int, data: bytes):
        """Send ``data`` from local rank ``src`` to rank ``dst`` as one message; returns ``wait()`` ->
        the Unix time its last PSN was acknowledged (raises TimeoutError at the job's deadline)."""
        if (src, dst) not in self.out:                  # both ranks on this host
            self.inq[(src, dst)].put(data)
            t = time.time()
            return lambda: t
        ev, done = threading.Event(), {}

        def completed(_m):
            done["t"] = time.time()
            ev.set()
        q = self.out[(src, dst)]
        self.engine.call_soon(lambda now: q.post_data(data, now, completed))

        def wait() -> float:
            while not ev.wait(0.5):
                if self.thread is None or not self.thread.is_alive():
                    raise ConnectionError(f"RoCE engine stopped ({self.error}) before rank {dst} acknowledged")
            return done["t"]
        return wait

    def recv(self, src: int, dst: int, timeout_s: float) -> bytes:
        """The next whole message from rank ``src`` to local rank ``dst``. Raises TimeoutError."""
        try:
            return self.inq[(src, dst)].get(timeout=timeout_s)
        except queue.Empty:
            raise TimeoutError(f"no message from rank {src} to rank {dst} within {timeout_s:.1f} s "
                               f"(engine: {self.error or 'running'})") from None

    def close(self, timeout_s: float) -> dict:
        """Let the engine finish (every sent message acknowledged, then a linger for the peers'
        last ACKs, or the end barrier: traffic.roce.EndBarrier), close it; returns the transport's
        record (loop statistics, QP records)."""
        self.stop.set()
        if self.thread is not None:
            self.thread.join(max(0.1, timeout_s))
            if self.thread.is_alive():
                self.error = self.error or "RoCE engine still busy at the deadline"
        stats = self.engine.loop_stats() if self.thread is not None else {}
        rec = {"kind": "roce", "error": self.error, "loop": stats,
               "senders": self.engine.sender_records(stats.get("pacer_late_p99_s")),
               "receivers": [q.record() for q in self.engine.receivers.values()]}
        if self.thread is None or not self.thread.is_alive():
            self.engine.close()
        return rec


def run_collective(job: dict, ready) -> dict:
    """Run this host's ranks of ``job`` (module docstring). ``ready()`` prints READY and returns
    the start time (Unix s). Returns ``{"role", "ranks": [record, ...]}``."""
    recs, begin, roce = run_ranks(job, ready, lambda rk, b: rk.run(b), lambda rk: rk.record())
    out = {"role": "collective", "begin_unix_s": begin, "ranks": recs, "transport": job.get("transport", "tcp")}
    if roce is not None:
        out["roce"] = roce
    return out


def run_ranks(job: dict, ready, body, record, prepare=None) -> tuple[list[dict], float, dict | None]:
    """This host's ranks of ``job``, one thread each: make them (listeners, or the RoCE links;
    ``prepare(rank)``, when given, may then replace the rank's ``steps``, whose moves name the
    peers it connects to), ``ready()`` (prints READY, returns the start time), connect every rank at the start, then
    ``body(rank, begin_unix_s)`` (begin = start + :data:`CONNECT_GRACE_S`); an exception is the
    rank's ``error``. Returns (``record(rank)`` of every rank, begin, the RoCE transport's record
    or None), after closing every connection.

    Raises:
        Exception: the RoCE links cannot be made (a plug-in's failure named).
    """
    by_rank = {r["rank"]: r for r in job["ranks"]}
    try:
        links = RoceLinks(job) if job.get("transport", "tcp") == "roce" else None
    except Exception as e:
        raise plugin_failure(e, job["roce"]) or e
    ranks = []
    for r in job["local_ranks"]:
        ls = None
        if links is None:                   # TCP: every rank listens for its sources
            ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            ls.bind(("0.0.0.0", by_rank[r]["port"]))
            ls.listen(64)
        ranks.append(Rank(r, job, ls))
        ranks[-1].links = links
        if prepare is not None:
            prepare(ranks[-1])
    start = ready()
    begin = start + CONNECT_GRACE_S
    deadline = job["deadline_unix_s"]
    if links is not None:
        while time.time() < start:
            time.sleep(min(0.01, max(0.0, start - time.time())))
        links.start(deadline, EndBarrier(sys.stdout) if job.get("end_barrier") else None)

    def go(rk: Rank):
        try:
            while time.time() < start:
                time.sleep(min(0.01, max(0.0, start - time.time())))
            rk.connect(min(deadline, begin + 30))
            rk.connected_unix_s = time.time()
            for s in list(rk.out_peers.values()) + list(rk.in_peers.values()):
                s.settimeout(max(0.1, deadline - time.time()))
            body(rk, begin)
        except Exception as e:  # recorded per rank; the runner reports it
            rk.error = f"{type(e).__name__}: {e}"
    threads = [threading.Thread(target=go, args=(rk,), daemon=True) for rk in ranks]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.1, deadline - time.time()))
    for rk, t in zip(ranks, threads):
        if t.is_alive():
            rk.error = rk.error or "deadline passed"
    recs = [record(rk) for rk in ranks]
    roce = links.close(deadline - time.time()) if links is not None else None
    for rk in ranks:
        rk.close()
    return recs, begin, roce
