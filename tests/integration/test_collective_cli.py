"""Issue 8 through the CLI: a collective scenario with two placements as rounds on one fabric."""
import csv
import json

import pytest
import yaml

from tests.chromium import check_report_folder

from .conftest import assert_clean, run_cli

# kernel TCP between namespaces, as in test_collective.py: host lane only
pytestmark = pytest.mark.lane("host", reason="kernel TCP between namespaces does not depend on the datapath; "
                                             "the VM lane runs test_collective.py's textbook example")


def test_allreduce_rounds_through_the_cli(tmp_path):
    sc = {"name": "ar-cli", "topology": {"spines": 2, "leaves": 2, "hosts_per_leaf": 4, "host_rate_mbps": 10,
                                         "uplink_rate_mbps": 10},
          "queues": {"buffer_packets": 100},
          "collective": {"kind": "allreduce", "ranks": 4, "sizes_bytes": [4800, 400_000], "repeat": 2},
          "rounds": [{"name": "local", "collective": {"placement": "local"}},
                     {"name": "spread", "collective": {"placement": "spread"}}]}
    path = tmp_path / "ar.yaml"
    path.write_text(yaml.safe_dump(sc))
    p = run_cli("run", str(path), "--results", str(tmp_path / "res"), timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (out,) = (tmp_path / "res").iterdir()
    dirs = sorted((out / "rounds").iterdir())
    assert [d.name for d in dirs] == ["01-local", "02-spread"]
    for d in dirs:
        s = json.loads((d / "summary.json").read_text())["collective"]
        assert s["all_exact"] and s["ranks"] == 4 and s["alpha_s"] is not None
        for r in s["sizes"]:
            assert r["transfers"] == r["expected_transfers"] == 24 and r["busbw_bps"] > 0
        for name in ("collective.csv", "collective_steps.csv", "collective_timeline.png", "collective_busbw.png"):
            assert (d / name).stat().st_size > 0, name
        with open(d / "collective_steps.csv") as fh:
            assert len(list(csv.DictReader(fh))) == 2 * 2 * 4 * 6        # sizes x repeats x ranks x steps
    assert "collective allreduce on 4 ranks" in p.stdout
    assert (out / "collective_rounds.csv").exists()
    assert (out / "collective_busbw_rounds.png").stat().st_size > 0      # one line per round
    check_report_folder(out, "allreduce-rounds", tmp_path)        # report.html, rendered
    assert_clean(str(out))
