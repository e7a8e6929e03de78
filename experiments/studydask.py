"""A study's fabric runs spread over machines with Dask distributed.

One machine runs one fabric at a time, so every Dask worker that runs fabriclab declares one
``fabric`` resource and every fabric run asks for it: the scheduler then never gives a machine
two runs at once. Start them yourself, as root on each fabric machine (docs/studies.md)::

    dask scheduler --host 10.0.0.1 --port 8786               # on one machine, a private address
    dask worker tcp://10.0.0.1:8786 --resources fabric=1 --nworkers 1 --nthreads 1   # on each

and run ``python -m experiments study FILE --dask tcp://10.0.0.1:8786`` anywhere that reaches the
scheduler (it needs no root: it only sends plans and gathers results). fabriclab itself starts
nothing that listens.

What crosses the wire is typed (:class:`RemoteRun`, :class:`RemoteResult`): the fabric run's
resolved scenario in file syntax (experiments.model.Scenario.to_data), checked again by the
worker's own schema, and back the run's results folder as a gzip'd tar with the run's exit
code. The worker runs the scenario as ``python -m experiments run`` in a child process (the run
loop handles signals, which only a main thread may do), in a temporary folder it removes after.
"""
from __future__ import annotations

import io
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
import uuid
from pathlib import Path
from typing import Iterator

import yaml
from distributed import Client, as_completed
from pydantic import BaseModel, ConfigDict

from common.errors import CapabilityError, ScenarioError, SetupError
from experiments import runner
from experiments.scenario import validate
from experiments.study import RunOutcome

#: The worker resource a fabric run needs (one per machine).
RESOURCE = "fabric"
#: Lines of a failed run's stderr sent back.
STDERR_LINES = 30


class RemoteRun(BaseModel):
    """A fabric run sent to a worker: its name, its scenario in file syntax, its cells (the rounds)."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    scenario: dict
    cells: tuple[str, ...]


class RemoteResult(BaseModel):
    """What a worker sends back: the results folder's name and its gzip'd tar (empty when the run
    created none), the run's exit code (0 ok, 3 a fidelity check failed: the cells are marked,
    1 or 2 failed), the tail of its stderr, and the worker's host name."""
    model_config = ConfigDict(frozen=True, extra="forbid")
    folder: str
    archive: bytes
    exit_code: int
    stderr_tail: str
    host: str


def run_remote(request: dict) -> dict:
    """On a worker: run one :class:`RemoteRun` (as a dict) and return a :class:`RemoteResult` (as a
    dict). The child process is ``python -m experiments run SCENARIO --results TMP --quiet
    --accept-unfaithful`` with this worker's Python."""
    req = RemoteRun.model_validate(request)
    tmp = Path(tempfile.mkdtemp(prefix="fabriclab-dask-"))
    try:
        path = tmp / "scenario.yaml"
        path.write_text(yaml.safe_dump(req.scenario, sort_keys=False))
        res_dir = tmp / "results"
        p = subprocess.run([sys.executable, "-m", "experiments", "run", str(path), "--results", str(res_dir),
                            "--quiet", "--accept-unfaithful"], capture_output=True, text=True)
        folders = sorted(res_dir.iterdir()) if res_dir.is_dir() else []
        buf = io.BytesIO()
        if folders:
            with tarfile.open(fileobj=buf, mode="w:gz") as tar:
                tar.add(folders[-1], arcname=folders[-1].name)
        tail = "\n".join(p.stderr.strip().splitlines()[-STDERR_LINES:])
        return RemoteResult(folder=folders[-1].name if folders else "", archive=buf.getvalue(),
                            exit_code=p.returncode, stderr_tail=tail, host=socket.gethostname()).model_dump()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def preflight_remote(scenarios: list[dict]) -> list[str | None]:
    """On a worker: experiments.runner.preflight of each scenario (file syntax); per scenario None
    or the error's text (``rounds[1].hosts.tcp_congestion_control: the kernel has no 'dctcp' ...``)."""
    out = []
    for data in scenarios:
        try:
            runner.preflight(validate(data))
            out.append(None)
        except ScenarioError as e:
            out.append(f"{e.key}: {e.detail}")
        except CapabilityError as e:
            out.append(str(e))
    return out


def unpack(result: RemoteResult, runs_dir: Path) -> Path | None:
    """Unpack a worker's results folder into ``runs_dir``; return it (None: the run made none).

    Raises:
        ValueError: an archive member would land outside ``runs_dir``.
    """
    if not result.archive:
        return None
    root = Path(runs_dir).resolve()
    with tarfile.open(fileobj=io.BytesIO(result.archive), mode="r:gz") as tar:
        members = tar.getmembers()
        for m in members:     # Python 3.11.2 has no extraction filter: check every member here
            target = (root / m.name).resolve()
            if not (m.isfile() or m.isdir()) or root not in target.parents or m.name.split("/")[0] != result.folder:
                raise ValueError(f"refusing archive member {m.name!r} (outside {result.folder}/ or not a file)")
        tar.extractall(root, members=members)
    return root / result.folder


class DaskDispatch:
    """A study's dispatch (experiments.study.serial's protocol) over a Dask scheduler at
    ``address``: every fabric run is one task asking for one ``fabric`` resource; results are
    unpacked as runs end.

    Raises (on construction):
        SetupError: the scheduler cannot be reached, or no worker offers a ``fabric`` resource.
    """

    def __init__(self, address: str, timeout_s: float = 20.0):
        try:
            self.client = Client(address, timeout=f"{timeout_s}s", set_as_default=False)
        except (OSError, TimeoutError) as e:
            raise SetupError(f"no Dask scheduler at {address}: {e}") from None
        workers = self.client.scheduler_info().get("workers", {})
        if not any((w.get("resources") or {}).get(RESOURCE) for w in workers.values()):
            self.client.close()
            raise SetupError(f"the Dask scheduler at {address} has no worker with a '{RESOURCE}' resource "
                             f"(start each with: dask worker {address} --resources {RESOURCE}=1 --nworkers 1 "
                             "--nthreads 1)")

    def preflight(self, plans) -> list[tuple[object, str]]:
        """experiments.runner.preflight of every plan on a worker: ``[(plan, error)]`` of the refused."""
        fut = self.client.submit(preflight_remote, [p.scenario.to_data() for p in plans], resources={RESOURCE: 1},
                                 pure=False, key=f"fabriclab-preflight-{uuid.uuid4().hex[:8]}")
        return [(p, e) for p, e in zip(plans, fut.result()) if e is not None]

    def __call__(self, plans, runs_dir: Path, on_round) -> Iterator[RunOutcome]:
        """Submit every plan, then yield each :class:`~experiments.study.RunOutcome` as its task ends
        (``on_round`` is not called: rounds finish on the workers)."""
        futures = {}
        for plan in plans:
            req = RemoteRun(name=plan.name, scenario=plan.scenario.to_data(), cells=tuple(c.name for c in plan.cells))
            fut = self.client.submit(run_remote, req.model_dump(), resources={RESOURCE: 1}, pure=False,
                                     key=f"fabriclab-{plan.name}-{uuid.uuid4().hex[:8]}")
            futures[fut] = plan
        for fut in as_completed(list(futures), loop=self.client.loop):
            plan = futures[fut]
            try:
                res = RemoteResult.model_validate(fut.result())
            except Exception as e:          # a worker that died or a task that raised: this run failed
                yield RunOutcome(plan, None, f"Dask task failed: {type(e).__name__}: {e}")
                continue
            run_dir = unpack(res, runs_dir)
            error = None if res.exit_code in (0, 3) else \
                f"exit {res.exit_code} on {res.host}: {res.stderr_tail.splitlines()[-1] if res.stderr_tail else ''}"
            yield RunOutcome(plan, run_dir, error)

    def close(self) -> None:
        """Disconnect from the scheduler (it and the workers keep running)."""
        self.client.close()
