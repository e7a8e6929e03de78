"""A live emulated fabric: Mininet + the switches' datapath (Open vSwitch: controller.datapaths)
+ the fabriclab controller, as a
context manager whose exit tears everything down (case C2).

Used by the experiment runner and by the integration tests alike.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

from mininet.link import Link
from mininet.log import setLogLevel
from mininet.net import Mininet
from mininet.node import RemoteController

from common.errors import SetupError
from experiments.procs import REPO, spawn
from controller import portsetup
from controller.dataplane import hostknobs
from controller.datapaths.base import Datapath
from controller.datapaths.registry import from_environment
from controller.messages import EcnPlan, PfcPlan
from controller.rest import ControlClient, free_port, new_token
from experiments.state import RunState
from topologies.mininet_topo import FabricTopo
from topologies.base import Fabric

OF_PORT = 6653
#: Longest wait for Mininet's own teardown before the recorded cleanup takes over.
STOP_TIMEOUT_S = 60.0
#: Environment variable naming a file to which every LiveFabric appends one JSON line when it is up
#: and one when it is down (``{"event": "up"|"down", "switches", "hosts", "up_s"|"down_s", "pid"}``):
#: how the test lanes count fabric bring-ups and their cost across processes. Unset: nothing written.
FABRIC_LOG_ENV = "FABRICLAB_FABRIC_LOG"


def log_fabric_event(event: str, **fields) -> None:
    """Append one record to the file named by :data:`FABRIC_LOG_ENV`, if set (never raises)."""
    path = os.environ.get(FABRIC_LOG_ENV)
    if not path:
        return
    try:
        with open(path, "a") as f:
            f.write(json.dumps({"event": event, "pid": os.getpid(), **fields}) + "\n")
    except OSError:
        pass


def port_listening(port: int) -> bool:
    """True if some socket listens on TCP ``port`` (IPv4 or IPv6) in this namespace."""
    hexport = f":{port:04X}"
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[1].endswith(hexport) and f[3] == "0A":
                return True
    return False


def _listening_controller(remote_controller: type) -> type:
    """Mininet's ``RemoteController`` class -> a subclass whose ``checkListening`` does nothing.

    Mininet checks a remote controller by running ``telnet`` to it in a shell and reading the
    output through a strict UTF-8 decoder; fabriclab's controller answers with an OpenFlow HELLO
    whose transaction id is not always valid UTF-8, and Mininet's constructor then raised
    UnicodeDecodeError (once in about 40 fabric bring-ups here, 2026-12-02). fabriclab waits
    for 127.0.0.1:6653 to listen before any switch starts (:meth:`LiveFabric._await_controller`)
    and for every switch to be configured after, so the check adds nothing. (A function, not
    a module-level class: Mininet is imported only where a fabric is built.)
    """
    class ListeningController(remote_controller):
        """A remote controller fabriclab has already seen listening."""

        def checkListening(self):
            """Nothing to check (see :func:`_listening_controller`)."""
            return

    return ListeningController


class LiveFabric:
    """Start controller and Mininet for ``fabric``; stop both on exit.

    Args:
        fabric: the pure description (topologies.base.Fabric).
        workdir: folder for the fabric map, controller log and agent files.
        state: the RunState that records what is created.
        datapath: the switches' datapath (:class:`controller.datapaths.base.Datapath`; the run's choice
            is :func:`controller.datapaths.registry.from_environment` of its environment), or the name
            of an Open vSwitch mode (``kernel`` or ``user``).
        switch_queue: ``rate_mbps -> PortQueue`` for every switch egress port, or None.
        host_queue: ``rate_mbps -> PortQueue`` for every host NIC, or None.
        connect_timeout_s: how long switches get to connect and be configured.
        routing: a registered routing strategy (controller.routing.STRATEGIES): ``ecmp`` (hash
            each 5-tuple over all equal-cost next hops), ``single`` (one deterministic path per
            destination), ``valiant`` (through a random intermediate group of a Dragonfly).
        ecn_plan: the ECN plan (:class:`controller.messages.EcnPlan`; experiments.features.ecn.plan.ecn_plan)
            the controller applies once the ports have queues, sent in ``POST /fabriclab/ecn/start``
            (controller.ecn.ports), or None.
        pfc_plan: the PFC plan (:class:`controller.messages.PfcPlan`; experiments.features.pfc.plan.pfc_plan),
            sent in ``POST /fabriclab/pfc/start``: the controller installs per-priority queues on every
            port instead of ``switch_queue``/``host_queue`` and runs the pauser (controller.pfc.ports);
            or None. Both are also written beside the results as ``ecn_plan.json``/``pfc_plan.json``.

    Attributes after enter: ``net`` (Mininet), ``fabric_map`` (dict),
    ``timings_s`` (set-up phases in seconds: ``controller_s``, ``mininet_build_s`` (namespaces, shells,
    links), ``ovs_s`` (bridges and ports), ``switch_connect_s``, ``ports_s`` (offloads and queues),
    ``pfc_s``/``ecn_s``; after exit also the teardown's ``teardown_bridges_s``, ``teardown_links_s``,
    ``teardown_hosts_s``), ``ecn_record`` / ``pfc_record`` (what the controller applied),
    ``rest_url`` (the controller's REST API, controller.rest: curl it during a run), ``token_file``
    (the file with the token its changes need, in the run's state folder), ``api`` (the runner's
    :class:`controller.rest.ControlClient`, with the token), ``port_plans`` (what the fabric gave
    each interface: ``{netns_pid or None: [controller.portsetup.PortPlan]}``, the intended queues
    each round starts from).

    Raises:
        SetupError: port 6653 is taken, the controller dies, switches do not
            connect in time (case C3), or a tc/ethtool step fails.
    """

    def __init__(self, fabric: Fabric, workdir: Path, state: RunState, datapath: Datapath | str = "kernel",
                 switch_queue=None, host_queue=None, connect_timeout_s: float = 90.0, routing: str = "ecmp",
                 ecn_plan: EcnPlan | None = None, pfc_plan: PfcPlan | None = None):
        self.fabric = fabric
        self.workdir = Path(workdir)
        self.state = state
        self.datapath = datapath if isinstance(datapath, Datapath) else from_environment({"datapath": datapath})
        self.switch_queue = switch_queue
        self.host_queue = host_queue
        self.connect_timeout_s = connect_timeout_s
        self.routing = routing
        self.ecn_plan = ecn_plan
        self.pfc_plan = pfc_plan
        self.pfc_record: dict = {}
        self.control_dir = self.workdir / "control"
        self.ecn_record: dict = {}
        self.rest_url = None
        self.token_file = None
        self.api = None
        self.net = None
        self.controller = None
        self.fabric_map = fabric.to_map()
        self.port_plans: dict[int | None, list[portsetup.PortPlan]] = {}
        self.timings_s = {}
        self.owner_pid = os.getpid()

    # -- lifecycle -------------------------------------------------------
    def __enter__(self):
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def _start(self):
        t0 = time.monotonic()
        self.workdir.mkdir(parents=True, exist_ok=True)
        map_path = self.workdir / "fabric_map.json"
        map_path.write_text(json.dumps(self.fabric_map, indent=1))
        self.state.claim([s.name for s in self.fabric.switches], self.fabric.interface_names())
        # the controller boots (about 0.6 s of imports) while Mininet builds the hosts and links,
        # which do not need it; the switches start, and connect to it, once it listens
        self._spawn_controller(map_path)
        self._build_mininet()
        self._await_controller()
        self.timings_s["controller_s"] = time.monotonic() - t0
        self._start_switches()
        t2 = time.monotonic()
        self._wait_configured()
        self.timings_s["switch_connect_s"] = time.monotonic() - t2
        # after the switches start: adding a port to OVS resets its root qdisc
        t3 = time.monotonic()
        self._configure_ports()
        self.timings_s["ports_s"] = time.monotonic() - t3
        if self.pfc_plan is not None:
            t5 = time.monotonic()
            pids = {h.name: h.pid for h in self.net.hosts}
            self.pfc_record = self.api.call("POST", "/pfc/start", {"host_pids": pids, "plan": self.pfc_plan.to_json()},
                                            timeout_s=120, what="PFC")["record"]
            self.timings_s["pfc_s"] = time.monotonic() - t5
        if self.ecn_plan is not None:
            t4 = time.monotonic()
            self.ecn_record = self.api.call("POST", "/ecn/start", self.ecn_plan.to_json(), timeout_s=60,
                                            what="ECN")["record"]
            self.timings_s["ecn_s"] = time.monotonic() - t4
        self._up_at = time.monotonic()
        log_fabric_event("up", switches=len(self.fabric.switches), hosts=len(self.fabric.hosts),
                         up_s=round(self._up_at - t0, 3))

    def _spawn_controller(self, map_path: Path):
        """Start the controller process (it listens once booted: :meth:`_await_controller`)."""
        if port_listening(OF_PORT):
            raise SetupError(f"TCP port {OF_PORT} is already in use by another program "
                             "(another OpenFlow controller?); stop it and retry")
        self.ready_file = self.workdir / "controller.ready"
        self.ready_file.unlink(missing_ok=True)
        log = open(self.workdir / "controller.log", "w")
        # the plans go to the controller in their start requests (below); these files record them
        for name, plan in (("ecn_plan.json", self.ecn_plan), ("pfc_plan.json", self.pfc_plan)):
            if plan is not None:
                (self.workdir / name).write_text(json.dumps(plan.to_json(), indent=1))
        rest_port = free_port()
        self.rest_url = f"http://127.0.0.1:{rest_port}"
        # a fresh token per run, in the 0700 state folder (0600); the controller reads the file,
        # so the token is in no process's arguments
        token = new_token()
        self.token_file = self.state.write_api_token(token)
        self.controller = spawn(
            [sys.executable, "-m", "controller.main", "--fabric-map", str(map_path),
             "--ready-file", str(self.ready_file), "--host", "127.0.0.1", "--port", str(OF_PORT),
             "--routing", self.routing, "--rest-port", str(rest_port), "--token-file", str(self.token_file),
             "--control-dir", str(self.control_dir)],
            cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.state.add_process(self.controller.pid, "controller")
        self.api = ControlClient(self.rest_url, is_alive=lambda: self.controller.poll() is None, token=token)
        self._controller_deadline = time.monotonic() + 20

    def _await_controller(self):
        """Wait until the spawned controller listens for OpenFlow; SetupError when it exited or did
        not within 20 s of its start."""
        deadline = self._controller_deadline
        while not port_listening(OF_PORT):
            if self.controller.poll() is not None:
                raise SetupError(f"controller exited with {self.controller.returncode}: "
                                 f"{self._tail(self.workdir / 'controller.log')}")
            if time.monotonic() > deadline:
                raise SetupError("controller did not listen on 127.0.0.1:6653 within 20 s")
            time.sleep(0.05)

    @staticmethod
    def _tail(path: Path, n: int = 8) -> str:
        try:
            return " | ".join(path.read_text().splitlines()[-n:])
        except OSError:
            return "(no log)"

    def _build_mininet(self):
        """Mininet's hosts, links and switch objects (no switch started yet), recorded by pid."""
        setLogLevel("error")
        self.net = Mininet(topo=FabricTopo(self.fabric), switch=self.datapath.switch_class(), link=Link, controller=None,
                           autoSetMacs=False, autoStaticArp=False, build=False, waitConnected=False)
        self.net.addController(_listening_controller(RemoteController)("c0", ip="127.0.0.1", port=OF_PORT))
        t0 = time.monotonic()
        self.net.build()
        # Mininet gives even a remote controller a shell of its own
        self.state.add_processes([(h.pid, f"host {h.name}") for h in self.net.hosts]
                                 + [(c.pid, f"mininet controller shell {c.name}") for c in self.net.controllers])
        self.timings_s["mininet_build_s"] = time.monotonic() - t0

    def _start_switches(self):
        """Start the switches: every bridge and port in one ovs-vsctl transaction (batch=True)."""
        t1 = time.monotonic()
        self.net.start()
        self.timings_s["ovs_s"] = time.monotonic() - t1

    def _wait_configured(self):
        """Wait for the controller's ready file; SetupError when the controller died, a switch never
        connected, or a switch refused a rule (the OpenFlow errors decoded, from the ready file)."""
        deadline = time.monotonic() + self.connect_timeout_s
        while not self.ready_file.exists():
            if self.controller.poll() is not None:
                raise SetupError(f"controller died: {self._tail(self.workdir / 'controller.log')}")
            if time.monotonic() > deadline:
                missing = self.datapath.unconnected(self.net.switches)
                raise SetupError(f"switches not connected/configured after {self.connect_timeout_s:.0f} s: "
                                 f"{', '.join(missing) or '(all connected, configuration incomplete)'}; "
                                 f"controller log: {self._tail(self.workdir / 'controller.log')}")
            time.sleep(0.05)
        errors = json.loads(self.ready_file.read_text()).get("openflow_errors") or []
        if errors:
            raise SetupError(f"{len(errors)} OpenFlow error(s) while configuring the switches, e.g. "
                             f"{errors[0]['switch']}: {errors[0]['text']}")

    def ecn_request(self, specs: dict, timeout_s: float = 20.0) -> dict:
        """Ask the controller to change ECN profiles ``{intf: spec}`` now (``PUT /fabriclab/ecn``);
        returns its answer once they took effect (SetupError on failure or without an ECN plan)."""
        if self.ecn_plan is None:
            raise SetupError("ECN change asked of a fabric started without an ECN plan")
        return self.api.call("PUT", "/ecn", {"ports": specs}, timeout_s=timeout_s, what="ECN")

    def pfc_request(self, body: dict, timeout_s: float = 30.0) -> dict:
        """Change PFC now (``PUT /fabriclab/pfc``): ``{"enabled": bool}`` or ``{"limits": {"xoff_bytes",
        "xon_bytes", "cap_bytes"}}``; returns the controller's answer (SetupError on failure or without a
        PFC plan)."""
        if self.pfc_plan is None:
            raise SetupError("PFC request to a fabric started without a PFC plan")
        return self.api.call("PUT", "/pfc", body.get("limits", body), timeout_s=timeout_s, what="PFC")

    def pfc_report(self, path: Path) -> dict:
        """The controller's PFC report now (``GET /fabriclab/pfc/report``: pauses, storms, reaction
        latencies, counters), also written to ``path``; SetupError without a PFC plan or when the
        controller fails."""
        if self.pfc_plan is None:
            raise SetupError("PFC report asked of a fabric started without a PFC plan")
        rep = self.api.call("GET", "/pfc/report", timeout_s=30.0, what="PFC")
        Path(path).write_text(json.dumps(rep, indent=1))
        return rep

    def ecn_counters(self) -> dict:
        """Per-port marker counters now ({} without an ECN plan): ``GET /fabriclab/ecn/counters``
        (controller.ecn.ports.EcnPorts.counters)."""
        if self.ecn_plan is None:
            return {}
        return self.api.call("GET", "/ecn/counters", what="ECN")

    def _configure_ports(self):
        """Offloads off everywhere (cases T1, L5); no IPv6 chatter from switch ports; queues at each
        link's rate: one netlink socket and one read-back per namespace (controller.portsetup)."""
        plans: dict[int | None, list[portsetup.PortPlan]] = {}
        self.port_plans = plans
        pfc = self.pfc_plan is not None
        for link in self.fabric.links:
            for node, intf in ((link.a, link.a_intf), (link.b, link.b_intf)):
                if self.fabric.node(node).is_host:
                    q = self.host_queue(link.rate_mbps) if self.host_queue is not None and not pfc else None
                    plans.setdefault(self.net.get(node).pid, []).append(portsetup.PortPlan(intf, q))
                else:
                    q = self.switch_queue(link.rate_mbps) if self.switch_queue is not None and not pfc else None
                    plans.setdefault(None, []).append(portsetup.PortPlan(intf, q, switch_port=True))
        portsetup.configure_ports(plans)

    def host(self, name: str):
        """The Mininet host called ``name``."""
        return self.net.get(name)

    def dead_host_shells(self) -> list[str]:
        """Hosts whose Mininet shell (the process holding the namespace) has exited, as
        ``name (exit N)`` or ``name (signal S)``."""
        if self.net is None:
            return []
        out = []
        for h in self.net.hosts:
            shell = getattr(h, "shell", None)
            if shell is not None and shell.poll() is not None:
                rc = shell.returncode
                out.append(f"{h.name} ({'signal ' + str(-rc) if rc < 0 else 'exit ' + str(rc)})")
        return out

    def stop(self):
        """Stop Mininet and the controller; safe to call more than once, never hangs.

        Mininet's own stop talks to every host shell and blocks forever if one
        has died; then (or if it takes over :data:`STOP_TIMEOUT_S`) it is
        skipped and the RunState's recorded cleanup removes what is left.
        A forked copy of the owning process does nothing.
        """
        if os.getpid() != self.owner_pid:
            return
        t0 = time.monotonic()
        was_up = self.net is not None
        if self.net is not None:
            dead = self.dead_host_shells()
            net, self.net = self.net, None
            if dead:
                print(f"fabriclab: host shells exited unexpectedly ({', '.join(dead[:6])}"
                      f"{' ...' if len(dead) > 6 else ''}); removing the fabric from the run record instead",
                      file=sys.stderr)
                self._stop_controller_shells(net)
            else:
                t = threading.Thread(target=self._mininet_stop, args=(net, self.datapath, self.fabric.interface_names(),
                                                                      self.timings_s, self.state), daemon=True)
                t.start()
                t.join(STOP_TIMEOUT_S)
                if t.is_alive():
                    print(f"fabriclab: Mininet's stop did not finish in {STOP_TIMEOUT_S:.0f} s; "
                          "removing the fabric from the run record instead", file=sys.stderr)
        if self.controller is not None:
            c, self.controller = self.controller, None
            if c.poll() is None:
                c.terminate()
                try:
                    c.wait(5)
                except subprocess.TimeoutExpired:
                    c.kill()
                    c.wait()
        if was_up:
            log_fabric_event("down", switches=len(self.fabric.switches), hosts=len(self.fabric.hosts),
                             down_s=round(time.monotonic() - t0, 3))

    @staticmethod
    def _stop_controller_shells(net):
        """End the shell Mininet opened for each controller object: RemoteController.stop()
        does nothing, so without this one bash per run would outlive the fabric."""
        for c in net.controllers:
            try:
                c.terminate()
            except Exception:  # noqa: BLE001 - the recorded cleanup still runs
                pass

    @staticmethod
    def _mininet_stop(net, datapath: Datapath, interfaces: list[str], timings_s: dict, state: RunState):
        """Mininet's ``net.stop()`` in bulk: every switch stopped at once by its datapath (Open vSwitch:
        every bridge deleted in one ``ovs-vsctl`` transaction, Mininet's own batch shutdown, which also
        ends the switches' shells), every link's
        root-namespace end (and so its peer) deleted in one netlink request
        (:func:`controller.dataplane.hostknobs.delete_root_links`) instead of one ``ip link del`` per
        interface, then the hosts' shells ended, which frees their namespaces. A Fat-Tree k=8 took
        19 s through ``net.stop()`` here. The kernel's RCU grace periods are expedited while the
        bridges go (:func:`controller.dataplane.hostknobs.rcu_expedited` says why; recorded in ``state`` so
        that a crash there still puts the setting back). Each step's time goes into
        ``timings_s`` (``teardown_bridges_s``, ``teardown_links_s``, ``teardown_hosts_s``)."""
        try:
            t0 = time.monotonic()
            with hostknobs.expedited_rcu(lambda before: state.remember("rcu_expedited", before),
                                         lambda: state.forget("rcu_expedited")):
                datapath.shutdown(list(net.switches))
            t1 = time.monotonic()
            timings_s["teardown_bridges_s"] = t1 - t0
            hostknobs.delete_root_links(interfaces)
            t2 = time.monotonic()
            timings_s["teardown_links_s"] = t2 - t1
            for h in net.hosts:
                h.terminate()
            timings_s["teardown_hosts_s"] = time.monotonic() - t2
        except Exception as e:  # the recorded cleanup still runs
            print(f"fabriclab: stopping the fabric failed ({e}); removing the fabric from the run record instead",
                  file=sys.stderr)
        LiveFabric._stop_controller_shells(net)
