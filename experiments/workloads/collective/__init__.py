"""Collectives, one package: where the ranks go and the alpha-beta model (:mod:`.plan`, pure),
the ranks' agents on the live fabric (:mod:`.agents`), a round's results (:mod:`.summary`: exactness,
timings, algbw/busbw, the tables and plots) and the run loop's workload (:mod:`.workload`,
registered in experiments.workloads.registry). Training and mixed-parallel jobs run their ranks
through the same agents and plan."""
