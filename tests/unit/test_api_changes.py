"""Component tier: the controller's REST API (controller.rest, a real HTTP server on a free port)
over the real fault manager on a fake data plane, and the run's two features that read it after a
round (experiments.features.faults, experiments.features.changes), as the run loop calls them.
A local user without the run's token is refused and nothing changes; the owner's hidden fault,
in a round whose scenario has no faults, is ended with the round and is in its results."""
import csv
import json
import time
import urllib.request

import pytest

from controller.faultports import FaultPorts
from controller.rest import ControlApi, ControlClient, serve
from experiments import rounds
from experiments.context import RoundRecord
from experiments.features.changes import ApiChanges
from experiments.features.faults import Faults
from experiments.plan import check_against_fabric
from experiments.scenario import validate
from tests.unit.test_faults import FakePlane

TOKEN = "0wner-token"


class Lf:
    """What the features read of a live fabric: the runner's client (with the token)."""

    def __init__(self, url):
        self.api = ControlClient(url, token=TOKEN)


@pytest.fixture()
def run(tmp_path):
    sc = validate({"name": "quiet", "topology": {"kind": "fattree", "k": 4},
                   "traffic": {"pattern": "permutation", "duration_s": 1}})
    layout = check_against_fabric(sc)
    ctx = rounds.run_context(sc, layout, {}, tmp_path / "run", True)
    plane = FakePlane()
    fp = FaultPorts(ctx.fabric_map, apply=plane)
    api = ControlApi(dict, lambda: None, lambda: None, faults=fp, ports=lambda: [], token=TOKEN)
    server = serve(api, "127.0.0.1", 0)
    url = f"http://127.0.0.1:{server.server_address[1]}"
    yield ctx, sc, url, plane, fp
    fp.remove_all()                  # no fault thread outlives the test
    server.shutdown()
    server.server_close()


def curl(url, method, path, body=None, token=None):
    """A request as a local user's curl would send it: (status, answer)."""
    headers = {"User-Agent": "curl/8.5.0", **({"Authorization": f"Bearer {token}"} if token else {})}
    req = urllib.request.Request(url + path, data=None if body is None else json.dumps(body).encode(),
                                 method=method, headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def drive_round(feats, lf, rec, during) -> dict:
    """Run ``feats`` around ``during()`` as the run loop runs a round's features (before the
    traffic, after it even when ``during`` raised, then their summaries); the round's summary.
    The live API test (tests/integration/test_faults.py) drives a real fabric with it."""
    for f in feats:
        f.before_round(lf, rec)
    try:
        during()
    finally:
        for f in feats:
            got = f.after_round(lf, rec)
            if got is not None:
                rec.features[f.name] = got
    summary = {}
    for f in feats:
        f.summarize(rec, summary)
    return summary


def one_round(ctx, sc, url, during):
    """Run the two features around ``during()`` as the run loop would; (round record, summary)."""
    rdir = ctx.out / "rounds" / "01-quiet"
    rdir.mkdir(parents=True)
    rec = RoundRecord(index=0, round=sc.rounds[0], dir=rdir)
    feats = [Faults(ctx), ApiChanges(ctx)]
    return rec, drive_round(feats, Lf(url), rec, during), feats


def test_an_outsider_is_refused_and_the_owners_hidden_fault_is_in_the_rounds_results(run):
    ctx, sc, url, plane, fp = run
    fault = {"faults": [{"kind": "drop", "switch": "c1", "frame_fraction": 0.5}], "hidden": True}

    def during():
        assert curl(url, "POST", "/fabriclab/faults", fault)[0] == 401                  # no token
        assert curl(url, "POST", "/fabriclab/faults", fault, token="guess")[0] == 403   # a wrong one
        assert curl(url, "DELETE", "/fabriclab/faults")[0] == 401
        assert plane.calls == [] and fp.faults == []                                     # nothing changed
        code, out = curl(url, "POST", "/fabriclab/faults", fault, token=TOKEN)           # the owner
        assert (code, out) == (200, {"ids": [1]})
        time.sleep(0.05)
        assert curl(url, "GET", "/fabriclab/faults") == (200, {"faults": [], "hidden": 1})  # still hidden

    rec, summary, (faults, changes) = one_round(ctx, sc, url, during)
    assert not sc.rounds[0].faults                                # the scenario asked for none
    # the fault was ended with the round and its record is in the round's faults
    assert fp.faults == [] and [(f["kind"], f["state"]) for f in summary["faults"]] == [("drop", "removed")]
    assert summary["faults"][0]["place"] == "c1"
    with open(rec.dir / "faults.csv") as fh:
        assert [r["kind"] for r in csv.DictReader(fh)] == ["drop"]
    # the change, with its time and client, hidden flag and body; the runner's DELETE after it
    a = summary["api_changes"]
    (mine, end) = a["accepted"]
    assert (mine["method"], mine["path"], mine["client"], mine["hidden"], mine["by_runner"]) == \
        ("POST", "/fabriclab/faults", "curl/8.5.0", True, False)
    assert json.loads(mine["body"]) == fault and json.loads(mine["answer"]) == {"ids": [1]}
    assert 0 <= mine["at_s"] < 5 and mine["at_unix_s"] == pytest.approx(time.time(), abs=60)
    assert (end["method"], end["by_runner"], json.loads(end["answer"])) == ("DELETE", True, {"removed_ids": [1]})
    assert a["not_by_runner"] == 1 and a["refused"] == 3
    assert [(r["method"], r["code"]) for r in a["refused_requests"]] == [("POST", 401), ("POST", 403), ("DELETE", 401)]
    with open(rec.dir / "changes.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["method"], r["hidden"], r["client"]) for r in rows] == [("POST", "True", "curl/8.5.0"),
                                                                       ("DELETE", "False", "fabriclab-runner")]
    # the terminal names the change but not what the hidden fault was
    line = changes.report(summary)
    assert line.startswith("API: 1 change(s) not by the runner (POST /fabriclab/faults (hidden) at ")
    assert "by curl/8.5.0); 3 request(s) refused" in line and "c1" not in line
    assert faults.report(summary) == "faults: 1 hidden fault(s) (in faults.csv)"
    assert summary["faults"][0]["hidden"] is True
    warns = changes.warnings(summary)
    assert len(warns) == 2 and "the runner did not make" in warns[0] and "refused 3 request(s)" in warns[1]
    assert all("c1" not in w for w in warns)


def test_a_round_nobody_touched_says_nothing_and_the_next_round_gets_only_its_own(run):
    ctx, sc, url, plane, fp = run
    rec, summary, (faults, changes) = one_round(ctx, sc, url, lambda: None)
    assert "faults" not in summary and summary["api_changes"]["accepted"] == []
    assert changes.report(summary) is None and changes.warnings(summary) == []
    # a change after one round's end is the next round's
    assert curl(url, "POST", "/fabriclab/faults", {"kind": "degrade", "link": "p0a1->c1"}, token=TOKEN)[0] == 200
    lf = Lf(url)
    got = changes.after_round(lf, rec)
    assert [c["seq"] for c in got["changes"]] == [1] and got["refused_total"] == 0
    assert changes.after_round(lf, rec)["changes"] == []


def test_a_change_after_the_last_round_is_in_the_runs_environment(run, capsys):
    ctx, sc, url, plane, fp = run
    rec, summary, (faults, changes) = one_round(ctx, sc, url, lambda: None)
    lf = Lf(url)
    assert changes.after_rounds(lf) == {}                                   # nothing since: nothing said
    assert curl(url, "PUT", "/fabriclab/faults", {})[0] == 401
    assert curl(url, "POST", "/fabriclab/faults", {"kind": "degrade", "link": "p0a1->c1"}, token=TOKEN)[0] == 200
    got = changes.after_rounds(lf)["api_changes_after_rounds"]
    assert [(c["method"], c["client"]) for c in got["accepted"]] == [("POST", "curl/8.5.0")] and got["refused"] == 1
    assert "accepted 1 change(s) after the last round" in capsys.readouterr().err
