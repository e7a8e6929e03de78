"""Traffic agent: runs inside one Mininet host, driven by a JSON job.

Started by the runner with popen (never ``host.cmd``: case T2). Protocol on
stdin/stdout: the agent sets up (receiver: listens), prints ``READY``, then
reads one line from stdin holding the absolute start time (Unix seconds; all
namespaces share the clock), runs, writes its result JSON to ``job["out"]``
and exits 0. Every agent has a deadline and exits by itself after it.

Roles (``job["role"]``):
- ``receiver``: ``{"port", "expect_flows", "deadline_unix_s", "out",
  "sample_interval_s"}``. Accepts TCP connections, counts bytes per flow
  until EOF; records first/last byte times and cumulative bytes over time.
- ``sender``: ``{"dst_ip", "port", "bytes", "flow_id", "deadline_unix_s", "out"}``.
  Connects at the start time, sends ``bytes`` of zeros, half-closes, waits
  for the receiver to close, records times, congestion control in use and
  retransmissions (TCP_INFO).
"""
from __future__ import annotations

import json
import selectors
import socket
import struct
import sys
import time

CHUNK_BYTES = 64 * 1024


def wait_until(t_unix_s: float) -> None:
    """Sleep until the absolute time ``t_unix_s`` (returns at once if past)."""
    while True:
        d = t_unix_s - time.time()
        if d <= 0:
            return
        time.sleep(d if d < 0.05 else d - 0.01)


def tcp_info(sock: socket.socket) -> dict:
    """``{"total_retrans", "rtt_us", "snd_cwnd"}`` from struct tcp_info (linux/tcp.h)."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    rtt_us, = struct.unpack_from("=I", raw, 68)
    snd_cwnd, = struct.unpack_from("=I", raw, 80)
    total_retrans, = struct.unpack_from("=I", raw, 100)
    return {"total_retrans": total_retrans, "rtt_us": rtt_us, "snd_cwnd": snd_cwnd}


def congestion_control(sock: socket.socket) -> str:
    """The congestion control algorithm the kernel uses on ``sock``."""
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()


def run_receiver(job: dict) -> dict:
    """Receive ``expect_flows`` TCP flows; return per-flow records (see module doc)."""
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("0.0.0.0", job["port"]))
    srv.listen(1024)
    srv.setblocking(False)
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    interval = job.get("sample_interval_s", 0.01)
    sel = selectors.DefaultSelector()
    sel.register(srv, selectors.EVENT_READ, None)
    flows = {}
    done = 0
    buf = bytearray(CHUNK_BYTES)
    while done < job["expect_flows"] and time.time() < job["deadline_unix_s"]:
        for key, _ in sel.select(timeout=0.05):
            if key.data is None:
                conn, addr = srv.accept()
                conn.setblocking(False)
                rec = {"src_ip": addr[0], "src_port": addr[1], "bytes": 0, "accepted_unix_s": time.time(),
                       "first_byte_unix_s": None, "last_byte_unix_s": None, "eof": False, "samples": []}
                flows[addr] = rec
                sel.register(conn, selectors.EVENT_READ, rec)
                continue
            rec, conn = key.data, key.fileobj
            try:
                n = conn.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                continue
            except ConnectionError as e:
                rec["error"] = repr(e)
                n = 0
            now = time.time()
            if n == 0:
                rec["eof"] = "error" not in rec
                sel.unregister(conn)
                conn.close()
                rec["samples"].append((now, rec["bytes"]))
                done += 1
                continue
            if rec["first_byte_unix_s"] is None:
                rec["first_byte_unix_s"] = now
            rec["bytes"] += n
            rec["last_byte_unix_s"] = now
            s = rec["samples"]
            if not s or now - s[-1][0] >= interval:
                s.append((now, rec["bytes"]))
    return {"role": "receiver", "start_at_unix_s": start_at, "flows": list(flows.values()),
            "complete": done >= job["expect_flows"]}


def run_sender(job: dict) -> dict:
    """Send one flow of ``job["bytes"]`` at the start time; return its record."""
    print("READY", flush=True)
    start_at = float(sys.stdin.readline())
    payload = memoryview(bytes(CHUNK_BYTES))
    wait_until(start_at)
    rec = {"role": "sender", "flow_id": job["flow_id"], "dst_ip": job["dst_ip"], "bytes_planned": job["bytes"],
           "start_at_unix_s": start_at, "started_unix_s": time.time(), "bytes_sent": 0}
    s = socket.create_connection((job["dst_ip"], job["port"]), timeout=max(1.0, job["deadline_unix_s"] - time.time()))
    rec["src_port"] = s.getsockname()[1]
    rec["connected_unix_s"] = time.time()
    rec["congestion_control"] = congestion_control(s)
    left = job["bytes"]
    while left > 0:
        n = s.send(payload[:min(left, CHUNK_BYTES)])
        left -= n
        rec["bytes_sent"] += n
    rec["sent_unix_s"] = time.time()
    s.shutdown(socket.SHUT_WR)
    while s.recv(4096):
        pass
    rec["closed_unix_s"] = time.time()
    rec.update(tcp_info(s))
    s.close()
    return rec


def main(argv=None) -> int:
    """``python -m traffic.agent JOB_JSON``: run the job, write its result, exit 0 (1 on error)."""
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(argv[0])
    try:
        if job["role"] == "receiver":
            res = run_receiver(job)
        elif job["role"] == "sender":
            res = run_sender(job)
        else:
            raise ValueError(f"unknown role {job['role']!r}")
        rc = 0
    except Exception as e:  # recorded in the result, reported by the runner
        res = {"role": job.get("role"), "flow_id": job.get("flow_id"), "error": f"{type(e).__name__}: {e}"}
        rc = 1
    with open(job["out"], "w") as f:
        json.dump(res, f)
    return rc


if __name__ == "__main__":
    sys.exit(main())
