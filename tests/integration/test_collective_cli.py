"""A collective scenario through the command line: two placements as rounds on one fabric."""
import csv
import json

import pytest

from tests.chromium import check_report_folder

from .conftest import assert_clean

# kernel TCP between namespaces, as in test_collective.py: host lane only
pytestmark = pytest.mark.lane("host", reason="kernel TCP between namespaces does not depend on the datapath; "
                                             "the VM lane runs test_collective.py's textbook example")


def test_allreduce_rounds_through_the_cli(tmp_path, allreduce_placement_run):
    """The shipped placement scenario (`make allreduce`, lab 3's run): 8 ranks rack-local, then
    spread, three sizes twice each; every result exact, every rank's 2(N - 1) steps on record."""
    p, out = allreduce_placement_run
    dirs = sorted((out / "rounds").iterdir())
    assert [d.name for d in dirs] == ["01-rack-local", "02-spread"]
    for d in dirs:
        s = json.loads((d / "summary.json").read_text())["collective"]
        assert s["all_exact"] and s["ranks"] == 8 and s["alpha_s"] is not None
        for r in s["sizes"]:
            assert r["transfers"] == r["expected_transfers"] == 8 * 14 and r["busbw_bps"] > 0
        for name in ("collective.csv", "collective_steps.csv", "collective_timeline.png", "collective_busbw.png"):
            assert (d / name).stat().st_size > 0, name
        with open(d / "collective_steps.csv") as fh:
            assert len(list(csv.DictReader(fh))) == 3 * 2 * 8 * 14        # sizes x repeats x ranks x steps
    assert "collective allreduce on 8 ranks" in p.stdout
    assert (out / "collective_rounds.csv").exists()
    assert (out / "collective_busbw_rounds.png").stat().st_size > 0      # one line per round
    check_report_folder(out, "allreduce-rounds", tmp_path)        # report.html, rendered
    assert_clean(str(out))
