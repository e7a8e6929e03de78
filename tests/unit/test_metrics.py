"""The study metrics' registry (experiments.metrics): each reads its own section of a round's summary."""
from experiments.metrics import measure


def test_fct_of_a_roce_round_is_its_messages_not_its_queue_pairs():
    # a RoCE round's flows section times each queue pair over all its messages (8 x 768 kB here);
    # the study compares message completion times, as study_fct.csv and the FCT ECDF hold them
    roce = {"flows": {"fct_median_s": 7.61, "fct_p99_s": 10.6},
            "roce": {"message_fct_s": {"median": 0.128, "p99": 0.88, "max": 1.2}}}
    m = measure(roce, ["fct_median_s", "fct_p99_s"])
    assert m == {"fct_median_s": 0.128, "fct_p99_s": 0.88}
    tcp = {"flows": {"fct_median_s": 3.0, "fct_p99_s": 3.3}}
    assert measure(tcp, ["fct_median_s", "fct_p99_s"]) == {"fct_median_s": 3.0, "fct_p99_s": 3.3}
    # nothing completed: no FCT
    none_done = {"flows": {"fct_median_s": None, "fct_p99_s": None},
                 "roce": {"message_fct_s": {"median": None, "p99": None}}}
    assert measure(none_done, ["fct_median_s"]) == {"fct_median_s": None}
