"""The troubleshooter end to end, as a user runs it: ``python -m experiments diagnose --inject
random --seed N`` (real OVS, the real controller, real probe packets), its verdict checked against
the hidden fault it reveals, its files, and nothing left behind. The fabric is a 2x2 Spine-Leaf
with two hosts per leaf, whose survey takes a few probe rounds; the 30-seed table on the k=4
Fat-Tree and the 3:1 Spine-Leaf is `make bench-diagnose`'s and docs/faults.md's."""
import json

import pytest
import yaml

from .conftest import assert_clean, run_cli

HOST_ONLY = pytest.mark.lane("host", reason="the probes' behaviour does not depend on the datapath (the injectors' "
                                            "mechanisms are tested in both lanes); a diagnosis takes minutes "
                                            "under the VM lane's emulated CPU")


@HOST_ONLY
@pytest.mark.parametrize("seed, kind", [(2, "drop")])
def test_a_hidden_fault_is_found_and_revealed(tmp_path, seed, kind, figure):
    sc = tmp_path / "small.yaml"
    sc.write_text(yaml.safe_dump({"name": "small", "topology": {"kind": "spineleaf", "spines": 2, "leaves": 2,
                                                                "hosts_per_leaf": 2},
                                  "faults": [{"kind": "corrupt", "link": "leaf1->h1"}]}))
    r = run_cli("diagnose", str(sc), "--inject", "random", "--seed", str(seed), "--results", str(tmp_path / "r"),
                timeout=600)
    (folder,) = list((tmp_path / "r").glob("*-diagnose-*"))
    rec = json.loads((folder / "diagnosis.json").read_text())
    print(r.stdout[-2500:])
    assert rec["truth"][0]["kind"] == kind               # the random fault replaced the file's own
    assert r.returncode == 0 and rec["matched"], (r.stdout[-3000:], r.stderr[-2000:])
    assert "the diagnosis MATCHES" in r.stdout
    out = r.stdout                                       # the truth is revealed only after the verdict
    assert out.index("step 3, which layer") < out.index("the hidden fault was")
    assert rec["verdict"]["why"] and rec["evidence"] and rec["step1"]["network_ok"] is False
    for f in ("probes.csv", "port_counters.csv", "diagnosis.png"):
        assert (folder / f).stat().st_size > 0
    # 7 runs beside a CPU load after the last fix (2026-12-04): right 7 of 7, 9.5 / 9.6 / 10.1 s, 3 probe rounds
    figure("diagnosis_s", rec["seconds"])
    figure("probe_rounds", rec["probe_rounds"])
    assert_clean(str(folder))
