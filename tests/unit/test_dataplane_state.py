"""Pure parts of the data-plane helpers and of the run-state record."""
import subprocess
import sys
import time

import pytest

from experiments.state import kill_recorded, proc_start_time
from controller.dataplane.tcqdisc import PortQueue


def test_port_queue_kind_and_limit():
    assert (PortQueue(10, buffer_bytes=30000).fifo_kind, PortQueue(10, buffer_bytes=30000).fifo_limit) == ("bfifo", 30000)
    assert (PortQueue(10, buffer_packets=100).fifo_kind, PortQueue(10, buffer_packets=100).fifo_limit) == ("pfifo", 100)
    with pytest.raises(ValueError):
        PortQueue(10)
    with pytest.raises(ValueError):
        PortQueue(10, buffer_bytes=1, buffer_packets=1)
    with pytest.raises(ValueError):
        PortQueue(0, buffer_packets=1)


def test_kill_recorded_checks_start_time():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        st = proc_start_time(p.pid)
        assert st is not None
        # a record with the right pid but another start time is a reused pid: left alone
        assert kill_recorded([{"pid": p.pid, "start_time": st + 1}], grace_s=0.1) == []
        assert p.poll() is None
        assert kill_recorded([{"pid": p.pid, "start_time": st}], grace_s=2) == [p.pid]
        t = time.monotonic()
        while p.poll() is None and time.monotonic() - t < 5:
            time.sleep(0.05)
        assert p.poll() is not None
    finally:
        if p.poll() is None:
            p.kill()


def test_forked_copy_of_the_runner_dies_on_sigterm_without_unwinding():
    """pyroute2 forks the runner to reach other namespaces and SIGTERMs the copy: the copy must
    not run the runner's SIGTERM handler (which unwinds into fabric teardown)."""
    import os
    import signal

    import experiments.state  # noqa: F401  (registers the at-fork reset)

    def runner_handler(*_):
        raise SystemExit(143)
    old = signal.signal(signal.SIGTERM, runner_handler)
    try:
        pid = os.fork()
        if pid == 0:
            ok = signal.getsignal(signal.SIGTERM) == signal.SIG_DFL and signal.getsignal(signal.SIGINT) == signal.SIG_DFL
            os._exit(0 if ok else 1)
        _, status = os.waitpid(pid, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        assert signal.getsignal(signal.SIGTERM) is runner_handler   # the parent keeps its handler
    finally:
        signal.signal(signal.SIGTERM, old)


def test_a_killed_runs_transmit_buffer_is_put_back_only_on_the_ovs_it_changed(monkeypatch):
    """The record says how big ovs-vswitchd's transmit buffer was; a restarted ovs-vswitchd (no
    transmit socket yet) has its default again and is left alone, the same one gets it back."""
    from controller.dataplane import hostknobs, ovsctl
    from experiments import state
    monkeypatch.setattr(ovsctl, "ovs_bridges", lambda: [])
    monkeypatch.setattr(ovsctl, "ovs_del_bridges", lambda names: None)
    monkeypatch.setattr(hostknobs, "delete_root_links", lambda names: [])
    calls = []
    monkeypatch.setattr(ovsctl, "set_ovs_tx_sndbuf", lambda size_bytes: calls.append(size_bytes))
    rec = {"restore": {"ovs_tx_sndbuf_bytes": 212992}}
    monkeypatch.setattr(ovsctl, "ovs_tx_socket_exists", lambda: False)
    assert state.cleanup_record(rec)["errors"] == [] and calls == []
    monkeypatch.setattr(ovsctl, "ovs_tx_socket_exists", lambda: True)
    assert state.cleanup_record(rec)["errors"] == [] and calls == [212992]
