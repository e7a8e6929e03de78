"""A mixed-parallel job, live, through the CLI: the shipped scenario (4 servers x 4 GPUs on a
Spine-Leaf, tensor 4 x pipeline 2 x data 2), one round. Every fabric link's bytes, counted by
the switch ports, match what the parallelism plan predicts over the paths the connections took
(within 5%); tensor traffic never reaches the fabric (each server's NVLink carries exactly the
plan's bytes); no link the plan leaves idle carries more than stray frames; every reduction is
exact and every rank sent, kind by kind, exactly the plan's bytes; and no port counts more than
the endpoints' TCP counters say was sent."""
import csv
import json
from pathlib import Path

import pytest
import yaml

from .conftest import assert_clean, cpu_bound_fidelity_failures, run_cli

pytestmark = pytest.mark.lane("host", reason="16 ranks' threads and a second per iteration of sleeps: the emulated "
                                             "CPU of the VM lane cannot pace them")

SCENARIO = Path(__file__).resolve().parents[2] / "experiments" / "scenarios" / "mixed-parallel.yaml"
#: Bytes a link the plan leaves idle may carry over the round (ARP and the like).
STRAY_BYTES = 5000


def test_per_link_bytes_by_kind_match_the_plan_from_port_counters(tmp_path, figure):
    sc = yaml.safe_load(SCENARIO.read_text())
    sc["training"]["iterations"] = 1          # the bytes per iteration are the plan's; one is enough
    sc["rounds"] = sc["rounds"][:1]
    path = tmp_path / "mp.yaml"
    path.write_text(yaml.safe_dump(sc))
    # the subject is bytes, not timing: a port's rate shortfall on a CPU-starved host is accepted
    # (named in the output); any other failed self-check fails the test (cpu_bound_fidelity_failures).
    # 0 in the 10 calibration runs, 1 in a CI rehearsal on 2026-12-05 (four ports at 0.954-0.965 of
    # 20 Mbit/s; its links' bytes 1.013 x predicted at most)
    p = run_cli("run", str(path), "--results", str(tmp_path / "res"), "--accept-unfaithful", timeout=600)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    (out,) = (tmp_path / "res").iterdir()
    print("accepted self-check failures:", cpu_bound_fidelity_failures(out))
    (d,) = sorted((out / "rounds").iterdir())
    s = json.loads((d / "summary.json").read_text())["parallel"]
    assert s["complete"] and s["exact"] and s["sent_as_planned"], s
    assert (s["tensor"], s["pipeline"], s["data"]) == (4, 2, 2)
    with open(d / "link_bytes.csv") as fh:
        rows = list(csv.DictReader(fh))
    fabric = [r for r in rows if r["src"] != r["dst"]]
    nvlink = [r for r in rows if r["src"] == r["dst"]]
    planned = [r for r in fabric if int(r["pipeline_bytes"]) + int(r["data_bytes"])]
    ratios = [float(r["measured_over_predicted"]) for r in planned]
    accounted = [float(r["measured_over_accounted"]) for r in planned]
    for r in planned:
        print(f"{r['link']:>14}: pipeline {int(r['pipeline_bytes']):>9} data {int(r['data_bytes']):>9} "
              f"acks {int(r['ack_bytes']):>7} predicted {int(r['predicted_bytes']):>9} measured "
              f"{int(r['measured_bytes']):>9} ratio {float(r['measured_over_predicted']):.4f}, with the endpoints' "
              f"TCP counters {float(r['measured_over_accounted']):.4f}")
    # every host link both ways carries the job; the spines carry the pipeline (its stages are on
    # different leaves) and never a data-parallel byte (a stage's replicas share a leaf); ECMP
    # may leave a spine link with acknowledgements only
    spine = [r for r in fabric if "spine" in r["link"]]
    assert len([r for r in planned if "spine" not in r["link"]]) == 8
    assert all(int(r["data_bytes"]) == 0 for r in spine) and any(int(r["pipeline_bytes"]) for r in spine)
    assert all(int(r["tensor_bytes"]) == 0 for r in fabric)
    assert [r for r in fabric if not int(r["predicted_bytes"]) and int(r["measured_bytes"]) > STRAY_BYTES] == []
    assert len(nvlink) == 4 and all(int(r["measured_bytes"]) == int(r["predicted_bytes"]) > 0 for r in nvlink)
    figure("link_ratio_min", min(ratios))
    figure("link_ratio_max", max(ratios))
    figure("accounted_ratio_min", min(accounted))
    figure("accounted_ratio_max", max(accounted))
    # 10 runs beside a busy loop (2026-12-05), over the links that carry the plan's data: measured /
    # predicted min 1.0026, largest per run 1.013 / 1.022 (median) / 1.039 (a run with 199 queue drops,
    # so retransmissions); measured / accounted largest per run 1.0014 / 1.0020 / 1.0093 (acknowledgements
    # with SACK blocks are longer than 66 bytes). The prediction's only free part is the acknowledgement
    # model (one per two segments, about 2% of the data).
    assert 0.95 <= min(ratios) and max(ratios) <= 1.05          # the 5%
    # the endpoints' own TCP counters (segments sent, retransmitted bytes) bound what any port
    # can see; a frame a queue dropped on the way is missing after it (so below, never above)
    assert max(accounted) <= 1.015
    for name in ("parallel.csv", "link_bytes.csv", "link_utilisation.png"):
        assert (d / name).stat().st_size > 0, name
    assert "mixed-parallel training on 16 ranks (tensor 4 x pipeline 2, 2 microbatches)" in p.stdout
    assert_clean(str(out))
