"""The controller's REST API on 127.0.0.1, as Ryu's ``rest_qos`` and ``ofctl_rest`` apps offer
theirs: the runner changes ECN profiles and PFC through it between rounds, and a user or a lab
can read and change them with ``curl`` during a run (docs/controller-api.md lists the endpoints).

Endpoints (bodies and answers are JSON objects; errors are ``{"error": "..."}`` with 400 for a
malformed message or a profile a port cannot hold, 404 for an unknown path or port or a part this
run does not have (ECN or PFC before its start request), 405 for a method a path does not take, 409
before the switches are configured or for a start of a part started already, 500 when the kernel or
tc refused the change):

- ``GET /fabriclab/status``: switches configured, whether ECN and PFC run, this API's URL.
- ``GET /fabriclab/ecn``: the marker and every switch port's profile now.
- ``PUT /fabriclab/ecn`` ``{"ports": {intf: profile}}``: new profiles (controller.messages.EcnChange).
- ``POST /fabriclab/ecn/start`` with the ECN plan (controller.messages.EcnPlan): apply it (the
  runner, once the ports have their queues).
- ``GET /fabriclab/ecn/counters``: the marker's per-port counters.
- ``GET /fabriclab/pfc``: enabled, lossless priorities, XOFF, XON, buffer per counter.
- ``PUT /fabriclab/pfc`` ``{"enabled": bool}`` or ``{"xoff_bytes", "xon_bytes", "cap_bytes"}``.
- ``POST /fabriclab/pfc/start`` ``{"host_pids": {host: pid}, "plan": {...}}`` (controller.messages.PfcStart,
  the plan a PfcPlan): install PFC, start the pauser.
- ``GET /fabriclab/pfc/report``: pauses, storms, reaction latencies, counters, occupancy.
- ``POST /fabriclab/hosts`` ``{"host_pids": {host: pid}}``: the hosts' namespaces (for faults on hosts).
- ``GET /fabriclab/ports``: every switch port's counters (controller.portstats).
- ``GET /fabriclab/faults``: every fault's record but hidden ones (``hidden``: how many);
  ``POST /fabriclab/faults`` ``{"faults": [...], "hidden": false}`` (or one fault): schedule
  faults, times from now (controller.messages.FaultsAdd); ``DELETE /fabriclab/faults``: end them
  all, answer their records (hidden ones too).
- ``GET /fabriclab/changes``: every change this API accepted (hidden faults too) and every request
  it refused, with their times (owner only).

Who may do what. Reads (``GET``) are open to every local user, as ``fabriclab ports`` needs, but
for ``/changes``, which would show hidden faults. Every other request changes something and needs
``Authorization: Bearer TOKEN``, the run's token (:func:`new_token`), which the runner writes in its
0700 state folder with mode 0600 and hands the controller as a file (``--token-file``: never in
its arguments): without it 401, with a wrong one 403, and nothing changes. A controller started
without a token takes no changes at all (403). Each accepted change is kept with its time
(:attr:`ControlApi.changes`) for the round's results.

The server is the standard library's, one request at a time on its own thread (the runner's
requests are sequential; a change takes effect before its answer). :class:`ControlClient` is the
runner's side.
"""
from __future__ import annotations

import hmac
import json
import logging
import secrets
import socket
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Callable

from common.ecn import profile_spec
from common.errors import ScenarioError, SetupError
from controller.messages import EcnChange, EcnPlan, FaultsAdd, HostsRegister, MessageError, PfcChange, PfcStart

LOG = logging.getLogger("fabriclab.controller.rest")
#: Ryu's REST apps listen on 8080; fabriclab takes it when it is free (another port otherwise).
DEFAULT_PORT = 8080
PREFIX = "/fabriclab"
#: Methods that only read: open to every local user (but :data:`OWNER_READS`).
READ_METHODS = frozenset({"GET", "HEAD"})
#: Paths (below :data:`PREFIX`) whose reads need the token too: they show hidden faults.
OWNER_READS = frozenset({"/changes"})
#: The client name the runner's requests carry (``User-Agent``); changes record who asked.
RUNNER_AGENT = "fabriclab-runner"
#: At most this many refused requests are kept (a flood of refusals costs no memory).
MAX_REFUSED = 1000


def new_token() -> str:
    """A fresh random API token (43 URL-safe characters, 256 bits)."""
    return secrets.token_urlsafe(32)


def read_token(path) -> str:
    """The token in file ``path`` (surrounding whitespace dropped).

    Raises:
        SetupError: the file cannot be read, or is empty (the message names the path).
    """
    try:
        with open(path) as f:
            token = f.read().strip()
    except OSError as e:
        raise SetupError(f"the REST API's token file {path}: {e.strerror or e}") from None
    if not token:
        raise SetupError(f"the REST API's token file {path} is empty")
    return token


class HttpError(Exception):
    """An answer other than 200: ``code`` and the error text."""

    def __init__(self, code: int, text: str):
        super().__init__(text)
        self.code = code


class ControlApi:
    """The routes, over the controller's ECN and PFC parts (no sockets: unit-tested directly).

    Args:
        status: () -> the status record (switches configured, ...).
        ecn: () -> the ECN port manager (controller.ecn.ports.EcnPorts), None until ECN is started.
        pfc: () -> the PFC part (controller.pfc.ports.PfcPorts), likewise.
        start_ecn: (:class:`controller.messages.EcnPlan`) -> the record of the plan applied
            (``POST /ecn/start``); it raises HttpError 409 before the switches are configured or
            when ECN is started already. None: 404.
        start_pfc: (:class:`controller.messages.PfcStart`) -> the record (``POST /pfc/start``), likewise.
        faults: the fault manager (controller.faultports.FaultPorts), or None (404).
        ports: () -> every switch port's counters (controller.portstats.read_ports), or None (404).
        token: the run's token (:func:`new_token`): a request other than a read must carry it as
            ``Authorization: Bearer TOKEN``; None: every such request is refused (403).
        clock: () -> Unix time in seconds, for the change records.

    Attributes:
        changes: every accepted change, oldest first: ``{"seq", "at_unix_s", "method", "path",
            "body", "answer", "client", "hidden"}`` (``answer``: the answer's scalar values and ids;
            ``client``: the request's ``User-Agent``, as the client named itself).
        refused: the refused requests (at most :data:`MAX_REFUSED`): ``{"at_unix_s", "method",
            "path", "code", "client"}``; ``refused_total`` counts them all.
    """

    def __init__(self, status: Callable[[], dict], ecn: Callable, pfc: Callable, *, start_ecn: Callable | None = None,
                 start_pfc: Callable | None = None, faults=None, ports: Callable | None = None,
                 token: str | None = None, clock: Callable[[], float] = time.time):
        self.status, self._ecn, self._pfc = status, ecn, pfc
        self._start_ecn, self._start_pfc = start_ecn, start_pfc
        self._faults, self._ports = faults, ports
        self._token = None if token is None else token.encode()
        self.clock = clock
        self.changes: list[dict] = []
        self.refused: list[dict] = []
        self.refused_total = 0
        self.lock = threading.Lock()
        self.routes = {
            ("GET", "/status"): lambda body: self.status(),
            ("GET", "/ecn"): self.get_ecn, ("PUT", "/ecn"): self.put_ecn,
            ("POST", "/ecn/start"): lambda body: {"record": self._need(self._start_ecn, "ECN")(
                EcnPlan.from_json(body))},
            ("GET", "/ecn/counters"): lambda body: self.ecn().counters(),
            ("GET", "/pfc"): self.get_pfc, ("PUT", "/pfc"): self.put_pfc,
            ("POST", "/pfc/start"): lambda body: {"record": self._need(self._start_pfc, "PFC")(
                PfcStart.from_json(body))},
            ("GET", "/pfc/report"): lambda body: self.pfc().report(),
            ("POST", "/hosts"): self.post_hosts,
            ("GET", "/ports"): lambda body: {"ports": self._need(self._ports, "port counters")()},
            ("GET", "/faults"): lambda body: self.faults().listing(),
            ("POST", "/faults"): self.post_faults,
            ("DELETE", "/faults"): lambda body: {"removed": self.faults().remove_all()},
            ("GET", "/changes"): lambda body: {"changes": list(self.changes), "refused": list(self.refused),
                                               "refused_total": self.refused_total},
        }

    @staticmethod
    def _need(part, what: str):
        if part is None:
            raise HttpError(404, f"this controller has no {what}")
        return part

    def faults(self):
        """The fault manager (HttpError 404 without one)."""
        return self._need(self._faults, "fault manager")

    def post_hosts(self, body) -> dict:
        """Register the hosts' namespaces (:class:`HostsRegister`); ``hosts``: how many."""
        msg = HostsRegister.from_json(body)
        self.faults().set_hosts(msg.host_pids)
        return {"hosts": len(msg.host_pids)}

    def post_faults(self, body) -> dict:
        """Schedule the faults of a :class:`FaultsAdd` (times from now); ``ids``: theirs."""
        f = self.faults()
        msg = FaultsAdd.from_json(body, f.fabric_map)
        return {"ids": f.add(list(msg.faults), hidden=msg.hidden)}

    def ecn(self):
        """The ECN part (HttpError 404 until a plan is started: a run without marking rounds has none)."""
        return self._part(self._ecn, "ECN", "/ecn/start")

    def pfc(self):
        """The PFC part (HttpError 404 until a plan is started: a run without priorities or a pfc
        section has none)."""
        return self._part(self._pfc, "PFC", "/pfc/start")

    @staticmethod
    def _part(get, what: str, start: str):
        part = get()
        if part is None:
            raise HttpError(404, f"{what} is not started on this fabric (POST {PREFIX}{start} with its plan)")
        return part

    def get_ecn(self, body=None) -> dict:
        """The marker and every port's profile (scenario syntax, thresholds in bytes)."""
        e = self.ecn()
        return {"marker": e.marker_kind, "ports": {intf: profile_spec(p) for intf, p in sorted(e.current.items())}}

    def put_ecn(self, body) -> dict:
        """Apply an :class:`EcnChange` (every profile checked against its port's buffer first:
        nothing changes when one is wrong); ``applied``: how many ports changed."""
        msg = EcnChange.from_json(body)
        e = self.ecn()
        try:
            e.check(msg.ports)
        except LookupError as err:
            raise HttpError(404, str(err).strip("'\"")) from None
        return {"applied": e.apply(msg.ports)}

    def get_pfc(self, body=None) -> dict:
        """PFC's state and thresholds now."""
        p = self.pfc()
        return {"enabled": p.enabled, "lossless": list(p.plan.lossless),
                **{k: getattr(p.plan, k) for k in ("xoff_bytes", "xon_bytes", "cap_bytes")}}

    def put_pfc(self, body) -> dict:
        """Apply a :class:`PfcChange`; ``changed``: how many (ingress port, priority) counters."""
        msg = PfcChange.from_json(body)
        p = self.pfc()
        if msg.enabled is not None:
            return {"changed": p.set_enabled(msg.enabled)}
        return {"changed": p.set_limits(msg.xoff_bytes, msg.xon_bytes, msg.cap_bytes)}

    def refusal(self, method: str, path: str, authorization: str | None) -> tuple[int, str] | None:
        """Whether a request may go on: None, or (401 or 403, why). Reads are open but
        :data:`OWNER_READS`; anything else needs ``Authorization: Bearer <the token>`` (compared
        in constant time)."""
        sub = path[len(PREFIX):].rstrip("/") if path.startswith(PREFIX + "/") else path
        if method in READ_METHODS and sub not in OWNER_READS:
            return None
        what = "reading it" if method in READ_METHODS else "a change"
        if self._token is None:
            return 403, f"{method} {path}: this controller was started without a token (--token-file): it takes no changes"
        if not authorization:
            return 401, (f"{method} {path}: {what} needs the run's token: Authorization: Bearer TOKEN "
                         "(the token is in the run's state folder, readable by the run's owner only)")
        scheme, _, given = authorization.strip().partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self._token):
            return 403, f"{method} {path}: wrong token (the run's token is in its state folder)"
        return None

    def _refuse(self, method: str, path: str, code: int, client: str | None) -> None:
        self.refused_total += 1
        if len(self.refused) < MAX_REFUSED:
            self.refused.append({"at_unix_s": self.clock(), "method": method, "path": path, "code": code,
                                 "client": client})
        LOG.warning("refused %s %s (%d) from %s", method, path, code, client or "a client without a name")

    def _record(self, method: str, path: str, body, out: dict, client: str | None) -> None:
        answer = {k: v for k, v in out.items() if isinstance(v, (int, float, str, bool)) or v is None or k == "ids"}
        if isinstance(out.get("removed"), list):
            answer["removed_ids"] = [r.get("id") for r in out["removed"] if isinstance(r, dict)]
        self.changes.append({"seq": len(self.changes) + 1, "at_unix_s": self.clock(), "method": method,
                             "path": path, "body": body, "answer": answer, "client": client,
                             "hidden": bool(isinstance(body, dict) and body.get("hidden") is True)})

    def handle(self, method: str, path: str, body, authorization: str | None = None,
               client: str | None = None) -> tuple[int, dict]:
        """Answer one request: (HTTP status, JSON object). ``authorization``: the request's
        ``Authorization`` header (:meth:`refusal`); ``client``: its ``User-Agent`` (recorded with
        the change it makes). A refused request changes nothing and is counted in :attr:`refused`;
        an accepted change (a 200 answer to anything but a read) goes to :attr:`changes`."""
        refused = self.refusal(method, path, authorization)
        if refused is not None:
            with self.lock:
                self._refuse(method, path, refused[0], client)
            return refused[0], {"error": refused[1]}
        if not path.startswith(PREFIX + "/"):
            return 404, {"error": f"no such path {path!r} (the API is under {PREFIX}/)"}
        sub = path[len(PREFIX):].rstrip("/")
        route = self.routes.get((method, sub))
        if route is None:
            allowed = sorted(m for m, p in self.routes if p == sub)
            if allowed:
                return 405, {"error": f"{method} {path}: not allowed (use {', '.join(allowed)})"}
            known = sorted({p for _, p in self.routes})
            return 404, {"error": f"no {method} {path} (paths: {', '.join(PREFIX + p for p in known)})"}
        with self.lock:
            try:
                out = route(body)
                if method not in READ_METHODS:
                    self._record(method, path, body, out, client)
                return 200, out
            except HttpError as e:
                return e.code, {"error": str(e)}
            except (MessageError, ScenarioError, ValueError, KeyError, TypeError) as e:
                return 400, {"error": str(e)}
            except SetupError as e:
                LOG.error("%s %s failed: %s", method, path, e)
                return 500, {"error": str(e)}


def _handler(api: ControlApi) -> type:
    class Handler(BaseHTTPRequestHandler):
        """One HTTP request: its JSON body to ``api.handle``, the answer back as JSON."""

        def _answer(self, method: str) -> None:
            path = self.path.split("?", 1)[0]
            auth, client = self.headers.get("Authorization"), self.headers.get("User-Agent")
            refused = api.refusal(method, path, auth)
            if refused is not None:      # before the body is parsed: nothing of it is looked at
                self._drain()
                code, out = api.handle(method, path, None, auth, client)
                return self._send(code, out, bearer=code == 401)
            n = int(self.headers.get("Content-Length") or 0)
            body = None
            if n:
                try:
                    body = json.loads(self.rfile.read(n))
                except ValueError as e:
                    code, out = 400, {"error": f"the body is not JSON: {e}"}
                    return self._send(code, out)
            code, out = api.handle(method, path, body, auth, client)
            self._send(code, out)

        def _drain(self, cap_bytes: int = 1 << 20) -> None:
            """Read and drop a refused request's body (up to ``cap_bytes``): a body left unread
            would make the close reset the connection before the client reads the answer."""
            try:
                n = min(int(self.headers.get("Content-Length") or 0), cap_bytes)
            except ValueError:
                n = 0
            if n > 0:
                self.rfile.read(n)

        def _send(self, code: int, out: dict, bearer: bool = False) -> None:
            data = json.dumps(out).encode()
            self.send_response(code)
            if bearer:
                self.send_header("WWW-Authenticate", 'Bearer realm="fabriclab"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            self._answer("GET")

        def do_PUT(self):
            self._answer("PUT")

        def do_POST(self):
            self._answer("POST")

        def do_DELETE(self):
            self._answer("DELETE")

        def do_PATCH(self):
            self._answer("PATCH")

        def log_message(self, fmt, *args):
            LOG.info("REST %s", fmt % args)
    return Handler


def serve(api: ControlApi, host: str = "127.0.0.1", port: int = DEFAULT_PORT) -> HTTPServer:
    """Serve ``api`` on ``host``:``port`` from a daemon thread; returns the server (its
    ``server_address`` has the port, useful with port 0). Raises OSError when the port is taken."""
    server = HTTPServer((host, port), _handler(api))
    threading.Thread(target=server.serve_forever, name="fabriclab-rest", daemon=True).start()
    return server


def free_port(preferred: int = DEFAULT_PORT, host: str = "127.0.0.1") -> int:
    """``preferred`` if nothing listens there on ``host``, else a free port the kernel picks."""
    for port in (preferred, 0):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            # as the server binds (SO_REUSEADDR): a port held only by TIME-WAIT sockets of the last
            # run's API is free for it; one with a listener is not
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((host, port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise SetupError(f"no free TCP port on {host} for the controller's REST API")


class ControlClient:
    """The runner's side of the API: one call per change, answered once it took effect.

    Args:
        url: the API's base URL (``http://127.0.0.1:PORT``).
        is_alive: () -> whether the controller process still runs (a dead one ends a wait early).
        token: the run's token, sent as ``Authorization: Bearer`` (changes need it); None: reads only.
    """

    def __init__(self, url: str, is_alive: Callable[[], bool] = lambda: True, token: str | None = None):
        self.url, self.is_alive = url.rstrip("/"), is_alive
        self.headers = {"Content-Type": "application/json", "User-Agent": RUNNER_AGENT}
        if token is not None:
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: dict | None = None, timeout_s: float = 20.0,
             what: str = "controller") -> dict:
        """``method`` ``PREFIX + path`` with ``body``; the answer. Retries while the server is not
        listening yet, until ``timeout_s``.

        Raises:
            SetupError: the controller answered with an error (its text), died, or did not answer in time.
        """
        data = None if body is None else json.dumps(body).encode()
        deadline = time.monotonic() + timeout_s
        while True:
            req = urllib.request.Request(self.url + PREFIX + path, data=data, method=method, headers=self.headers)
            try:
                with urllib.request.urlopen(req, timeout=max(0.1, deadline - time.monotonic())) as r:
                    return json.loads(r.read())
            except urllib.error.HTTPError as e:
                try:
                    text = json.loads(e.read()).get("error")
                except ValueError:
                    text = e.reason
                raise SetupError(f"{what}: the controller could not apply it: {text}") from None
            except (urllib.error.URLError, ConnectionError, TimeoutError, socket.timeout) as e:
                if not self.is_alive():
                    raise SetupError(f"{what} request: the controller died") from None
                if time.monotonic() > deadline:
                    raise SetupError(f"{what} request: no answer from the controller within {timeout_s:g} s ({e})") \
                        from None
                time.sleep(0.05)
