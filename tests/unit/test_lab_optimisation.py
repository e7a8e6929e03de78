"""Lab 5 (optimisation) without a fabric: its check on synthetic run folders (right answers full
marks, wrong ones zero with a reason each, a missing run's questions marked missing), and the
collective's bytes by level (network, NVLink) from the ranks' records and the schedule."""
import json

import pytest

from experiments.workloads.collective import plan as coll_plan, summary as coll_summary
from experiments.labs.optimisation import Optimisation

D_BYTES = 1 << 20


def training_summary(time_s, compute_s, comm_s, wire_bytes, ratio=1.0, model_comm_s=0.8):
    its = [{"iteration": i, "time_s": time_s, "compute_s": compute_s, "comm_s": comm_s,
            "exposed_comm_s": time_s - compute_s, "wire_bytes": wire_bytes + (999 if i == 0 else 0),
            "model_compute_s": 2.0, "model_time_s": time_s * 0.98} for i in range(3)]
    return {"training": {"time_s": time_s, "compute_s": compute_s, "comm_s": comm_s,
                         "exposed_comm_s": time_s - compute_s, "sum_s": compute_s + comm_s,
                         "max_s": max(compute_s, comm_s), "model_time_s": time_s * 0.98,
                         "model_comm_s": model_comm_s, "ratio": ratio, "iterations": its}}


def collective_summary(rows):
    return {"collective": {"ranks": 16, "servers": 4, "gpus_per_server": 4,
                           "sizes": [{"size_bytes": s, "time_s": t, "model_time_s": t * 0.9,
                                      "traced_model_time_s": t * 0.95, "network_bytes": nb,
                                      "network_bytes_max_rank": mx} for s, t, nb, mx in rows]}}


def write_run(root, stamp, name, rounds):
    run = root / f"{stamp}-{name}"
    for i, (rname, summary) in enumerate(rounds):
        d = run / "rounds" / f"{i + 1:02d}-{rname}"
        d.mkdir(parents=True)
        (d / "summary.json").write_text(json.dumps(summary))
    (run / "scenario.yaml").write_text(f"name: {name}\n")
    (run / "timings.json").write_text("{}")
    return run


def make_runs(root) -> dict:
    """A training run and a hierarchical-rail run; returns the right answers."""
    wire = 48_000_000
    write_run(root, "20261205T100000Z", "training", (
        ("overlap-off", training_summary(2.95, 2.0, 0.95, wire)),
        ("overlap-on", training_summary(2.13, 2.0, 0.95, wire)),
        ("fp16", training_summary(2.63, 2.0, 0.63, wire // 2, ratio=2.0, model_comm_s=0.45)),
        ("int8", training_summary(2.40, 2.0, 0.40, 12_800_000, ratio=3.76, model_comm_s=0.30)),
        ("topk-8x", training_summary(2.51, 2.0, 0.51, wire // 8, ratio=8.0, model_comm_s=0.2))))
    write_run(root, "20261205T101000Z", "hierarchical-rail", (
        ("flat-ring", collective_summary([(262144, 0.9, 7.5 * 262144, 1.875 * 262144),
                                          (D_BYTES, 3.2, 7.5 * D_BYTES, 1.875 * D_BYTES)])),
        ("hierarchical", collective_summary([(262144, 0.3, 6 * 262144, 0.375 * 262144),
                                             (D_BYTES, 0.92, 6 * D_BYTES, 0.375 * D_BYTES)]))))
    return {"q1": 2.95, "q2": 2.13, "q3": 0.13, "q4": 12.8 / 48, "q5": 0.95 / 0.40, "q6": 3.2, "q7": 0.92,
            "q8": 7.5 * D_BYTES / 1e6, "q9": 6 * D_BYTES / 1e6, "q10": 5.0, "q11": "hierarchical"}


def test_right_answers_score_full_marks_with_the_model_beside_them(tmp_path):
    right = make_runs(tmp_path)
    verdicts = Optimisation().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 11, [(v.question.id, v.expected, v.why) for v in verdicts if not v.ok]
    by = {v.question.id: v for v in verdicts}
    assert "2.00 + 0.95 = 2.95 s" in by["q1"].why
    assert by["q3"].expected == "0.1000..0.1600 s"                       # 0.13 +- 0.03 (more than 15%)
    assert "1/3.76 = 0.266" in by["q4"].why
    assert "model: 2.67" in by["q5"].why                                 # 0.8 / 0.3
    assert "2(N - 1) D / G = 7.86 MB" in by["q8"].why and "2(S - 1) D = 6.29 MB" in by["q9"].why
    assert "= 5.00, about G = 4" in by["q10"].why
    assert by["q11"].expected == "hierarchical" and "3.200 s (flat ring) against 0.920 s" in by["q11"].why
    with_units = {**right, "q1": "2.95 s", "q8": "7,86 MB", "q11": " Hierarchical "}
    assert all(v.ok for v in Optimisation().check(tmp_path, with_units))


def test_wrong_answers_score_zero_each_with_its_reason(tmp_path):
    right = make_runs(tmp_path)
    wrong = {k: (v * 1.5 + 0.1 if not isinstance(v, str) else "flat-ring") for k, v in right.items()}
    wrong["q2"] = "about two"
    del wrong["q9"]
    verdicts = Optimisation().check(tmp_path, wrong)
    assert [v.ok for v in verdicts] == [False] * 11
    by = {v.question.id: v for v in verdicts}
    assert "not a number" in by["q2"].why and "no answer given" in by["q9"].why
    assert all("your " in v.why for k, v in by.items() if k not in ("q2", "q9"))   # what it was checked against
    # the model's answers where the run departs from it: 1/r for q4 passes (the run is near it),
    # the model's compression speed-up (2.67 against the run's 2.38) does not
    assert Optimisation().check(tmp_path, {**right, "q4": 1 / 3.76})[3].ok
    assert not Optimisation().check(tmp_path, {**right, "q5": 0.8 / 0.3})[4].ok


def test_a_missing_run_marks_its_questions_missing(tmp_path):
    right = make_runs(tmp_path)
    (tmp_path / "20261205T101000Z-hierarchical-rail" / "timings.json").unlink()      # did not finish
    verdicts = Optimisation().check(tmp_path, right)
    assert [v.ok for v in verdicts] == [True] * 5 + [False] * 6
    assert "sudo fabriclab run experiments/scenarios/hierarchical-rail.yaml" in verdicts[5].why


def records(steps, n):
    """Each rank's record of one iteration as the agents write it: per step, the bytes it sent."""
    return [{"rank": r, "iterations": [{"steps": [[st[0].step, st[0].phase, 0,
                                                   4 * sum(m.elements for m in st if m.src == r)] for st in steps]}]}
            for r in range(n)]


@pytest.mark.parametrize("algorithm, network, max_rank, nvlink", [
    ("ring", 7.5, 1.875, 22.5),               # 2(N-1) D / G; 2(N-1) D / N; the other hops
    ("hierarchical", 6.0, 0.375, 24.0)])      # 2(S-1) D; 2(S-1) D / (G S); 2(G-1) D / G per rank
def test_bytes_by_level_on_four_servers_of_four(algorithm, network, max_rank, nvlink):
    hosts = [f"h{i + 1}" for i in range(16)]
    servers = [f"s{i // 4}" for i in range(16)]
    steps = coll_plan.schedule(hosts, "allreduce", D_BYTES // 4, algorithm, servers)
    got = coll_summary.sent_bytes_by_level(records(steps, 16), steps, servers)
    assert got == {"network_bytes": network * D_BYTES, "network_bytes_max_rank": max_rank * D_BYTES,
                   "nvlink_bytes": nvlink * D_BYTES}
    one_per_server = coll_summary.sent_bytes_by_level(records(steps, 16), steps, hosts)
    assert one_per_server["nvlink_bytes"] == 0 and one_per_server["network_bytes"] == (network + nvlink) * D_BYTES
    with pytest.raises(ValueError, match="steps recorded"):
        coll_summary.sent_bytes_by_level(records(steps[:-1], 16), steps, servers)
