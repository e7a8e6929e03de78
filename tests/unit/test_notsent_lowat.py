"""A time-limited TCP flow holds little unsent data (TCP_NOTSENT_LOWAT), so it ends soon after its
duration: a sender agent over loopback to a receiver that reads nothing for a while sends, in its
duration, what the receiver's window and the bound take, not a whole send buffer more, and
half-closes at its end though its socket takes nothing then. No root."""
import json
import socket
import time

from experiments.workloads.flows import NOTSENT_LOWAT_MIN_BYTES, notsent_lowat_bytes
from tests.unit.test_udp_agent import _agent, _ready_then_release


def test_the_bound_is_50_ms_of_the_host_link_and_at_least_16_kib():
    assert notsent_lowat_bytes(2) == NOTSENT_LOWAT_MIN_BYTES == 16384
    assert notsent_lowat_bytes(10) == 62500
    assert notsent_lowat_bytes(100) == 625000


def _bytes_accepted_in(tmp_path, name: str, lowat: int | None) -> int:
    """What a 0.5 s time-limited sender handed its socket while the receiver read nothing."""
    ls = socket.socket()
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)       # a small window, as a slow path
    ls.bind(("127.0.0.1", 0))
    ls.listen(1)
    job = {"role": "sender", "deadline_unix_s": time.time() + 30, "out": str(tmp_path / f"{name}.json"),
           "flows": [{"dst_ip": "127.0.0.1", "port": ls.getsockname()[1], "duration_s": 0.5, "flow_id": 0}]}
    if lowat is not None:
        job["notsent_lowat_bytes"] = lowat
    tx = _agent(job)
    _ready_then_release(tx)
    conn, _ = ls.accept()
    time.sleep(1.0)                          # past the duration: the sender has stopped writing
    while conn.recv(1 << 20):                # now drain to the sender's half-close, and close
        pass
    conn.close()
    tx.wait(20)
    ls.close()
    (flow,) = json.loads((tmp_path / f"{name}.json").read_text())["flows"]
    assert flow["state"] == "closed", flow
    # it half-closed at its end, though its socket took nothing then (the receiver read nothing)
    assert 0 <= flow["sent_unix_s"] - flow["until_unix_s"] < 0.2, flow
    return flow["bytes_sent"]


def test_a_time_limited_flow_holds_at_most_its_bound_unsent(tmp_path):
    bounded = _bytes_accepted_in(tmp_path, "bounded", 16384)
    unbounded = _bytes_accepted_in(tmp_path, "unbounded", None)
    print(f"accepted while the receiver read nothing: {bounded} B bounded, {unbounded} B unbounded")
    # the window (up to twice the 64 KiB receive buffer) plus at most the bound and a chunk
    assert bounded <= 2 * 65536 + 16384 + 65536, bounded
    assert unbounded > 2 * bounded, (bounded, unbounded)
